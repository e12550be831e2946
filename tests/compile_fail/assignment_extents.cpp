// A 3x2 result assigned to a 3x3 tensor.
// expect: attnx: assignment: the expression's extents differ from the target's
// expect: axis_index<1>.*target_extent<3>.*source_extent<2>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 3, 4> x;
  attnx::tensor<float, 4, 2> w;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 3, 2> y = x * w;
#else
  attnx::tensor<float, 3, 3> y = x * w;
#endif
  return y(0, 0) == 0 ? 0 : 1;
}
