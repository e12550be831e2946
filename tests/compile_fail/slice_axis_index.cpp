// slice along axis 2 of a matrix (axes 0 and 1).
// expect: attnx: slice / concat: the axis index must be less than the operand's rank
// expect: axis_index<2>, attnx::error::rank<2>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 8> x;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 4, 2> y = attnx::slice<1, 0, 2>(x);
#else
  attnx::tensor<float, 4, 2> y = attnx::slice<2, 0, 2>(x);
#endif
  return y(0, 0) > 0 ? 0 : 1;
}
