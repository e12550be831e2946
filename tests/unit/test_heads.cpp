// split_heads / merge_heads / repeat_heads against plain index arithmetic, and multi-head attention
// built from them, fused and row by row, against plain loops (GQA included).
#define BOOST_TEST_MODULE heads
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "naive.hpp"
#include "support.hpp"

using namespace attnx;
using naive::make;
using naive::mat;
using namespace test_support;


BOOST_AUTO_TEST_CASE(split_merge_repeat_index_maps) {
  constexpr std::size_t B = 2, L = 3, H = 4, d = 5;
  const mat x = naive::random(B * L * H * d, 1);
  const auto X = make<tensor<double, B, L, H * d>>(x);
  tensor<double, B, H, L, d> S = split_heads<H>(X);
  static_assert(std::is_same_v<shape_of_t<decltype(split_heads<H>(X))>, make_shape<B, heads<H>, L, d>>);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t l = 0; l < L; ++l)
        for (std::size_t c = 0; c < d; ++c) BOOST_TEST(S(b, h, l, c) == x[(b * L + l) * H * d + h * d + c]);
  tensor<double, B, L, H * d> M = merge_heads(S);
  BOOST_TEST(M == X);
  tensor<double, B, L, H * d> M2 = merge_heads(split_heads<H>(X * 2.0));  // an expression operand
  for (std::size_t i = 0; i < M2.size; ++i) BOOST_TEST(M2.data()[i] == 2 * x[i]);
  tensor<double, B, 2 * H, L, d> R = repeat_heads<2>(S);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < 2 * H; ++h)
      for (std::size_t l = 0; l < L; ++l)
        for (std::size_t c = 0; c < d; ++c) BOOST_TEST(R(b, h, l, c) == S(b, h / 2, l, c));
  // rank 2 in: (L, H*d) -> (H, L, d)
  const auto Y = make<tensor<double, L, H * d>>(mat(x.begin(), x.begin() + L * H * d));
  tensor<double, H, L, d> SY = split_heads<H>(Y);
  BOOST_TEST(SY(3, 2, 4) == x[2 * H * d + 3 * d + 4]);
}

// Multi-head self-attention written with the nodes; checked fused and row by row against loops.
template <class T, std::size_t Hkv>
void mha_case(double tol) {
  constexpr std::size_t B = 2, L = 9, Dm = 12, H = 4, d = Dm / H, G = H / Hkv;
  const mat x = naive::random(B * L * Dm, 2), wq = naive::random(Dm * Dm, 3), wk = naive::random(Dm * Hkv * d, 4),
            wv = naive::random(Dm * Hkv * d, 5), wo = naive::random(Dm * Dm, 6);
  const auto X = make<tensor<T, B, L, Dm>>(x);
  const auto WQ = make<tensor<T, Dm, Dm>>(wq);
  const auto WK = make<tensor<T, Dm, Hkv * d>>(wk);
  const auto WV = make<tensor<T, Dm, Hkv * d>>(wv);
  const auto WO = make<tensor<T, Dm, Dm>>(wo);
  const std::vector<std::size_t> lens{9, 6};
  auto heads_out = [&] {
    return attention(split_heads<H>(X * WQ), repeat_heads<G>(split_heads<Hkv>(X * WK)), repeat_heads<G>(split_heads<Hkv>(X * WV)),
                     causal, key_lengths(lens));
  };
  tensor<T, B, H, L, d> fused_heads, plain_heads;
  BOOST_TEST(evaluated_fused(fused_heads, heads_out()));
  default_context().set_fused(false);
  plain_heads = heads_out();
  default_context().set_fused(true);
  tensor<T, B, L, Dm> out = merge_heads(heads_out()) * WO;

  // Reference: per batch item and head, plain loops.
  const mat want_heads = naive::gqa_heads(x, wq, wk, wv, B, L, Dm, H, Hkv, d,
                                          [&](std::size_t b, std::size_t i, std::size_t j) { return j <= i && j < lens[b]; });
  const mat want_out = naive::matmul(naive::merge_heads(want_heads, B, H, L, d), wo, B * L, Dm, Dm);
  double e1 = 0, e2 = 0, e3 = 0;
  for (std::size_t i = 0; i < want_heads.size(); ++i) {
    e1 = std::max(e1, std::abs(double(fused_heads.data()[i]) - want_heads[i]));
    e2 = std::max(e2, std::abs(double(plain_heads.data()[i]) - want_heads[i]));
  }
  for (std::size_t i = 0; i < want_out.size(); ++i) e3 = std::max(e3, std::abs(double(out.data()[i]) - want_out[i]));
  BOOST_TEST(e1 <= tol, "fused heads error " << e1);
  BOOST_TEST(e2 <= tol, "row-by-row heads error " << e2);
  BOOST_TEST(e3 <= 10 * tol, "output error " << e3);
}

BOOST_AUTO_TEST_CASE(multi_head_double) { mha_case<double, 4>(1e-13); }
BOOST_AUTO_TEST_CASE(grouped_query_float) { mha_case<float, 2>(2e-5); }
BOOST_AUTO_TEST_CASE(multi_query_double) { mha_case<double, 1>(1e-13); }
