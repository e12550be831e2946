// A KV cache of double queries stored as bf16: reduced-precision storage is for float caches only.
// expect: attnx: kv_cache: the storage type must be T, or attnx::bf16 / attnx::f16 with T = float
#include <attnx/attnx.hpp>
int main() {
#ifdef ATTNX_CONTROL
  attnx::kv_cache<float, 2, 8, 8, attnx::bf16> cache(1, 16);
#else
  attnx::kv_cache<double, 2, 8, 8, attnx::bf16> cache(1, 16);
#endif
  return int(cache.capacity()) - 16;
}
