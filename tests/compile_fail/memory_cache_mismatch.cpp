// A cross-attention memory projected into a cache of the wrong head width (d_k 4 for a module's 8): one error, and
// attend_memory with the same cache adds none.
// expect: attnx: multi_head_attention::project_memory / attend_memory: the cache must have the module's T, kv_heads, d_k and d_v
#include <attnx/attnx.hpp>
int main() {
  attnx::multi_head_attention<float, 32, 4> mha;
#ifdef ATTNX_CONTROL
  attnx::kv_cache<float, 4, 8> cache(1, 16);
#else
  attnx::kv_cache<float, 4, 4> cache(1, 16);
#endif
  attnx::tensor<float, 1, 6, 32> memory;
  mha.project_memory(memory, cache);
  attnx::tensor<float, 1, 1, 32> x;
  auto y = mha.attend_memory(x, cache);
  return y(0, 0, 0) == 0 ? 0 : 1;
}
