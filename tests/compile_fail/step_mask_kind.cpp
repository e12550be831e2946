// step(x, cache, causal): the cache gives the causal order and each item's length; step takes boolean and
// additive masks, the named key-interval masks, alibi and softcap. One error.
// expect: attnx: multi_head_attention::step: a mask must be allowed\(m\), blocked\(m\) or additive\(m\)
// expect: step_argument_is_not_a_mask<attnx::error::argument_position<1>
#include <attnx/attnx.hpp>
int main() {
  attnx::multi_head_attention<float, 16, 4> mha;
  attnx::kv_cache<float, 4, 4> cache(2, 8);
  attnx::tensor<float, 2, 1, 16> x;
  attnx::tensor<bool, 2, 1, 1, 8> pad;
#ifdef ATTNX_CONTROL
  auto y = mha.step(x, cache, attnx::blocked(pad));
#else
  auto y = mha.step(x, cache, attnx::causal);
#endif
  return y.numel() > 0 ? 0 : 1;
}
