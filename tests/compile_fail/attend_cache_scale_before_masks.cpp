// partial_attention(q, cache, ...) with a scale before the masks: the order rule (masks, then a scale, then a
// context) names the function called and the argument out of place. One error.
// expect: attnx: partial_attention\(q, cache\): after the cache \(and cache_keys\) come the masks \(allowed\(m\), blocked\(m\) or additive\(m\)\), then at most a scale, then at most a context
// expect: attend_cache_arguments_out_of_order<attnx::error::argument_position<2>
#include <attnx/attnx.hpp>
int main() {
  attnx::kv_cache<float, 2, 8> cache(2, 8);
  attnx::tensor<float, 2, 4, 1, 8> q;
  attnx::tensor<bool, 2, 1, 1, 8> pad;
#ifdef ATTNX_CONTROL
  auto s = attnx::partial_attention(q, cache, attnx::cache_keys::all, attnx::blocked(pad), 0.5f);
#else
  auto s = attnx::partial_attention(q, cache, attnx::cache_keys::all, 0.5f, attnx::blocked(pad));
#endif
  return s.out.numel() > 0 ? 0 : 1;
}
