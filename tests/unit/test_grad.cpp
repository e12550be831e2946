// Reverse mode over expressions (attnx/grad/backward.hpp): every rule against central finite differences in double,
// attention's gradients against a reference written here with plain loops, and seed 001's worked example and a small
// attention proven by static_assert.
#define BOOST_TEST_MODULE grad
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "../../examples/seed001.hpp"
#include "random.hpp"

using namespace attnx;

namespace {

constexpr double absd(double x) { return x < 0 ? -x : x; }

// The sum of e's elements weighted by w (w's elements in e's row-major order), in double.
template <class E>
double weighted_sum(const E& e, const std::vector<double>& w) {
  const auto t = evaluate(e);
  double s = 0;
  for (std::size_t i = 0; i < t.numel(); ++i) s += static_cast<double>(t.data()[i]) * w[i];
  return s;
}

// The largest |analytic - numeric| / (1 + |numeric|) over x's elements, the numeric one from central differences
// of f (x's elements moved by +-h in place).
template <class X, class F, class G>
double fd_error(X& x, const F& f, const G& analytic, double h = 1e-6) {
  double worst = 0;
  for (std::size_t i = 0; i < x.numel(); ++i) {
    const auto keep = x.data()[i];
    x.data()[i] = keep + h;
    const double up = f();
    x.data()[i] = keep - h;
    const double down = f();
    x.data()[i] = keep;
    const double num = (up - down) / (2 * h);
    const double err = absd(static_cast<double>(analytic.data()[i]) - num) / (1 + absd(num));
    worst = err > worst ? err : worst;
  }
  return worst;
}

template <class Tn>
void fill(Tn& t, test_random::rng& r, double lo = -1, double hi = 1) {
  for (auto& v : t) v = static_cast<value_t<Tn>>(r.uniform(lo, hi));
}
std::vector<double> weights(std::size_t n, test_random::rng& r) {
  std::vector<double> w(n);
  for (auto& v : w) v = r.uniform(-1, 1);
  return w;
}

}  // namespace

BOOST_AUTO_TEST_CASE(elementwise_rules_with_broadcasting) {
  test_random::rng r(1);
  tensor<double, 3, 5> a;
  tensor<double, 5> b;
  tensor<double, 3, 1> c;
  fill(a, r, 0.2, 2), fill(b, r, 0.5, 1.5), fill(c, r, -1, 1);
  const auto y = [&] {
    return hadamard(exp(a) * 0.5 + tanh(b), c) / (square(a) + 1.0) - log(b) + sqrt(a) - abs(c - a) + sigmoid(a - b) +
           relu(a - 1.0) + silu(c) + gelu(a - b) + gelu_tanh(b - a) + maximum(a, b) - minimum(c, b) - (-a);
  };
  const auto w = weights(15, r);
  tensor<double, 3, 5> dyt;
  alg::copy_n(w.data(), 15, dyt.data());
  const auto [da, db, dc] = backward(y(), dyt, wrt(a, b, c));
  const auto f = [&] { return weighted_sum(y(), w); };
  BOOST_TEST(fd_error(a, f, da) < 1e-7);
  BOOST_TEST(fd_error(b, f, db) < 1e-7);
  BOOST_TEST(fd_error(c, f, dc) < 1e-7);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(db)>, tensor<double, 5>>);
}

BOOST_AUTO_TEST_CASE(ties_and_kinks_follow_pytorch) {
  const tensor<double, 4> a{1, 2, 3, 0};
  const tensor<double, 4> b{2, 2, 1, 0};
  const auto [ga, gb] = grad(maximum(a, b), wrt(a, b));
  BOOST_TEST(ga(0) == 0.0);
  BOOST_TEST(ga(1) == 0.5);
  BOOST_TEST(ga(2) == 1.0);
  BOOST_TEST(gb(0) == 1.0);
  BOOST_TEST(gb(1) == 0.5);
  BOOST_TEST(gb(2) == 0.0);
  const auto [gr, gabs] = grad(relu(a - 3.0) + abs(b), wrt(a, b));
  BOOST_TEST(gr(2) == 0.0);     // relu at its kink: 0
  BOOST_TEST(gabs(3) == 0.0);   // abs at 0: 0
  BOOST_TEST(gabs(0) == 1.0);
  const auto [gm] = grad(row_max(b), wrt(b));
  BOOST_TEST(gm(0) == 0.5);  // b's maxima tie: each takes half
  BOOST_TEST(gm(1) == 0.5);
  BOOST_TEST(gm(2) == 0.0);
}

BOOST_AUTO_TEST_CASE(matmul_batched_and_shared_rhs) {
  test_random::rng r(2);
  tensor<double, 2, 3, 4> a;
  tensor<double, 4, 5> b;
  tensor<double, 2, 5, 4> c;
  fill(a, r), fill(b, r), fill(c, r);
  const auto w = weights(2 * 3 * 4, r);
  tensor<double, 2, 3, 4> dy;
  alg::copy_n(w.data(), w.size(), dy.data());
  const auto y = [&] { return (a * b) * c; };
  const auto [da, db, dc] = backward(y(), dy, wrt(a, b, c));
  const auto f = [&] { return weighted_sum(y(), w); };
  BOOST_TEST(fd_error(a, f, da) < 1e-8);
  BOOST_TEST(fd_error(b, f, db) < 1e-8);
  BOOST_TEST(fd_error(c, f, dc) < 1e-8);
  const auto [dt] = grad(transpose(a) * a, wrt(a));  // a used twice: both paths
  const auto g = [&] { return weighted_sum(transpose(a) * a, std::vector<double>(2 * 4 * 4, 1.0)); };
  BOOST_TEST(fd_error(a, g, dt) < 1e-8);
}

// A weighted sum of y() with random weights, its gradient by backward, against central differences for each leaf.
template <class Y, class... X>
void check_against_fd(test_random::rng& r, const Y& y, double tol, X&... x) {
  using R = std::remove_cvref_t<decltype(evaluate(y()))>;
  const auto w = weights(evaluate(y()).numel(), r);
  R dy(dims_of(y()), uninitialized);
  alg::copy_n(w.data(), w.size(), dy.data());
  const auto grads = backward(y(), dy, wrt(x...));
  const auto f = [&] { return weighted_sum(y(), w); };
  std::size_t i = 0;
  const auto one = [&](auto& leaf, const auto& g) {
    BOOST_TEST_CONTEXT("leaf " << i++) { BOOST_TEST(fd_error(leaf, f, g) < tol); }
  };
  std::apply([&](const auto&... g) { (one(x, g), ...); }, grads);
}

// slice, concat (static and dyn extents), index_select with repeated ids, the unit batch axis, reshape (a view over
// a leaf's memory) and rotary in both layouts at an offset.
BOOST_AUTO_TEST_CASE(slices_concat_rows_and_rotary) {
  test_random::rng r(11);
  for (std::size_t n : {1, 3, 17}) {
    BOOST_TEST_CONTEXT("n " << n) {
      tensor<double, dyn, 6> a(n + 2), b(n);
      tensor<double, 2, 3, 6> c;
      fill(a, r), fill(b, r), fill(c, r);
      check_against_fd(r, [&] { return exp(concat<0>(slice<0>(a, 1, n), b * 2.0)); }, 1e-8, a, b);
      check_against_fd(r, [&] { return square(concat<1>(slice<1, 2, 3>(a), slice<1>(a, 0, 2))); }, 1e-8, a);
      check_against_fd(r, [&] { return tanh(slice<2, 1, 4>(c)) * transpose(slice<2, 0, 4>(c) + 1.0); }, 1e-8, c);
      const std::vector<int> ids{2, 0, 2, 1, 2};  // row 2 three times: its gradient sums three rows
      tensor<double, dyn, 6> table(n + 2);
      fill(table, r);
      check_against_fd(r, [&] { return sigmoid(index_select(table, ids)); }, 1e-8, table);
      check_against_fd(r, [&] { return drop_unit_batch(square(add_unit_batch(a))); }, 1e-8, a);
      check_against_fd(r, [&] { return tanh(reshape<dyn, 3>(b, 2 * n)); }, 1e-8, b);
      tensor<double, 2, dyn, 6> x(n);
      fill(x, r);
      check_against_fd(r, [&] { return square(rotary(x, rope_style::half, 5)) + rotary(x, rope_style::interleaved, 0); }, 1e-8, x);
      check_against_fd(r, [&] { return rotary(x * 2.0, rope_style::interleaved, 1000, 500.0); }, 1e-8, x);
    }
  }
}

// The pairwise similarities: cosine (a zero row included), rbf and additive (with and without its hidden bias), with
// K shared by a batch and batched.
BOOST_AUTO_TEST_CASE(pairwise_similarities) {
  test_random::rng r(12);
  for (std::size_t n : {1, 3, 17}) {
    BOOST_TEST_CONTEXT("n " << n) {
      tensor<double, 2, dyn, 5> q(n + 1), kb(n);
      tensor<double, dyn, 5> k(n);
      fill(q, r), fill(k, r), fill(kb, r);
      check_against_fd(r, [&] { return cosine_scores(q, k, 0.5); }, 1e-7, q, k);
      check_against_fd(r, [&] { return softmax(cosine_scores(q, kb, 0.25)); }, 1e-7, q, kb);
      check_against_fd(r, [&] { return rbf_scores(q, k, 0.7); }, 1e-7, q, k);
      check_against_fd(r, [&] { return softmax(rbf_scores(q, kb, 1.3)) * kb; }, 1e-7, q, kb);
      tensor<double, 5, 4> w1, w2;
      tensor<double, 4> w, bias;
      fill(w1, r), fill(w2, r), fill(w, r), fill(bias, r);
      check_against_fd(r, [&] { return additive_scores(q, k, w1, w2, w); }, 1e-7, q, k, w1, w2, w);
      check_against_fd(r, [&] { return softmax(additive_scores(q, kb, w1, w2, w, bias)); }, 1e-7, q, kb, w1, w2, w, bias);
    }
  }
  // A zero query: cosine's eps keeps it finite, and its gradient is the first term's alone.
  tensor<double, 2, 3> q0, k0;
  const double qv[6] = {0, 0, 0, 1, 2, 3}, kv[6] = {1, 0, 0, 0.5, -1, 2};
  alg::copy_n(qv, 6, q0.data()), alg::copy_n(kv, 6, k0.data());
  const auto [dq] = grad(cosine_scores(q0, k0, 1.0), wrt(q0));
  for (std::size_t j = 0; j < 3; ++j) BOOST_TEST(std::isfinite(dq(0, j)));
  test_random::rng r2(13);
  check_against_fd(r2, [&] { return cosine_scores(q0, k0, 2.0); }, 1e-6, k0);
}

// Attention with projections, X used three times; every mask kind; dyn sequence lengths of 1, 3, 17 and 65.
template <std::size_t L>
void check_projected_attention(std::size_t n, int mask_kind) {
  test_random::rng r(10 + n + 100 * mask_kind);
  tensor<double, L, 8> x(n);
  tensor<double, 8, 4> wq, wk;
  tensor<double, 8, 6> wv;
  fill(x, r), fill(wq, r, -2, 2), fill(wk, r, -2, 2), fill(wv, r);
  tensor<bool, L, L> allow(n, n);
  tensor<double, L, L> bias(n, n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) allow(i, j) = (i + 2 * j) % 3 != 0 || j == 0, bias(i, j) = r.uniform(-1, 1);
  const std::vector<std::size_t> lens{n > 2 ? n - 2 : n};
  const std::vector<std::size_t> offs{0, n / 3, n / 3, n};
  const std::array<double, 1> slope{0.3};
  const auto y = [&] {
    const auto q = x * wq;
    const auto k = x * wk;
    const auto v = x * wv;
    if (mask_kind == 0) return evaluate(attention(q, k, v));
    if (mask_kind == 1) return evaluate(attention(q, k, v, causal));
    if (mask_kind == 2) return evaluate(attention(q, k, v, allowed(allow)));
    if (mask_kind == 3) return evaluate(attention(q, k, v, additive(bias), causal_bottom_right));
    if (mask_kind == 5) return evaluate(attention(q, k, v, sliding_window(n / 2, n / 4)));
    if (mask_kind == 6) return evaluate(attention(q, k, v, causal, documents(offs)));
    if (mask_kind == 7) return evaluate(attention(q, k, v, softcap(1.5), causal));
    if (mask_kind == 8) return evaluate(attention(q, k, v, causal, alibi(slope)));
    return evaluate(attention(q, k, v, key_lengths(lens)));
  };
  const auto w = weights(n * 6, r);
  tensor<double, L, 6> dy(n);
  alg::copy_n(w.data(), w.size(), dy.data());
  const auto grads = [&] {
    const auto q = x * wq;
    const auto k = x * wk;
    const auto v = x * wv;
    if (mask_kind == 0) return backward(attention(q, k, v), dy, wrt(x, wq, wk, wv, bias));
    if (mask_kind == 1) return backward(attention(q, k, v, causal), dy, wrt(x, wq, wk, wv, bias));
    if (mask_kind == 2) return backward(attention(q, k, v, allowed(allow)), dy, wrt(x, wq, wk, wv, bias));
    if (mask_kind == 3) return backward(attention(q, k, v, additive(bias), causal_bottom_right), dy, wrt(x, wq, wk, wv, bias));
    if (mask_kind == 5) return backward(attention(q, k, v, sliding_window(n / 2, n / 4)), dy, wrt(x, wq, wk, wv, bias));
    if (mask_kind == 6) return backward(attention(q, k, v, causal, documents(offs)), dy, wrt(x, wq, wk, wv, bias));
    if (mask_kind == 7) return backward(attention(q, k, v, softcap(1.5), causal), dy, wrt(x, wq, wk, wv, bias));
    if (mask_kind == 8) return backward(attention(q, k, v, causal, alibi(slope)), dy, wrt(x, wq, wk, wv, bias));
    return backward(attention(q, k, v, key_lengths(lens)), dy, wrt(x, wq, wk, wv, bias));
  }();
  const auto f = [&] {
    const auto t = y();
    double s = 0;
    for (std::size_t i = 0; i < t.numel(); ++i) s += t.data()[i] * w[i];
    return s;
  };
  BOOST_TEST_CONTEXT("L " << n << ", mask kind " << mask_kind) {
    BOOST_TEST(fd_error(x, f, std::get<0>(grads)) < 1e-7);
    BOOST_TEST(fd_error(wq, f, std::get<1>(grads)) < 1e-7);
    BOOST_TEST(fd_error(wk, f, std::get<2>(grads)) < 1e-7);
    BOOST_TEST(fd_error(wv, f, std::get<3>(grads)) < 1e-7);
    BOOST_TEST(fd_error(bias, f, std::get<4>(grads)) < 1e-7);
  }
}
BOOST_AUTO_TEST_CASE(attention_every_mask_kind_dyn_lengths) {
  for (std::size_t n : {1, 3, 17})
    for (int kind = 0; kind < 9; ++kind) check_projected_attention<dyn>(n, kind);
  check_projected_attention<dyn>(65, 1);
  check_projected_attention<dyn>(65, 5);
  check_projected_attention<dyn>(65, 6);
  check_projected_attention<dyn>(65, 7);
  check_projected_attention<dyn>(65, 8);
  check_projected_attention<dyn>(65, 3);
}

// A fully masked row passes no gradient to its query, and none of its zero weights reaches K or V.
BOOST_AUTO_TEST_CASE(fully_masked_row_gives_zero_gradient) {
  test_random::rng r(3);
  tensor<double, 4, 3> q, k, v;
  fill(q, r), fill(k, r), fill(v, r);
  tensor<bool, 4, 4> allow;
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j) allow(i, j) = i != 2;  // row 2 sees no key
  const auto [dq, dk, dv] = grad(attention(q, k, v, allowed(allow)), wrt(q, k, v));
  for (std::size_t j = 0; j < 3; ++j) BOOST_TEST(dq(2, j) == 0.0);
  // V's gradient is the column sums of P over the three live rows.
  const tensor<double, 4, 4> p = attention_weights(q, k, allowed(allow));
  for (std::size_t kk = 0; kk < 4; ++kk) BOOST_TEST(dv(kk, 0) == p(0, kk) + p(1, kk) + p(2, kk) + p(3, kk), boost::test_tools::tolerance(1e-14));
  // A NaN score row: its query's gradient is NaN (the forward row is NaN), the others' are finite.
  q(1, 0) = std::numeric_limits<double>::quiet_NaN();
  const auto [dq2] = grad(attention(q, k, v), wrt(q));
  BOOST_TEST(std::isnan(dq2(1, 1)));
  BOOST_TEST(std::isfinite(dq2(0, 0)));
}

BOOST_AUTO_TEST_CASE(norms_heads_and_grouped_queries) {
  test_random::rng r(4);
  tensor<double, 5, 8> x;
  tensor<double, 8> g, b;
  fill(x, r), fill(g, r, 0.5, 1.5), fill(b, r);
  const auto w = weights(40, r);
  tensor<double, 5, 8> dy;
  alg::copy_n(w.data(), 40, dy.data());
  const auto [dx, dg, db] = backward(layer_norm(x, g, b) + rms_norm(x, g), dy, wrt(x, g, b));
  const auto f = [&] { return weighted_sum(layer_norm(x, g, b) + rms_norm(x, g), w); };
  BOOST_TEST(fd_error(x, f, dx) < 1e-7);
  BOOST_TEST(fd_error(g, f, dg) < 1e-7);
  BOOST_TEST(fd_error(b, f, db) < 1e-7);
  // Four query heads over two KV heads, merged back: split_heads, repeat_heads, merge_heads.
  tensor<double, 2, 5, 8> xq;
  tensor<double, 2, 5, 4> xk, xv;
  fill(xq, r), fill(xk, r), fill(xv, r);
  const auto y = [&] {
    return merge_heads(attention(split_heads<4>(xq), repeat_heads<2>(split_heads<2>(xk)), repeat_heads<2>(split_heads<2>(xv)), causal));
  };
  const auto w2 = weights(2 * 5 * 8, r);
  tensor<double, 2, 5, 8> dy2;
  alg::copy_n(w2.data(), w2.size(), dy2.data());
  const auto [dq, dk, dv] = backward(y(), dy2, wrt(xq, xk, xv));
  const auto f2 = [&] { return weighted_sum(y(), w2); };
  BOOST_TEST(fd_error(xq, f2, dq) < 1e-7);
  BOOST_TEST(fd_error(xk, f2, dk) < 1e-7);
  BOOST_TEST(fd_error(xv, f2, dv) < 1e-7);
}

// In float: the gradients of a float attention within float rounding of the double ones.
BOOST_AUTO_TEST_CASE(float_agrees_with_double) {
  test_random::rng r(5);
  tensor<double, 33, 16> q, k, v;
  fill(q, r), fill(k, r), fill(v, r);
  const tensor<float, 33, 16> qf = cast<float>(q), kf = cast<float>(k), vf = cast<float>(v);
  const auto [dq, dk, dv] = grad(square(attention(q, k, v, causal)), wrt(q, k, v));
  const auto [dqf, dkf, dvf] = grad(square(attention(qf, kf, vf, causal)), wrt(qf, kf, vf));
  double worst = 0;
  for (std::size_t i = 0; i < dq.numel(); ++i) {
    worst = std::max(worst, absd(dq.data()[i] - dqf.data()[i]));
    worst = std::max(worst, absd(dk.data()[i] - dkf.data()[i]));
    worst = std::max(worst, absd(dv.data()[i] - dvf.data()[i]));
  }
  BOOST_TEST(worst < 2e-5);
  BOOST_TEST(worst > 0.0);  // (float is not double: the comparison sees both)
}

// ---- Compile time ----------------------------------------------------------------------------------------------
// Attention's gradients by plain loops, independent of the library: O = softmax(c Q K^T) V with Q = X W_Q, K = X W_K,
// V = X W_V and upstream gradient dO; dS_ij = c sum_k P_ij P_ik (dP_ij - dP_ik) (no cancellation in a saturated row).
template <std::size_t L, std::size_t D, std::size_t DK, std::size_t DV>
struct loop_reference {
  double dwq[D][DK]{}, dwk[D][DK]{}, dwv[D][DV]{};
  constexpr loop_reference(const double (&x)[L][D], const double (&wq)[D][DK], const double (&wk)[D][DK],
                           const double (&wv)[D][DV], const double (&dout)[L][DV]) {
    double q[L][DK]{}, k[L][DK]{}, v[L][DV]{}, p[L][L]{}, dp[L][L]{}, ds[L][L]{}, dq[L][DK]{}, dk[L][DK]{}, dv[L][DV]{};
    const double c = 1 / math::sqrt(double(DK));
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t m = 0; m < D; ++m) {
        for (std::size_t j = 0; j < DK; ++j) q[i][j] += x[i][m] * wq[m][j], k[i][j] += x[i][m] * wk[m][j];
        for (std::size_t j = 0; j < DV; ++j) v[i][j] += x[i][m] * wv[m][j];
      }
    for (std::size_t i = 0; i < L; ++i) {
      double s[L]{}, mx = -1e300, sum = 0;
      for (std::size_t j = 0; j < L; ++j) {
        for (std::size_t t = 0; t < DK; ++t) s[j] += c * q[i][t] * k[j][t];
        mx = s[j] > mx ? s[j] : mx;
      }
      for (std::size_t j = 0; j < L; ++j) sum += math::exp(s[j] - mx);
      for (std::size_t j = 0; j < L; ++j) p[i][j] = math::exp(s[j] - mx) / sum;
      for (std::size_t j = 0; j < L; ++j)
        for (std::size_t t = 0; t < DV; ++t) dp[i][j] += dout[i][t] * v[j][t], dv[j][t] += p[i][j] * dout[i][t];
    }
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < L; ++j)
        for (std::size_t kk = 0; kk < L; ++kk) ds[i][j] += c * p[i][j] * p[i][kk] * (dp[i][j] - dp[i][kk]);
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < L; ++j)
        for (std::size_t t = 0; t < DK; ++t) dq[i][t] += ds[i][j] * k[j][t], dk[j][t] += ds[i][j] * q[i][t];
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t m = 0; m < D; ++m) {
        for (std::size_t t = 0; t < DK; ++t) dwq[m][t] += x[i][m] * dq[i][t], dwk[m][t] += x[i][m] * dk[i][t];
        for (std::size_t t = 0; t < DV; ++t) dwv[m][t] += x[i][m] * dv[i][t];
      }
  }
};

// The largest |got - want| over a gradient, relative to the gradient's largest element.
template <class Tn, std::size_t R, std::size_t C>
constexpr double rel_err(const Tn& got, const double (&want)[R][C]) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < R; ++i)
    for (std::size_t j = 0; j < C; ++j) scale = absd(want[i][j]) > scale ? absd(want[i][j]) : scale;
  for (std::size_t i = 0; i < R; ++i)
    for (std::size_t j = 0; j < C; ++j) {
      const double e = absd(got(i, j) - want[i][j]) / scale;
      worst = e > worst ? e : worst;
    }
  return worst;
}

namespace seed {
constexpr double X[3][4] = {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}};
constexpr double WQ[4][2] = {{1, 0}, {1, 0}, {0, 1}, {0, 1}};
constexpr double WK[4][2] = {{0, 1}, {0, 1}, {1, 0}, {1, 0}};
constexpr double WV[4][2] = {{1, 0}, {0, 1}, {1, 0}, {0, 1}};
constexpr double ones[3][2] = {{1, 1}, {1, 1}, {1, 1}};
// The squared error against the target [[17, 19], [16, 19], [18.5, 20.5]]: dO = 2 (O - target), O = [[18, 20], [18, 20],
// [18, 20]] (to 1e-15).
constexpr double dsq[3][2] = {{2, 2}, {4, 2}, {-1, -1}};
}  // namespace seed

constexpr auto seed001_sum_grads() {
  using namespace seed001;
  return grad(attention(X * W_Q, X * W_K, X * W_V), wrt(W_Q, W_K, W_V));
}
constexpr auto seed001_squared_error_grads() {
  using namespace seed001;
  const tensor<double, seq<3>, d_v<2>> t{{17, 19}, {16, 19}, {18.5, 20.5}};
  return grad(square(attention(X * W_Q, X * W_K, X * W_V) - t), wrt(W_Q, W_K, W_V));
}
constexpr loop_reference<3, 4, 2, 2> seed_sum_ref(seed::X, seed::WQ, seed::WK, seed::WV, seed::ones);
constexpr loop_reference<3, 4, 2, 2> seed_sq_ref(seed::X, seed::WQ, seed::WK, seed::WV, seed::dsq);

constexpr double seed_sum_worst() {
  const auto [dq, dk, dv] = seed001_sum_grads();
  const double e[3] = {rel_err(dq, seed_sum_ref.dwq), rel_err(dk, seed_sum_ref.dwk), rel_err(dv, seed_sum_ref.dwv)};
  return e[0] > e[1] ? (e[0] > e[2] ? e[0] : e[2]) : (e[1] > e[2] ? e[1] : e[2]);
}
constexpr double seed_sq_worst() {
  const auto [dq, dk, dv] = seed001_squared_error_grads();
  const double e[3] = {rel_err(dq, seed_sq_ref.dwq), rel_err(dk, seed_sq_ref.dwk), rel_err(dv, seed_sq_ref.dwv)};
  return e[0] > e[1] ? (e[0] > e[2] ? e[0] : e[2]) : (e[1] > e[2] ? e[1] : e[2]);
}
static_assert(seed_sum_worst() < 1e-12);
static_assert(seed_sq_worst() < 1e-12);
// dW_V of the sum: X^T P^T 1, and P's rows are one-hot to 1e-15 on token C: every row of dW_V is 3 x (row C of X).
static_assert(absd(std::get<2>(seed001_sum_grads())(3, 1) - 33.0) < 1e-12);

// A small attention whose softmax is far from saturated: 4 tokens of 3 features, d_k = d_v = 2.
namespace small {
constexpr double X[4][3] = {{0.1, -0.2, 0.3}, {0.4, 0.1, -0.5}, {-0.3, 0.2, 0.2}, {0.0, 0.5, -0.1}};
constexpr double WQ[3][2] = {{0.5, -0.3}, {0.2, 0.8}, {-0.6, 0.1}};
constexpr double WK[3][2] = {{-0.4, 0.7}, {0.3, -0.2}, {0.9, 0.5}};
constexpr double WV[3][2] = {{0.2, 0.1}, {-0.5, 0.4}, {0.3, -0.7}};
constexpr double DO[4][2] = {{1, -0.5}, {0.25, 2}, {-1, 0.75}, {0.5, 0.5}};
template <std::size_t R, std::size_t C>
constexpr tensor<double, R, C> t(const double (&a)[R][C]) {
  return tensor<double, R, C>::generate([&](auto i, auto j) { return a[i][j]; });
}
constexpr loop_reference<4, 3, 2, 2> ref(X, WQ, WK, WV, DO);
constexpr double worst() {
  const auto x = t(X);
  const auto wq = t(WQ), wk = t(WK);
  const auto wv = t(WV);
  const auto dout = t(DO);
  const auto [dq, dk, dv] = backward(attention(x * wq, x * wk, x * wv), dout, wrt(wq, wk, wv));
  const double e[3] = {rel_err(dq, ref.dwq), rel_err(dk, ref.dwk), rel_err(dv, ref.dwv)};
  return e[0] > e[1] ? (e[0] > e[2] ? e[0] : e[2]) : (e[1] > e[2] ? e[1] : e[2]);
}
static_assert(worst() < 1e-13);
static_assert(absd(ref.dwq[0][0]) > 1e-3);  // (gradients of a live softmax, not zeros)
}  // namespace small

// A small multi-head attention, proven at compile time against PyTorch 1.13 autograd: 4 tokens of 4 features, two
// causal heads of 2 (split from X W_Q, X W_K, X W_V), merged, times W_O; the loss sum(dY o Y). The expected gradients
// were printed by scripts/torch_grad_constexpr.py (float64), which holds the same inputs.
namespace mha_small {
constexpr double X[4][4] = {{0.1, -0.2, 0.3, 0.5}, {0.4, 0.1, -0.5, 0.2}, {-0.3, 0.2, 0.2, -0.4}, {0.0, 0.5, -0.1, 0.3}};
constexpr double WQ[4][4] = {{0.5, -0.3, 0.2, 0.1}, {0.2, 0.8, -0.4, 0.3}, {-0.6, 0.1, 0.7, -0.2}, {0.3, -0.5, 0.1, 0.6}};
constexpr double WK[4][4] = {{-0.4, 0.7, 0.3, -0.1}, {0.3, -0.2, 0.5, 0.4}, {0.9, 0.5, -0.3, 0.2}, {-0.2, 0.1, 0.6, -0.7}};
constexpr double WV[4][4] = {{0.2, 0.1, -0.3, 0.4}, {-0.5, 0.4, 0.2, 0.1}, {0.3, -0.7, 0.5, -0.2}, {0.1, 0.3, -0.4, 0.6}};
constexpr double WO[4][4] = {{0.6, -0.1, 0.2, 0.3}, {0.1, 0.5, -0.3, 0.2}, {-0.2, 0.3, 0.4, -0.5}, {0.4, -0.2, 0.1, 0.7}};
constexpr double DY[4][4] = {{1, -0.5, 0.25, 2}, {-1, 0.75, 0.5, 0.5}, {0.3, -0.2, 1.5, -1}, {0.8, 0.4, -0.6, 0.1}};
constexpr double dWQ[4][4] = {{-0.035402723156461251, -0.0076429462575700845, 0.025156061170470433, -0.030498437756608418}, {-0.0050273975953759389, 0.0028046997008938923, -0.0011641162295265399, 0.00091143761629448525}, {0.034951066969484225, 0.0078353801080036801, -0.018740458681433592, 0.024753860619578648}, {-0.044933536161969954, -0.0036731648385647112, 0.046887872197354012, -0.050458595007648023}};
constexpr double dWK[4][4] = {{0.027750443725727048, -0.01634787060144852, -0.0017790991683240165, 0.031076296730685887}, {0.01303431246780291, -0.0082483485527908764, 0.0024938418738497444, -0.009517510096347442}, {-0.051437882113942027, 0.032840703963620092, -0.00259081976425922, -0.022061243196640351}, {-0.0016321776245521915, 0.0053025179671460547, -0.0073718537451147393, 0.038107798954773425}};
constexpr double dWV[4][4] = {{0.066002342165181388, 0.012205141548664379, 0.037361679226981408, 0.13041541170204349}, {-0.17611616776462541, 0.0030296090813459811, 0.20355631399126012, -0.34790825338032239}, {0.40407456798808844, 0.060374417827495912, -0.41040777846884974, 0.59077671534698528}, {0.57361037669929582, 0.13845271959558453, -0.41143437705025337, 0.89041464733810338}};
constexpr double dWO[4][4] = {{0.12174583254665855, -0.077024327611423582, 0.16963065484722775, 0.55055299041040673}, {-0.15996488903408235, 0.19860846815059746, 0.097887628833677132, -0.26117687667477152}, {0.113041555636226, -0.14020036013602591, -0.25421668792830293, -0.31045542991041652}, {0.042448794238243603, 0.12874628004797151, 0.33148556565463383, 0.58441423775011947}};
constexpr auto grads() {
  const auto x = small::t(X), wq = small::t(WQ), wk = small::t(WK), wv = small::t(WV), wo = small::t(WO);
  const auto y = merge_heads(attention(split_heads<2>(x * wq), split_heads<2>(x * wk), split_heads<2>(x * wv), causal)) * wo;
  return backward(y, small::t(DY), wrt(wq, wk, wv, wo));
}
constexpr double worst() {
  const auto [dq, dk, dv, dout] = grads();
  const double e[4] = {rel_err(dq, dWQ), rel_err(dk, dWK), rel_err(dv, dWV), rel_err(dout, dWO)};
  double w = 0;
  for (double x : e) w = x > w ? x : w;
  return w;
}
static_assert(worst() < 1e-13);
static_assert(absd(std::get<0>(grads())(0, 0) - -0.035402723156461251) < 1e-15);
}  // namespace mha_small

BOOST_AUTO_TEST_CASE(compile_time_results_hold_at_run_time) {
  {  // the rules, as in the constant evaluation
    attnx::context off;
    off.set_fused(false);
    attnx::context_scope use(off);
    BOOST_TEST(seed_sum_worst() < 1e-12);
    BOOST_TEST(seed_sq_worst() < 1e-12);
    BOOST_TEST(small::worst() < 1e-13);
    BOOST_TEST(mha_small::worst() < 1e-13);
  }
  // The fused backward: seed 001's rows are saturated (one weight 1 - 1e-15), where dS = P o (dP - rowsum(dO o O))
  // keeps an absolute error of rounding in |dO| |V|, while the true dW_Q and dW_K are of that order themselves
  // (docs/gradients.md, "Precision"). dW_V = X^T P^T dO has no cancellation.
  BOOST_TEST(small::worst() < 1e-13);
  {
    const auto [dq, dk, dv] = seed001_squared_error_grads();
    BOOST_TEST(rel_err(dv, seed_sq_ref.dwv) < 1e-12);
    double worst = 0;
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 2; ++j)
        worst = std::max({worst, absd(dq(i, j) - seed_sq_ref.dwq[i][j]), absd(dk(i, j) - seed_sq_ref.dwk[i][j])});
    BOOST_TEST(worst < 1e-13 * absd(seed_sq_ref.dwv[3][1]));
  }
  // And against finite differences at run time, for the squared error of seed 001.
  auto wq = seed001::W_Q;
  const auto [dq, dk, dv] = seed001_squared_error_grads();
  const tensor<double, seq<3>, d_v<2>> target{{17, 19}, {16, 19}, {18.5, 20.5}};
  const auto f = [&] {
    using namespace seed001;
    const tensor<double, seq<3>, d_v<2>> o = attention(X * wq, X * W_K, X * W_V);
    double s = 0;
    for (std::size_t i = 0; i < 6; ++i) s += (o.data()[i] - target.data()[i]) * (o.data()[i] - target.data()[i]);
    return s;
  };
  BOOST_TEST(fd_error(wq, f, dq, 1e-4) < 1e-6);
  BOOST_TEST(absd(dv(0, 0)) > 1.0);
}

// The fused backward (the rule of a fused attention, kernels::flash_attention_backward) against the unfused rules
// (the context's fused path off), on the forms the forward fuses: heads split from projections, grouped K/V heads,
// K and V shared by a batch, cross-attention of dyn lengths, each mask kind the kernel takes; and that it ran.
template <class F>
void check_fused_matches_rules(const F& grads, double tol, const char* what) {
  const std::size_t before = attnx::current_context().fused_runs();
  const auto fused = grads();
  BOOST_TEST(attnx::current_context().fused_runs() > before, what << ": the fused backward did not run");
  attnx::context off;
  off.set_fused(false);
  attnx::context_scope use(off);
  const auto rules = grads();
  const auto compare = [&](const auto& a, const auto& b, std::size_t index) {
    double worst = 0;
    for (std::size_t e = 0; e < a.numel(); ++e)
      worst = std::max(worst, absd(double(a.data()[e]) - double(b.data()[e])) / (1 + absd(double(b.data()[e]))));
    BOOST_TEST(worst <= tol, what << ", gradient " << index << ": worst error " << worst);
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (compare(std::get<I>(fused), std::get<I>(rules), I), ...);
  }(std::make_index_sequence<std::tuple_size_v<std::remove_cvref_t<decltype(fused)>>>{});
}

// attention_forward(e) saves O and the lse; backward(e, dO, wrt(...), saved) starts the backward kernel from them:
// the same bits as the backward that runs the forward itself, its O the forward's value, and with the fused path off
// (no lse saved) the rules' gradients.
BOOST_AUTO_TEST_CASE(saved_forward_backward) {
  test_random::rng r(91);
  tensor<double, 2, 4, 70, 16> q;
  tensor<double, 2, 2, 70, 16> k, v, dummy;
  tensor<double, 2, 4, 70, 16> d_o;
  fill(q, r), fill(k, r), fill(v, r), fill(d_o, r);
  const auto e = attention(q, repeat_heads<2>(k), repeat_heads<2>(v), causal);
  const auto s = attention_forward(e);
  BOOST_TEST(s.has_lse);
  const tensor<double, 2, 4, 70, 16> o = e;
  for (std::size_t i = 0; i < o.numel(); ++i) BOOST_TEST(s.o.data()[i] == o.data()[i]);
  const auto [dq, dk, dv] = backward(e, d_o, wrt(q, k, v), s);
  const auto [dq1, dk1, dv1] = backward(e, d_o, wrt(q, k, v));
  for (std::size_t i = 0; i < dq.numel(); ++i) BOOST_TEST(dq.data()[i] == dq1.data()[i]);
  for (std::size_t i = 0; i < dk.numel(); ++i) BOOST_TEST((dk.data()[i] == dk1.data()[i] && dv.data()[i] == dv1.data()[i]));
  check_fused_matches_rules(
      [&] {
        const auto saved = attention_forward(e);
        return backward(e, d_o, wrt(q, k, v, dummy), saved);
      },
      1e-12, "saved forward");
  const auto [dq2, dk2, dv2, dd] = backward(e, d_o, wrt(q, k, v, dummy), s);
  for (std::size_t i = 0; i < dd.numel(); ++i) BOOST_TEST(dd.data()[i] == 0.0);  // (a leaf no path reaches: zeros)
}

BOOST_AUTO_TEST_CASE(fused_backward_matches_the_rules) {
  test_random::rng r(90);
  // Multi-head self-attention from projections of one x: 4 query heads over 2 K/V heads, causal.
  tensor<double, 2, 70, 32> x;
  tensor<double, 32, 32> wq;
  tensor<double, 32, 16> wk, wv;
  fill(x, r), fill(wq, r, -0.3, 0.3), fill(wk, r, -0.3, 0.3), fill(wv, r);
  check_fused_matches_rules(
      [&] {
        return grad(merge_heads(attention(split_heads<4>(x * wq), repeat_heads<2>(split_heads<2>(x * wk)),
                                          repeat_heads<2>(split_heads<2>(x * wv)), causal)),
                    wrt(x, wq, wk, wv));
      },
      1e-12, "GQA self-attention");
  // A batch of queries against one K and V (rank 2: their gradients summed over the batch), key padding.
  tensor<float, 3, 40, 16> qb;
  tensor<float, 50, 16> kb, vb;
  fill(qb, r), fill(kb, r), fill(vb, r);
  check_fused_matches_rules([&] { return grad(attention(qb, kb, vb, key_padding<37>), wrt(qb, kb, vb)); }, 2e-5,
                                   "shared K and V");
  // Heads split from one projection against one K and V for every batch item and head (rank 2: their gradients summed
  // over both), causal.
  tensor<double, 2, 30, 32> xh;
  tensor<double, 30, 8> kh, vh;
  fill(xh, r), fill(kh, r), fill(vh, r);
  check_fused_matches_rules([&] { return grad(attention(split_heads<4>(xh), kh, vh, causal), wrt(xh, kh, vh)); }, 1e-12,
                            "K and V shared by batch and heads");
  // Cross-attention of dyn lengths 65 x 130, bottom-right causal and a boolean mask; dot_scores with a scale.
  tensor<double, dyn, 24> qc(65), kc(130), vc(130);
  fill(qc, r), fill(kc, r), fill(vc, r);
  tensor<bool, dyn, dyn> allow(65, 130);
  for (std::size_t i = 0; i < 65; ++i)
    for (std::size_t j = 0; j < 130; ++j) allow(i, j) = (i * 7 + j * 3) % 5 != 0;
  check_fused_matches_rules(
      [&] { return grad(attention(qc, kc, vc, allowed(allow), causal_bottom_right), wrt(qc, kc, vc)); }, 1e-12,
      "cross-attention");
  // The named key-interval masks: the fused backward skips the tiles outside the intervals.
  const std::vector<std::size_t> offs{0, 40, 40, 95, 130};
  check_fused_matches_rules([&] { return grad(attention(qc, kc, vc, sliding_window(33)), wrt(qc, kc, vc)); }, 1e-12,
                            "sliding_window");
  check_fused_matches_rules(
      [&] { return grad(attention(qc, kc, vc, causal_bottom_right, documents(offs)), wrt(qc, kc, vc)); }, 1e-12,
      "documents");
  check_fused_matches_rules([&] { return grad(attention(qc, kc, vc, chunked(16), prefix_lm(20)), wrt(qc, kc, vc)); },
                            1e-12, "chunked and prefix_lm");
  check_fused_matches_rules([&] { return grad(attention(qc, kc, vc, causal_bottom_right, alibi()), wrt(qc, kc, vc)); },
                            1e-12, "alibi");
  check_fused_matches_rules(
      [&] { return grad(hadamard(softmax(dot_scores(qc, kc, 0.3)) * vc, softmax(dot_scores(qc, kc, 0.3)) * vc), wrt(qc, kc, vc)); },
      1e-12, "a sub-expression used twice");
  // Programs off the kernel's fast path: a fixed bias (ALiBi-like, not differentiated) under a causal mask, a finite
  // fill, a negative factor; and a bias that is differentiated (the rules: its gradient is dS).
  tensor<double, dyn, dyn> slope_bias(65, 130);
  for (std::size_t i = 0; i < 65; ++i)
    for (std::size_t j = 0; j < 130; ++j) slope_bias(i, j) = -0.05 * absd(double(i) - double(j));
  check_fused_matches_rules(
      [&] { return grad(attention(qc, kc, vc, additive(slope_bias), causal_bottom_right), wrt(qc, kc, vc)); }, 1e-12,
      "a fixed bias");
  check_fused_matches_rules(
      [&] { return grad(softmax(mask(scale(qc * transpose(kc), -0.2), allowed(allow), -1.0)) * vc, wrt(qc, kc, vc)); },
      1e-12, "a finite fill and a negative factor");
  const auto [dq_fused, db] = grad(attention(qc, kc, vc, additive(slope_bias)), wrt(qc, slope_bias));
  attnx::context off;
  off.set_fused(false);
  const attnx::context_scope use(off);
  const auto [dq_rules, db_rules] = grad(attention(qc, kc, vc, additive(slope_bias)), wrt(qc, slope_bias));
  BOOST_TEST((dq_fused == dq_rules && db == db_rules));  // the same code: the rules, both times
}
