// attnx: simd::vec<T, avx2_t>, 8 floats / 4 doubles in 16 registers. Compiled for AVX2 + FMA + F16C whatever
// the translation unit's flags (simd/target.hpp); run only where simd::cpu_supports(isa::avx2).
// The operations and their NaN rules are listed in simd/vec.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "attnx/simd/isa.hpp"
#include "attnx/simd/target.hpp"

#if ATTNX_SIMD_X86
ATTNX_TARGET_AVX2_BEGIN
namespace attnx::simd {

template <class T, class I>
struct vec;

template <>
struct vec<float, avx2_t> {
  using reg = __m256;
  static constexpr std::size_t W = 8;

  static reg zero() { return _mm256_setzero_ps(); }
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg load(const float* p) { return _mm256_load_ps(p); }
  static reg loadu(const float* p) { return _mm256_loadu_ps(p); }
  static reg load_bf16(const std::uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
  static reg load_f16(const std::uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static float reduce_add(reg x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  // Pairwise sums within 64-bit pairs, within 128-bit lanes, then across the two lanes.
  static reg reduce_lanes(const reg* a) {
    __m256 b[4], c[2];
    for (int k = 0; k < 4; ++k) b[k] = _mm256_add_ps(_mm256_unpacklo_ps(a[2 * k], a[2 * k + 1]), _mm256_unpackhi_ps(a[2 * k], a[2 * k + 1]));
    for (int k = 0; k < 2; ++k) {
      const __m256d x = _mm256_castps_pd(b[2 * k]), y = _mm256_castps_pd(b[2 * k + 1]);
      c[k] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)), _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
    }
    return _mm256_add_ps(_mm256_permute2f128_ps(c[0], c[1], 0x20), _mm256_permute2f128_ps(c[0], c[1], 0x31));
  }
  static float reduce_max(reg x) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
  }
  static void store(float* p, reg x) { _mm256_store_ps(p, x); }
  static void storeu(float* p, reg x) { _mm256_storeu_ps(p, x); }
  // 8 x 8: pairs of rows interleaved (32-bit), then pairs of those (64-bit): u[g][k]'s 128-bit lane L holds column
  // 4 L + k of rows 4 g .. 4 g + 3; one round of 128-bit lane permutes joins each column's two halves.
  static void transpose(const float* src, std::size_t ld, float* dst, std::size_t ldd) {
    __m256 t[8], u[2][4];
    for (std::size_t p = 0; p < 4; ++p) {
      const __m256 a = _mm256_loadu_ps(src + 2 * p * ld), b = _mm256_loadu_ps(src + (2 * p + 1) * ld);
      t[2 * p] = _mm256_unpacklo_ps(a, b);
      t[2 * p + 1] = _mm256_unpackhi_ps(a, b);
    }
    for (std::size_t g = 0; g < 2; ++g)
      for (std::size_t h = 0; h < 2; ++h) {
        const __m256d x = _mm256_castps_pd(t[4 * g + h]), y = _mm256_castps_pd(t[4 * g + 2 + h]);
        u[g][2 * h] = _mm256_castpd_ps(_mm256_unpacklo_pd(x, y));
        u[g][2 * h + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(x, y));
      }
    for (std::size_t k = 0; k < 4; ++k) {
      _mm256_store_ps(dst + k * ldd, _mm256_permute2f128_ps(u[0][k], u[1][k], 0x20));
      _mm256_store_ps(dst + (4 + k) * ldd, _mm256_permute2f128_ps(u[0][k], u[1][k], 0x31));
    }
  }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm256_div_ps(a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg fma_exact(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg div_or_zero(reg a, reg l) {
    return _mm256_blendv_ps(_mm256_div_ps(a, l), _mm256_setzero_ps(), _mm256_cmp_ps(l, _mm256_setzero_ps(), _CMP_EQ_OQ));
  }
  static reg max_keep(reg x, reg m) { return _mm256_max_ps(x, m); }
  static reg min_pass(reg c, reg x) { return _mm256_min_ps(c, x); }
  static reg max_pass(reg c, reg x) { return _mm256_max_ps(c, x); }
  static reg round_nearest(reg x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static reg scale_pow2(reg p, reg n) {  // two exact steps: subnormal results are not flushed
    const __m256i e = _mm256_cvtps_epi32(n);
    const __m256i e1 = _mm256_srai_epi32(e, 1), e2 = _mm256_sub_epi32(e, e1);
    const __m256i bias = _mm256_set1_epi32(127);
    const reg s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e1, bias), 23));
    const reg s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  }
  static reg neg_inf_to_zero(reg m) {
    const reg ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    return _mm256_blendv_ps(m, _mm256_setzero_ps(), _mm256_cmp_ps(m, ninf, _CMP_EQ_OQ));
  }
  static bool any_pos_inf(reg m) {
    const reg pinf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
    return _mm256_movemask_ps(_mm256_cmp_ps(m, pinf, _CMP_EQ_OQ)) != 0;
  }
  static bool any_inf(reg m) {
    const reg abs = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), m);
    return _mm256_movemask_ps(_mm256_cmp_ps(abs, _mm256_set1_ps(std::numeric_limits<float>::infinity()), _CMP_EQ_OQ)) != 0;
  }
  static bool any_abs_above(reg x, float t) {
    const reg abs = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    return _mm256_movemask_ps(_mm256_cmp_ps(abs, _mm256_set1_ps(t), _CMP_GT_OQ)) != 0;
  }
  static bool any_above(reg x, float t) { return _mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_set1_ps(t), _CMP_GT_OQ)) != 0; }
  static reg below_or(reg x, reg lim, float j, reg f) {
    return _mm256_blendv_ps(f, x, _mm256_cmp_ps(_mm256_set1_ps(j), lim, _CMP_LT_OQ));
  }
  static reg abs(reg x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
  static reg copysign(reg m, reg s) {
    const reg sign = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(sign, m), _mm256_and_ps(sign, s));
  }
  static reg less_or(reg a, reg t, reg x, reg f) { return _mm256_blendv_ps(f, x, _mm256_cmp_ps(a, t, _CMP_LT_OQ)); }
  static reg where_flags(const bool* p, reg x, reg f) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_blendv_ps(f, x, _mm256_castsi256_ps(_mm256_cmpgt_epi32(b, _mm256_setzero_si256())));
  }
};

template <>
struct vec<double, avx2_t> {
  using reg = __m256d;
  static constexpr std::size_t W = 4;

  static reg zero() { return _mm256_setzero_pd(); }
  static reg set1(double x) { return _mm256_set1_pd(x); }
  static reg load(const double* p) { return _mm256_load_pd(p); }
  static reg loadu(const double* p) { return _mm256_loadu_pd(p); }
  static double reduce_add(reg x) {
    const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
  }
  static reg reduce_lanes(const reg* a) {
    const __m256d c0 = _mm256_add_pd(_mm256_unpacklo_pd(a[0], a[1]), _mm256_unpackhi_pd(a[0], a[1]));
    const __m256d c1 = _mm256_add_pd(_mm256_unpacklo_pd(a[2], a[3]), _mm256_unpackhi_pd(a[2], a[3]));
    return _mm256_add_pd(_mm256_permute2f128_pd(c0, c1, 0x20), _mm256_permute2f128_pd(c0, c1, 0x31));
  }
  static double reduce_max(reg x) {
    const __m128d s = _mm_max_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
    return _mm_cvtsd_f64(_mm_max_sd(s, _mm_unpackhi_pd(s, s)));
  }
  static void store(double* p, reg x) { _mm256_store_pd(p, x); }
  static void storeu(double* p, reg x) { _mm256_storeu_pd(p, x); }
  // 4 x 4: pairs of rows interleaved (column 2 L + k of the pair in 128-bit lane L), then the lanes joined.
  static void transpose(const double* src, std::size_t ld, double* dst, std::size_t ldd) {
    const __m256d r0 = _mm256_loadu_pd(src), r1 = _mm256_loadu_pd(src + ld), r2 = _mm256_loadu_pd(src + 2 * ld),
                  r3 = _mm256_loadu_pd(src + 3 * ld);
    const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1), t2 = _mm256_unpacklo_pd(r2, r3),
                  t3 = _mm256_unpackhi_pd(r2, r3);
    _mm256_store_pd(dst, _mm256_permute2f128_pd(t0, t2, 0x20));
    _mm256_store_pd(dst + ldd, _mm256_permute2f128_pd(t1, t3, 0x20));
    _mm256_store_pd(dst + 2 * ldd, _mm256_permute2f128_pd(t0, t2, 0x31));
    _mm256_store_pd(dst + 3 * ldd, _mm256_permute2f128_pd(t1, t3, 0x31));
  }
  static reg add(reg a, reg b) { return _mm256_add_pd(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_pd(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_pd(a, b); }
  static reg div(reg a, reg b) { return _mm256_div_pd(a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_pd(a, b, c); }
  static reg fma_exact(reg a, reg b, reg c) { return _mm256_fmadd_pd(a, b, c); }
  static reg div_or_zero(reg a, reg l) {
    return _mm256_blendv_pd(_mm256_div_pd(a, l), _mm256_setzero_pd(), _mm256_cmp_pd(l, _mm256_setzero_pd(), _CMP_EQ_OQ));
  }
  static reg max_keep(reg x, reg m) { return _mm256_max_pd(x, m); }
  static reg min_pass(reg c, reg x) { return _mm256_min_pd(c, x); }
  static reg max_pass(reg c, reg x) { return _mm256_max_pd(c, x); }
  static reg round_nearest(reg x) { return _mm256_round_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static reg scale_pow2(reg p, reg n) {
    const __m128i e = _mm256_cvtpd_epi32(n);
    const __m128i e1 = _mm_srai_epi32(e, 1), e2 = _mm_sub_epi32(e, e1);
    const __m256i bias = _mm256_set1_epi64x(1023);
    const reg s1 = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(e1), bias), 52));
    const reg s2 = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(e2), bias), 52));
    return _mm256_mul_pd(_mm256_mul_pd(p, s1), s2);
  }
  static reg neg_inf_to_zero(reg m) {
    const reg ninf = _mm256_set1_pd(-std::numeric_limits<double>::infinity());
    return _mm256_blendv_pd(m, _mm256_setzero_pd(), _mm256_cmp_pd(m, ninf, _CMP_EQ_OQ));
  }
  static bool any_pos_inf(reg m) {
    const reg pinf = _mm256_set1_pd(std::numeric_limits<double>::infinity());
    return _mm256_movemask_pd(_mm256_cmp_pd(m, pinf, _CMP_EQ_OQ)) != 0;
  }
  static bool any_inf(reg m) {
    const reg abs = _mm256_andnot_pd(_mm256_set1_pd(-0.0), m);
    return _mm256_movemask_pd(_mm256_cmp_pd(abs, _mm256_set1_pd(std::numeric_limits<double>::infinity()), _CMP_EQ_OQ)) != 0;
  }
  static bool any_abs_above(reg x, double t) {
    const reg abs = _mm256_andnot_pd(_mm256_set1_pd(-0.0), x);
    return _mm256_movemask_pd(_mm256_cmp_pd(abs, _mm256_set1_pd(t), _CMP_GT_OQ)) != 0;
  }
  static bool any_above(reg x, double t) { return _mm256_movemask_pd(_mm256_cmp_pd(x, _mm256_set1_pd(t), _CMP_GT_OQ)) != 0; }
  static reg below_or(reg x, reg lim, double j, reg f) {
    return _mm256_blendv_pd(f, x, _mm256_cmp_pd(_mm256_set1_pd(j), lim, _CMP_LT_OQ));
  }
  static reg abs(reg x) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), x); }
  static reg copysign(reg m, reg s) {
    const reg sign = _mm256_set1_pd(-0.0);
    return _mm256_or_pd(_mm256_andnot_pd(sign, m), _mm256_and_pd(sign, s));
  }
  static reg less_or(reg a, reg t, reg x, reg f) { return _mm256_blendv_pd(f, x, _mm256_cmp_pd(a, t, _CMP_LT_OQ)); }
  static reg where_flags(const bool* p, reg x, reg f) {
    std::int32_t four;
    std::memcpy(&four, p, 4);
    const __m256i b = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(four));
    return _mm256_blendv_pd(f, x, _mm256_castsi256_pd(_mm256_cmpgt_epi64(b, _mm256_setzero_si256())));
  }
};

}  // namespace attnx::simd
ATTNX_TARGET_END
#endif  // ATTNX_SIMD_X86
