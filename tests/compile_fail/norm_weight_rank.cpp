// rms_norm with a (1, 64) weight (one axis expected).
// expect: attnx: layer_norm / rms_norm: the weight and the bias must have one axis
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 64> x;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 64> w;
#else
  attnx::tensor<float, 1, 64> w;
#endif
  attnx::tensor<float, 4, 64> y = attnx::rms_norm(x, w);
  return y(0, 0) > 0 ? 0 : 1;
}
