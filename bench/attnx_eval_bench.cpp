// attnx benchmarks: attention written as an attnx expression on views,
//   attnx::evaluate(softmax(scale(Q * transpose(K), s)) * V)      (with mask(..., causal) when causal)
// evaluated two ways, one thread each, one instantiation per (d, causal, path): L is a run-time extent
// (view<const float, dyn, d>), so the 22 (L, d, causal, path) cells compile as 8 (this file: 22.0 -> 12.1 s of g++ -O3 -march=native):
//   BM_attnx_eval  the row-by-row expression evaluator (a context with the fused path off): unfused
//   BM_attnx_expr  the same expression dispatched to the fused kernel (eval/fused.hpp): what a user
//                  of the expression API gets; its gap to BM_fused is the dispatch overhead
#include <initializer_list>
#include <string>

#include "attnx/attnx.hpp"
#include "bench_common.hpp"

namespace {

template <std::size_t D, bool Causal, bool Fused>
void BM_attnx(benchmark::State& state, std::size_t L) {
  bench::qkv x(L, D);
  const attnx::view<const float, attnx::dyn, D> Q(x.q), K(x.k), V(x.v);
  const float s = x.scale();
  attnx::context ctx;
  ctx.set_fused(Fused).set_threads(1);
  for (auto _ : state) {
    if constexpr (Causal) {
      auto r = attnx::evaluate(attnx::softmax(attnx::mask(attnx::scale(Q * attnx::transpose(K), s), attnx::causal)) * V, ctx);
      benchmark::DoNotOptimize(r.data());
    } else {
      auto r = attnx::evaluate(attnx::softmax(attnx::scale(Q * attnx::transpose(K), s)) * V, ctx);
      benchmark::DoNotOptimize(r.data());
    }
    benchmark::ClobberMemory();
  }
  const bool took_fused_path = ctx.fused_runs() != 0;
  if (took_fused_path != Fused) state.SkipWithError(Fused ? "the fused path was not taken" : "the fused path was taken");
  bench::set_counters(state, L, D, Causal, 1);
}

template <std::size_t D, bool Causal, bool Fused>
void add(std::size_t L) {
  const std::string name = std::string(Fused ? "BM_attnx_expr" : "BM_attnx_eval") + "/L:" + std::to_string(L) +
                           "/d:" + std::to_string(D) + "/causal:" + std::to_string(int(Causal)) + "/threads:1";
  benchmark::RegisterBenchmark(name.c_str(), [L](benchmark::State& state) { BM_attnx<D, Causal, Fused>(state, L); })
      ->Unit(benchmark::kMillisecond);
}

template <bool Fused>
void add_all(std::initializer_list<std::size_t> Ls) {
  for (std::size_t L : Ls) add<64, false, Fused>(L);
  for (std::size_t L : Ls) add<64, true, Fused>(L);
  for (std::size_t L : Ls) add<128, false, Fused>(L);
  for (std::size_t L : Ls) add<128, true, Fused>(L);
}

// One thread (CPU time, like every one-thread benchmark). The row evaluator stops at L = 2048 to
// keep the run short.
const int registered = [] {
  add_all<false>({128, 512, 1024, 2048});
  add_all<true>({128, 512, 1024, 2048, 4096, 8192});
  return 0;
}();

}  // namespace
