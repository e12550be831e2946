// A PyTorch-style bool key_padding_mask passed to the module as it is (attention, weights and the block take
// masks the same way): one error saying to write allowed(m) or blocked(m).
// expect: attnx: mask: a bool mask must say its polarity
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  multi_head_attention<float, 16, 4> mha;
  tensor<float, 2, 5, 16> x;
  tensor<bool, 2, 1, 1, 5> key_padding_mask;
#ifdef ATTNX_CONTROL
  tensor<float, 2, 5, 16> y = mha(x, causal, blocked(key_padding_mask));
#else
  tensor<float, 2, 5, 16> y = mha(x, causal, key_padding_mask);
#endif
  return y(0, 0, 0) == 0 ? 0 : 1;
}
