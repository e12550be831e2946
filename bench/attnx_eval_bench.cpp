// attnx benchmarks: the library's own (unfused) expression evaluation of attention on views,
// attnx::evaluate(softmax(scale(Q * transpose(K), s)) * V), one instantiation per (L, d).
#include <string>

#include "attnx/attnx.hpp"
#include "bench_common.hpp"

namespace {

template <std::size_t L, std::size_t D, bool Causal>
void BM_attnx_eval(benchmark::State& state) {
  bench::qkv x(L, D);
  const attnx::view<const float, L, D> Q(x.q), K(x.k), V(x.v);
  const float s = x.scale();
  for (auto _ : state) {
    if constexpr (Causal) {
      auto r = attnx::evaluate(attnx::softmax(attnx::mask(attnx::scale(Q * attnx::transpose(K), s), attnx::causal)) * V);
      benchmark::DoNotOptimize(r.data());
    } else {
      auto r = attnx::evaluate(attnx::softmax(attnx::scale(Q * attnx::transpose(K), s)) * V);
      benchmark::DoNotOptimize(r.data());
    }
    benchmark::ClobberMemory();
  }
  bench::set_counters(state, L, D, Causal, 1);
}

template <std::size_t L, std::size_t D, bool Causal>
void add() {
  const std::string name = "BM_attnx_eval/L:" + std::to_string(L) + "/d:" + std::to_string(D) +
                           "/causal:" + std::to_string(int(Causal)) + "/threads:1";
  benchmark::RegisterBenchmark(name.c_str(), BM_attnx_eval<L, D, Causal>)->Unit(benchmark::kMillisecond);
}

template <std::size_t... Ls>
void add_all() {
  (add<Ls, 64, false>(), ...);
  (add<Ls, 64, true>(), ...);
  (add<Ls, 128, false>(), ...);
  (add<Ls, 128, true>(), ...);
}

// The evaluator is single-threaded (CPU time, like every one-thread benchmark); L <= 2048 keeps
// the run short.
const int registered = [] {
  add_all<128, 512, 1024, 2048>();
  return 0;
}();

}  // namespace
