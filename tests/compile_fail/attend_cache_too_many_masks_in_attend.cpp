// Seven masks in one attend over a cache (the partial_attention form: attend_cache_too_many_masks). One error,
// naming attend.
// expect: attnx: attend\(q, cache\): at most six masks
// expect: attend_cache_too_many_masks<attnx::error::mask_count<7>
#include <attnx/attnx.hpp>
int main() {
  attnx::kv_cache<float, 2, 8> cache(2, 8);
  attnx::tensor<float, 2, 4, 1, 8> q;
  attnx::tensor<bool, 1, 1, 8> m;
  const auto a = attnx::allowed(m);
#ifdef ATTNX_CONTROL
  auto y = attnx::attend(q, cache, a, a, a, a, a, a);
#else
  auto y = attnx::attend(q, cache, a, a, a, a, a, a, a);
#endif
  return y.numel() > 0 ? 0 : 1;
}
