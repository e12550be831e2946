// attnx benchmarks: the whole multi-head attention forward pass of attnx::multi_head_attention,
//   y = merge_heads(attention(split_heads<8>(x W_Q + b_Q), split_heads<8>(x W_K + b_K),
//                             split_heads<8>(x W_V + b_V))) W_O + b_O
// at d_model 512, 8 heads (d_k = d_v = 64), float, biases, no mask, for several (L, B): projections,
// attention and output projection, as a user gets them by assigning mha(x) to a tensor.
//   BM_mha_fused    the attention dispatched to the fused kernel (the default)
//   BM_mha_unfused  a context with the fused path off: every node evaluated row by row
//   BM_mha_projections  the four projections alone (x W + b, (B L) x 512 x 512 each): the share of the
//                   forward pass that is not attention, so that the attention's own rate can be derived
// The projections are the row evaluator's products in both (attnx has no GEMM kernel of its own).
// One thread (a context with set_threads(1)), CPU time; and the fused forward pass on two threads (the
// kernel and the GEMM's row blocks split across them), wall time: threads = 2 in the name.
// FLOPS counts 8 B L d_model^2 (four projections, 2 flops per multiply-add) + B H 4 L^2 d_k (the
// attention: two products of 2 L^2 d_k per head).
#include <cstddef>
#include <random>
#include <string>

#include <benchmark/benchmark.h>

#include "attnx/attnx.hpp"
#include "bench_mha_module.hpp"

namespace {

using bench::D;
using bench::H;
using bench::mha_t;
using bench::mha_flops;
using bench::module;

template <std::size_t L, std::size_t B, bool Fused, unsigned Threads = 1>
void BM_mha(benchmark::State& state) {
  const mha_t& mha = module();
  attnx::tensor<float, B, L, D> x(attnx::uninitialized), y(attnx::uninitialized);
  std::mt19937 g(42);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(g);
  attnx::context ctx;
  ctx.set_fused(Fused).set_threads(Threads);
  for (auto _ : state) {
    attnx::assign(y, mha(x), ctx);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const bool took_fused_path = ctx.fused_runs() != 0;
  if (took_fused_path != Fused) state.SkipWithError(Fused ? "the fused path was not taken" : "the fused path was taken");
  state.counters["FLOPS"] = benchmark::Counter(mha_flops(B, L), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["L"] = double(L);
  state.counters["B"] = double(B);
  state.counters["fused"] = Fused ? 1 : 0;
  state.counters["threads"] = Threads;
}

// The four projection products of the forward pass, without the attention between them.
template <std::size_t L, std::size_t B>
void BM_projections(benchmark::State& state) {
  const mha_t& mha = module();
  attnx::context ctx;
  ctx.set_threads(1);
  const attnx::context_scope use(ctx);
  attnx::tensor<float, B, L, D> x(attnx::uninitialized), q(attnx::uninitialized), k(attnx::uninitialized),
      v(attnx::uninitialized), o(attnx::uninitialized);
  std::mt19937 g(42);
  std::normal_distribution<float> nd;
  for (auto& e : x) e = nd(g);
  for (auto _ : state) {
    q = x * mha.w_q + mha.b_q;
    k = x * mha.w_k + mha.b_k;
    v = x * mha.w_v + mha.b_v;
    o = q * mha.w_o + mha.b_o;
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] =
      benchmark::Counter(8.0 * double(B) * double(L) * double(D) * double(D), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["L"] = double(L);
  state.counters["B"] = double(B);
  state.counters["threads"] = 1;
}

template <std::size_t L, std::size_t B>
void add_projections() {
  const std::string name = "BM_mha_projections/L:" + std::to_string(L) + "/B:" + std::to_string(B) + "/d_model:512/threads:1";
  benchmark::RegisterBenchmark(name.c_str(), BM_projections<L, B>)->Unit(benchmark::kMillisecond);
}

template <std::size_t L, std::size_t B, bool Fused>
void add() {
  if constexpr (Fused) add_projections<L, B>();
  const std::string name = std::string(Fused ? "BM_mha_fused" : "BM_mha_unfused") + "/L:" + std::to_string(L) +
                           "/B:" + std::to_string(B) + "/d_model:512/heads:8/threads:";
  benchmark::RegisterBenchmark((name + "1").c_str(), BM_mha<L, B, Fused>)->Unit(benchmark::kMillisecond);
  if constexpr (Fused)
    benchmark::RegisterBenchmark((name + "2").c_str(), BM_mha<L, B, Fused, 2>)->Unit(benchmark::kMillisecond)->UseRealTime();
}

// Shapes are compile-time: one instantiation per (L, B, path); every L in {128, 512, 1024, 2048} with
// every B in {1, 4, 8}, both paths (the largest takes a few seconds per iteration).
template <bool Fused>
void add_all() {
  add<128, 1, Fused>(), add<128, 4, Fused>(), add<128, 8, Fused>();
  add<512, 1, Fused>(), add<512, 4, Fused>(), add<512, 8, Fused>();
  add<1024, 1, Fused>(), add<1024, 4, Fused>(), add<1024, 8, Fused>();
  add<2048, 1, Fused>(), add<2048, 4, Fused>(), add<2048, 8, Fused>();
}
const int registered = [] {
  add_all<true>();
  add_all<false>();
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
