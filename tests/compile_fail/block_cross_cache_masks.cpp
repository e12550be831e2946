// Memory masks given with a memory cache: the cache holds each item's keys and nothing else. One error.
// expect: attnx: nn::cross\(memory_cache\) takes no masks
#include <attnx/attnx.hpp>
#include <vector>
using namespace attnx;
int main() {
  nn::transformer_block<float, 16, 4, 32, nn::activation::gelu, nn::norm_position::pre, mha_options{}, true> dec;
  tensor<float, 2, 3, 16> x;
  kv_cache<float, 4, 4> memory_cache(2, 8);
  const std::vector<std::size_t> lengths{5, 3};
#ifdef ATTNX_CONTROL
  tensor<float, 2, 3, 16> y = dec.forward(x, nn::cross(memory_cache), causal);
#else
  tensor<float, 2, 3, 16> y = dec.forward(x, nn::cross(memory_cache, key_lengths(lengths)), causal);
#endif
  return y(0, 0, 0) == 0 ? 0 : 1;
}
