// A float transformer block given double inputs.
// expect: attnx: nn::transformer_block: x must have the block's element type T \(convert it: cast<T>\(x\)\)
// expect: input_element_type<double>
#include <attnx/attnx.hpp>
int main() {
  static attnx::nn::transformer_block<float, 16, 4, 64> block;
  attnx::tensor<double, 5, 16> x;
#ifdef ATTNX_CONTROL
  auto y = block.forward(attnx::cast<float>(x), attnx::causal);
#else
  auto y = block.forward(x, attnx::causal);
#endif
  return y(0, 0) > 0 ? 0 : 1;
}
