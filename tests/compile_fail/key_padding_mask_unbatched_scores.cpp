// Scores of one sequence, (L_q, L_k), with a mask of two sequences: which row would apply is not said.
// expect: attnx: key_padding_mask: scores without a batch axis take the mask of one sequence, \(L_k\) or \(1, L_k\)
// expect: key_padding_mask_unbatched_scores<.*mask_batch<2>.*rank<2>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 5, 8> q;
#ifdef ATTNX_CONTROL
  attnx::tensor<bool, 1, 5> kpm;
#else
  attnx::tensor<bool, 2, 5> kpm;
#endif
  attnx::tensor<float, 5, 8> o = attnx::attention(q, q, q, attnx::key_padding_mask(kpm));
  (void)o;
}
