// attnx benchmarks: the fused attention backward (kernels::flash_attention_backward) against the FMA peak of this
// core measured in the same run, and against attnx's unfused backward (the rules over the stored weights, what grad()
// runs with the fused path off; its time includes the forward it recomputes). Counter FLOPS = 2.5 x the forward's
// 4 L^2 d per second (half for causal): the five products of the backward. scripts/bench_backward_torch.py times
// PyTorch's autograd on the same problems.
#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "attnx/attnx.hpp"
#include "attnx/kernels/flash_attention_backward.hpp"
#include "bench_common.hpp"
#include "fma_peak.hpp"

namespace {

using bench::qkv;

void BM_fma_peak(benchmark::State& state) { bench::fma_peak_benchmark(state); }

struct backward_data {
  qkv x;
  std::vector<float> d_o, lse, dq, dk, dv;
  attnx::kernels::attention_problem<float> p;
  attnx::kernels::attention_gradients<float> g;
  backward_data(std::size_t L, std::size_t d, bool causal)
      : x(L, d), d_o(L * d), lse(L), dq(L * d), dk(L * d), dv(L * d), p(bench::problem(x, causal)) {
    for (std::size_t i = 0; i < L * d; ++i) d_o[i] = std::sin(0.37f * float(i));
    const auto dd = static_cast<std::ptrdiff_t>(d);
    p.lse = {lse.data(), 0, 0, 1};
    attnx::kernels::flash_attention(p);
    g.o = {x.o.data(), 0, 0, dd};
    g.d_o = {d_o.data(), 0, 0, dd};
    g.lse = {lse.data(), 0, 0, 1};
    g.dq = {dq.data(), 0, 0, dd};
    g.dk = {dk.data(), 0, 0, dd};
    g.dv = {dv.data(), 0, 0, dd};
  }
};

void counters(benchmark::State& state, std::size_t L, std::size_t d, bool causal) {
  state.counters["FLOPS"] =
      benchmark::Counter(2.5 * bench::attention_flops(L, d, causal), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["L"] = double(L);
  state.counters["d"] = double(d);
}

void BM_backward_fused(benchmark::State& state) {
  const auto L = std::size_t(state.range(0)), d = std::size_t(state.range(1));
  const bool causal = state.range(2) != 0;
  const auto threads = unsigned(state.range(3));
  backward_data b(L, d, causal);
  const attnx::simd::isa isa = attnx::default_context().isa();
  for (auto _ : state) {
    if (!attnx::kernels::flash_attention_backward(b.p, b.g, isa, threads)) state.SkipWithError("not fused");
    benchmark::DoNotOptimize(b.dq.data());
    benchmark::ClobberMemory();
  }
  counters(state, L, d, causal);
  state.counters["threads"] = threads;
  state.SetLabel(std::string(attnx::simd::name(isa)));
}

// The same gradients through the rules, node by node (a context with the fused path off): the L x L weights stored,
// the softmax rule and the blocked GEMM, as grad() runs attention that the fused backward declines.
void BM_backward_rules(benchmark::State& state) {
  const auto L = std::size_t(state.range(0));
  const bool causal = state.range(1) != 0;
  constexpr std::size_t d = 64;
  using M = attnx::tensor<float, attnx::dyn, d>;
  M q(L), k(L), v(L), dy(L);
  std::mt19937 gen(42);
  std::normal_distribution<float> nd;
  for (M* t : {&q, &k, &v})
    for (std::size_t i = 0; i < L * d; ++i) t->data()[i] = nd(gen);
  for (std::size_t i = 0; i < L * d; ++i) dy.data()[i] = std::sin(0.37f * float(i));
  attnx::context rules;
  rules.set_fused(false).set_threads(1);
  attnx::context_scope use(rules);
  for (auto _ : state) {
    if (causal) {
      auto g = attnx::backward(attnx::attention(q, k, v, attnx::causal), dy, attnx::wrt(q, k, v));
      benchmark::DoNotOptimize(std::get<0>(g).data());
    } else {
      auto g = attnx::backward(attnx::attention(q, k, v), dy, attnx::wrt(q, k, v));
      benchmark::DoNotOptimize(std::get<0>(g).data());
    }
    benchmark::ClobberMemory();
  }
  counters(state, L, d, causal);
}

// The forward with its lse, for scale: the backward's FLOPS are 2.5x these.
void BM_forward_fused(benchmark::State& state) {
  const auto L = std::size_t(state.range(0)), d = std::size_t(state.range(1));
  const bool causal = state.range(2) != 0;
  backward_data b(L, d, causal);
  const attnx::simd::isa isa = attnx::default_context().isa();
  for (auto _ : state) {
    attnx::kernels::flash_attention(b.p, isa, 1);
    benchmark::DoNotOptimize(b.x.o.data());
    benchmark::ClobberMemory();
  }
  bench::set_counters(state, L, d, causal, 1);
}

}  // namespace

BENCHMARK(BM_fma_peak)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_forward_fused)->Args({1024, 64, 0})->Args({1024, 64, 1})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_backward_rules)->ArgsProduct({{1024}, {0, 1}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_backward_fused)
    ->ArgsProduct({{1024, 2048}, {64}, {0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_MAIN();
