// nn::cross(memory) after the masks, to a block without cross-attention: one error (not a cascade from the memory
// reaching self-attention as a mask).
// expect: attnx: nn::transformer_block: nn::cross\(memory\) given to a block without cross-attention
// expect: block_without_cross_attention_given_memory
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  nn::transformer_block<float, 8, 2, 16> blk;
  tensor<float, 4, 8> x;
  tensor<float, 6, 8> memory;
#ifdef ATTNX_CONTROL
  tensor<float, 4, 8> y = blk.forward(x, causal);
#else
  tensor<float, 4, 8> y = blk.forward(x, causal, nn::cross(memory));
#endif
  return y(0, 0) == 0 ? 0 : 1;
}
