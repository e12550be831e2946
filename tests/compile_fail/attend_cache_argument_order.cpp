// attend(q, cache, ...) with masks: a bool tensor is no mask until allowed(m) or blocked(m) says its polarity; the
// masks come first, then a scale, then a context. One error.
// expect: attnx: attend\(q, cache\): after the cache come the masks \(allowed\(m\), blocked\(m\) or additive\(m\)\), then at most a scale, then at most a context
// expect: attend_cache_arguments_out_of_order<attnx::error::argument_position<2>
#include <attnx/attnx.hpp>
int main() {
  attnx::kv_cache<float, 2, 8> cache(2, 8);
  attnx::tensor<float, 2, 4, 1, 8> q;
  attnx::tensor<bool, 2, 1, 1, 8> pad;
#ifdef ATTNX_CONTROL
  auto y = attnx::attend(q, cache, attnx::blocked(pad), attnx::allowed(pad), 0.5f);
#else
  auto y = attnx::attend(q, cache, attnx::blocked(pad), pad, 0.5f);
#endif
  return y.numel() > 0 ? 0 : 1;
}
