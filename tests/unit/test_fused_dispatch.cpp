// Expressions of the form softmax(mask(scale(Q K^T))) V go to the fused kernel at run time; the
// result must match plain double loops, for every mask kind and rank, and the fallbacks must work.
#define BOOST_TEST_MODULE fused_dispatch
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "naive.hpp"
#include "support.hpp"

using namespace attnx;
using naive::make;
using naive::mat;
using namespace test_support;

namespace {
// Slices batch item / head n of a flat (N, rows, cols) buffer.
mat slice(const mat& m, std::size_t n, std::size_t rows, std::size_t cols) {
  return mat(m.begin() + n * rows * cols, m.begin() + (n + 1) * rows * cols);
}
}  // namespace

BOOST_AUTO_TEST_CASE(rank4_batch_heads_every_mask) {
  constexpr std::size_t B = 2, H = 3, Lq = 13, Lk = 21, D = 9, Dv = 7;
  const mat q = naive::random(B * H * Lq * D, 1), k = naive::random(B * H * Lk * D, 2), v = naive::random(B * H * Lk * Dv, 3);
  const auto Q = make<tensor<float, B, H, Lq, D>>(q);
  const auto K = make<tensor<float, B, H, Lk, D>>(k);
  const auto V = make<tensor<float, B, H, Lk, Dv>>(v);
  tensor<bool, B, 1, Lq, Lk> M;  // per batch item, broadcast over heads
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < Lq; ++i)
      for (std::size_t j = 0; j < Lk; ++j) M(b, 0, i, j) = (i * 7 + j * 3 + b) % 5 != 0;
  const std::vector<std::size_t> lens{17, 9};

  auto check = [&](auto&& expr, auto allowed, const char* what) {
    tensor<float, B, H, Lq, Dv> O;
    BOOST_TEST(evaluated_fused(O, expr), what << ": fused path taken");
    mat want;
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t h = 0; h < H; ++h) {
        const std::size_t n = b * H + h;
        const mat o = naive::attention(slice(q, n, Lq, D), slice(k, n, Lk, D), slice(v, n, Lk, Dv), Lq, Lk, D, Dv,
                                       [&](std::size_t i, std::size_t j) { return allowed(b, i, j); });
        want.insert(want.end(), o.begin(), o.end());
      }
    BOOST_TEST(max_err(O, want) <= 2e-6, what << ": error " << max_err(O, want));
  };
  check(attention(Q, K, V), [](auto, auto, auto) { return true; }, "no mask");
  check(attention(Q, K, V, causal), [](auto, auto i, auto j) { return j <= i; }, "causal");
  check(attention(Q, K, V, causal_bottom_right), [](auto, auto i, auto j) { return j <= i + Lk - Lq; }, "bottom-right");
  check(attention(Q, K, V, key_padding<11>), [](auto, auto, auto j) { return j < 11; }, "key_padding");
  check(attention(Q, K, V, key_lengths(lens)), [&](auto b, auto, auto j) { return j < lens[b]; }, "key_lengths");
  check(attention(Q, K, V, allowed(M)), [&](auto b, auto i, auto j) { return M(b, 0, i, j); }, "boolean (B,1,Lq,Lk)");
  check(attention(Q, K, V, causal, key_lengths(lens), allowed(M)), [&](auto b, auto i, auto j) { return j <= i && j < lens[b] && M(b, 0, i, j); },
        "causal + lengths + boolean");
}

BOOST_AUTO_TEST_CASE(rank2_projections_and_temperature_double) {
  // Q, K, V as projections of X (evaluated once into temporaries), a temperature instead of 1/sqrt(d).
  constexpr std::size_t L = 10, Dm = 12, D = 6;
  const mat x = naive::random(L * Dm, 4), wq = naive::random(Dm * D, 5), wk = naive::random(Dm * D, 6), wv = naive::random(Dm * D, 7);
  const auto X = make<tensor<double, L, Dm>>(x);
  const auto WQ = make<tensor<double, Dm, D>>(wq);
  const auto WK = make<tensor<double, Dm, D>>(wk);
  const auto WV = make<tensor<double, Dm, D>>(wv);
  tensor<double, L, D> O;
  BOOST_TEST(evaluated_fused(O, softmax(mask(temperature((X * WQ) * transpose(X * WK), 0.5), causal)) * (X * WV)));
  const mat q = naive::matmul(x, wq, L, Dm, D), k = naive::matmul(x, wk, L, Dm, D), v = naive::matmul(x, wv, L, Dm, D);
  mat s(L * L);
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t j = 0; j < L; ++j) {
      double dot = 0;
      for (std::size_t p = 0; p < D; ++p) dot += q[i * D + p] * k[j * D + p];
      s[i * L + j] = j <= i ? dot / 0.5 : -std::numeric_limits<double>::infinity();
    }
  BOOST_TEST(max_err(O, naive::matmul(naive::softmax_rows(s, L, L), v, L, L, D)) <= 1e-13);
}

BOOST_AUTO_TEST_CASE(shared_kv_and_additive_bias_rank3) {
  // Q batched (B, Lq, D); K and V plain matrices shared by every batch item; an additive bias (Lk).
  constexpr std::size_t B = 3, Lq = 5, Lk = 8, D = 4;
  const mat q = naive::random(B * Lq * D, 8), k = naive::random(Lk * D, 9), v = naive::random(Lk * D, 10), bias = naive::random(Lk, 11);
  const auto Q = make<tensor<double, B, Lq, D>>(q);
  const auto K = make<tensor<double, Lk, D>>(k);
  const auto V = make<tensor<double, Lk, D>>(v);
  const auto Bias = make<tensor<double, Lk>>(bias);
  tensor<double, B, Lq, D> O;
  BOOST_TEST(evaluated_fused(O, softmax(mask(scaled_scores(Q, K), additive(Bias))) * V));
  mat want;
  for (std::size_t b = 0; b < B; ++b) {
    mat s(Lq * Lk);
    for (std::size_t i = 0; i < Lq; ++i)
      for (std::size_t j = 0; j < Lk; ++j) {
        double dot = 0;
        for (std::size_t p = 0; p < D; ++p) dot += q[(b * Lq + i) * D + p] * k[j * D + p];
        s[i * Lk + j] = dot / 2.0 + bias[j];
      }
    const mat o = naive::matmul(naive::softmax_rows(s, Lq, Lk), v, Lq, Lk, D);
    want.insert(want.end(), o.begin(), o.end());
  }
  BOOST_TEST(max_err(O, want) <= 1e-14);
}

BOOST_AUTO_TEST_CASE(fallbacks_and_special_rows) {
  constexpr std::size_t L = 4, D = 3;
  const mat q = naive::random(L * D, 12), k = naive::random(L * D, 13), v = naive::random(L * D, 14);
  const auto Q = make<tensor<double, L, D>>(q);
  const auto K = make<tensor<double, L, D>>(k);
  const auto V = make<tensor<double, L, D>>(v);
  // A finite fill value (seed 003's -1e9) is the kernel's too: a fully masked row then weighs every key
  // equally (softmax of equal scores) and its output is the mean of V's rows.
  tensor<double, L, D> O;
  BOOST_TEST(evaluated_fused(O, softmax(mask(scaled_scores(Q, K), key_padding<0>, -1e9)) * V));
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t c = 0; c < D; ++c) {  // every key blocked at -1e9: uniform weights
      double mean = 0;
      for (std::size_t j = 0; j < L; ++j) mean += v[j * D + c] / L;
      BOOST_TEST(std::abs(O(i, c) - mean) <= 1e-15);
    }
  // Fully masked rows with -inf: output 0, through the fused kernel.
  BOOST_TEST(evaluated_fused(O, attention(Q, K, V, key_padding<0>)));
  for (double x : O) BOOST_TEST(x == 0.0);
  // Disabled: same numbers through the evaluator.
  tensor<double, L, D> fused_out, plain_out;
  BOOST_TEST(evaluated_fused(fused_out, attention(Q, K, V, causal)));
  default_context().set_fused(false);
  BOOST_TEST(!evaluated_fused(plain_out, attention(Q, K, V, causal)));
  default_context().set_fused(true);
  for (std::size_t i = 0; i < fused_out.size; ++i) BOOST_TEST(std::abs(fused_out.data()[i] - plain_out.data()[i]) <= 1e-15);
  // Two threads through the expression API.
  set_threads(2);
  tensor<double, L, D> two;
  BOOST_TEST(evaluated_fused(two, attention(Q, K, V, causal)));
  set_threads(0);
  for (std::size_t i = 0; i < two.size; ++i) BOOST_TEST(std::abs(two.data()[i] - plain_out.data()[i]) <= 1e-15);
}

BOOST_AUTO_TEST_CASE(constant_evaluation_takes_the_evaluator) {
  constexpr auto O = [] {
    const tensor<double, 2, 2> Q{{1, 0}, {0, 1}}, K{{1, 0}, {0, 1}}, V{{1, 2}, {3, 4}};
    return evaluate(attention(Q, K, V, causal));
  }();
  static_assert(O(0, 0) == 1.0 && O(0, 1) == 2.0);
  BOOST_TEST(O(1, 0) > 1.0);
}

BOOST_AUTO_TEST_CASE(pairwise_dot_scores_take_the_fused_path) {
  constexpr std::size_t Lq = 6, Lk = 9, D = 5;
  const mat q = naive::random(Lq * D, 15), k = naive::random(Lk * D, 16), v = naive::random(Lk * D, 17);
  const auto Q = make<tensor<double, Lq, D>>(q);
  const auto K = make<tensor<double, Lk, D>>(k);
  const auto V = make<tensor<double, Lk, D>>(v);
  tensor<double, Lq, D> O;
  BOOST_TEST(evaluated_fused(O, softmax(mask(dot_scores(Q, K), causal)) * V));
  const mat want = naive::attention(q, k, v, Lq, Lk, D, D, [](auto i, auto j) { return j <= i; });
  BOOST_TEST(max_err(O, want) <= 1e-14);
  // cosine is not the kernel's similarity: row by row
  BOOST_TEST(!evaluated_fused(O, softmax(cosine_scores(Q, K, 0.5)) * V));
}
