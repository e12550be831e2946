// attnx: portable constexpr maths (exp, expm1, sqrt, tanh, log, erf, sin, cos) for float and double.
//
// std::exp/std::sqrt are constant expressions only as a GCC extension, and even GCC refuses when the
// result is subnormal or overflows; clang refuses always. The c* functions below are plain C++ that
// any C++20 compiler can evaluate at compile time:
//   cexp   <= 1 ulp of std::exp over the whole finite range (subnormal results included)
//   csqrt  correctly rounded, i.e. bit-identical to std::sqrt
//   clog, cexpm1, ctanh   within 1 ulp of the correctly rounded value in every measurement so far
//   cerf   within 3 ulp of std::erf (double; float: 1 ulp)
//   csin, ccos  within 1 ulp of std::sin / std::cos for |x| < 2^28 (the argument reduction carries pi/2 to
//          157 bits); a larger argument in a constant evaluation is a compile error (outside the domain), at
//          run time it is answered by the C library
//                         (tests/unit/test_constexpr_math.cpp prints the figures: sampled sweeps)
// The unprefixed exp/sqrt/log/tanh/expm1/erf/sin/cos dispatch: c* inside a constant evaluation, std:: at run time.
//
// Rules the code follows so that it stays a constant expression on every compiler:
//   * never let an arithmetic operation produce inf or NaN (clang rejects that): special inputs and
//     overflow are answered with numeric_limits values before any arithmetic happens;
//   * a double -> float conversion must not be out of float's range (undefined, so not constant).
// Float versions evaluate the double kernel and round once: double carries 29 extra bits, so the
// result is correctly rounded except in rare double-rounding cases (then off by one ulp).
#pragma once

#include <array>
#include <bit>
#include <concepts>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "attnx/math/builtin_math.hpp"

namespace attnx::math {

// The element types the maths takes: float and double (IEEE-754 binary32 and binary64).
template <class T>
concept ieee_float = std::same_as<T, float> || std::same_as<T, double>;

// +inf and a quiet NaN of T.
template <ieee_float T>
inline constexpr T infinity = std::numeric_limits<T>::infinity();
template <ieee_float T>
inline constexpr T quiet_nan = std::numeric_limits<T>::quiet_NaN();

namespace detail {

template <class T>
struct ieee_bits;
template <>
struct ieee_bits<float> {
  using uint = std::uint32_t;
  static constexpr uint sign = 0x8000'0000u;
  static constexpr uint exponent = 0x7f80'0000u;
};
template <>
struct ieee_bits<double> {
  using uint = std::uint64_t;
  static constexpr uint sign = 0x8000'0000'0000'0000u;
  static constexpr uint exponent = 0x7ff0'0000'0000'0000u;
};

// |x| as raw bits. Classifying on the bits keeps working under -ffinite-math-only, where x != x
// may be folded to false.
template <ieee_float T>
constexpr typename ieee_bits<T>::uint abs_bits(T x) noexcept {
  return std::bit_cast<typename ieee_bits<T>::uint>(x) & ~ieee_bits<T>::sign;
}

}  // namespace detail

// Classification on the bits (correct under -ffinite-math-only too): NaN, +-inf, finite, the sign bit.
template <ieee_float T>
constexpr bool isnan(T x) noexcept { return detail::abs_bits(x) > detail::ieee_bits<T>::exponent; }
template <ieee_float T>
constexpr bool isinf(T x) noexcept { return detail::abs_bits(x) == detail::ieee_bits<T>::exponent; }
template <ieee_float T>
constexpr bool isfinite(T x) noexcept { return detail::abs_bits(x) < detail::ieee_bits<T>::exponent; }
template <ieee_float T>
constexpr bool signbit(T x) noexcept {
  return (std::bit_cast<typename detail::ieee_bits<T>::uint>(x) & detail::ieee_bits<T>::sign) != 0;
}

namespace detail {

inline constexpr std::uint64_t f64_frac_mask = 0x000f'ffff'ffff'ffffu;
inline constexpr std::uint64_t f64_hidden_bit = 0x0010'0000'0000'0000u;

// 2^n for n in [-1022, 1023], written straight into the exponent field.
constexpr double pow2(int n) noexcept {
  return std::bit_cast<double>(static_cast<std::uint64_t>(n + 1023) << 52);
}

// Cody & Waite: ln2 = ln2_hi + ln2_lo, where ln2_hi keeps only 32 significant bits (its 21 low
// significand bits are zero), so k * ln2_hi is exact for |k| < 2^11 and x - k * ln2_hi is exact.
// ln2_lo = ln2 - ln2_hi rounded to double (both checked against a 300-bit ln 2).
inline constexpr double ln2_hi = 0x1.62e42feep-1;          // 6.93147180369123816490e-01
inline constexpr double ln2_lo = 0x1.a39ef35793c76p-33;    // 1.90821492927058770002e-10
inline constexpr double inv_ln2 = 0x1.71547652b82fep+0;    // 1/ln2 rounded; only picks k

// Argument thresholds, found with 300-bit arithmetic (and confirmed against glibc in the tests):
// largest x whose exp rounds to a finite double / float, and smallest x whose exp does not round
// to zero (exp(x) > 2^-1075, resp. 2^-150).
inline constexpr double exp_max_f64 = 0x1.62e42fefa39efp+9;   //  709.782712893384
inline constexpr double exp_min_f64 = -0x1.74910d52d3051p+9;  // -745.1332191019411
inline constexpr float exp_max_f32 = 0x1.62e42ep+6f;          //   88.72283172607422
inline constexpr float exp_min_f32 = -0x1.9fe368p+6f;         // -103.97207641601562

// x = k ln2 + (hi - lo), |hi - lo| <= ~ln2/2. hi is exact; lo carries the part of k*ln2 beyond ln2_hi.
struct reduced {
  int k;
  double hi;
  double lo;
};
constexpr reduced reduce_ln2(double x) noexcept {  // needs |x| < ~1400
  const double t = x * inv_ln2;
  const int k = static_cast<int>(t < 0 ? t - 0.5 : t + 0.5);  // k need not be the exact nearest
  const double kd = k;
  return {k, x - kd * ln2_hi, kd * ln2_lo};
}

// expm1(r) - r = r^2 (1/2! + r/3! + ... + r^11/13!). Taylor series cut at degree 13: on
// |r| <= 0.35 the first omitted term r^14/14! < 5e-18 (0.04 ulp of 1), so no minimax fit is needed.
// Its coefficients 1/2!, ..., 1/13!, shared with exp_nonpositive_reduced_f64 and the constant-evaluated softmax's
// vector form (eval/constant_attention.hpp), which evaluate the same polynomial inline to save a call.
namespace tail {
inline constexpr double c0 = 1.0 / 2, c1 = 1.0 / 6, c2 = 1.0 / 24, c3 = 1.0 / 120, c4 = 1.0 / 720, c5 = 1.0 / 5040,
                        c6 = 1.0 / 40320, c7 = 1.0 / 362880, c8 = 1.0 / 3628800, c9 = 1.0 / 39916800,
                        c10 = 1.0 / 479001600, c11 = 1.0 / 6227020800;
}  // namespace tail
constexpr double expm1_tail(double r) noexcept {
  // Horner's rule written out as one expression (p = c11; p = p r + c10; ...; p = p r + c0): the same
  // operations as a loop, but a constant evaluation counts statements, and this is one.
  using namespace tail;
  return r * r * ((((((((((((c11 * r + c10) * r + c9) * r + c8) * r + c7) * r + c6) * r + c5) * r + c4) * r + c3) * r + c2) * r + c1) * r) + c0);
}

// y * 2^k for y in [0.5, 2] and k in [-1076, 1024]; the result is rounded exactly once.
constexpr double scale_pow2(double y, int k) noexcept {
  // k > 1023: 2^1024 itself is not a double. k < -1022: the result is subnormal (gradual underflow) and
  // 2^k is not a normal double (2^-1075 and 2^-1076 are not doubles at all), so scale in two steps: the
  // first stays in the normal range and is exact, the second lands on the subnormal grid and does the
  // one and only rounding. (One expression: a constant evaluation counts statements.)
  return k > 1023 ? y * pow2(1023) * 2.0 : k >= -1022 ? y * pow2(k) : (y * pow2(k + 64)) * 0x1p-64;
}

// exp_f64 after the special cases, with k the nearest integer to x / ln2 (as reduce_ln2): exp(r) =
// 1 + hi + (tail - lo), small terms first (the rounded hi - lo only feeds the tail, where its error is
// negligible). One expression, so that a constant evaluation (bounded by what it runs) pays little for it.
constexpr double exp_reduced_f64(double x, int k) noexcept {
  return scale_pow2(1.0 + ((x - double(k) * ln2_hi) +
                           (expm1_tail((x - double(k) * ln2_hi) - double(k) * ln2_lo) - double(k) * ln2_lo)),
                    k);
}

constexpr double exp_f64(double x) noexcept {
  if (!(x <= exp_max_f64)) return x != x ? x : infinity<double>;  // NaN, or too large (also +inf)
  if (x < exp_min_f64) return 0.0;                                  // also -inf: exactly +0
  if (x < 0x1p-60 && x > -0x1p-60) return 1.0 + x;                  // |x| < 2^-60: exp(x) rounds to 1
  const double tk = x * inv_ln2;
  return exp_reduced_f64(x, static_cast<int>(tk < 0 ? tk - 0.5 : tk + 0.5));
}

// exp_f64 for x <= 0 or -inf (never NaN): the same result with fewer tests (softmax's exp(s - max), once
// per score).
//
// Written for the constant evaluations that call it once per score: two calls of one expression each, no
// helper calls (clang counts each call's statements; the chain exp_reduced_f64 -> expm1_tail -> scale_pow2
// -> pow2 cost 16 steps), with exactly exp_reduced_f64's operations: r = hi - lo, y = 1 + (hi + (tail(r) -
// lo)), and y * 2^k rounded once: for k >= -1022, y * 2^k (times 1, exact); below, (y * 2^(k + 64)) * 2^-64
// (scale_pow2's two steps). k <= 0 here, so scale_pow2's k > 1023 case cannot occur.
constexpr double exp_nonpositive_reduced_f64(double r, double hi, double lo, int k) noexcept {
  using namespace tail;
  return ((1.0 + (hi + (r * r * ((((((((((((c11 * r + c10) * r + c9) * r + c8) * r + c7) * r + c6) * r + c5) * r + c4) * r + c3) * r + c2) * r + c1) * r) + c0) - lo))) *
          __builtin_bit_cast(double, static_cast<std::uint64_t>((k >= -1022 ? k : k + 64) + 1023) << 52)) *
         (k >= -1022 ? 1.0 : 0x1p-64);
}
constexpr double exp_nonpositive_f64(double x) noexcept {
  // k = static_cast<int>(x * inv_ln2 - 0.5), hi = x - k ln2_hi, lo = k ln2_lo, each written where it is used
  return x < exp_min_f64    ? 0.0
         : x > -0x1p-60 ? 1.0 + x
                        : exp_nonpositive_reduced_f64(
                              (x - double(static_cast<int>(x * inv_ln2 - 0.5)) * ln2_hi) - double(static_cast<int>(x * inv_ln2 - 0.5)) * ln2_lo,
                              x - double(static_cast<int>(x * inv_ln2 - 0.5)) * ln2_hi,
                              double(static_cast<int>(x * inv_ln2 - 0.5)) * ln2_lo, static_cast<int>(x * inv_ln2 - 0.5));
}

// Unevaluated sums hi + lo (double-double), for the few places that need more than 53 bits.
struct dd {
  double hi;
  double lo;
};
constexpr dd fast_two_sum(double a, double b) noexcept {  // |a| >= |b|: hi + lo == a + b exactly
  const double s = a + b;
  return {s, (a - s) + b};
}
constexpr dd two_sum(double a, double b) noexcept {  // any order (Knuth)
  const double s = a + b;
  const double bb = s - a;
  return {s, (a - (s - bb)) + (b - bb)};
}
// Exact product. Dekker's splitting needs no FMA, so it is a constant expression; at run time,
// where FMA contraction (-ffp-contract=fast) could break the splitting, use a real fma if there is one.
constexpr dd two_prod(double a, double b) noexcept {
  const double p = a * b;
#if defined(__FP_FAST_FMA)
  if (!std::is_constant_evaluated()) return {p, math::rt::fma(a, b, -p)};
#endif
  constexpr double splitter = 0x1p27 + 1.0;  // Veltkamp: 26 + 27 bit halves
  const double ca = splitter * a, cb = splitter * b;
  const double ah = ca - (ca - a), bh = cb - (cb - b);
  const double al = a - ah, bl = b - bh;
  return {p, ((ah * bh - p) + ah * bl + al * bh) + al * bl};
}

// expm1(x) as an unevaluated sum, for |x| <= ~50 (no special values).
constexpr dd expm1_dd(double x) noexcept {
  const auto [k, hi, lo] = reduce_ln2(x);
  const double t = expm1_tail(hi - lo) - lo;  // expm1(r) = hi + t
  const dd q = fast_two_sum(hi, t);           // |hi| >= |t|
  if (k == 0) return q;
  // 2^k (1 + q) - 1 loses up to k bits to cancellation when k is small, so carry 1 + q as a sum
  // s.hi + s.lo and subtract the 1 after scaling, keeping the rounding error of that subtraction.
  dd s = fast_two_sum(1.0, q.hi);
  s.lo += q.lo;
  const double p = pow2(k);
  const dd h = two_sum(p * s.hi, -1.0);
  return {h.hi, h.lo + p * s.lo};
}

constexpr double expm1_f64(double x) noexcept {
  if (math::isnan(x)) return x;
  if (x > exp_max_f64) return infinity<double>;
  if (x < -38.0) return -1.0;  // e^x < 2^-54: -1 + e^x rounds to -1 (also -inf)
  if (detail::abs_bits(x) < 0x3c90'0000'0000'0000u) return x;  // |x| < 2^-54: x + x^2/2 rounds to x
  if (x > 700.0) {  // 2^k itself may overflow: the -1 no longer matters
    const auto [k, hi, lo] = reduce_ln2(x);
    return scale_pow2(1.0 + (hi + (expm1_tail(hi - lo) - lo)), k);
  }
  const dd r = expm1_dd(x);
  return r.hi + r.lo;
}

// tanh|x| = T/(T + 2) with T = expm1(2|x|) >= 0. In that form a relative error in T reaches the
// result damped by 2/(T + 2) <= 1 (the fdlibm form -t/(t + 2), t = expm1(-2|x|), amplifies it by up
// to 1.76). T is kept as a double-double and the quotient gets one exact-residual correction, so
// the result is close to correctly rounded.
constexpr double tanh_f64(double x) noexcept {
  if (math::isnan(x)) return x;
  const double a = x < 0 ? -x : x;
  if (a < 0x1p-28) return x;  // tanh x = x - x^3/3: relative term < 2^-57, rounds to x (keeps -0)
  double z = 1.0;             // a > 22: 1 - tanh(22) < 1.6e-19, far below half an ulp of 1 (also inf)
  if (a <= 22.0) {
    const dd T = expm1_dd(2.0 * a);
    dd d = two_sum(T.hi, 2.0);
    d.lo += T.lo;
    const double q = T.hi / d.hi;
    const dd qd = two_prod(q, d.hi);  // T.hi - qd.hi is exact: q d.hi is within an ulp of T.hi
    const double res = (((T.hi - qd.hi) - qd.lo) + T.lo) - q * d.lo;
    z = q + res / d.hi;
  }
  return x < 0 ? -z : z;
}

inline constexpr double sqrt2 = 0x1.6a09e667f3bcdp+0;

// log x = e ln2 + log(1 + f), 1 + f in (sqrt(1/2), sqrt(2)]. With s = f/(2 + f):
//   log(1 + f) = 2 atanh(s) = 2s + s R,  R = 2s^2/3 + 2s^4/5 + ...
// and 2s = f - s f = f - hfsq + s hfsq (hfsq = f^2/2), which gives the fdlibm arrangement
//   log(1 + f) = f - (hfsq - s (hfsq + R))
// where f is exact and everything subtracted from it is small.
constexpr double log_f64(double x) noexcept {
  if (math::isnan(x)) return x;
  if (x < 0) return quiet_nan<double>;
  if (detail::abs_bits(x) == 0) return -infinity<double>;  // log(+-0)
  if (math::isinf(x)) return x;
  int e = 0;
  if (x < std::numeric_limits<double>::min()) {  // subnormal: normalise exactly
    x *= 0x1p54;
    e = -54;
  }
  const auto b = std::bit_cast<std::uint64_t>(x);
  e += static_cast<int>(b >> 52) - 1023;
  double m = std::bit_cast<double>((b & f64_frac_mask) | (std::uint64_t{1023} << 52));  // [1, 2)
  if (m > sqrt2) {
    m *= 0.5;
    ++e;
  }
  const double f = m - 1.0;  // exact (Sterbenz)
  const double s = f / (2.0 + f);
  const double z = s * s;
  // Taylor coefficients 2/(2j+1), j = 1..10: with s^2 <= 0.0295 the first omitted term is
  // below 1e-18 of the result.
  constexpr double c[] = {2.0 / 3,  2.0 / 5,  2.0 / 7,  2.0 / 9,  2.0 / 11,
                          2.0 / 13, 2.0 / 15, 2.0 / 17, 2.0 / 19, 2.0 / 21};
  double p = c[9];
  for (int i = 8; i >= 0; --i) p = p * z + c[i];
  const double R = z * p;
  const double hfsq = 0.5 * f * f;
  const double de = e;
  return de * ln2_hi - ((hfsq - (s * (hfsq + R) + de * ln2_lo)) - f);
}

// Correctly rounded sqrt. Write x = X 2^(2E - 52) with the integer X in [2^52, 2^54); then
// sqrt(x) = sqrt(X 2^52) 2^(E - 52), and the answer's significand is Y = round(sqrt(X 2^52)),
// an integer in [2^52, 2^53]. Newton in double gets Y to within an ulp or so; then the exact
// integer residual R = X 2^52 - Y^2 decides: Y is right iff (Y - 1/2)^2 <= X 2^52 < (Y + 1/2)^2,
// i.e. -Y < R <= Y. Only R's low 64 bits are needed because |R| < 2^56 once Y is that close, and
// unsigned arithmetic wraps exactly. Integer arithmetic also makes the check immune to FMA
// contraction (-ffp-contract), which would break a floating-point residual.
constexpr double sqrt_f64(double x) noexcept {
  if (math::isnan(x)) return x;
  if (x < 0) return quiet_nan<double>;
  if (detail::abs_bits(x) == 0 || math::isinf(x)) return x;  // sqrt(-0) = -0
  if (x < std::numeric_limits<double>::min()) return sqrt_f64(x * 0x1p108) * 0x1p-54;  // both exact
  const auto b = std::bit_cast<std::uint64_t>(x);
  int e = static_cast<int>(b >> 52) - 1023;
  std::uint64_t X = (b & f64_frac_mask) | f64_hidden_bit;  // x = X 2^(e - 52)
  if (e & 1) {  // make the exponent even (e odd, also when negative: e & 1 works on two's complement)
    X <<= 1;
    --e;
  }
  const double m = static_cast<double>(X) * 0x1p-52;  // exact, in [1, 4)
  double y = (m + 2.0) / 3.0;  // chord of sqrt on [1, 4]: within 6%
  for (int i = 0; i < 4; ++i) y = 0.5 * (y + m / y);  // 6e-2 -> 2e-3 -> 1e-6 -> 1e-12 -> rounding
  auto Y = static_cast<std::uint64_t>(y * 0x1p52);    // y in [1, 2]: exact integer
  const std::uint64_t target = X << 52;               // X 2^52 mod 2^64
  for (int i = 0; i < 4; ++i) {
    const auto R = static_cast<std::int64_t>(target - Y * Y);
    const auto Ys = static_cast<std::int64_t>(Y);
    if (R > Ys) {
      ++Y;
    } else if (R <= -Ys) {
      --Y;
    } else {
      break;
    }
  }
  // Exponent field e/2 + 1023 plus the 52-bit fraction Y - 2^52; Y = 2^53 carries into the exponent.
  return std::bit_cast<double>((static_cast<std::uint64_t>(e / 2 + 1023) << 52) + (Y - f64_hidden_bit));
}


// erf(x). |x| < 1: the Taylor series x (1 + S), S = sum_{n>=1} (-x^2)^n / (n! (2n + 1)), multiplied by 2/sqrt(pi)
// carried as a double-double (no cancellation: |S| < 1/3). 1 <= |x| < 6: 1 - erfc(x), with the continued fraction
//   erfc(x) = e^(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...)))))
// evaluated backwards (200 levels below 2, 60 above: enough for double precision there), e^(-x^2) with x^2 carried
// exactly. |x| >= 6: erf is +-1 to double precision (erfc(6) = 2e-17).
constexpr double erf_f64(double x) noexcept {
  if (math::isnan(x) || x == 0) return x;  // (erf(-0) = -0)
  const double a = x < 0 ? -x : x;
  if (a >= 6.0) return x < 0 ? -1.0 : 1.0;
  constexpr double c_hi = 0x1.20dd750429b6dp+0, c_lo = 0x1.1ae3a914fed80p-56;  // 2/sqrt(pi) = c_hi + c_lo
  constexpr double sqrt_pi = 0x1.c5bf891b4ef6bp+0;
  double r;
  if (a < 1.0) {
    const double a2 = a * a;
    double term = 1.0, s = 0.0;
    for (int n = 1; n < 40; ++n) {
      term *= -a2 / double(n);
      const double add = term / double(2 * n + 1);
      s += add;
      if ((add < 0 ? -add : add) < 0x1p-60) break;
    }
    const dd p = two_prod(c_hi, a);
    r = p.hi + (p.lo + c_lo * a + p.hi * s);
  } else {
    const dd sq = two_prod(a, a);
    const double e = exp_nonpositive_f64(-sq.hi) * (1.0 - sq.lo);  // e^(-hi - lo), |lo| <= ulp(hi) / 2
    double f = a;
    for (int n = a < 2.0 ? 200 : 60; n >= 1; --n) f = a + 0.5 * double(n) / f;
    r = 1.0 - e / (sqrt_pi * f);
  }
  return x < 0 ? -r : r;
}

// sin and cos. x = k pi/2 + r with |r| <= pi/4: pi/2 = c[0] + ... + c[4] (four 24-bit pieces and the rest, 157 bits),
// k c[i] exact for k < 2^29, the differences accumulated as a double-double r = hi + lo. Then the Taylor series on
// [-pi/4, pi/4] (19th / 20th degree: the next terms are below 2^-62), with the tail lo as a first-order correction.
inline constexpr double pio2_parts[5] = {0x1.921fb6p+0, -0x1.777a5cp-25, -0x1.ee59dap-50, 0x1.98a2ep-77,
                                         0x1.b839a252049c1p-104};
inline constexpr double two_over_pi = 0x1.45f306dc9c883p-1;
inline constexpr double trig_domain = 0x1p28;
struct trig_reduced {
  int quadrant;  // k mod 4
  double hi, lo;
};
constexpr trig_reduced reduce_pio2(double x) noexcept {  // |x| < trig_domain
  const double t = x * two_over_pi;
  const auto k = static_cast<std::int64_t>(t < 0 ? t - 0.5 : t + 0.5);
  const double kd = static_cast<double>(k);
  dd acc{x, 0.0};
  for (double c : pio2_parts) {
    const dd s = two_sum(acc.hi, -kd * c);  // (kd c exact but for the last, tiny, piece)
    acc = fast_two_sum(s.hi, s.lo + acc.lo);
  }
  return {static_cast<int>(k & 3), acc.hi, acc.lo};
}
// The Taylor coefficients, computed once (at compile time): sin_coeffs[n - 1] = (-1)^n / (2n+1)!, n = 1..9;
// cos_coeffs[n - 2] = (-1)^n / (2n)!, n = 2..10 (the factorials exact up to 18!; 19! and 20! round once).
inline constexpr auto sin_coeffs = [] {
  std::array<double, 9> c{};
  double f = 1.0;  // (2n+1)!
  for (int n = 1; n <= 9; ++n) {
    f *= double(2 * n) * double(2 * n + 1);
    c[std::size_t(n - 1)] = ((n & 1) ? -1.0 : 1.0) / f;
  }
  return c;
}();
inline constexpr auto cos_coeffs = [] {
  std::array<double, 9> c{};
  double f = 2.0;  // (2n)!
  for (int n = 2; n <= 10; ++n) {
    f *= double(2 * n - 1) * double(2 * n);
    c[std::size_t(n - 2)] = ((n & 1) ? -1.0 : 1.0) / f;
  }
  return c;
}();
// sin(hi + lo) and cos(hi + lo) for |hi| <= pi/4 (+ rounding), |lo| <= ulp(hi).
constexpr double sin_kernel(double r, double rl) noexcept {
  const double z = r * r;
  double p = 0.0;  // sum_{n>=1} (-1)^n z^(n-1) / (2n+1)!, Horner
  for (std::size_t i = sin_coeffs.size(); i-- > 0;) p = p * z + sin_coeffs[i];
  return r + (r * z * p + rl * (1.0 - 0.5 * z));
}
constexpr double cos_kernel(double r, double rl) noexcept {
  const dd z = two_prod(r, r);
  double q = 0.0;  // sum_{n>=2} (-1)^n z^(n-2) / (2n)!, Horner
  for (std::size_t i = cos_coeffs.size(); i-- > 0;) q = q * z.hi + cos_coeffs[i];
  const double hz = 0.5 * z.hi, w = 1.0 - hz;
  const double corr = (1.0 - w) - hz;  // exact: 1 - hz = w + corr
  return w + (corr + (z.hi * z.hi * q - 0.5 * z.lo - r * rl));
}
// Called only when a constant evaluation asks for sin/cos outside the domain: not constexpr, so the compiler
// reports the call (its name is the message).
inline double attnx_constexpr_sin_cos_argument_must_be_below_2_pow_28(double x) noexcept { return x; }
template <bool Cos>
constexpr double sin_cos_f64(double x) noexcept {
  if (!math::isfinite(x)) return quiet_nan<double>;
  const double a = x < 0 ? -x : x;
  if (a < 0x1p-27) return Cos ? 1.0 : x;  // sin x = x - x^3/6 rounds to x; cos x = 1 - x^2/2 rounds to 1 (also +-0)
  if (a >= trig_domain) {
    if (std::is_constant_evaluated()) return attnx_constexpr_sin_cos_argument_must_be_below_2_pow_28(x);
    return Cos ? math::rt::cos(x) : math::rt::sin(x);
  }
  const trig_reduced r = reduce_pio2(x);
  switch ((r.quadrant + (Cos ? 1 : 0)) & 3) {  // cos x = sin(x + pi/2)
    case 0: return sin_kernel(r.hi, r.lo);
    case 1: return cos_kernel(r.hi, r.lo);
    case 2: return -sin_kernel(r.hi, r.lo);
    default: return -cos_kernel(r.hi, r.lo);
  }
}
}  // namespace detail

// --- constexpr implementations ---------------------------------------------------------------

// e^x, constexpr (the header's table: error bounds of each function).
template <ieee_float T>
constexpr T cexp(T x) noexcept {
  if constexpr (std::same_as<T, double>) {
    return detail::exp_f64(x);
  } else {
    if (math::isnan(x)) return x;
    if (x > detail::exp_max_f32) return infinity<float>;
    if (x < detail::exp_min_f32) return 0.0f;
    return static_cast<float>(detail::exp_f64(x));
  }
}

// e^x - 1, constexpr.
template <ieee_float T>
constexpr T cexpm1(T x) noexcept {
  if constexpr (std::same_as<T, double>) {
    return detail::expm1_f64(x);
  } else {
    if (math::isnan(x)) return x;
    if (x > detail::exp_max_f32) return infinity<float>;
    return static_cast<float>(detail::expm1_f64(x));
  }
}

// sqrt(x), constexpr, correctly rounded.
template <ieee_float T>
constexpr T csqrt(T x) noexcept {
  if constexpr (std::same_as<T, double>) {
    return detail::sqrt_f64(x);
  } else {
    // A correctly rounded double sqrt rounded again to float is the correctly rounded float sqrt
    // (53 >= 2 * 24 + 2 bits: no double-rounding error is possible).
    if (math::isnan(x)) return x;
    if (x < 0) return quiet_nan<float>;
    if (math::isinf(x)) return x;
    return static_cast<float>(detail::sqrt_f64(x));
  }
}

// tanh(x), constexpr.
template <ieee_float T>
constexpr T ctanh(T x) noexcept {
  if constexpr (std::same_as<T, double>) {
    return detail::tanh_f64(x);
  } else {
    if (math::isnan(x)) return x;
    return static_cast<float>(detail::tanh_f64(x));
  }
}

// ln(x), constexpr.
template <ieee_float T>
constexpr T clog(T x) noexcept {
  if constexpr (std::same_as<T, double>) {
    return detail::log_f64(x);
  } else {
    if (math::isnan(x)) return x;
    if (x < 0) return quiet_nan<float>;
    if (detail::abs_bits(x) == 0) return -infinity<float>;
    if (math::isinf(x)) return x;
    return static_cast<float>(detail::log_f64(x));
  }
}

// erf(x), constexpr.
template <ieee_float T>
constexpr T cerf(T x) noexcept {
  return static_cast<T>(detail::erf_f64(x));  // float: the double value rounded once (|erf| <= 1: in range)
}

// sin(x), constexpr.
template <ieee_float T>
constexpr T csin(T x) noexcept {
  return static_cast<T>(detail::sin_cos_f64<false>(x));  // float: the double value rounded once
}
// cos(x), constexpr.
template <ieee_float T>
constexpr T ccos(T x) noexcept {
  return static_cast<T>(detail::sin_cos_f64<true>(x));
}

// cexp(x) for x <= 0 or -inf, never NaN (softmax's exp(s - max)): the same value, cheaper to evaluate.
template <ieee_float T>
constexpr T cexp_nonpositive(T x) noexcept {
  if constexpr (std::same_as<T, double>) {
    return detail::exp_nonpositive_f64(x);
  } else {
    return x < detail::exp_min_f32 ? 0.0f : static_cast<float>(detail::exp_nonpositive_f64(x));
  }
}

// --- dispatchers: constexpr kernels at compile time, the C library at run time ----------------

// exp: the constexpr version above in a constant evaluation, the C library's at run time.
template <ieee_float T>
constexpr T exp(T x) noexcept {
  if (std::is_constant_evaluated()) return cexp(x);
  return math::rt::exp(x);
}

// expm1: the constexpr version above in a constant evaluation, the C library's at run time.
template <ieee_float T>
constexpr T expm1(T x) noexcept {
  if (std::is_constant_evaluated()) return cexpm1(x);
  return math::rt::expm1(x);
}

// sqrt: the constexpr version above in a constant evaluation, the C library's at run time.
template <ieee_float T>
constexpr T sqrt(T x) noexcept {
  if (std::is_constant_evaluated()) return csqrt(x);
  return math::rt::sqrt(x);
}

// tanh: the constexpr version above in a constant evaluation, the C library's at run time.
template <ieee_float T>
constexpr T tanh(T x) noexcept {
  if (std::is_constant_evaluated()) return ctanh(x);
  return math::rt::tanh(x);
}

// log: the constexpr version above in a constant evaluation, the C library's at run time.
template <ieee_float T>
constexpr T log(T x) noexcept {
  if (std::is_constant_evaluated()) return clog(x);
  return math::rt::log(x);
}

// erf: the constexpr version above in a constant evaluation, the C library's at run time.
template <ieee_float T>
constexpr T erf(T x) noexcept {
  if (std::is_constant_evaluated()) return cerf(x);
  return math::rt::erf(x);
}

// sin: the constexpr version above in a constant evaluation, the C library's at run time.
template <ieee_float T>
constexpr T sin(T x) noexcept {
  if (std::is_constant_evaluated()) return csin(x);
  return math::rt::sin(x);
}

// cos: the constexpr version above in a constant evaluation, the C library's at run time.
template <ieee_float T>
constexpr T cos(T x) noexcept {
  if (std::is_constant_evaluated()) return ccos(x);
  return math::rt::cos(x);
}

}  // namespace attnx::math
