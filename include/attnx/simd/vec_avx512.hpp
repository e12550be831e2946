// attnx: simd::vec<T, avx512_t>, 16 floats / 8 doubles in 32 registers. Compiled for AVX-512
// (F, DQ, BW, VL) + FMA whatever the translation unit's flags (simd/target.hpp); run only where
// simd::cpu_supports(isa::avx512). The operations and their NaN rules are listed in simd/vec.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "attnx/simd/isa.hpp"
#include "attnx/simd/target.hpp"

#if ATTNX_SIMD_X86
ATTNX_TARGET_AVX512_BEGIN
namespace attnx::simd {

template <class T, class I>
struct vec;

template <>
struct vec<float, avx512_t> {
  using reg = __m512;
  static constexpr std::size_t W = 16;

  // The all-lanes mask forms of max/min/roundscale/scalef: GCC 12's unmasked ones warn
  // -Wmaybe-uninitialized (its _mm512_undefined_*), and they compile to the same instruction.
  static constexpr __mmask16 all = static_cast<__mmask16>(~0u);

  static reg zero() { return _mm512_setzero_ps(); }
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg load(const float* p) { return _mm512_load_ps(p); }
  static reg loadu(const float* p) { return _mm512_loadu_ps(p); }
  static reg load_bf16(const std::uint16_t* p) {
    const __m512i w = _mm512_maskz_cvtepu16_epi32(all, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, w, 16));
  }
  static reg load_f16(const std::uint16_t* p) {
    return _mm512_maskz_cvtph_ps(all, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // 2 W bf16 values at p (unaligned) as two vectors: those at even indices (p[0], p[2], ...) and those at odd ones.
  // Two vector operations per 2 W values where load_bf16 takes two per W (a widening and a shift).
  static void load_bf16_pairs(const std::uint16_t* p, reg& even, reg& odd) {
    const __m512i x = _mm512_loadu_si512(p);
    even = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, x, 16));
    odd = _mm512_castsi512_ps(_mm512_maskz_and_epi32(all, x, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  // (Not _mm512_reduce_*_ps: GCC 12's form warns -Wmaybe-uninitialized through _mm512_undefined_*.)
  static float reduce_add(reg x) {
    const __m256 h = _mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xff, x, 0), _mm512_maskz_extractf32x8_ps(0xff, x, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  // s with lane x (< W) replaced by reduce_add(d): the decode kernel's one-row dots, gathered into one vector key by
  // key without a store.
  static reg with_lane_sum(reg s, std::size_t x, reg d) {
    return _mm512_mask_broadcastss_ps(s, static_cast<__mmask16>(1u << x), _mm_set_ss(reduce_add(d)));
  }
  // Pairwise sums within 64-bit pairs, then within 128-bit lanes (reduce_quad: c[k]'s lane L, element e, a partial
  // sum of result 4k + e), then across the four lanes (reduce_quads). The halves apart: reduce_quad(a + 4 k) for k
  // = 0..3, then reduce_quads over the four results, is reduce_lanes(a), bit for bit (the decode kernel's four-key
  // steps).
  static reg reduce_lanes(const reg* a) {
    const __m512 c[4] = {reduce_quad(a), reduce_quad(a + 4), reduce_quad(a + 8), reduce_quad(a + 12)};
    return reduce_quads(c);
  }
  static reg reduce_quad(const reg* a) {
    const __m512 b0 = _mm512_add_ps(_mm512_maskz_unpacklo_ps(all, a[0], a[1]), _mm512_maskz_unpackhi_ps(all, a[0], a[1]));
    const __m512 b1 = _mm512_add_ps(_mm512_maskz_unpacklo_ps(all, a[2], a[3]), _mm512_maskz_unpackhi_ps(all, a[2], a[3]));
    constexpr __mmask8 all8 = static_cast<__mmask8>(~0u);
    const __m512d x = _mm512_castps_pd(b0), y = _mm512_castps_pd(b1);
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_maskz_unpacklo_pd(all8, x, y)), _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(all8, x, y)));
  }
  // The 4 x 4 transpose within each 128-bit lane: d[r]'s lane L, element j is c[j]'s lane L, element r. With c[x] =
  // reduce_quad of four rows' vectors for key x (x = 0..3), d[r] is reduce_quad of row r's vectors for the four keys,
  // bit for bit (reduce_quad's element e is a sum of its input e alone, the same way for every e).
  static void transpose_quads(const reg* c, reg* d) {
    const __m512 t0 = _mm512_maskz_unpacklo_ps(all, c[0], c[1]), t1 = _mm512_maskz_unpackhi_ps(all, c[0], c[1]);
    const __m512 t2 = _mm512_maskz_unpacklo_ps(all, c[2], c[3]), t3 = _mm512_maskz_unpackhi_ps(all, c[2], c[3]);
    constexpr __mmask8 all8 = static_cast<__mmask8>(~0u);
    const __m512d x0 = _mm512_castps_pd(t0), x1 = _mm512_castps_pd(t1), x2 = _mm512_castps_pd(t2), x3 = _mm512_castps_pd(t3);
    d[0] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(all8, x0, x2));
    d[1] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(all8, x0, x2));
    d[2] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(all8, x1, x3));
    d[3] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(all8, x1, x3));
  }
  static reg reduce_quads(const reg* c) {
    const __m512 e0 = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(all, c[0], c[1], 0x88), _mm512_maskz_shuffle_f32x4(all, c[0], c[1], 0xdd));
    const __m512 e1 = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(all, c[2], c[3], 0x88), _mm512_maskz_shuffle_f32x4(all, c[2], c[3], 0xdd));
    return _mm512_add_ps(_mm512_maskz_shuffle_f32x4(all, e0, e1, 0x88), _mm512_maskz_shuffle_f32x4(all, e0, e1, 0xdd));
  }
  static float reduce_max(reg x) {
    const __m256 h = _mm256_max_ps(_mm512_maskz_extractf32x8_ps(0xff, x, 0), _mm512_maskz_extractf32x8_ps(0xff, x, 1));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
  }
  static void store(float* p, reg x) { _mm512_store_ps(p, x); }
  static void storeu(float* p, reg x) { _mm512_storeu_ps(p, x); }
  // (The mask forms, as above.) 16 x 16: pairs of rows interleaved (32-bit), then pairs of those (64-bit): vector u[g][k]'s 128-bit lane L holds
  // column 4 L + k of rows 4 g .. 4 g + 3; two rounds of 128-bit lane shuffles gather each column's four lanes.
  static void transpose(const float* src, std::size_t ld, float* dst, std::size_t ldd) {
    __m512 t[16], u[4][4];
    for (std::size_t p = 0; p < 8; ++p) {
      const __m512 a = _mm512_loadu_ps(src + 2 * p * ld), b = _mm512_loadu_ps(src + (2 * p + 1) * ld);
      t[2 * p] = _mm512_maskz_unpacklo_ps(all, a, b);
      t[2 * p + 1] = _mm512_maskz_unpackhi_ps(all, a, b);
    }
    for (std::size_t g = 0; g < 4; ++g)
      for (std::size_t h = 0; h < 2; ++h) {
        const __m512d x = _mm512_castps_pd(t[4 * g + h]), y = _mm512_castps_pd(t[4 * g + 2 + h]);
        u[g][2 * h] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(0xff, x, y));
        u[g][2 * h + 1] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(0xff, x, y));
      }
    for (std::size_t k = 0; k < 4; ++k) {
      const __m512 v0 = _mm512_maskz_shuffle_f32x4(all, u[0][k], u[1][k], 0x88), v1 = _mm512_maskz_shuffle_f32x4(all, u[0][k], u[1][k], 0xDD);
      const __m512 w0 = _mm512_maskz_shuffle_f32x4(all, u[2][k], u[3][k], 0x88), w1 = _mm512_maskz_shuffle_f32x4(all, u[2][k], u[3][k], 0xDD);
      _mm512_store_ps(dst + k * ldd, _mm512_maskz_shuffle_f32x4(all, v0, w0, 0x88));
      _mm512_store_ps(dst + (8 + k) * ldd, _mm512_maskz_shuffle_f32x4(all, v0, w0, 0xDD));
      _mm512_store_ps(dst + (4 + k) * ldd, _mm512_maskz_shuffle_f32x4(all, v1, w1, 0x88));
      _mm512_store_ps(dst + (12 + k) * ldd, _mm512_maskz_shuffle_f32x4(all, v1, w1, 0xDD));
    }
  }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm512_div_ps(a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg fma_exact(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg div_or_zero(reg a, reg l) { return _mm512_maskz_div_ps(_mm512_cmp_ps_mask(l, zero(), _CMP_NEQ_UQ), a, l); }
  // vmaxps/vminps return their second operand when either is NaN.
  static reg max_keep(reg x, reg m) { return _mm512_maskz_max_ps(all, x, m); }
  static reg min_pass(reg c, reg x) { return _mm512_maskz_min_ps(all, c, x); }
  static reg max_pass(reg c, reg x) { return _mm512_maskz_max_ps(all, c, x); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-conversion"  // GCC's -O0 macro form casts the mask to short
#endif
  static reg round_nearest(reg x) { return _mm512_maskz_roundscale_ps(all, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  // vscalefps: p * 2^n, rounding subnormal results once, 0 below them, NaN kept.
  static reg scale_pow2(reg p, reg n) { return _mm512_maskz_scalef_ps(all, p, n); }
  static reg neg_inf_to_zero(reg m) {
    const __mmask16 k = _mm512_cmp_ps_mask(m, set1(-std::numeric_limits<float>::infinity()), _CMP_EQ_OQ);
    return _mm512_mask_blend_ps(k, m, _mm512_setzero_ps());
  }
  static bool any_pos_inf(reg m) {
    return _mm512_cmp_ps_mask(m, set1(std::numeric_limits<float>::infinity()), _CMP_EQ_OQ) != 0;
  }
  static bool any_inf(reg m) { return _mm512_fpclass_ps_mask(m, 0x18) != 0; }  // +inf (0x08) or -inf (0x10)
  static bool any_abs_above(reg x, float t) {
    return _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(t), _CMP_GT_OQ) != 0;
  }
  static bool any_above(reg x, float t) { return _mm512_cmp_ps_mask(x, _mm512_set1_ps(t), _CMP_GT_OQ) != 0; }
  static reg below_or(reg x, reg lim, float j, reg f) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(_mm512_set1_ps(j), lim, _CMP_LT_OQ), f, x);
  }
  static reg abs(reg x) { return _mm512_abs_ps(x); }
  static reg copysign(reg m, reg s) {
    // (|m| | sign of s: _mm512_andnot_si512 draws a false -Wmaybe-uninitialized from GCC 12's header)
    const __m512i sign = _mm512_castps_si512(_mm512_set1_ps(-0.0f));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(_mm512_abs_ps(m)),
                                                     _mm512_and_si512(sign, _mm512_castps_si512(s))));
  }
  static reg less_or(reg a, reg t, reg x, reg f) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, t, _CMP_LT_OQ), f, x); }
  static reg where_flags(const bool* p, reg x, reg f) {
    const __m512i b = _mm512_maskz_cvtepu8_epi32(all, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_mask_blend_ps(_mm512_test_epi32_mask(b, b), f, x);
  }
};

template <>
struct vec<double, avx512_t> {
  using reg = __m512d;
  static constexpr std::size_t W = 8;
  static constexpr __mmask8 all = static_cast<__mmask8>(~0u);

  static reg zero() { return _mm512_setzero_pd(); }
  static reg set1(double x) { return _mm512_set1_pd(x); }
  static reg load(const double* p) { return _mm512_load_pd(p); }
  static reg loadu(const double* p) { return _mm512_loadu_pd(p); }
  static double reduce_add(reg x) {
    const __m256d h = _mm256_add_pd(_mm512_maskz_extractf64x4_pd(0xf, x, 0), _mm512_maskz_extractf64x4_pd(0xf, x, 1));
    const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
  }
  static reg with_lane_sum(reg s, std::size_t x, reg d) {
    return _mm512_mask_broadcastsd_pd(s, static_cast<__mmask8>(1u << x), _mm_set_sd(reduce_add(d)));
  }
  // Pairwise sums within 128-bit lanes, then across the four lanes (as the float form's last steps).
  static reg reduce_lanes(const reg* a) {
    __m512d c[4];
    for (int k = 0; k < 4; ++k) c[k] = _mm512_add_pd(_mm512_maskz_unpacklo_pd(all, a[2 * k], a[2 * k + 1]), _mm512_maskz_unpackhi_pd(all, a[2 * k], a[2 * k + 1]));
    const __m512d e0 = _mm512_add_pd(_mm512_maskz_shuffle_f64x2(all, c[0], c[1], 0x88), _mm512_maskz_shuffle_f64x2(all, c[0], c[1], 0xdd));
    const __m512d e1 = _mm512_add_pd(_mm512_maskz_shuffle_f64x2(all, c[2], c[3], 0x88), _mm512_maskz_shuffle_f64x2(all, c[2], c[3], 0xdd));
    return _mm512_add_pd(_mm512_maskz_shuffle_f64x2(all, e0, e1, 0x88), _mm512_maskz_shuffle_f64x2(all, e0, e1, 0xdd));
  }
  static double reduce_max(reg x) {
    const __m256d h = _mm256_max_pd(_mm512_maskz_extractf64x4_pd(0xf, x, 0), _mm512_maskz_extractf64x4_pd(0xf, x, 1));
    const __m128d s = _mm_max_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
    return _mm_cvtsd_f64(_mm_max_sd(s, _mm_unpackhi_pd(s, s)));
  }
  static void store(double* p, reg x) { _mm512_store_pd(p, x); }
  static void storeu(double* p, reg x) { _mm512_storeu_pd(p, x); }
  // 8 x 8: pairs of rows interleaved, t[p][k]'s 128-bit lane L holding column 2 L + k of rows 2 p, 2 p + 1; two rounds
  // of 128-bit lane shuffles gather each column's four lanes.
  static void transpose(const double* src, std::size_t ld, double* dst, std::size_t ldd) {
    __m512d t[4][2];
    for (std::size_t p = 0; p < 4; ++p) {
      const __m512d a = _mm512_loadu_pd(src + 2 * p * ld), b = _mm512_loadu_pd(src + (2 * p + 1) * ld);
      t[p][0] = _mm512_maskz_unpacklo_pd(0xff, a, b);
      t[p][1] = _mm512_maskz_unpackhi_pd(0xff, a, b);
    }
    for (std::size_t k = 0; k < 2; ++k) {
      const __m512d v0 = _mm512_maskz_shuffle_f64x2(0xff, t[0][k], t[1][k], 0x88), v1 = _mm512_maskz_shuffle_f64x2(0xff, t[0][k], t[1][k], 0xDD);
      const __m512d w0 = _mm512_maskz_shuffle_f64x2(0xff, t[2][k], t[3][k], 0x88), w1 = _mm512_maskz_shuffle_f64x2(0xff, t[2][k], t[3][k], 0xDD);
      _mm512_store_pd(dst + k * ldd, _mm512_maskz_shuffle_f64x2(0xff, v0, w0, 0x88));
      _mm512_store_pd(dst + (4 + k) * ldd, _mm512_maskz_shuffle_f64x2(0xff, v0, w0, 0xDD));
      _mm512_store_pd(dst + (2 + k) * ldd, _mm512_maskz_shuffle_f64x2(0xff, v1, w1, 0x88));
      _mm512_store_pd(dst + (6 + k) * ldd, _mm512_maskz_shuffle_f64x2(0xff, v1, w1, 0xDD));
    }
  }
  static reg add(reg a, reg b) { return _mm512_add_pd(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_pd(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_pd(a, b); }
  static reg div(reg a, reg b) { return _mm512_div_pd(a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_pd(a, b, c); }
  static reg fma_exact(reg a, reg b, reg c) { return _mm512_fmadd_pd(a, b, c); }
  static reg div_or_zero(reg a, reg l) { return _mm512_maskz_div_pd(_mm512_cmp_pd_mask(l, zero(), _CMP_NEQ_UQ), a, l); }
  static reg max_keep(reg x, reg m) { return _mm512_maskz_max_pd(all, x, m); }
  static reg min_pass(reg c, reg x) { return _mm512_maskz_min_pd(all, c, x); }
  static reg max_pass(reg c, reg x) { return _mm512_maskz_max_pd(all, c, x); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-conversion"  // GCC's -O0 macro form casts the mask to short
#endif
  static reg round_nearest(reg x) { return _mm512_maskz_roundscale_pd(all, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  static reg scale_pow2(reg p, reg n) { return _mm512_maskz_scalef_pd(all, p, n); }
  static reg neg_inf_to_zero(reg m) {
    const __mmask8 k = _mm512_cmp_pd_mask(m, set1(-std::numeric_limits<double>::infinity()), _CMP_EQ_OQ);
    return _mm512_mask_blend_pd(k, m, _mm512_setzero_pd());
  }
  static bool any_pos_inf(reg m) {
    return _mm512_cmp_pd_mask(m, set1(std::numeric_limits<double>::infinity()), _CMP_EQ_OQ) != 0;
  }
  static bool any_inf(reg m) { return _mm512_fpclass_pd_mask(m, 0x18) != 0; }
  static bool any_abs_above(reg x, double t) {
    return _mm512_cmp_pd_mask(_mm512_abs_pd(x), _mm512_set1_pd(t), _CMP_GT_OQ) != 0;
  }
  static bool any_above(reg x, double t) { return _mm512_cmp_pd_mask(x, _mm512_set1_pd(t), _CMP_GT_OQ) != 0; }
  static reg below_or(reg x, reg lim, double j, reg f) {
    return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(_mm512_set1_pd(j), lim, _CMP_LT_OQ), f, x);
  }
  static reg abs(reg x) { return _mm512_abs_pd(x); }
  static reg copysign(reg m, reg s) {
    // (|m| | sign of s: _mm512_andnot_si512 draws a false -Wmaybe-uninitialized from GCC 12's header)
    const __m512i sign = _mm512_castpd_si512(_mm512_set1_pd(-0.0));
    return _mm512_castsi512_pd(_mm512_or_si512(_mm512_castpd_si512(_mm512_abs_pd(m)),
                                                     _mm512_and_si512(sign, _mm512_castpd_si512(s))));
  }
  static reg less_or(reg a, reg t, reg x, reg f) { return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, t, _CMP_LT_OQ), f, x); }
  static reg where_flags(const bool* p, reg x, reg f) {
    const __m512i b = _mm512_maskz_cvtepu8_epi64(all, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm512_mask_blend_pd(_mm512_test_epi64_mask(b, b), f, x);
  }
};

}  // namespace attnx::simd
ATTNX_TARGET_END
#endif  // ATTNX_SIMD_X86
