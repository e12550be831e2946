// A module with 2 KV heads stepping with a cache of 4 KV heads.
// expect: attnx: multi_head_attention::step: the cache must have the module's T, kv_heads, d_k and d_v
#include <attnx/attnx.hpp>
int main() {
  attnx::multi_head_attention<float, 32, 4, attnx::mha_options{.kv_heads = 2}> mha;
#ifdef ATTNX_CONTROL
  attnx::kv_cache<float, 2, 8> cache(1, 16);
#else
  attnx::kv_cache<float, 4, 8> cache(1, 16);
#endif
  attnx::tensor<float, 1, 1, 32> x;
  auto y = mha.step(x, cache);
  return y(0, 0, 0) == 0 ? 0 : 1;
}
