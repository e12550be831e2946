// nn::cross(memory) after the masks: one error saying where it goes (it would otherwise reach self-attention as a mask).
// expect: attnx: nn::transformer_block: nn::cross\(memory, ...\) must come right after x
// expect: block_cross_memory_must_follow_x
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  nn::transformer_block<float, 8, 2, 16, nn::activation::gelu, nn::norm_position::pre, mha_options{}, true> dec;
  tensor<float, 4, 8> x;
  tensor<float, 6, 8> memory;
#ifdef ATTNX_CONTROL
  tensor<float, 4, 8> y = dec.forward(x, nn::cross(memory), causal);
#else
  tensor<float, 4, 8> y = dec.forward(x, causal, nn::cross(memory));
#endif
  return y(0, 0) == 0 ? 0 : 1;
}
