// A KV cache of int: the cache holds float or double keys and values.
// expect: attnx: kv_cache: T must be float or double
#include <attnx/attnx.hpp>
int main() {
#ifdef ATTNX_CONTROL
  attnx::kv_cache<float, 2, 8> cache(1, 16);
#else
  attnx::kv_cache<int, 2, 8> cache(1, 16);
#endif
  return int(cache.capacity()) - 16;
}
