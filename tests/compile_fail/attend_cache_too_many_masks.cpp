// Seven masks in one attend over a cache (the kernel's program holds the scale, six masks and the causal order).
// One error.
// expect: attnx: partial_attention\(q, cache\): at most six masks
// expect: attend_cache_too_many_masks<attnx::error::mask_count<7>
#include <attnx/attnx.hpp>
int main() {
  attnx::kv_cache<float, 2, 8> cache(2, 8);
  attnx::tensor<float, 2, 4, 1, 8> q;
  attnx::tensor<bool, 1, 1, 8> m;
  const auto a = attnx::allowed(m);
#ifdef ATTNX_CONTROL
  auto s = attnx::partial_attention(q, cache, attnx::cache_keys::all, a, a, a, a, a, a);
#else
  auto s = attnx::partial_attention(q, cache, attnx::cache_keys::all, a, a, a, a, a, a, a);
#endif
  return s.out.numel() > 0 ? 0 : 1;
}
