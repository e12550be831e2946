// PyTorch's key_padding_mask is bool (B, L_k): a float mask, or one of rank 4, is refused by name.
// expect: attnx: key_padding_mask: m must be as PyTorch gives it: bool elements, shape \(B, L_k\), or \(L_k\) for one sequence
// expect: key_padding_mask_shape<.*element_type<float>.*rank<2>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 2, 4, 5, 8> q;
#ifdef ATTNX_CONTROL
  attnx::tensor<bool, 2, 5> kpm;
#else
  attnx::tensor<float, 2, 5> kpm;
#endif
  attnx::tensor<float, 2, 4, 5, 8> o = attnx::attention(q, q, q, attnx::key_padding_mask(kpm));
  (void)o;
}
