// attnx reads only the parts of <immintrin.h> its kernels use (simd/target.hpp, for compile time): a
// program that includes <immintrin.h> after attnx must still get all of it. The functions use
// intrinsics of extensions attnx never reads (AVX-512 VL and BW, BMI2); test headers.immintrin_after
// compiles this file with g++ and, when present, clang++.
#include <attnx/attnx.hpp>
#include <immintrin.h>

__attribute__((target("avx512f,avx512vl"))) __m256i abs64(__m256i a) { return _mm256_abs_epi64(a); }
__attribute__((target("avx512f,avx512bw"))) __m512i adds16(__m512i a, __m512i b) { return _mm512_adds_epi16(a, b); }
__attribute__((target("bmi2"))) unsigned pdep(unsigned a, unsigned m) { return _pdep_u32(a, m); }
// and the parts attnx does read stay usable
__attribute__((target("avx2,fma"))) __m256 fma8(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }

int main() { return 0; }
