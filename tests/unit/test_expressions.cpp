// Every expression node, evaluated by attnx, against plain double loops (naive.hpp).
#define BOOST_TEST_MODULE expressions
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "messages.hpp"
#include "naive.hpp"

using namespace attnx;
using naive::make;
using naive::mat;

namespace {

template <class Tensor>
mat to_mat(const Tensor& t) {
  return mat(t.data(), t.data() + Tensor::size);
}

// Relative-or-absolute closeness, element by element, with the first failure reported.
template <class Tensor>
void check_close(const Tensor& got, const mat& want, double tol) {
  BOOST_REQUIRE_EQUAL(want.size(), Tensor::size);
  for (std::size_t i = 0; i < Tensor::size; ++i) {
    const double g = got.data()[i], w = want[i];
    if (std::isnan(w)) {
      BOOST_TEST(std::isnan(g), "element " << i << ": got " << g << ", want NaN");
      continue;
    }
    if (std::isinf(w)) {
      BOOST_TEST(g == w, "element " << i << ": got " << g << ", want " << w);
      continue;
    }
    const double err = std::abs(g - w) / std::max(1.0, std::abs(w));
    if (err > tol) {
      BOOST_TEST(err <= tol, "element " << i << ": got " << g << ", want " << w << " (error " << err << ")");
      return;
    }
  }
}

constexpr double inf = std::numeric_limits<double>::infinity();

}  // namespace

// ---- matmul -------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(matmul_plain_double) {
  const mat a = naive::random(5 * 7, 1), b = naive::random(7 * 3, 2);
  const auto A = make<tensor<double, 5, 7>>(a);
  const auto B = make<tensor<double, 7, 3>>(b);
  tensor<double, 5, 3> C = A * B;
  check_close(C, naive::matmul(a, b, 5, 7, 3), 1e-14);
}

BOOST_AUTO_TEST_CASE(matmul_float_odd_shapes) {
  const mat a = naive::random(13 * 17, 3), b = naive::random(17 * 19, 4);
  tensor<float, 13, 19> C = make<tensor<float, 13, 17>>(a) * make<tensor<float, 17, 19>>(b);
  check_close(C, naive::matmul(a, b, 13, 17, 19), 2e-6);
}

BOOST_AUTO_TEST_CASE(matmul_transposed_rhs) {
  const mat a = naive::random(4 * 6, 5), b = naive::random(9 * 6, 6);
  const auto A = make<tensor<double, 4, 6>>(a);
  const auto B = make<tensor<double, 9, 6>>(b);
  tensor<double, 4, 9> C = A * transpose(B);
  check_close(C, naive::matmul(a, naive::transpose(b, 9, 6), 4, 6, 9), 1e-14);
}

BOOST_AUTO_TEST_CASE(matmul_chain_materialises_rhs_once) {
  // (A B) C and A (B C): the rhs B C is an expression, materialised once.
  const mat a = naive::random(3 * 4, 7), b = naive::random(4 * 5, 8), c = naive::random(5 * 2, 9);
  const auto A = make<tensor<double, 3, 4>>(a);
  const auto B = make<tensor<double, 4, 5>>(b);
  const auto C = make<tensor<double, 5, 2>>(c);
  const mat want = naive::matmul(naive::matmul(a, b, 3, 4, 5), c, 3, 5, 2);
  tensor<double, 3, 2> left = (A * B) * C;
  tensor<double, 3, 2> right = A * (B * C);
  check_close(left, want, 1e-13);
  check_close(right, want, 1e-13);
  tensor<double, 3, 5> bt = A * transpose(transpose(B));
  check_close(bt, naive::matmul(a, b, 3, 4, 5), 1e-14);
}

BOOST_AUTO_TEST_CASE(matmul_batched_and_shared_rhs) {
  // (2, 3, 4) x (2, 4, 5) per batch item, and (2, 3, 4) x (4, 5) with the matrix shared.
  const mat a = naive::random(2 * 3 * 4, 10), b = naive::random(2 * 4 * 5, 11), w = naive::random(4 * 5, 12);
  const auto A = make<tensor<double, 2, 3, 4>>(a);
  const auto B = make<tensor<double, 2, 4, 5>>(b);
  const auto W = make<tensor<double, 4, 5>>(w);
  tensor<double, 2, 3, 5> C = A * B;
  tensor<double, 2, 3, 5> D = A * W;
  mat wantC, wantD;
  for (int n = 0; n < 2; ++n) {
    const mat an(a.begin() + n * 12, a.begin() + (n + 1) * 12);
    const mat bn(b.begin() + n * 20, b.begin() + (n + 1) * 20);
    const mat cn = naive::matmul(an, bn, 3, 4, 5), dn = naive::matmul(an, w, 3, 4, 5);
    wantC.insert(wantC.end(), cn.begin(), cn.end());
    wantD.insert(wantD.end(), dn.begin(), dn.end());
  }
  check_close(C, wantC, 1e-14);
  check_close(D, wantD, 1e-14);
}

BOOST_AUTO_TEST_CASE(transpose_alone_and_batched) {
  const mat a = naive::random(2 * 3 * 5, 13);
  const auto A = make<tensor<double, 2, 3, 5>>(a);
  tensor<double, 2, 5, 3> T = transpose(A);
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) BOOST_TEST(T(n, j, i) == a[n * 15 + i * 5 + j]);
  // transpose of an expression (materialised, then read strided)
  tensor<double, 2, 5, 3> T2 = transpose(A * 2.0);
  BOOST_TEST(T2(1, 4, 2) == 2 * a[15 + 2 * 5 + 4]);
}

// ---- element-wise -------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(elementwise_ops_and_broadcasting) {
  const mat a = naive::random(3 * 4, 14), b = naive::random(3 * 4, 15, 0.5, 2), row = naive::random(4, 16),
            col = naive::random(3, 17);
  const auto A = make<tensor<double, 3, 4>>(a);
  const auto B = make<tensor<double, 3, 4>>(b);
  const auto R = make<tensor<double, 4>>(row);     // broadcasts over rows (a bias)
  const auto C = make<tensor<double, 3, 1>>(col);  // broadcasts over columns
  tensor<double, 3, 4> sum = A + B, diff = A - B, prod = hadamard(A, B), quot = A / B;
  tensor<double, 3, 4> bias = A + R, colwise = A - C, scalars = 2.0 * A + 1.0 - A / 4.0, neg = -A;
  tensor<double, 3, 4> chain = exp(A - B) * 0.5 + sqrt(B) - abs(A) + square(A) + tanh(A) + log(B);
  mat w(12);
  for (std::size_t i = 0; i < 12; ++i) w[i] = a[i] + b[i];
  check_close(sum, w, 0);
  for (std::size_t i = 0; i < 12; ++i) w[i] = a[i] - b[i];
  check_close(diff, w, 0);
  for (std::size_t i = 0; i < 12; ++i) w[i] = a[i] * b[i];
  check_close(prod, w, 0);
  for (std::size_t i = 0; i < 12; ++i) w[i] = a[i] / b[i];
  check_close(quot, w, 0);
  for (std::size_t i = 0; i < 12; ++i) w[i] = a[i] + row[i % 4];
  check_close(bias, w, 0);
  for (std::size_t i = 0; i < 12; ++i) w[i] = a[i] - col[i / 4];
  check_close(colwise, w, 0);
  for (std::size_t i = 0; i < 12; ++i) w[i] = 2 * a[i] + 1 - a[i] / 4;
  check_close(scalars, w, 1e-15);
  for (std::size_t i = 0; i < 12; ++i) w[i] = -a[i];
  check_close(neg, w, 0);
  for (std::size_t i = 0; i < 12; ++i)
    w[i] = std::exp(a[i] - b[i]) * 0.5 + std::sqrt(b[i]) - std::abs(a[i]) + a[i] * a[i] + std::tanh(a[i]) + std::log(b[i]);
  check_close(chain, w, 1e-14);
}

BOOST_AUTO_TEST_CASE(broadcast_rank4_over_heads) {
  // (2, 1, 3, 4) + (2, 5, 3, 4): the first broadcasts over the heads axis.
  const mat a = naive::random(2 * 3 * 4, 18), b = naive::random(2 * 5 * 3 * 4, 19);
  const auto A = make<tensor<double, 2, 1, 3, 4>>(a);
  const auto B = make<tensor<double, 2, 5, 3, 4>>(b);
  tensor<double, 2, 5, 3, 4> C = A + B;
  for (int n = 0; n < 2; ++n)
    for (int h = 0; h < 5; ++h)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 4; ++j) BOOST_TEST(C(n, h, i, j) == a[n * 12 + i * 4 + j] + b[((n * 5 + h) * 3 + i) * 4 + j]);
}

// ---- reductions and softmax -------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(row_reductions) {
  const mat a = naive::random(4 * 6, 20, -5, 5);
  const auto A = make<tensor<double, 4, 6>>(a);
  tensor<double, 4, 1> mx = row_max(A), sm = row_sum(A);
  tensor<double, 4, 6> centred = A - row_max(A);  // broadcasts the (4, 1) max back over the rows
  for (int i = 0; i < 4; ++i) {
    double m = -inf, s = 0;
    for (int j = 0; j < 6; ++j) m = std::max(m, a[i * 6 + j]), s += a[i * 6 + j];
    BOOST_TEST(mx(i, 0) == m);
    BOOST_TEST(std::abs(sm(i, 0) - s) <= 1e-14);
    for (int j = 0; j < 6; ++j) BOOST_TEST(centred(i, j) == a[i * 6 + j] - m);
  }
  tensor<double, 1, 3> nanrow{{1.0, std::nan(""), 2.0}};
  tensor<double, 1, 1> nanmax = row_max(nanrow);
  BOOST_TEST(std::isnan(nanmax(0, 0)));
}

BOOST_AUTO_TEST_CASE(softmax_matches_reference_and_sums_to_one) {
  const mat a = naive::random(5 * 7, 21, -30, 30);
  const auto A = make<tensor<double, 5, 7>>(a);
  tensor<double, 5, 7> P = softmax(A);
  check_close(P, naive::softmax_rows(a, 5, 7), 1e-14);
  tensor<double, 5, 1> sums = row_sum(softmax(A));
  for (int i = 0; i < 5; ++i) BOOST_TEST(std::abs(sums(i, 0) - 1) <= 1e-15);
  // The same softmax written out by hand, as an expression: exp(A - max) / sum(exp(A - max)).
  tensor<double, 5, 7> manual = exp(A - row_max(A)) / row_sum(exp(A - row_max(A)));
  check_close(manual, naive::softmax_rows(a, 5, 7), 1e-14);
  // float
  tensor<float, 5, 7> Pf = softmax(make<tensor<float, 5, 7>>(a));
  check_close(Pf, naive::softmax_rows(a, 5, 7), 1e-5);
}

BOOST_AUTO_TEST_CASE(softmax_special_rows) {
  // -inf everywhere -> zeros; a NaN -> all NaN; +inf entries share the weight; huge logits stay exact.
  const double n = std::nan("");
  tensor<double, 4, 3> S{{-inf, -inf, -inf}, {1.0, n, 2.0}, {inf, 3.0, inf}, {1000.0, 999.0, -1000.0}};
  tensor<double, 4, 3> P = softmax(S);
  for (int j = 0; j < 3; ++j) BOOST_TEST(P(0, j) == 0.0);
  for (int j = 0; j < 3; ++j) BOOST_TEST(std::isnan(P(1, j)));
  BOOST_TEST(P(2, 0) == 0.5);
  BOOST_TEST(P(2, 1) == 0.0);
  BOOST_TEST(P(2, 2) == 0.5);
  const double e = std::exp(-1.0);
  BOOST_TEST(std::abs(P(3, 0) - 1 / (1 + e)) <= 1e-15);
  BOOST_TEST(std::abs(P(3, 1) - e / (1 + e)) <= 1e-15);
  BOOST_TEST(P(3, 2) == 0.0);
}

// ---- masks ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(causal_top_left_and_bottom_right) {
  // L_q = 3 queries, L_k = 5 keys.
  const mat s = naive::random(3 * 5, 22);
  const auto S = make<tensor<double, 3, 5>>(s);
  tensor<double, 3, 5> tl = mask(S, causal), br = mask(S, causal_bottom_right);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      BOOST_TEST(tl(i, j) == (j <= i ? s[i * 5 + j] : -inf));
      BOOST_TEST(br(i, j) == (j <= i + 2 ? s[i * 5 + j] : -inf));
    }
  // L_q > L_k with bottom-right alignment: the first rows see no key at all -> softmax gives 0.
  const mat s2 = naive::random(4 * 2, 23);
  tensor<double, 4, 2> p = softmax(mask(make<tensor<double, 4, 2>>(s2), causal_bottom_right));
  BOOST_TEST(p(0, 0) == 0.0);
  BOOST_TEST(p(0, 1) == 0.0);
  BOOST_TEST(p(1, 0) == 0.0);
  BOOST_TEST(p(2, 0) == 1.0);
  BOOST_TEST(std::abs(p(3, 0) + p(3, 1) - 1) <= 1e-15);
}

BOOST_AUTO_TEST_CASE(causal_mask_applies_per_matrix_in_a_batch) {
  const mat s = naive::random(2 * 3 * 3, 24);
  const auto S = make<tensor<double, 2, 3, 3>>(s);
  tensor<double, 2, 3, 3> m = mask(S, causal);
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) BOOST_TEST(m(n, i, j) == (j <= i ? s[n * 9 + i * 3 + j] : -inf));
}

BOOST_AUTO_TEST_CASE(key_padding_static_and_runtime) {
  const mat s = naive::random(2 * 3 * 4, 25);
  const auto S = make<tensor<double, 2, 3, 4>>(s);
  tensor<double, 2, 3, 4> st = mask(S, key_padding<3>, -1e9);  // seed 003's fill value
  const std::vector<std::size_t> lens{2, 4};
  tensor<double, 2, 3, 4> rt = mask(S, key_lengths(lens));
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) {
        const double v = s[n * 12 + i * 4 + j];
        BOOST_TEST(st(n, i, j) == (j < 3 ? v : -1e9));
        BOOST_TEST(rt(n, i, j) == (std::size_t(j) < lens[n] ? v : -inf));
      }
  // A wrong count or a length beyond the keys is reported with the numbers.
  const std::vector<std::size_t> three{1, 2, 3}, too_long{2, 5};
  BOOST_CHECK_EXCEPTION((void)mask(S, key_lengths(three)), std::invalid_argument,
                        test_support::says({"3 entries", "2 batch items"}));
  BOOST_CHECK_EXCEPTION((void)mask(S, key_lengths(too_long)), std::out_of_range,
                        test_support::says({"key_lengths[1] = 5"}));
}

BOOST_AUTO_TEST_CASE(boolean_mask_broadcast_over_heads) {
  // scores (2, 2, 3, 3), mask (2, 1, 3, 3): one mask per batch item, shared by the heads.
  const mat s = naive::random(2 * 2 * 3 * 3, 26);
  const auto S = make<tensor<double, 2, 2, 3, 3>>(s);
  tensor<bool, 2, 1, 3, 3> M;
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) M(n, 0, i, j) = (i + j + n) % 2 == 0;
  tensor<double, 2, 2, 3, 3> m = mask(S, allowed(M));
  for (int n = 0; n < 2; ++n)
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j)
          BOOST_TEST(m(n, h, i, j) == ((i + j + n) % 2 == 0 ? s[((n * 2 + h) * 3 + i) * 3 + j] : -inf));
}

BOOST_AUTO_TEST_CASE(additive_mask_and_composition) {
  const mat s = naive::random(3 * 3, 27), bias = naive::random(3 * 3, 28);
  const auto S = make<tensor<double, 3, 3>>(s);
  const auto B = make<tensor<double, 3, 3>>(bias);
  tensor<double, 3, 3> add = mask(S, additive(B));
  tensor<double, 3, 3> both = mask(mask(S, causal), key_padding<2>);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      BOOST_TEST(add(i, j) == s[i * 3 + j] + bias[i * 3 + j]);
      BOOST_TEST(both(i, j) == (j <= i && j < 2 ? s[i * 3 + j] : -inf));
    }
}

// ---- attention -----------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(attention_against_reference_all_masks) {
  constexpr std::size_t Lq = 7, Lk = 11, D = 5, Dv = 3;
  const mat q = naive::random(Lq * D, 29), k = naive::random(Lk * D, 30), v = naive::random(Lk * Dv, 31);
  const auto Q = make<tensor<double, Lq, D>>(q);
  const auto K = make<tensor<double, Lk, D>>(k);
  const auto V = make<tensor<double, Lk, Dv>>(v);
  tensor<bool, Lq, Lk> M;
  for (std::size_t i = 0; i < Lq; ++i)
    for (std::size_t j = 0; j < Lk; ++j) M(i, j) = (i * 3 + j) % 4 != 0;
  const std::vector<std::size_t> len{6};

  tensor<double, Lq, Dv> none = attention(Q, K, V);
  tensor<double, Lq, Dv> tl = attention(Q, K, V, causal);
  tensor<double, Lq, Dv> br = attention(Q, K, V, causal_bottom_right);
  tensor<double, Lq, Dv> pad = attention(Q, K, V, key_padding<4>);
  tensor<double, Lq, Dv> rt = attention(Q, K, V, key_lengths(len));
  tensor<double, Lq, Dv> bm = attention(Q, K, V, allowed(M));
  tensor<double, Lq, Dv> two = attention(Q, K, V, causal, allowed(M));

  check_close(none, naive::attention(q, k, v, Lq, Lk, D, Dv, [](auto, auto) { return true; }), 1e-14);
  check_close(tl, naive::attention(q, k, v, Lq, Lk, D, Dv, [](auto i, auto j) { return j <= i; }), 1e-14);
  check_close(br, naive::attention(q, k, v, Lq, Lk, D, Dv, [](auto i, auto j) { return j <= i + Lk - Lq; }), 1e-14);
  check_close(pad, naive::attention(q, k, v, Lq, Lk, D, Dv, [](auto, auto j) { return j < 4; }), 1e-14);
  check_close(rt, naive::attention(q, k, v, Lq, Lk, D, Dv, [](auto, auto j) { return j < 6; }), 1e-14);
  check_close(bm, naive::attention(q, k, v, Lq, Lk, D, Dv, [](auto i, auto j) { return (i * 3 + j) % 4 != 0; }), 1e-14);
  check_close(two, naive::attention(q, k, v, Lq, Lk, D, Dv, [](auto i, auto j) { return j <= i && (i * 3 + j) % 4 != 0; }),
              1e-14);

  // The weights for inspection, and the product of weights with V, agree with the fused expression.
  tensor<double, Lq, Lk> W = attention_weights(Q, K, causal);
  tensor<double, Lq, Dv> wv = W * V;
  check_close(wv, to_mat(tl), 1e-15);
}

// Random shapes, none a multiple of a vector width, float and double.
template <class T, std::size_t B, std::size_t Lq, std::size_t Lk, std::size_t D, std::size_t Dv>
struct case_t {
  using value = T;
  static constexpr std::size_t b = B, lq = Lq, lk = Lk, d = D, dv = Dv;
};
using random_cases = std::tuple<case_t<double, 1, 1, 1, 1, 1>, case_t<double, 3, 5, 9, 7, 2>, case_t<float, 2, 17, 33, 19, 23>,
                                case_t<float, 1, 31, 13, 40, 9>, case_t<double, 2, 64, 65, 24, 8>>;

BOOST_AUTO_TEST_CASE_TEMPLATE(attention_random_shapes, C, random_cases) {
  using T = typename C::value;
  constexpr std::size_t B = C::b, Lq = C::lq, Lk = C::lk, D = C::d, Dv = C::dv;
  const mat q = naive::random(B * Lq * D, 40 + B), k = naive::random(B * Lk * D, 50 + Lk), v = naive::random(B * Lk * Dv, 60 + D);
  const auto Q = make<tensor<T, B, Lq, D>>(q);
  const auto K = make<tensor<T, B, Lk, D>>(k);
  const auto V = make<tensor<T, B, Lk, Dv>>(v);
  tensor<T, B, Lq, Dv> O = attention(Q, K, V, causal);
  mat want;
  for (std::size_t n = 0; n < B; ++n) {
    const mat qn(q.begin() + n * Lq * D, q.begin() + (n + 1) * Lq * D);
    const mat kn(k.begin() + n * Lk * D, k.begin() + (n + 1) * Lk * D);
    const mat vn(v.begin() + n * Lk * Dv, v.begin() + (n + 1) * Lk * Dv);
    const mat on = naive::attention(qn, kn, vn, Lq, Lk, D, Dv, [](auto i, auto j) { return j <= i; });
    want.insert(want.end(), on.begin(), on.end());
  }
  check_close(O, want, std::is_same_v<T, float> ? 2e-6 : 1e-14);
}
