// Similarity functions other than the scaled dot product (seed 002: dot, cosine, rbf; seed 003:
// additive / Bahdanau), built with pairwise(Q, K, f), against plain double loops.
#define BOOST_TEST_MODULE similarity
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "naive.hpp"

using namespace attnx;
using naive::make;
using naive::mat;

namespace {

// ---- helpers -------------------------------------------------------------------------------
// The values a tensor of element type T holds, back in double (so the reference sees the same inputs).
template <class T>
mat rounded(const mat& m) {
  mat r(m.size());
  for (std::size_t i = 0; i < m.size(); ++i) r[i] = static_cast<double>(static_cast<T>(m[i]));
  return r;
}

template <class Tensor>
void check_close(const Tensor& got, const mat& want, double tol) {
  BOOST_REQUIRE_EQUAL(want.size(), Tensor::size);
  for (std::size_t i = 0; i < Tensor::size; ++i) {
    const double g = got.data()[i], w = want[i];
    if (std::isinf(w)) {
      BOOST_TEST(g == w, "element " << i << ": got " << g << ", want " << w);
      continue;
    }
    const double err = std::abs(g - w) / std::max(1.0, std::abs(w));
    if (!(err <= tol)) {
      BOOST_TEST(err <= tol, "element " << i << ": got " << g << ", want " << w << " (error " << err << ")");
      return;
    }
  }
}

// ---- the references: plain double loops over std::vector ----------------------------------------
using sim_fn = std::function<double(const double*, const double*, std::size_t)>;

double ref_dot(const double* q, const double* k, std::size_t d) {
  double s = 0;
  for (std::size_t p = 0; p < d; ++p) s += q[p] * k[p];
  return s;
}
double ref_norm(const double* v, std::size_t d) { return std::sqrt(ref_dot(v, v, d)); }

sim_fn ref_dot_sim(double scale) {
  return [=](const double* q, const double* k, std::size_t d) { return scale * ref_dot(q, k, d); };
}
sim_fn ref_cosine(double tau, double eps = 1e-9) {
  return [=](const double* q, const double* k, std::size_t d) {
    const double nq = ref_norm(q, d) + eps, nk = ref_norm(k, d) + eps;
    double s = 0;
    for (std::size_t p = 0; p < d; ++p) s += (q[p] / nq) * (k[p] / nk);
    return s / tau;
  };
}
sim_fn ref_rbf(double tau) {
  return [=](const double* q, const double* k, std::size_t d) {
    double s = 0;
    for (std::size_t p = 0; p < d; ++p) s += (q[p] - k[p]) * (q[p] - k[p]);
    return -s / (2 * tau * tau);
  };
}

// Scores (batch, lq, lk) for Q (batch, lq, d) and K (batch or 1, lk, d).
mat ref_scores(const mat& q, const mat& k, std::size_t batch, std::size_t lq, std::size_t lk, std::size_t d,
               const sim_fn& f, bool shared_k = false) {
  mat s(batch * lq * lk);
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t i = 0; i < lq; ++i)
      for (std::size_t j = 0; j < lk; ++j)
        s[(b * lq + i) * lk + j] = f(&q[(b * lq + i) * d], &k[((shared_k ? 0 : b) * lk + j) * d], d);
  return s;
}

// softmax(S with blocked(b, i, j) set to fill) V, per batch item.
template <class Blocked>
mat ref_attention(const mat& s, const mat& v, std::size_t batch, std::size_t lq, std::size_t lk, std::size_t dv,
                  Blocked blocked, double fill = -std::numeric_limits<double>::infinity()) {
  mat out;
  for (std::size_t b = 0; b < batch; ++b) {
    mat sb(s.begin() + b * lq * lk, s.begin() + (b + 1) * lq * lk);
    for (std::size_t i = 0; i < lq; ++i)
      for (std::size_t j = 0; j < lk; ++j)
        if (blocked(b, i, j)) sb[i * lk + j] = fill;
    const mat vb(v.begin() + b * lk * dv, v.begin() + (b + 1) * lk * dv);
    const mat ob = naive::matmul(naive::softmax_rows(sb, lq, lk), vb, lq, lk, dv);
    out.insert(out.end(), ob.begin(), ob.end());
  }
  return out;
}
constexpr auto nothing_blocked = [](std::size_t, std::size_t, std::size_t) { return false; };

// Additive: s_ij = sum_a w_a tanh((q_i W1)_a + (k_j W2)_a).
mat ref_additive(const mat& q, const mat& k, const mat& w1, const mat& w2, const mat& w, std::size_t lq, std::size_t lk,
                 std::size_t dq, std::size_t dk, std::size_t h) {
  const mat qh = naive::matmul(q, w1, lq, dq, h), kh = naive::matmul(k, w2, lk, dk, h);
  mat s(lq * lk);
  for (std::size_t i = 0; i < lq; ++i)
    for (std::size_t j = 0; j < lk; ++j) {
      double acc = 0;
      for (std::size_t a = 0; a < h; ++a) acc += w[a] * std::tanh(qh[i * h + a] + kh[j * h + a]);
      s[i * lk + j] = acc;
    }
  return s;
}

// ---- seed 002's soft k-NN data (docs/maths.md section 3) ---------------------------------------------
constexpr tensor<double, 6, 2> keys{{1.0, 0.2}, {0.9, 0.1}, {0.2, 1.0}, {-0.2, 0.9}, {0.0, -1.0}, {-1.0, -0.6}};
constexpr tensor<double, 2, 2> W_v{{0.7, 0.1}, {0.2, 0.9}};
constexpr tensor<double, 1, 2> query{{0.8, 0.15}};

template <class T>
std::span<const T> sp(const std::vector<T>& v) {
  return std::span<const T>(v.data(), v.size());
}

}  // namespace

// ---- the similarity functions on single pairs ------------------------------------------------------

BOOST_AUTO_TEST_CASE(similarities_on_single_pairs) {
  for (std::size_t d : {1u, 2u, 3u, 5u, 8u, 13u}) {
    const mat q = naive::random(d, 100 + d), k = naive::random(d, 200 + d);
    const auto qs = sp(q), ks = sp(k);
    BOOST_TEST(std::abs(similarity::dot{0.5}(qs, ks) - ref_dot_sim(0.5)(q.data(), k.data(), d)) <= 1e-15);
    BOOST_TEST(std::abs(similarity::cosine{0.25}(qs, ks) - ref_cosine(0.25)(q.data(), k.data(), d)) <= 1e-14);
    BOOST_TEST(std::abs(similarity::rbf{0.7}(qs, ks) - ref_rbf(0.7)(q.data(), k.data(), d)) <= 1e-14);
    // float: inputs rounded to float, compared with the double loop on the same inputs
    const std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end());
    const mat qr(qf.begin(), qf.end()), kr(kf.begin(), kf.end());
    BOOST_TEST(std::abs(similarity::dot{1.0}(sp(qf), sp(kf)) - ref_dot(qr.data(), kr.data(), d)) <= 1e-5);
    BOOST_TEST(std::abs(similarity::cosine{0.5}(sp(qf), sp(kf)) - ref_cosine(0.5)(qr.data(), kr.data(), d)) <= 1e-5);
    BOOST_TEST(std::abs(similarity::rbf{0.5}(sp(qf), sp(kf)) - ref_rbf(0.5)(qr.data(), kr.data(), d)) <= 1e-5);
    // the evaluator's path for cosine (each vector normalised once) is bit-identical to the pair call
    mat qn = q, kn = k;
    similarity::cosine c{0.25};
    c.prepare(std::span<double>(qn));
    c.prepare(std::span<double>(kn));
    BOOST_TEST(c.prepared(sp(qn), sp(kn)) == c(qs, ks));
    // ranges: cosine in [-1/tau, 1/tau], rbf <= 0 with 0 for identical vectors
    BOOST_TEST(std::abs(c(qs, ks)) <= 1 / 0.25);
    BOOST_TEST(c(qs, qs) <= 4.0);
    BOOST_TEST(std::abs(c(qs, qs) - 4.0) <= 1e-6);
    BOOST_TEST(similarity::rbf{0.3}(qs, qs) == 0.0);
    BOOST_TEST(similarity::rbf{0.3}(qs, ks) < 0.0);
  }
  // eps keeps a zero vector finite: its cosine similarity to anything is 0, not NaN
  const mat zero(4, 0.0), v = naive::random(4, 7);
  BOOST_TEST(similarity::cosine{0.5}(sp(zero), sp(v)) == 0.0);
  BOOST_TEST(similarity::cosine{0.5}(sp(zero), sp(zero)) == 0.0);
  const similarity::cosine no_eps{0.5, 0.0};
  BOOST_TEST(std::isnan(no_eps(sp(zero), sp(v))));  // NaN without eps
  // additive on projected vectors, w in memory
  const tensor<double, 3> w{0.5, -1.0, 2.0};
  const mat qh = naive::random(3, 8), kh = naive::random(3, 9);
  double want = 0;
  for (int a = 0; a < 3; ++a) want += w(a) * std::tanh(qh[a] + kh[a]);
  BOOST_TEST(std::abs(similarity::additive(w)(sp(qh), sp(kh)) - want) <= 1e-15);
}

// ---- score matrices ------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(scores_double_odd_shapes) {
  const mat q = naive::random(7 * 5, 1), k = naive::random(11 * 5, 2);
  const auto Q = make<tensor<double, 7, 5>>(q);
  const auto K = make<tensor<double, 11, 5>>(k);
  tensor<double, 7, 11> sd = dot_scores(Q, K, 0.3), sc = cosine_scores(Q, K, 0.5), sr = rbf_scores(Q, K, 0.8);
  tensor<double, 7, 11> sdefault = dot_scores(Q, K), sp_ = pairwise(Q, K, similarity::cosine{2.0, 1e-3});
  check_close(sd, ref_scores(q, k, 1, 7, 11, 5, ref_dot_sim(0.3)), 1e-15);
  check_close(sc, ref_scores(q, k, 1, 7, 11, 5, ref_cosine(0.5)), 1e-15);
  check_close(sr, ref_scores(q, k, 1, 7, 11, 5, ref_rbf(0.8)), 1e-15);
  check_close(sdefault, ref_scores(q, k, 1, 7, 11, 5, ref_dot_sim(1 / std::sqrt(5.0))), 1e-15);
  check_close(sp_, ref_scores(q, k, 1, 7, 11, 5, ref_cosine(2.0, 1e-3)), 1e-15);
  // the default dot_scores is scaled_scores (the matrix-product path)
  const tensor<double, 7, 11> via_matmul = scaled_scores(Q, K);
  check_close(sdefault, mat(via_matmul.begin(), via_matmul.end()), 1e-15);
}

BOOST_AUTO_TEST_CASE(scores_float_odd_shapes) {
  const mat q = rounded<float>(naive::random(13 * 9, 3)), k = rounded<float>(naive::random(17 * 9, 4));
  const auto Q = make<tensor<float, 13, 9>>(q);
  const auto K = make<tensor<float, 17, 9>>(k);
  tensor<float, 13, 17> sd = dot_scores(Q, K), sc = cosine_scores(Q, K, 0.5), sr = rbf_scores(Q, K, 0.5);
  check_close(sd, ref_scores(q, k, 1, 13, 17, 9, ref_dot_sim(1 / 3.0)), 2e-6);
  check_close(sc, ref_scores(q, k, 1, 13, 17, 9, ref_cosine(0.5)), 2e-6);
  check_close(sr, ref_scores(q, k, 1, 13, 17, 9, ref_rbf(0.5)), 2e-6);
  static_assert(std::is_same_v<value_t<decltype(cosine_scores(Q, K, 0.5))>, float>);
}

BOOST_AUTO_TEST_CASE(scores_mixed_element_types) {
  // float Q, double K: not accepted silently (a compile error, tests/compile_fail/element_types_differ.cpp);
  // converted explicitly, the scores are double, Q's rows converted as they are read.
  const mat q = rounded<float>(naive::random(4 * 3, 5)), k = naive::random(6 * 3, 6);
  const auto Q = make<tensor<float, 4, 3>>(q);
  const auto K = make<tensor<double, 6, 3>>(k);
  static_assert(std::is_same_v<value_t<decltype(rbf_scores(cast<double>(Q), K, 1.0))>, double>);
  tensor<double, 4, 6> sr = rbf_scores(cast<double>(Q), K, 1.0);
  tensor<double, 6, 4> sc = cosine_scores(K, cast<double>(Q), 0.5);  // keys converted once
  check_close(sr, ref_scores(q, k, 1, 4, 6, 3, ref_rbf(1.0)), 1e-15);
  check_close(sc, ref_scores(k, q, 1, 6, 4, 3, ref_cosine(0.5)), 1e-15);
}

BOOST_AUTO_TEST_CASE(batched_keys_and_shared_keys) {
  // (2, 3, 5, 4) queries with (2, 3, 6, 4) keys, per (batch, head); and with one (6, 4) key matrix for all.
  const mat q = naive::random(2 * 3 * 5 * 4, 10), k = naive::random(2 * 3 * 6 * 4, 11), ks = naive::random(6 * 4, 12);
  const auto Q = make<tensor<double, batch<2>, heads<3>, seq_q<5>, d_k<4>>>(q);
  const auto K = make<tensor<double, batch<2>, heads<3>, seq_k<6>, d_k<4>>>(k);
  const auto KS = make<tensor<double, seq_k<6>, d_k<4>>>(ks);
  tensor<double, batch<2>, heads<3>, seq_q<5>, seq_k<6>> sb = cosine_scores(Q, K, 0.5);
  tensor<double, batch<2>, heads<3>, seq_q<5>, seq_k<6>> ss = rbf_scores(Q, KS, 0.5);
  check_close(sb, ref_scores(q, k, 6, 5, 6, 4, ref_cosine(0.5)), 1e-15);
  check_close(ss, ref_scores(q, ks, 6, 5, 6, 4, ref_rbf(0.5), true), 1e-15);
  // rank 3, keys as an expression (materialised once), queries as an expression (row by row)
  const mat x = naive::random(3 * 7 * 5, 13), wq = naive::random(5 * 4, 14), wk = naive::random(5 * 4, 15);
  const auto X = make<tensor<double, 3, 7, 5>>(x);
  const auto Wq = make<tensor<double, 5, 4>>(wq);
  const auto Wk = make<tensor<double, 5, 4>>(wk);
  tensor<double, 3, 7, 7> sx = rbf_scores(X * Wq, X * Wk, 0.9);
  mat qx, kx;
  for (int b = 0; b < 3; ++b) {
    const mat xb(x.begin() + b * 35, x.begin() + (b + 1) * 35);
    const mat qb = naive::matmul(xb, wq, 7, 5, 4), kb = naive::matmul(xb, wk, 7, 5, 4);
    qx.insert(qx.end(), qb.begin(), qb.end());
    kx.insert(kx.end(), kb.begin(), kb.end());
  }
  check_close(sx, ref_scores(qx, kx, 3, 7, 7, 4, ref_rbf(0.9)), 1e-14);
}

BOOST_AUTO_TEST_CASE(views_and_named_axes) {
  std::vector<float> qmem(3 * 4), kmem(5 * 4);
  const mat q = rounded<float>(naive::random(12, 16)), k = rounded<float>(naive::random(20, 17));
  std::copy(q.begin(), q.end(), qmem.begin());
  std::copy(k.begin(), k.end(), kmem.begin());
  const view<const float, seq<3>, d_k<4>> Q(qmem);
  const view<const float, seq<5>, d_k<4>> K(kmem);
  tensor<float, seq<3>, seq<5>> s = cosine_scores(Q, K, 1.0);
  check_close(s, ref_scores(q, k, 1, 3, 5, 4, ref_cosine(1.0)), 2e-6);
  // the result keeps Q's row axis and K's row axis: (seq_q, seq_k) from named inputs
  using S = shape_of_t<decltype(rbf_scores(std::declval<tensor<float, seq_q<3>, d_k<4>>>(),
                                           std::declval<tensor<float, seq_k<5>, d_k<4>>>(), 1.0))>;
  static_assert(std::is_same_v<S, shape<axis<names::seq_q, 3>, axis<names::seq_k, 5>>>);
}

BOOST_AUTO_TEST_CASE(user_callables) {
  const mat q = naive::random(6 * 3, 20), k = naive::random(8 * 3, 21);
  const auto Q = make<tensor<double, 6, 3>>(q);
  const auto K = make<tensor<double, 8, 3>>(k);
  // a generic lambda: negative L1 distance (a Laplacian kernel)
  const auto l1 = [](auto a, auto b) {
    typename decltype(a)::value_type s = 0;
    for (std::size_t p = 0; p < a.size(); ++p) s += a[p] < b[p] ? b[p] - a[p] : a[p] - b[p];
    return -s;
  };
  tensor<double, 6, 8> s1 = pairwise(Q, K, l1);
  check_close(s1, ref_scores(q, k, 1, 6, 8, 3, [](const double* a, const double* b, std::size_t d) {
                double s = 0;
                for (std::size_t p = 0; p < d; ++p) s += std::abs(a[p] - b[p]);
                return -s;
              }), 1e-15);
  // a stateful callable with a non-generic signature, in an attention with a mask
  struct weighted_dot {
    std::array<double, 3> g;
    constexpr double operator()(std::span<const double> a, std::span<const double> b) const {
      return g[0] * a[0] * b[0] + g[1] * a[1] * b[1] + g[2] * a[2] * b[2];
    }
  };
  const mat v = naive::random(8 * 2, 22);
  const auto V = make<tensor<double, 8, 2>>(v);
  tensor<double, 6, 2> o = softmax(mask(pairwise(Q, K, weighted_dot{{1.0, -2.0, 0.5}}), causal)) * V;
  const mat s = ref_scores(q, k, 1, 6, 8, 3, [](const double* a, const double* b, std::size_t) {
    return 1.0 * a[0] * b[0] + -2.0 * a[1] * b[1] + 0.5 * a[2] * b[2];
  });
  check_close(o, ref_attention(s, v, 1, 6, 8, 2, [](auto, auto i, auto j) { return j > i; }), 1e-14);
}

// ---- attention with the new scores: masks, fills, batches ----------------------------------------

BOOST_AUTO_TEST_CASE(attention_with_masks) {
  const mat q = naive::random(2 * 5 * 4, 30), k = naive::random(2 * 7 * 4, 31), v = naive::random(2 * 7 * 3, 32);
  const auto Q = make<tensor<double, 2, 5, 4>>(q);
  const auto K = make<tensor<double, 2, 7, 4>>(k);
  const auto V = make<tensor<double, 2, 7, 3>>(v);
  const mat sr = ref_scores(q, k, 2, 5, 7, 4, ref_rbf(0.5)), sc = ref_scores(q, k, 2, 5, 7, 4, ref_cosine(0.5));

  tensor<double, 2, 5, 3> o1 = softmax(mask(rbf_scores(Q, K, 0.5), causal)) * V;
  check_close(o1, ref_attention(sr, v, 2, 5, 7, 3, [](auto, auto i, auto j) { return j > i; }), 1e-14);

  tensor<double, 2, 5, 3> o2 = softmax(mask(cosine_scores(Q, K, 0.5), causal_bottom_right)) * V;
  check_close(o2, ref_attention(sc, v, 2, 5, 7, 3, [](auto, auto i, auto j) { return j > i + 2; }), 1e-14);

  tensor<double, 2, 5, 3> o3 = softmax(mask(rbf_scores(Q, K, 0.5), key_padding<4>, -1e9)) * V;
  check_close(o3, ref_attention(sr, v, 2, 5, 7, 3, [](auto, auto, auto j) { return j >= 4; }, -1e9), 1e-14);

  const std::array<std::size_t, 2> lens{3, 6};
  tensor<double, 2, 5, 3> o4 = softmax(mask(mask(cosine_scores(Q, K, 0.5), key_lengths(lens)), causal)) * V;
  check_close(o4, ref_attention(sc, v, 2, 5, 7, 3, [&](auto b, auto i, auto j) { return j >= lens[b] || j > i; }), 1e-14);

  // a boolean (1, 7) mask broadcast over batch and queries
  tensor<bool, 1, 7> keep{{true, false, true, true, false, true, true}};
  tensor<double, 2, 5, 7> w5 = softmax(mask(rbf_scores(Q, K, 0.5), allowed(keep)));
  mat want5 = sr;
  for (std::size_t i = 0; i < want5.size(); ++i)
    if (!keep(0, i % 7)) want5[i] = -std::numeric_limits<double>::infinity();
  check_close(w5, naive::softmax_rows(want5, 10, 7), 1e-15);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 5; ++i) BOOST_TEST(w5(b, i, 1) == 0.0);

  // float, rank 2, an expression for V
  const mat qf = rounded<float>(naive::random(9 * 6, 33)), kf = rounded<float>(naive::random(11 * 6, 34)),
            vf = rounded<float>(naive::random(11 * 2, 35));
  const auto Qf = make<tensor<float, 9, 6>>(qf);
  const auto Kf = make<tensor<float, 11, 6>>(kf);
  const auto Vf = make<tensor<float, 11, 2>>(vf);
  tensor<float, 9, 2> of = softmax(mask(cosine_scores(Qf, Kf, 0.25), causal)) * (Vf * 2.0f);
  mat vf2 = vf;
  for (auto& x : vf2) x *= 2;
  check_close(of, ref_attention(ref_scores(qf, kf, 1, 9, 11, 6, ref_cosine(0.25)), vf2, 1, 9, 11, 2,
                                [](auto, auto i, auto j) { return j > i; }),
              2e-6);
}

BOOST_AUTO_TEST_CASE(multi_head_through_split_heads) {
  // cosine attention per head: split_heads<2>(X W_Q) against split_heads<2>(X), causal, merged back
  const mat x = naive::random(2 * 5 * 8, 36), wq = naive::random(8 * 8, 37);
  const auto X = make<tensor<double, batch<2>, seq<5>, d_model<8>>>(x);
  const auto Wq = make<tensor<double, d_model<8>, d_model<8>>>(wq);
  tensor<double, batch<2>, seq<5>, d_model<8>> O =
      merge_heads(softmax(mask(cosine_scores(split_heads<2>(X * Wq), split_heads<2>(X), 0.5), causal)) * split_heads<2>(X));
  mat want(2 * 5 * 8);
  for (std::size_t b = 0; b < 2; ++b) {
    const mat xb(x.begin() + b * 40, x.begin() + (b + 1) * 40), qb = naive::matmul(xb, wq, 5, 8, 8);
    for (std::size_t h = 0; h < 2; ++h) {
      mat qh(5 * 4), kh(5 * 4);
      for (std::size_t i = 0; i < 5; ++i)
        for (std::size_t p = 0; p < 4; ++p) qh[i * 4 + p] = qb[i * 8 + h * 4 + p], kh[i * 4 + p] = xb[i * 8 + h * 4 + p];
      const mat oh = ref_attention(ref_scores(qh, kh, 1, 5, 5, 4, ref_cosine(0.5)), kh, 1, 5, 5, 4,
                                   [](auto, auto i, auto j) { return j > i; });
      for (std::size_t i = 0; i < 5; ++i)
        for (std::size_t p = 0; p < 4; ++p) want[b * 40 + i * 8 + h * 4 + p] = oh[i * 4 + p];
    }
  }
  check_close(O, want, 1e-14);
}

BOOST_AUTO_TEST_CASE(temperature_sharpens) {
  // smaller tau: the largest weight grows (towards argmax), for cosine and rbf
  double last_cos = 0, last_rbf = 0;
  for (double tau : {4.0, 2.0, 1.0, 0.5, 0.25, 0.1, 0.05}) {
    const tensor<double, 1, 6> wc = softmax(cosine_scores(query, keys, tau));
    const tensor<double, 1, 6> wr = softmax(rbf_scores(query, keys, tau));
    const double mc = *std::max_element(wc.begin(), wc.end()), mr = *std::max_element(wr.begin(), wr.end());
    BOOST_TEST(mc > last_cos);
    BOOST_TEST(mr > last_rbf);
    last_cos = mc, last_rbf = mr;
  }
  BOOST_TEST(last_rbf > 0.99);
}

// ---- seed 002: the soft k-NN numbers of docs/maths.md section 3 -------------------------------------

BOOST_AUTO_TEST_CASE(soft_knn_reference_numbers) {
  const tensor<double, 6, 2> V = keys * W_v;
  struct row {
    const char* name;
    std::array<double, 6> w;
    std::array<double, 2> out;
  };
  const row want[3] = {{"dot", {0.252, 0.236, 0.174, 0.138, 0.126, 0.075}, {0.318, 0.221}},
                       {"cosine", {0.397, 0.394, 0.113, 0.050, 0.037, 0.008}, {0.576, 0.287}},
                       {"rbf", {0.443, 0.471, 0.055, 0.021, 0.010, 0.000}, {0.651, 0.268}}};
  const tensor<double, 1, 6> w[3] = {softmax(dot_scores(query, keys, 1 / std::sqrt(2.0))),
                                     softmax(cosine_scores(query, keys, 0.5)), softmax(rbf_scores(query, keys, 0.5))};
  const tensor<double, 1, 2> out[3] = {softmax(dot_scores(query, keys, 1 / std::sqrt(2.0))) * (keys * W_v),
                                       softmax(cosine_scores(query, keys, 0.5)) * (keys * W_v),
                                       softmax(rbf_scores(query, keys, 0.5)) * (keys * W_v)};
  const sim_fn refs[3] = {ref_dot_sim(1 / std::sqrt(2.0)), ref_cosine(0.5), ref_rbf(0.5)};
  const mat km(keys.begin(), keys.end()), qm(query.begin(), query.end()), vm(V.begin(), V.end());
  for (int s = 0; s < 3; ++s) {
    BOOST_TEST_CONTEXT(want[s].name) {
      // to the printed 3 decimals
      for (int j = 0; j < 6; ++j)
        BOOST_TEST(std::abs(w[s](0, j) - want[s].w[j]) <= 5e-4, "weight " << j << " = " << w[s](0, j));
      for (int c = 0; c < 2; ++c)
        BOOST_TEST(std::abs(out[s](0, c) - want[s].out[c]) <= 5e-4, "output " << c << " = " << out[s](0, c));
      // and exactly, against the loops
      const mat sc = ref_scores(qm, km, 1, 1, 6, 2, refs[s]);
      check_close(w[s], naive::softmax_rows(sc, 1, 6), 1e-15);
      check_close(out[s], ref_attention(sc, vm, 1, 1, 6, 2, nothing_blocked), 1e-15);
    }
  }
}

BOOST_AUTO_TEST_CASE(soft_knn_causal_rows_sum_to_one) {
  // Q = K = V = the keys, causal: lower-triangular weights, rows summing to 1, for every similarity
  const tensor<double, 6, 6> A[3] = {softmax(mask(dot_scores(keys, keys), causal)),
                                     softmax(mask(cosine_scores(keys, keys, 0.5), causal)),
                                     softmax(mask(rbf_scores(keys, keys, 0.5), causal))};
  for (const auto& a : A)
    for (int i = 0; i < 6; ++i) {
      double sum = 0;
      for (int j = 0; j < 6; ++j) {
        if (j > i) BOOST_TEST(a(i, j) == 0.0);
        else BOOST_TEST(a(i, j) > 0.0);
        sum += a(i, j);
      }
      BOOST_TEST(std::abs(sum - 1) <= 1e-15);
    }
  BOOST_TEST(A[1](0, 0) == 1.0);
}

// ---- seed 003: additive (Bahdanau) scores -----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(additive_attention_against_loops) {
  const mat q = naive::random(5 * 4, 40), k = naive::random(7 * 3, 41), w1 = naive::random(4 * 6, 42),
            w2 = naive::random(3 * 6, 43), w = naive::random(6, 44), v = naive::random(7 * 2, 45);
  const auto Q = make<tensor<double, 5, 4>>(q);
  const auto K = make<tensor<double, 7, 3>>(k);
  const auto W1 = make<tensor<double, 4, 6>>(w1);
  const auto W2 = make<tensor<double, 3, 6>>(w2);
  const auto w_vec = make<tensor<double, 6>>(w);
  const auto w_col = make<tensor<double, 6, 1>>(w);
  const auto V = make<tensor<double, 7, 2>>(v);
  const mat s = ref_additive(q, k, w1, w2, w, 5, 7, 4, 3, 6);

  tensor<double, 5, 7> s1 = additive_scores(Q, K, W1, W2, w_vec);
  check_close(s1, s, 1e-14);
  tensor<double, 5, 7> s2 = additive_scores(Q, K, W1, W2, w_col);  // w as a (6, 1) column
  check_close(s2, s, 1e-14);
  tensor<double, 5, 7> s3 = additive_scores(Q, K, W1, W2, w_vec * 2.0);  // w an expression
  mat s2x = s;
  for (auto& x : s2x) x *= 2;
  check_close(s3, s2x, 1e-14);
  // the same through pairwise on projections the caller writes (here with a bias on Q W1)
  const auto bias = make<tensor<double, 6>>(naive::random(6, 46));
  tensor<double, 5, 7> s4 = pairwise(Q * W1 + bias, K * W2, similarity::additive(w_vec));
  mat qb = naive::matmul(q, w1, 5, 4, 6), kh = naive::matmul(k, w2, 7, 3, 6);
  for (std::size_t i = 0; i < qb.size(); ++i) qb[i] += bias(i % 6);
  const mat want4 = ref_scores(qb, kh, 1, 5, 7, 6, [&](const double* a, const double* b, std::size_t h) {
    double acc = 0;
    for (std::size_t p = 0; p < h; ++p) acc += w[p] * std::tanh(a[p] + b[p]);
    return acc;
  });
  check_close(s4, want4, 1e-14);
  tensor<double, 5, 7> s5 = additive_scores(Q, K, W1, W2, w_vec, bias);  // the same, with the bias overload
  check_close(s5, want4, 1e-14);
  // attention, with key padding filled with -1e9 as in seed 003
  tensor<double, 5, 2> o = softmax(mask(additive_scores(Q, K, W1, W2, w_vec), key_padding<5>, -1e9)) * V;
  check_close(o, ref_attention(s, v, 1, 5, 7, 2, [](auto, auto, auto j) { return j >= 5; }, -1e9), 1e-14);
  // the node lists w among its operands (aliasing checks see it)
  const auto e = additive_scores(Q, K, W1, W2, w_vec);
  BOOST_TEST(reads_memory(e, w_vec.data(), 6));
  static_assert(node_count<decltype(e)>() == 8);  // pairwise, Q * W1 (3), K * W2 (3), w

  // batched queries and keys, float
  const mat qbf = rounded<float>(naive::random(2 * 3 * 4, 47)), kbf = rounded<float>(naive::random(2 * 5 * 3, 48));
  const auto Qb = make<tensor<float, 2, 3, 4>>(qbf);
  const auto Kb = make<tensor<float, 2, 5, 3>>(kbf);
  const auto W1f = make<tensor<float, 4, 6>>(rounded<float>(w1));
  const auto W2f = make<tensor<float, 3, 6>>(rounded<float>(w2));
  const auto wf = make<tensor<float, 6>>(rounded<float>(w));
  tensor<float, 2, 3, 5> sb = additive_scores(Qb, Kb, W1f, W2f, wf);
  mat want_b;
  for (int b = 0; b < 2; ++b) {
    const mat sbb = ref_additive(mat(qbf.begin() + b * 12, qbf.begin() + (b + 1) * 12),
                                 mat(kbf.begin() + b * 15, kbf.begin() + (b + 1) * 15), rounded<float>(w1),
                                 rounded<float>(w2), rounded<float>(w), 3, 5, 4, 3, 6);
    want_b.insert(want_b.end(), sbb.begin(), sbb.end());
  }
  check_close(sb, want_b, 1e-5);
}

// ---- ownership, aliasing, memory -------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(ownership_and_aliasing) {
  const mat a = naive::random(4 * 4, 50);
  auto A = make<tensor<double, 4, 4>>(a);
  // an lvalue tensor is held by reference, a temporary is owned
  auto e1 = rbf_scores(A, A, 1.0);
  static_assert(std::is_same_v<decltype(e1.queries()), const tensor_ref<double, shape_of_t<decltype(A)>>&>);
  auto e2 = cosine_scores(make<tensor<double, 4, 4>>(a), A, 0.5);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(e2.queries())>, tensor<double, 4, 4>>);
  check_close(evaluate(e2), ref_scores(a, a, 1, 4, 4, 4, ref_cosine(0.5)), 1e-15);
  // A = scores(A, A): A is read throughout (evaluated through a fresh buffer)
  A = rbf_scores(A, A, 1.0);
  check_close(A, ref_scores(a, a, 1, 4, 4, 4, ref_rbf(1.0)), 1e-15);
  // the evaluator holds one row of Q and one row of scores, not the Lq x Lk matrix
  using big = tensor<double, 512, 64>;
  using ev = evaluator<decltype(rbf_scores(std::declval<const big&>(), std::declval<const big&>(), 1.0))>;
  static_assert(sizeof(ev) < 512 * sizeof(double) + 64 * sizeof(double) + 256);
}

// ---- compile time ------------------------------------------------------------------------------------------

namespace {
template <class T>
constexpr std::array<T, 4> knn_at_compile_time() {
  const tensor<T, 6, 2> k = cast<T>(keys);  // the data of seed 002, converted to T
  const tensor<T, 2, 2> wv = cast<T>(W_v);
  const tensor<T, 1, 2> q = cast<T>(query);
  const tensor<T, 1, 2> oc = softmax(cosine_scores(q, k, 0.5)) * (k * wv);
  const tensor<T, 1, 2> orbf = softmax(rbf_scores(q, k, 0.5)) * (k * wv);
  return {oc(0, 0), oc(0, 1), orbf(0, 0), orbf(0, 1)};
}
constexpr bool near(double a, double b, double tol) { return (a > b ? a - b : b - a) <= tol; }

constexpr std::array<double, 4> ct = knn_at_compile_time<double>();
static_assert(near(ct[0], 0.576, 5e-4) && near(ct[1], 0.287, 5e-4) && near(ct[2], 0.651, 5e-4) && near(ct[3], 0.268, 5e-4));
constexpr std::array<float, 4> ctf = knn_at_compile_time<float>();
static_assert(near(ctf[0], 0.576, 5e-4) && near(ctf[2], 0.651, 5e-4));

// causal cosine / rbf attention with projections, and additive scores, in one constant evaluation
constexpr double masked_at_compile_time() {
  const auto X = tensor<double, 8, 4>::generate([](auto i, auto j) { return double(int(i * 3 + j * 5) % 7) / 7.0 - 0.4; });
  const auto W = tensor<double, 4, 4>::generate([](auto i, auto j) { return i == j ? 1.0 : 0.25; });
  const tensor<double, 8, 4> o1 = softmax(mask(cosine_scores(X * W, X, 0.5), causal)) * X;
  const tensor<double, 8, 4> o2 = softmax(mask(rbf_scores(X, X * W, 0.5), key_padding<6>)) * X;
  const tensor<double, 4> w{0.5, -1.0, 0.25, 2.0};
  const tensor<double, 8, 8> s3 = additive_scores(X, X, W, W, w);
  double sum = 0;
  for (std::size_t i = 0; i < 32; ++i) sum += o1.data()[i] + o2.data()[i];
  for (double x : s3) sum += x;
  return sum;
}
constexpr double masked_ct = masked_at_compile_time();
}  // namespace

BOOST_AUTO_TEST_CASE(compile_time_equals_run_time) {
  std::array<double, 4> (*volatile f)() = knn_at_compile_time<double>;  // run time: std::exp, std::sqrt
  const auto rt = f();
  for (int i = 0; i < 4; ++i) BOOST_TEST(std::abs(rt[i] - ct[i]) <= 1e-15);
  std::array<float, 4> (*volatile g)() = knn_at_compile_time<float>;
  const auto rtf = g();
  for (int i = 0; i < 4; ++i) BOOST_TEST(std::abs(rtf[i] - ctf[i]) <= 1e-6f);
  double (*volatile h)() = masked_at_compile_time;
  BOOST_TEST(std::abs(h() - masked_ct) <= 1e-12 * std::abs(masked_ct));
}
