// One item's memory (L_m, d_model) given without the item's index: one error naming both forms.
// expect: attnx: multi_head_attention::project_memory: the memory must be \(B, L_m, d_model\) \(or \(L_m, d_model\) with a batch item\)
#include <attnx/attnx.hpp>
int main() {
  attnx::multi_head_attention<float, 32, 4> mha;
  attnx::kv_cache<float, 4, 8> cache(2, 16);
  attnx::tensor<float, 6, 32> memory;
#ifdef ATTNX_CONTROL
  mha.project_memory(memory, cache, 1);
#else
  mha.project_memory(memory, cache);
#endif
  return cache.length(1) == 6 ? 0 : 1;
}
