// Seven masks in one step (the kernel's program holds the scale, six masks and the causal order). One error.
// expect: attnx: multi_head_attention::step: at most six masks
// expect: step_too_many_masks<attnx::error::mask_count<7>
#include <attnx/attnx.hpp>
#include <vector>
int main() {
  attnx::multi_head_attention<float, 16, 4> mha;
  attnx::kv_cache<float, 4, 4> cache(2, 8);
  attnx::tensor<float, attnx::dyn, 16> x(2);
  attnx::tensor<bool, 1, 1, 8> m;
  const std::vector<std::size_t> rows{1, 1};
  const auto a = attnx::allowed(m);
#ifdef ATTNX_CONTROL
  auto y = mha.step(x, cache, rows, a, a, a, a, a, a);
#else
  auto y = mha.step(x, cache, rows, a, a, a, a, a, a, a);
#endif
  return y.numel() > 0 ? 0 : 1;
}
