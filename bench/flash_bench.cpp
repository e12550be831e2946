// attnx benchmarks: the fused kernel against the unfused computations users know, and the FMA
// peak of this core measured in the same run. Counter FLOPS = 4 L^2 d per second (half for causal).
// Run through scripts/bench.sh, which turns the JSON into docs/benchmarks.md.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include <cblas.h>

#include "bench_common.hpp"
#include "fma_peak.hpp"

namespace {

using bench::qkv;

void BM_fma_peak(benchmark::State& state) { bench::fma_peak_benchmark(state); }

// ---- fused kernel ----------------------------------------------------------------------------
void BM_fused(benchmark::State& state) {
  const auto L = std::size_t(state.range(0)), d = std::size_t(state.range(1));
  const bool causal = state.range(2) != 0;
  const auto threads = unsigned(state.range(3));
  qkv x(L, d);
  const auto p = bench::problem(x, causal);
  const attnx::simd::isa isa = attnx::default_context().isa();
  for (auto _ : state) {
    attnx::kernels::flash_attention(p, isa, threads);
    benchmark::DoNotOptimize(x.o.data());
    benchmark::ClobberMemory();
  }
  bench::set_counters(state, L, d, causal, threads);
  state.SetLabel(std::string(attnx::simd::name(isa)));
}

// ---- unfused: OpenBLAS sgemm, row softmax, sgemm ----------------------------------------------
void BM_openblas(benchmark::State& state) {
  const auto L = std::size_t(state.range(0)), d = std::size_t(state.range(1));
  const bool causal = state.range(2) != 0;
  const auto threads = unsigned(state.range(3));
  qkv x(L, d);
  std::vector<float> S(L * L);
  openblas_set_num_threads(int(threads));
  const auto n = int(L), dd = int(d);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, dd, x.scale(), x.q.data(), dd, x.k.data(), dd, 0.0f,
                S.data(), n);
    if (threads > 1) {  // the softmax rows split like the GEMMs: one slice per thread
      attnx::exec::parallel_for(threads, threads, [&](std::size_t t, unsigned) {
        const std::size_t r0 = L * t / threads, r1 = L * (t + 1) / threads;
        bench::softmax_rows(S.data() + r0 * L, r1 - r0, L, L, causal, r0);
      });
    } else {
      bench::softmax_rows(S.data(), L, L, L, causal);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dd, n, 1.0f, S.data(), n, x.v.data(), dd, 0.0f,
                x.o.data(), dd);
    benchmark::ClobberMemory();
  }
  bench::set_counters(state, L, d, causal, threads);
  state.SetLabel(openblas_get_corename());
}


// ---- naive reference: three loops, stable softmax (small L only) -------------------------------
void BM_naive(benchmark::State& state) {
  const auto L = std::size_t(state.range(0)), d = std::size_t(state.range(1));
  const bool causal = state.range(2) != 0;
  qkv x(L, d);
  std::vector<float> s(L);
  for (auto _ : state) {
    for (std::size_t i = 0; i < L; ++i) {
      const std::size_t n = causal ? i + 1 : L;
      float m = -INFINITY;
      for (std::size_t j = 0; j < n; ++j) {
        float a = 0;
        for (std::size_t c = 0; c < d; ++c) a += x.q[i * d + c] * x.k[j * d + c];
        s[j] = a * x.scale();
        m = std::max(m, s[j]);
      }
      float sum = 0;
      for (std::size_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - m));
      for (std::size_t c = 0; c < d; ++c) {
        float a = 0;
        for (std::size_t j = 0; j < n; ++j) a += s[j] * x.v[j * d + c];
        x.o[i * d + c] = a / sum;
      }
    }
    benchmark::ClobberMemory();
  }
  bench::set_counters(state, L, d, causal, 1);
}

}  // namespace

namespace bench {
void attention_args(benchmark::internal::Benchmark* b, const std::vector<long>& Ls, const std::vector<long>& threads) {
  for (long d : {64, 128})
    for (long causal : {0, 1})
      for (long t : threads)
        for (long L : Ls) b->Args({L, d, causal, t});
  b->ArgNames({"L", "d", "causal", "threads"})->Unit(benchmark::kMillisecond);
  // One thread: CPU time of the calling thread, which other processes on the machine disturb less
  // than wall time. More threads: wall time for the rate, and the CPU time of the whole process
  // (all threads) in cpu_time, to tell the threads' extra work from time lost to other processes.
  if (threads.size() != 1 || threads[0] != 1) b->UseRealTime()->MeasureProcessCPUTime();
}

}  // namespace bench

namespace {
using bench::all_L;
using bench::attention_args;

BENCHMARK(BM_fma_peak)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_fused)->Apply([](auto* b) { attention_args(b, all_L, {1}); });
BENCHMARK(BM_fused)->Apply([](auto* b) { attention_args(b, all_L, {2}); });
BENCHMARK(BM_openblas)->Apply([](auto* b) { attention_args(b, all_L, {1}); });
BENCHMARK(BM_openblas)->Apply([](auto* b) { attention_args(b, all_L, {2}); });
BENCHMARK(BM_naive)->Apply([](auto* b) { attention_args(b, {128, 512}, {1}); });

}  // namespace

BENCHMARK_MAIN();
