// attend(q, cache) with q of rank 3: the queries are (B, heads, n, d_k).
// expect: attnx: attend\(q, cache\): q must be \(B, heads, n, d_k\)
#include <attnx/attnx.hpp>
int main() {
  attnx::kv_cache<float, 2, 8> cache(1, 16);
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 1, 4, 1, 8> q;
#else
  attnx::tensor<float, 4, 1, 8> q;
#endif
  auto o = attnx::attend(q, cache);
  return o.numel() > 0 ? 0 : 1;
}
