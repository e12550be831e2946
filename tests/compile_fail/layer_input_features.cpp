// A feed-forward layer of d_model 64 applied to rows of 32 features.
// expect: attnx: nn layer: the input's feature extent \(its last axis\) differs from the layer's
// expect: input_features<32>, attnx::error::features<64>
#include <attnx/attnx.hpp>
int main() {
  static attnx::nn::feed_forward<float, 64, 256> ff;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 4, 64> x;
#else
  attnx::tensor<float, 4, 32> x;
#endif
  attnx::tensor<float, 4, 64> y = ff(x);
  return y(0, 0) > 0 ? 0 : 1;
}
