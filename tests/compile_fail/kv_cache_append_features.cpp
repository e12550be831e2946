// Appending keys of 10 features to a cache of 2 KV heads of d_k 8 (16 features per token).
// expect: attnx: kv_cache: append: the feature extent must be kv_heads \* d
#include <attnx/attnx.hpp>
int main() {
  attnx::kv_cache<float, 2, 8> cache(1, 16);
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 1, 3, 16> k, v;
#else
  attnx::tensor<float, 1, 3, 10> k, v;
#endif
  cache.append(k, v);
  return int(cache.length(0)) - 3;
}
