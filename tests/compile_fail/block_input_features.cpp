// A transformer block of d_model 16 given a sequence of 8 features.
// expect: attnx: nn layer: the input's feature extent \(its last axis\) differs from the layer's
// expect: input_features<8>, attnx::error::features<16>
#include <attnx/attnx.hpp>
int main() {
  static attnx::nn::transformer_block<float, 16, 4, 64> block;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 5, 16> x;
#else
  attnx::tensor<float, 5, 8> x;
#endif
  auto y = block.forward(x, attnx::causal);
  return y(0, 0) > 0 ? 0 : 1;
}
