// attend(q, cache) with 3 query heads over 2 KV heads: each KV head must serve a whole group.
// expect: attnx: attend\(q, cache\): q's heads must be a multiple of the cache's kv_heads
#include <attnx/attnx.hpp>
int main() {
  attnx::kv_cache<float, 2, 8> cache(1, 16);
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 1, 4, 1, 8> q;
#else
  attnx::tensor<float, 1, 3, 1, 8> q;
#endif
  auto o = attnx::attend(q, cache);
  return o.numel() > 0 ? 0 : 1;
}
