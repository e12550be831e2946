// attend over a cache with masks and a q of rank 3 (the partial_attention form: attend_cache_masked_rank): the rank
// rule of attend without masks, once, naming attend.
// expect: attnx: attend\(q, cache\): q must be \(B, heads, n, d_k\)
#include <attnx/attnx.hpp>
int main() {
  attnx::kv_cache<float, 2, 8> cache(2, 8);
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 2, 4, 1, 8> q;
#else
  attnx::tensor<float, 4, 1, 8> q;
#endif
  attnx::tensor<bool, 1, 1, 1, 8> m;
  auto y = attnx::attend(q, cache, attnx::allowed(m), 0.5f);
  return y.numel() > 0 ? 0 : 1;
}
