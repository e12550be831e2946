// A memory cache made in the call: it would be gone before the block reads it. One error.
// expect: attnx: nn::cross: a temporary KV cache would be gone before the block reads it
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  nn::transformer_block<float, 16, 4, 32, nn::activation::gelu, nn::norm_position::pre, mha_options{}, true> dec;
  tensor<float, 2, 3, 16> x;
#ifdef ATTNX_CONTROL
  kv_cache<float, 4, 4> memory_cache(2, 8);
  tensor<float, 2, 3, 16> y = dec.forward(x, nn::cross(memory_cache), causal);
#else
  tensor<float, 2, 3, 16> y = dec.forward(x, nn::cross(kv_cache<float, 4, 4>(2, 8)), causal);
#endif
  return y(0, 0, 0) == 0 ? 0 : 1;
}
