// A block's step(x, cache, b, m) with a bool tensor m: the self-attention's step takes allowed(m), blocked(m) or
// additive(m) (its rule, through the block), not a bare bool tensor. One error.
// expect: attnx: multi_head_attention::step: a mask must be allowed\(m\), blocked\(m\) or additive\(m\)
// expect: step_argument_is_not_a_mask<attnx::error::argument_position<1>
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  nn::transformer_block<float, 8, 2, 16> blk;
  kv_cache<float, 2, 4> cache(2, 8);
  tensor<float, 1, 8> x;
  tensor<bool, 1, 8> window;
#ifdef ATTNX_CONTROL
  tensor<float, 1, 8> y = blk.step(x, cache, 1, blocked(window));
#else
  tensor<float, 1, 8> y = blk.step(x, cache, 1, window);
#endif
  return y(0, 0) == 0 ? 0 : 1;
}
