// step with double inputs on a float module (the cache's keys are projected in the module's type).
// expect: attnx: multi_head_attention::step: x must have the module's element type T \(convert it: cast<T>\(x\)\)
#include <attnx/attnx.hpp>
int main() {
  attnx::multi_head_attention<float, 32, 4> mha;
  attnx::kv_cache<float, 4, 8> cache(1, 16);
#ifdef ATTNX_CONTROL
  attnx::tensor<double, 1, 3, 32> x;
  auto y = mha.step(attnx::cast<float>(x), cache);
#else
  attnx::tensor<double, 1, 3, 32> x;
  auto y = mha.step(x, cache);
#endif
  return y.numel() > 0 ? 0 : 1;
}
