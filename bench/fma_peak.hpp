// attnx benchmarks: the FMA peak, the arithmetic ceiling every figure is compared with (flash_bench's BM_fma_peak,
// bench_decode's arithmetic floor): independent register-resident FMA chains, enough to cover latency x pipes.
// Compiled for AVX-512 and for AVX2 + FMA whatever the build's flags (the default-flags build measures the same
// ceiling), and run on the widest this CPU has.
#pragma once
#include <cstring>
#include <string>

#include <benchmark/benchmark.h>

#include "attnx/simd/isa.hpp"

#include <immintrin.h>

namespace bench {

constexpr int fma_chains = 16;

template <class Reg, int Lanes, Reg (*Fma)(Reg, Reg, Reg), Reg (*Set1)(float)>
double fma_loop(long inner) {
  Reg acc[fma_chains];
  for (int i = 0; i < fma_chains; ++i) acc[i] = Set1(float(i));
  const Reg x = Set1(0.9999f), y = Set1(1e-7f);
  for (long it = 0; it < inner; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < fma_chains; ++i) acc[i] = Fma(acc[i], x, y);
  }
  float sink = 0;
  for (int i = 0; i < fma_chains; ++i) {
    float tmp[Lanes];
    std::memcpy(tmp, &acc[i], sizeof tmp);
    sink += tmp[0];
  }
  return double(sink);
}
__attribute__((target("avx512f"))) inline __m512 fma512(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
__attribute__((target("avx512f"))) inline __m512 set512(float x) { return _mm512_set1_ps(x); }
__attribute__((target("avx2,fma"))) inline __m256 fma256(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
__attribute__((target("avx2,fma"))) inline __m256 set256(float x) { return _mm256_set1_ps(x); }
__attribute__((target("avx512f"), flatten)) inline double fma_peak_avx512(long inner) {
  return fma_loop<__m512, 16, fma512, set512>(inner);
}
__attribute__((target("avx2,fma"), flatten)) inline double fma_peak_avx2(long inner) {
  return fma_loop<__m256, 8, fma256, set256>(inner);
}
// One pass of inner x fma_chains FMAs on the widest vectors (wide: AVX-512, else AVX2); returns its floating-point
// operations (2 per lane per FMA); the result is added to sink, for the caller to keep from the optimiser.
inline double fma_pass(bool wide, long inner, double& sink) {
  __asm__ volatile("" : "+r"(inner));  // a new pass each call (not hoisted out of a caller's loop)
  sink += wide ? fma_peak_avx512(inner) : fma_peak_avx2(inner);
  return 2.0 * (wide ? 16 : 8) * fma_chains * double(inner);
}

// BM_fma_peak's body (attnx_bench, bench_backward): one core's FMA peak as counter FLOPS, on the widest vectors.
inline void fma_peak_benchmark(benchmark::State& state) {
  const bool wide = attnx::simd::cpu_supports(attnx::simd::isa::avx512);
  constexpr long inner = 1 << 16;
  double sink = 0, flops = 0;
  for (auto _ : state) flops = fma_pass(wide, inner, sink);
  benchmark::DoNotOptimize(sink);
  state.counters["FLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::to_string(wide ? 16 : 8) + " lanes x " + std::to_string(fma_chains) + " chains");
}

}  // namespace bench
