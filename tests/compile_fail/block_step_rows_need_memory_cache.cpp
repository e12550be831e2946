// A decoder's step with rows per item reads each item's memory from a memory cache (a memory given as such is one
// tensor for the whole batch, not the items' rows): one error saying so.
// expect: attnx: nn::transformer_block: a step with rows per item reads each item's memory from a memory cache
// expect: block_rows_per_item_need_memory_cache
#include <attnx/attnx.hpp>
#include <vector>
using namespace attnx;
int main() {
  nn::transformer_block<float, 8, 2, 16, nn::activation::gelu, nn::norm_position::pre, mha_options{}, true> dec;
  kv_cache<float, 2, 4> cache(2, 8), memory_cache(2, 6);
  tensor<float, 3, 8> x;
  tensor<float, 2, 6, 8> memory;
  const std::vector<std::size_t> rows = {1, 2};
#ifdef ATTNX_CONTROL
  dec.cross_attn.project_memory(memory, memory_cache);
  tensor<float, 3, 8> y = dec.step(x, cache, nn::cross(memory_cache), rows);
#else
  tensor<float, 3, 8> y = dec.step(x, cache, nn::cross(memory), rows);
#endif
  return y(0, 0) == 0 ? 0 : 1;
}
