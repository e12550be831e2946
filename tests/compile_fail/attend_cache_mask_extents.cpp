// A mask over 3 query rows for q of 2: the forward pass's mask rule, against the scores (B, heads, n, keys) of q.
// One error.
// expect: attnx: mask: the mask's extents must equal the scores' extents \(or be 1 to broadcast\)
// expect: attnx::error::mask_extent<3>, attnx::error::score_extent<2>
#include <attnx/attnx.hpp>
int main() {
  attnx::kv_cache<float, 2, 8> cache(2, 8);
  attnx::tensor<float, 2, 4, 2, 8> q;
#ifdef ATTNX_CONTROL
  attnx::tensor<bool, 2, 1, 2, 8> m;
#else
  attnx::tensor<bool, 2, 1, 3, 8> m;
#endif
  auto y = attnx::attend(q, cache, attnx::allowed(m));
  return y.numel() > 0 ? 0 : 1;
}
