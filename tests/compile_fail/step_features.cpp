// step with inputs of 16 features on a module of d_model 32.
// expect: attnx: multi_head_attention::step: x's feature extent \(its last axis\) must equal d_model
#include <attnx/attnx.hpp>
int main() {
  attnx::multi_head_attention<float, 32, 4> mha;
  attnx::kv_cache<float, 4, 8> cache(1, 16);
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 1, 3, 32> x;
#else
  attnx::tensor<float, 1, 3, 16> x;
#endif
  auto y = mha.step(x, cache);
  return y.numel() > 0 ? 0 : 1;
}
