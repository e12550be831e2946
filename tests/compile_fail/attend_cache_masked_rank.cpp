// attend over a cache with masks and a q of rank 3: the rank rule of attend without masks, once. One error.
// expect: attnx: partial_attention\(q, cache\): q must be \(B, heads, n, d_k\)
#include <attnx/attnx.hpp>
int main() {
  attnx::kv_cache<float, 2, 8> cache(2, 8);
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 2, 4, 1, 8> q;
#else
  attnx::tensor<float, 4, 1, 8> q;
#endif
  attnx::tensor<bool, 1, 1, 1, 8> m;
  auto s = attnx::partial_attention(q, cache, attnx::cache_keys::all, attnx::allowed(m), 0.5f);
  return s.out.numel() > 0 ? 0 : 1;
}
