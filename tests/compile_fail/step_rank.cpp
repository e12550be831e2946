// step(x, cache) with an unbatched x (n, d_model) and no batch item: which item would it extend?
// expect: attnx: multi_head_attention::step: x must be \(B, n, d_model\)
#include <attnx/attnx.hpp>
int main() {
  attnx::multi_head_attention<float, 32, 4> mha;
  attnx::kv_cache<float, 4, 8> cache(1, 16);
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 1, 3, 32> x;
#else
  attnx::tensor<float, 3, 32> x;
#endif
  auto y = mha.step(x, cache);
  return y.numel() == 96 ? 0 : 1;
}
