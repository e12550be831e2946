// A double bias for a float module's step. One error.
// expect: attnx: multi_head_attention::step: additive\(m\) must have the module's element type T
#include <attnx/attnx.hpp>
int main() {
  attnx::multi_head_attention<float, 16, 4> mha;
  attnx::kv_cache<float, 4, 4> cache(2, 8);
  attnx::tensor<float, 1, 16> x;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 4, 1, 8> bias;
#else
  attnx::tensor<double, 4, 1, 8> bias;
#endif
  auto y = mha.step(x, cache, 1, attnx::additive(bias));
  return y.numel() > 0 ? 0 : 1;
}
