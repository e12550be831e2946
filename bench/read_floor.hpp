// attnx benchmarks: the memory-bandwidth floor (bench_decode, bench_gpt2, attnx_overlap_probe). read512 / read256:
// one vectorised pass over n floats at p (64-byte aligned, n a multiple of 64 / 32), four independent sums so that
// the loads, not the adds, set the pace; they return one lane of the sum (to be kept from the optimiser). read_pass:
// one such read of a buffer on T threads; read_buffer: the buffer every floor reads.
#pragma once
#include <algorithm>
#include <cstddef>

#include <immintrin.h>
#include <unistd.h>

#include "attnx/exec/context.hpp"
#include "attnx/simd/isa.hpp"
#include "attnx/tensor/storage.hpp"

namespace bench {

__attribute__((target("avx512f"))) inline float read512(const float* p, std::size_t n) {
  __m512 a = _mm512_setzero_ps(), b = a, c = a, e = a;
  for (std::size_t i = 0; i + 64 <= n; i += 64) {
    a = _mm512_add_ps(a, _mm512_load_ps(p + i));
    b = _mm512_add_ps(b, _mm512_load_ps(p + i + 16));
    c = _mm512_add_ps(c, _mm512_load_ps(p + i + 32));
    e = _mm512_add_ps(e, _mm512_load_ps(p + i + 48));
  }
  float t[16];
  _mm512_storeu_ps(t, _mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, e)));
  return t[0];
}
__attribute__((target("avx2"))) inline float read256(const float* p, std::size_t n) {
  __m256 a = _mm256_setzero_ps(), b = a, c = a, e = a;
  for (std::size_t i = 0; i + 32 <= n; i += 32) {
    a = _mm256_add_ps(a, _mm256_load_ps(p + i));
    b = _mm256_add_ps(b, _mm256_load_ps(p + i + 8));
    c = _mm256_add_ps(c, _mm256_load_ps(p + i + 16));
    e = _mm256_add_ps(e, _mm256_load_ps(p + i + 24));
  }
  float t[8];
  _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, e)));
  return t[0];
}

inline std::size_t llc_bytes() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? std::size_t(l3) : std::size_t(64) << 20;
}

// One read of the n floats at buf on `threads` threads (each a contiguous share); returns a sum to keep.
inline float read_pass(const float* buf, std::size_t n, unsigned threads) {
  const bool wide = attnx::simd::cpu_supports(attnx::simd::isa::avx512);
  float sink[2] = {0, 0};
  attnx::exec::parallel_for(threads, threads, [&](std::size_t t, unsigned) {
    const std::size_t b = n / threads * t / 64 * 64, e = t + 1 == threads ? n : n / threads * (t + 1) / 64 * 64;
    sink[t & 1] += wide ? read512(buf + b, e - b) : read256(buf + b, e - b);
  });
  return sink[0] + sink[1];
}
// The buffer every floor reads (64-byte aligned, 4x the last-level cache, at least 512 MiB; filled once per
// process and kept).
inline const attnx::storage<float, attnx::dyn>& read_buffer() {
  static const attnx::storage<float, attnx::dyn> b = [] {
    attnx::storage<float, attnx::dyn> s(attnx::uninitialized,
                                        std::max<std::size_t>(std::size_t(512) << 20, 4 * llc_bytes()) / sizeof(float));
    std::fill_n(s.data(), s.size(), 1.0f);
    return s;
  }();
  return b;
}

}  // namespace bench
