// attnx benchmarks: unfused attention with Eigen's products and the same row softmax as the
// OpenBLAS baseline. One thread (built without OpenMP).
#include <Eigen/Core>

#include "bench_common.hpp"

namespace {
using bench::qkv;

// ---- unfused: Eigen products (one thread: built without OpenMP) --------------------------------
void BM_eigen(benchmark::State& state) {
  using mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const auto L = std::size_t(state.range(0)), d = std::size_t(state.range(1));
  const bool causal = state.range(2) != 0;
  qkv x(L, d);
  const Eigen::Map<const mat> Q(x.q.data(), Eigen::Index(L), Eigen::Index(d)), K(x.k.data(), Eigen::Index(L), Eigen::Index(d)),
      V(x.v.data(), Eigen::Index(L), Eigen::Index(d));
  Eigen::Map<mat> O(x.o.data(), Eigen::Index(L), Eigen::Index(d));
  mat S(L, L);
  for (auto _ : state) {
    S.noalias() = x.scale() * Q * K.transpose();
    bench::softmax_rows(S.data(), L, L, L, causal);
    O.noalias() = S * V;
    benchmark::ClobberMemory();
  }
  bench::set_counters(state, L, d, causal, 1);
}

BENCHMARK(BM_eigen)->Apply([](auto* b) { bench::attention_args(b, bench::all_L, {1}); });

}  // namespace
