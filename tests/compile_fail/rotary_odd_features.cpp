// RoPE rotates pairs of features: an odd feature extent is one error naming it.
// expect: attnx: rotary: the feature extent \(the last axis\) must be even
// expect: rotary_features_must_be_even<.*features<5>
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
#ifdef ATTNX_CONTROL
  tensor<float, 4, 6> q;
  tensor<float, 4, 6> r = rotary(q, rope_style::half);
#else
  tensor<float, 4, 5> q;
  tensor<float, 4, 5> r = rotary(q, rope_style::half);
#endif
  return r(0, 0) == 0 ? 0 : 1;
}
