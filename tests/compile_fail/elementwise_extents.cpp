// 3x4 + 4x3: extents differ on axis 0 and neither is 1.
// expect: attnx: element-wise operation: the operands' extents differ
// expect: axis_index<0>.*lhs_extent<3>.*rhs_extent<4>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 3, 4> a;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 1, 4> b;  // broadcasts over rows
#else
  attnx::tensor<float, 4, 3> b;
#endif
  auto c = a + b;
  (void)c;
}
