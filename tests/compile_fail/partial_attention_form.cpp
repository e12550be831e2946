// partial_attention of the scores alone: an attention state is the result of softmax(scores) * V.
// expect: attnx: partial_attention: the expression must be an attention softmax\(scores\) \* V
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 8> q, k, v;
#ifdef ATTNX_CONTROL
  auto s = attnx::partial_attention(attnx::attention(q, k, v));
#else
  auto s = attnx::partial_attention(q * attnx::transpose(k));
#endif
  return s.lse.numel() > 0 ? 0 : 1;
}
