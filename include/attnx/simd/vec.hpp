// attnx: the SIMD layer shared by the kernels. simd::vec<T, I> is a vector of T for instruction set I
// (simd::scalar_t, avx2_t, avx512_t), with the operations the kernels need and their NaN rules:
//
//   W                       lanes
//   zero, set1, load, store (aligned), add, sub, mul, div, fmadd(a, b, c) = a * b + c (fused on the
//                           vector paths; the one-lane path leaves it to the compiler, for speed)
//   loadu, storeu           unaligned load and store
//   load_bf16, load_f16     (float only) W 16-bit values (attnx::bf16 / f16 bits, unaligned) as floats
//   load_bf16_pairs(p, e, o)  (AVX-512 float only) 2 W bf16 values at p (unaligned) as two vectors: those at even
//                           indices (p[0], p[2], ...) and those at odd ones (one load, a shift and an AND)
//   reduce_add, reduce_max  the sum / max of the lanes (max: NaN lanes may be dropped or kept)
//   reduce_lanes(a)         for W vectors a[0..W): the vector whose lane i is the sum of a[i]'s lanes (vector
//                           paths only)
//   reduce_quad(a), reduce_quads(c)  (AVX-512 float only) reduce_lanes in two halves: c[k] = reduce_quad(a + 4k)
//                           for k = 0..3, then reduce_quads(c) is reduce_lanes(a), bit for bit
//   transpose_quads(c, d)   (AVX-512 float only) the 4 x 4 transpose within each 128-bit lane of c[0..4): with c[x]
//                           = reduce_quad of four rows' vectors for key x, d[r] = reduce_quad of row r's four keys
//   transpose(src, ld, dst, ldd)  the W x W block of W rows at src, src + ld, ... (unaligned) written transposed:
//                           dst[c * ldd + r] = src[r * ld + c] (dst + c * ldd aligned)
//   fma_exact(a, b, c)      a * b + c with one rounding on every path
//   div_or_zero(a, l)       a / l, and 0 where l == 0
//   max_keep(x, m)          max, m where x is NaN (x86 maxps: NaN -> second operand)
//   min_pass(c, x), max_pass(c, x)   min/max with a constant c, x where x is NaN
//   round_nearest(x)        to the nearest integer (ties to even), NaN kept
//   scale_pow2(p, n)        p * 2^n for integral n in [2 * min_exponent, max_exponent], subnormal
//                           results rounded once, NaN kept
//   neg_inf_to_zero(m)      0 where m == -inf
//   any_pos_inf(m)          whether any lane is +inf
//   any_inf(m)              whether any lane is +inf or -inf
//   any_abs_above(x, t)     whether any lane has |x| > t
//   any_above(x, t)         whether any lane has x > t (NaN lanes are not)
//   below_or(x, lim, j, f)  x in the lanes where j < lim, f elsewhere
//   abs(x), copysign(m, s)  |x|; |m| with the sign of s (NaN kept)
//   less_or(a, t, x, f)     x in the lanes where a < t, f elsewhere (NaN lanes of a: f)
//   where_flags(p, x, f)    x in the lanes whose flag p[lane] (W bools in a row) is true, f elsewhere
//
// The vector specialisations live in simd/vec_avx2.hpp and simd/vec_avx512.hpp, each compiled for its
// instruction set (simd/target.hpp); code that uses them must itself be compiled for that set.
// simd::portable_vec<T> is a 16-byte vector of the GCC/Clang vector extension (SSE2 on any x86-64) with
// the few operations of the GEMM's portable path (load, store, loadu, storeu, fmadd, add, mul).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attnx/math/builtin_math.hpp"
#include "attnx/simd/isa.hpp"
#include "attnx/math/half.hpp"
#include "attnx/simd/target.hpp"

namespace attnx::simd {

template <class T, class I>
struct vec;

// One lane: the portable path, with the same operations and NaN rules as the vector ones, so that the
// kernels are one source for every instruction set.
template <class T>
struct vec<T, scalar_t> {
  using reg = T;
  static constexpr std::size_t W = 1;

  static reg zero() { return T(0); }
  static reg set1(T x) { return x; }
  static reg load(const T* p) { return *p; }
  static reg loadu(const T* p) { return *p; }
  static reg load_bf16(const std::uint16_t* p) { return bf16::from_bits(*p); }
  static reg load_f16(const std::uint16_t* p) { return f16::to_float(*p); }
  static T reduce_add(reg x) { return x; }
  static T reduce_max(reg x) { return x; }
  static void store(T* p, reg x) { *p = x; }
  static void storeu(T* p, reg x) { *p = x; }
  static void transpose(const T* src, std::size_t, T* dst, std::size_t) { *dst = *src; }
  static reg add(reg a, reg b) { return a + b; }
  static reg sub(reg a, reg b) { return a - b; }
  static reg mul(reg a, reg b) { return a * b; }
  static reg div(reg a, reg b) { return a / b; }
  static reg fmadd(reg a, reg b, reg c) { return a * b + c; }
  static reg fma_exact(reg a, reg b, reg c) { return math::rt::fma(a, b, c); }
  static reg div_or_zero(reg a, reg l) { return l == T(0) ? T(0) : a / l; }
  static reg max_keep(reg x, reg m) { return x > m ? x : m; }
  static reg min_pass(reg c, reg x) { return c < x ? c : x; }
  static reg max_pass(reg c, reg x) { return c > x ? c : x; }
  static reg round_nearest(reg x) { return x == x ? math::rt::nearbyint(x) : x; }
  static reg scale_pow2(reg p, reg n) {  // two exact steps: subnormal results are not flushed
    if (n != n) return n;
    const int e = static_cast<int>(n), e1 = e / 2, e2 = e - e1;
    return p * pow2(e1) * pow2(e2);
  }
  static reg neg_inf_to_zero(reg m) { return m == -std::numeric_limits<T>::infinity() ? T(0) : m; }
  static bool any_pos_inf(reg m) { return m == std::numeric_limits<T>::infinity(); }
  static bool any_inf(reg m) { return m == std::numeric_limits<T>::infinity() || m == -std::numeric_limits<T>::infinity(); }
  static bool any_abs_above(reg x, T t) { return (x < 0 ? -x : x) > t; }
  static bool any_above(reg x, T t) { return x > t; }
  static reg below_or(reg x, reg lim, T j, reg f) { return j < lim ? x : f; }
  static reg abs(reg x) {
    if constexpr (std::is_same_v<T, float>) return __builtin_fabsf(x);
    else return __builtin_fabs(x);
  }
  static reg copysign(reg m, reg s) {
    if constexpr (std::is_same_v<T, float>) return __builtin_copysignf(m, s);
    else return __builtin_copysign(m, s);
  }
  static reg less_or(reg a, reg t, reg x, reg f) { return a < t ? x : f; }
  static reg where_flags(const bool* p, reg x, reg f) { return *p ? x : f; }

 private:
  static T pow2(int e) {  // 2^e for e in the normal exponent range
    using bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
    constexpr int mant = std::numeric_limits<T>::digits - 1;
    constexpr int bias = std::numeric_limits<T>::max_exponent - 1;
    return std::bit_cast<T>(static_cast<bits>(static_cast<bits>(e + bias) << mant));
  }
};

// 16 bytes of T through the compiler's vector extension (one lane where there is none).
#if defined(__GNUC__) || defined(__clang__)
namespace detail {
template <class T>
struct vector16;
template <>
struct vector16<float> {
  typedef float type __attribute__((vector_size(16)));
};
template <>
struct vector16<double> {
  typedef double type __attribute__((vector_size(16)));
};
}  // namespace detail
template <class T>
struct portable_vec {
  using reg = typename detail::vector16<T>::type;
  static constexpr std::size_t W = 16 / sizeof(T);
  static reg zero() { return reg{}; }
  static reg set1(T x) { return reg{} + x; }
  static reg load(const T* p) {
    reg r;
    std::memcpy(&r, p, sizeof r);
    return r;
  }
  static reg loadu(const T* p) { return load(p); }
  static void store(T* p, reg x) { std::memcpy(p, &x, sizeof x); }
  static void storeu(T* p, reg x) { store(p, x); }
  static reg fmadd(reg a, reg b, reg c) { return a * b + c; }
  static reg add(reg a, reg b) { return a + b; }
  static reg mul(reg a, reg b) { return a * b; }
};
#else
template <class T>
using portable_vec = vec<T, scalar_t>;
#endif

}  // namespace attnx::simd

#if ATTNX_SIMD_X86
#include "attnx/simd/vec_avx2.hpp"
#include "attnx/simd/vec_avx512.hpp"
#endif
