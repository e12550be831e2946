// A step mask over 3 heads for a module of 4: the forward pass's mask rule, against the step's scores
// (B, heads, n, keys). One error.
// expect: attnx: mask: the mask's extents must equal the scores' extents \(or be 1 to broadcast\)
// expect: attnx::error::mask_extent<3>, attnx::error::score_extent<4>
#include <attnx/attnx.hpp>
int main() {
  attnx::multi_head_attention<float, 16, 4> mha;
  attnx::kv_cache<float, 4, 4> cache(2, 8);
  attnx::tensor<float, 2, 1, 16> x;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 1, 4, 1, 8> bias;
#else
  attnx::tensor<float, 1, 3, 1, 8> bias;
#endif
  auto y = mha.step(x, cache, attnx::additive(bias));
  return y.numel() > 0 ? 0 : 1;
}
