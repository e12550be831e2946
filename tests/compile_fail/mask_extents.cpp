// A 3x4 boolean mask on 3x3 scores.
// expect: attnx: mask: the mask's extents must equal the scores' extents
// expect: axis_index<1>.*mask_extent<4>.*score_extent<3>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 3, 3> s;
#ifdef ATTNX_CONTROL
  attnx::tensor<bool, 3, 3> m;
#else
  attnx::tensor<bool, 3, 4> m;
#endif
  auto c = attnx::mask(s, allowed(m));
  (void)c;
}
