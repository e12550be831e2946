// blocked(m) with a float tensor (meant: a PyTorch bool attn_mask).
// expect: attnx: allowed\(m\) / blocked\(m\): m must have bool elements
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 4> s;
#ifdef ATTNX_CONTROL
  attnx::tensor<bool, 4, 4> m;
#else
  attnx::tensor<float, 4, 4> m;
#endif
  attnx::tensor<float, 4, 4> p = attnx::softmax(attnx::mask(s, attnx::blocked(m)));
  return p(0, 0) > 0 ? 0 : 1;
}
