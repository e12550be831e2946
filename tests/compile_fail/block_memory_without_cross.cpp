// nn::cross(memory) given to a block without cross-attention: one error (the memory would otherwise be ignored).
// expect: attnx: nn::transformer_block: nn::cross\(memory\) given to a block without cross-attention
// expect: block_without_cross_attention_given_memory
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  nn::transformer_block<float, 8, 2, 16> blk;
  tensor<float, 4, 8> x;
  tensor<float, 6, 8> memory;
  kv_cache<float, 2, 4> cache(1, 8);
#ifdef ATTNX_CONTROL
  tensor<float, dyn, 8> y = blk.step(x, cache, 0);
#else
  tensor<float, dyn, 8> y = blk.step(x, cache, nn::cross(memory), 0);
#endif
  return y(0, 0) == 0 ? 0 : 1;
}
