// attnx benchmarks: shared set-up. One head, Q, K, V of L x d, fp32, row-major, N(0,1) entries.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include <benchmark/benchmark.h>

#include "attnx/kernels/flash_attention.hpp"

namespace bench {

struct qkv {
  std::size_t L, d;
  std::vector<float> q, k, v, o;
  qkv(std::size_t L_, std::size_t d_) : L(L_), d(d_), q(L * d), k(L * d), v(L * d), o(L * d) {
    std::mt19937 g(42);
    std::normal_distribution<float> nd;
    for (auto* t : {&q, &k, &v})
      for (auto& x : *t) x = nd(g);
  }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(d)); }
};

inline attnx::kernels::attention_problem<float> problem(qkv& x, bool causal) {
  attnx::kernels::attention_problem<float> p;
  const auto d = static_cast<std::ptrdiff_t>(x.d);
  p.q = {x.q.data(), 0, 0, d};
  p.k = {x.k.data(), 0, 0, d};
  p.v = {x.v.data(), 0, 0, d};
  p.o = {x.o.data(), 0, 0, d};
  p.lq = p.lk = x.L;
  p.dk = p.dv = x.d;
  p.multiply(x.scale());
  if (causal) p.causal(attnx::kernels::causal_kind::top_left);
  return p;
}

// A decode cell's problem (bench_decode, attnx_overlap_probe): H heads (= KV heads) of lq query rows against lk keys,
// d_k = d_v = d, q / o and each head's K / V rows contiguous (K and V as float, or as bf16 / f16 bits with storage),
// scale 1/sqrt(d), bottom-right causal.
template <class KV>
attnx::kernels::attention_problem<float> decode_problem(const float* q, float* o, const KV* k, const KV* v, std::size_t H,
                                                        std::size_t lq, std::size_t lk, std::size_t d,
                                                        attnx::kernels::kv_storage storage = attnx::kernels::kv_storage::same,
                                                        std::size_t kv_heads = 0) {
  const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
  attnx::kernels::attention_problem<float> p;
  p.q = {q, 0, sz(lq * d), sz(d)};
  p.o = {o, 0, sz(lq * d), sz(d)};
  if constexpr (std::is_same_v<KV, float>) {
    p.k = {k, 0, sz(lk * d), sz(d)};
    p.v = {v, 0, sz(lk * d), sz(d)};
  } else {
    p.kv = storage;
    p.k16 = {reinterpret_cast<const std::uint16_t*>(k), 0, sz(lk * d), sz(d)};
    p.v16 = {reinterpret_cast<const std::uint16_t*>(v), 0, sz(lk * d), sz(d)};
  }
  p.heads = H;
  p.kv_heads = kv_heads ? kv_heads : H;  // (K and V: kv_heads matrices of lk x d)
  p.lq = lq;
  p.lk = lk;
  p.dk = p.dv = d;
  p.multiply(1.0f / std::sqrt(static_cast<float>(d))).causal(attnx::kernels::causal_kind::bottom_right);
  return p;
}

// 4 L^2 d: two products of 2 L^2 d each; half of it with a causal mask (only unmasked work counts).
inline double attention_flops(std::size_t L, std::size_t d, bool causal) {
  return 4.0 * double(L) * double(L) * double(d) * (causal ? 0.5 : 1.0);
}

inline void set_counters(benchmark::State& state, std::size_t L, std::size_t d, bool causal, unsigned threads) {
  state.counters["FLOPS"] = benchmark::Counter(attention_flops(L, d, causal), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["L"] = double(L);
  state.counters["d"] = double(d);
  state.counters["causal"] = causal ? 1 : 0;
  state.counters["threads"] = threads;
}

// Row softmax of S (rows x cols, leading dimension ld), in place; with causal, row i keeps
// columns j <= i and zeroes the rest. Defined in softmax_rows.cpp (built with -ffast-math so
// that glibc's vectorised expf is used: the strongest baseline we can give the unfused path).
// Benchmark arguments {L, d, causal, threads} for every d in {64, 128}, causal off/on.
void attention_args(benchmark::internal::Benchmark* b, const std::vector<long>& Ls, const std::vector<long>& threads);
inline const std::vector<long> all_L = {128, 512, 1024, 2048, 4096, 8192};

void softmax_rows(float* S, std::size_t rows, std::size_t cols, std::size_t ld, bool causal, std::size_t row0 = 0);

}  // namespace bench
