// Probe (c): a multi-head attention forward pass, then decoding steps over a KV cache.
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  using mha_t = multi_head_attention<float, 256, 8, mha_options{.kv_heads = 2}>;
  mha_t mha;
  tensor<float, dyn, 256> x(16);
  tensor<float, dyn, 256> y = mha(x, causal);
  kv_cache<float, 2, 32> cache(1, 64);
  tensor<float, dyn, 256> t = mha.step(slice<0>(x, 0, 8), cache, 0);
  for (std::size_t i = 8; i < 16; ++i) t = mha.step(slice<0>(x, i, 1), cache, 0);
  return y(0, 0) == y(0, 0) && t(0, 0) == t(0, 0) ? 0 : 1;
}
