// key_padding_mask of a temporary tensor: the mask would read freed memory when evaluated.
// expect: attnx: key_padding_mask: the mask of a temporary tensor would dangle \(name the tensor first\)
// expect: key_padding_mask_temporary<.*argument_type<attnx::basic_tensor<bool
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 2, 4, 5, 8> q;
#ifdef ATTNX_CONTROL
  attnx::tensor<bool, 2, 5> kpm;
  auto e = attnx::attention(q, q, q, attnx::key_padding_mask(kpm));
#else
  auto e = attnx::attention(q, q, q, attnx::key_padding_mask(attnx::tensor<bool, 2, 5>{}));
#endif
  (void)e;
}
