// attnx benchmarks: the memory-bandwidth floor's read loop (bench_decode, attnx_overlap_probe): one vectorised pass
// over n floats at p (64-byte aligned, n a multiple of 64 / 32), four independent sums so that the loads, not the
// adds, set the pace. Returns one lane of the sum (to be kept from the optimiser).
#pragma once
#include <cstddef>

#include <immintrin.h>

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

}  // namespace bench
