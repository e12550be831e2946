// attnx benchmarks: run-time sequence lengths (attnx::dyn) against the same static shapes, in one run.
//   BM_attention/<static|dyn>/L      attention(Q, K, V) of one head, d = 64, float, assigned to a tensor
//                                    (the fused kernel), Q K V of shape (L, 64) or (dyn, 64)
//   BM_gemm/<static|dyn>/L           x W with x (L, 512), W (512, 512) (the blocked GEMM)
//   BM_mha/<static|dyn>/L            multi_head_attention<float, 512, 8> forward pass on (1, L, 512)
//   BM_sweep/L                       the dyn attention at lengths no static program would instantiate
//                                    (one binary, any L: the reason dyn exists)
// One thread (a context with set_threads(1)), CPU time. The ratio dyn / static per L is what
// docs/benchmarks.md reports (target: within 5% for L >= 128).
#include <cstddef>
#include <random>
#include <string>

#include <benchmark/benchmark.h>

#include "attnx/attnx.hpp"
#include "bench_mha_module.hpp"

namespace {

using attnx::dyn;
constexpr std::size_t d = 64;
using bench::D;

template <class Tn>
void fill(Tn& t, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd;
  for (auto& v : t) v = nd(g);
}

attnx::context one_thread() {
  attnx::context ctx;
  ctx.set_threads(1);
  return ctx;
}

void counters(benchmark::State& state, std::size_t L, double flops, bool dynamic) {
  state.counters["FLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["L"] = double(L);
  state.counters["dyn"] = dynamic ? 1 : 0;
}

// ---- attention ------------------------------------------------------------------------------------
template <class Tn>
void run_attention(benchmark::State& state, Tn q, Tn k, Tn v, bool dynamic) {
  const std::size_t L = q.dims()[0];
  fill(q, 1);
  fill(k, 2);
  fill(v, 3);
  Tn o = q;
  const attnx::context ctx = one_thread();
  for (auto _ : state) {
    attnx::assign(o, attnx::attention(q, k, v), ctx);
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
  if (ctx.fused_runs() == 0) state.SkipWithError("the fused path was not taken");
  counters(state, L, 4.0 * double(L) * double(L) * double(d), dynamic);
}
template <std::size_t L>
void BM_attention_static(benchmark::State& state) {
  using Tn = attnx::tensor<float, L, d>;
  run_attention(state, Tn(), Tn(), Tn(), false);
}
void BM_attention_dyn(benchmark::State& state) {
  using Tn = attnx::tensor<float, dyn, d>;
  const auto L = std::size_t(state.range(0));
  run_attention(state, Tn(L), Tn(L), Tn(L), true);
}

// ---- GEMM -----------------------------------------------------------------------------------------
template <class X>
void run_gemm(benchmark::State& state, X x, bool dynamic) {
  const std::size_t L = x.dims()[0];
  attnx::tensor<float, D, D> w;
  fill(x, 4);
  fill(w, 5);
  X y = x;
  const attnx::context ctx = one_thread();
  for (auto _ : state) {
    attnx::assign(y, x * w, ctx);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  counters(state, L, 2.0 * double(L) * D * D, dynamic);
}
template <std::size_t L>
void BM_gemm_static(benchmark::State& state) {
  run_gemm(state, attnx::tensor<float, L, D>(), false);
}
void BM_gemm_dyn(benchmark::State& state) {
  run_gemm(state, attnx::tensor<float, dyn, D>(std::size_t(state.range(0))), true);
}

// ---- MHA forward pass (the module of bench_mha) -------------------------------------------------
template <class X>
void run_mha(benchmark::State& state, X x, bool dynamic) {
  const std::size_t L = x.dims()[1];
  fill(x, 6);
  X y = x;
  const bench::mha_t& m = bench::module();
  const attnx::context ctx = one_thread();
  for (auto _ : state) {
    attnx::assign(y, m(x), ctx);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  if (ctx.fused_runs() == 0) state.SkipWithError("the fused path was not taken");
  counters(state, L, bench::mha_flops(1, L), dynamic);
}
template <std::size_t L>
void BM_mha_static(benchmark::State& state) {
  run_mha(state, attnx::tensor<float, 1, L, D>(), false);
}
void BM_mha_dyn(benchmark::State& state) {
  run_mha(state, attnx::tensor<float, dyn, dyn, D>(std::size_t(1), std::size_t(state.range(0))), true);
}

benchmark::internal::Benchmark* reg(const std::string& name, void (*f)(benchmark::State&), long arg = -1) {
  auto* b = benchmark::RegisterBenchmark(name.c_str(), f)->Unit(benchmark::kMicrosecond);
  return arg >= 0 ? b->Arg(arg) : b;
}
template <std::size_t... L>
void register_all() {
  // static and dyn of one L next to each other (the comparison is within a pair)
  ((reg("BM_attention/static/" + std::to_string(L), BM_attention_static<L>),
    reg("BM_attention/dyn", BM_attention_dyn, long(L))),
   ...);
  ((reg("BM_gemm/static/" + std::to_string(L), BM_gemm_static<L>), reg("BM_gemm/dyn", BM_gemm_dyn, long(L))),
   ...);
  ((reg("BM_mha/static/" + std::to_string(L), BM_mha_static<L>), reg("BM_mha/dyn", BM_mha_dyn, long(L))),
   ...);
}

}  // namespace

int main(int argc, char** argv) {
  register_all<16, 128, 512, 1024, 2048>();
  for (long L : {1L, 37L, 100L, 130L, 257L, 1000L, 1500L, 3000L})
    reg("BM_sweep", BM_attention_dyn, L);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
