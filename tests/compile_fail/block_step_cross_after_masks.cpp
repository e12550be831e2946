// A decoder's step with masks: nn::cross(memory) comes right after the cache (and before a batch item), the masks
// after it; given after a mask, one error saying where it goes.
// expect: attnx: nn::transformer_block: nn::cross\(memory, ...\) must come right after x \(forward\) or the cache \(step\)
// expect: block_cross_memory_must_follow_x
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  nn::transformer_block<float, 8, 2, 16, nn::activation::gelu, nn::norm_position::pre, mha_options{}, true> dec;
  kv_cache<float, 2, 4> cache(1, 8);
  tensor<float, 1, 1, 8> x;
  tensor<float, 1, 6, 8> memory;
  tensor<bool, 1, 8> window;
#ifdef ATTNX_CONTROL
  tensor<float, 1, 1, 8> y = dec.step(x, cache, nn::cross(memory), blocked(window));
#else
  tensor<float, 1, 1, 8> y = dec.step(x, cache, blocked(window), nn::cross(memory));
#endif
  return y(0, 0, 0) == 0 ? 0 : 1;
}
