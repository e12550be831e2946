// The multi-head attention module the benchmarks share (bench_mha, bench_dynamic): d_model 512, 8 heads
// (d_k = d_v = 64), float, biases, N(0, 1/d_model) weights, built once; and its forward pass's flop count.
#pragma once

#include <cstddef>
#include <random>

#include "attnx/attnx.hpp"

namespace bench {

inline constexpr std::size_t D = 512, H = 8;
using mha_t = attnx::multi_head_attention<float, D, H>;

// 8 B L d_model^2 (four projections) + B H 4 L^2 d_k (two products of 2 L^2 d_k per head).
inline double mha_flops(std::size_t B, std::size_t L) {
  const double b = double(B), l = double(L), d = double(D), dk = double(mha_t::d_k);
  return 8.0 * b * l * d * d + b * double(H) * 4.0 * l * l * dk;
}

// A module with N(0, 1/d_model) weights and small biases, built once.
inline const mha_t& module() {
  static const mha_t m = [] {
    mha_t r;
    std::mt19937 g(7);
    std::normal_distribution<float> w(0.0f, 1.0f / 22.6f);
    for (auto* p : {r.w_q.data(), r.w_k.data(), r.w_v.data(), r.w_o.data()})
      for (std::size_t i = 0; i < D * D; ++i) p[i] = w(g);
    for (auto* p : {r.b_q.data(), r.b_k.data(), r.b_v.data(), r.b_o.data()})
      for (std::size_t i = 0; i < D; ++i) p[i] = 0.1f * w(g);
    return r;
  }();
  return m;
}

}  // namespace bench
