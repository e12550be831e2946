// A block with cross-attention called without its memory: one error saying how to pass it.
// expect: attnx: nn::transformer_block: a block with cross-attention needs the memory
// expect: block_cross_attention_needs_memory
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  nn::transformer_block<float, 8, 2, 16, nn::activation::gelu, nn::norm_position::pre, mha_options{}, true> dec;
  tensor<float, 4, 8> x;
  tensor<float, 6, 8> memory;
#ifdef ATTNX_CONTROL
  tensor<float, 4, 8> y = dec.forward(x, nn::cross(memory), causal);
#else
  tensor<float, 4, 8> y = dec.forward(x, causal);
#endif
  return y(0, 0) == 0 ? 0 : 1;
}
