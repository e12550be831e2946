// attnx: the C library's maths at run time, for float, double and long double, without <cmath>.
//
// <cmath> declares several hundred functions and overloads, a large part of what every program that includes
// <attnx/attnx.hpp> would parse. attnx needs a dozen of
// them at run time; these call the compiler's builtins, which is what libstdc++'s std::exp etc. do too
// (the same code: an inline instruction where there is one, else the C library's function).
// Constant evaluation uses the c* functions of math/constexpr_math.hpp instead.
#pragma once

namespace attnx::math::rt {

#define ATTNX_RT_MATH(name)                                                                    \
  inline float name(float x) noexcept { return __builtin_##name##f(x); }                     \
  inline double name(double x) noexcept { return __builtin_##name(x); }                       \
  inline long double name(long double x) noexcept { return __builtin_##name##l(x); }
ATTNX_RT_MATH(exp)
ATTNX_RT_MATH(exp2)
ATTNX_RT_MATH(expm1)
ATTNX_RT_MATH(log)
ATTNX_RT_MATH(log2)
ATTNX_RT_MATH(sqrt)
ATTNX_RT_MATH(tanh)
ATTNX_RT_MATH(erf)
ATTNX_RT_MATH(sin)
ATTNX_RT_MATH(cos)
ATTNX_RT_MATH(nearbyint)
#undef ATTNX_RT_MATH

// |x|, a * b + c with one rounding, and the classification, as the compiler's builtins (no <cmath>).
inline float abs(float x) noexcept { return __builtin_fabsf(x); }
inline double abs(double x) noexcept { return __builtin_fabs(x); }
inline long double abs(long double x) noexcept { return __builtin_fabsl(x); }
inline float fma(float a, float b, float c) noexcept { return __builtin_fmaf(a, b, c); }
inline double fma(double a, double b, double c) noexcept { return __builtin_fma(a, b, c); }
inline long double fma(long double a, long double b, long double c) noexcept { return __builtin_fmal(a, b, c); }
template <class T>
inline bool isfinite(T x) noexcept {
  return __builtin_isfinite(x);
}
template <class T>
inline bool isnormal(T x) noexcept {
  return __builtin_isnormal(x);
}

}  // namespace attnx::math::rt
