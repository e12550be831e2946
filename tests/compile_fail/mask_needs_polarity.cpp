// A bool mask passed as it is: attnx's masks are true = attended, PyTorch's attn_mask is true = masked out, so
// the polarity must be said (allowed(m) or blocked(m)); one error naming both.
// expect: attnx: mask: a bool mask must say its polarity: allowed\(m\) \(true = attend to the key\) or blocked\(m\)
// expect: bool_mask_needs_polarity<.*rank<2>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 4> s;
  attnx::tensor<bool, 4, 4> m;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 4, 4> p = attnx::softmax(attnx::mask(s, attnx::blocked(m)));
#else
  attnx::tensor<float, 4, 4> p = attnx::softmax(attnx::mask(s, m));
#endif
  return p(0, 0) > 0 ? 0 : 1;
}
