// attend(q, cache) with queries of 16 features against keys of d_k 8.
// expect: attnx: attend\(q, cache\): q's last axis must be the cache's d_k
#include <attnx/attnx.hpp>
int main() {
  attnx::kv_cache<float, 2, 8> cache(1, 16);
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 1, 4, 1, 8> q;
#else
  attnx::tensor<float, 1, 4, 1, 16> q;
#endif
  auto o = attnx::attend(q, cache);
  return o.numel() > 0 ? 0 : 1;
}
