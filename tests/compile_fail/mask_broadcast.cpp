// A (2, 1, 3, 3) mask broadcasts over heads of (2, 4, 3, 3) scores; a (3, 1, 3, 3) one does not.
// expect: attnx: mask: the mask's extents must equal the scores' extents
// expect: axis_index<0>.*mask_extent<3>.*score_extent<2>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 2, 4, 3, 3> s;
#ifdef ATTNX_CONTROL
  attnx::tensor<bool, 2, 1, 3, 3> m;
#else
  attnx::tensor<bool, 3, 1, 3, 3> m;
#endif
  auto c = attnx::mask(s, attnx::blocked(m));
  (void)c;
}
