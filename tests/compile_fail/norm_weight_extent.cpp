// layer_norm with a weight of 32 features on rows of 64.
// expect: attnx: layer_norm / rms_norm: the weight's \(or bias'\) extent differs from the operand's last axis
// expect: weight_extent<32>, attnx::error::features<64>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 64> x;
  attnx::tensor<float, 64> b;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 64> w;
#else
  attnx::tensor<float, 32> w;
#endif
  attnx::tensor<float, 4, 64> y = attnx::layer_norm(x, w, b);
  return y(0, 0) > 0 ? 0 : 1;
}
