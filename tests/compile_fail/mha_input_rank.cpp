// multi_head_attention: the input is (L, d_model) or (B, L, d_model); a rank-4 tensor is neither.
// expect: attnx: multi_head_attention: the input must be \(L, d_model\) or \(B, L, d_model\)
// expect: mha_input_needs_rank_2_or_3<.*input_rank<4>
#include <attnx/attnx.hpp>
int main() {
  attnx::multi_head_attention<float, 8, 2> m;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 2, 3, 8> x;
#else
  attnx::tensor<float, 2, 2, 3, 8> x;
#endif
  auto y = m(x);
  (void)y;
}
