// sin of 1e9 in a constant expression: outside the constant-evaluation domain of math::sin / cos (|x| < 2^28);
// the error names the limit (at run time the same call is answered by the C library).
// expect: attnx_constexpr_sin_cos_argument_must_be_below_2_pow_28
#include <attnx/math/constexpr_math.hpp>
int main() {
#ifdef ATTNX_CONTROL
  constexpr double s = attnx::math::sin(1e8);
#else
  constexpr double s = attnx::math::sin(1e9);
#endif
  return s > 2.0 ? 1 : 0;
}
