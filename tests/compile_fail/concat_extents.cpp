// concat<0> of (2, 8) and (3, 6): the rows differ in length.
// expect: attnx: concat: the operands' extents differ on an axis other than the one concatenated
// expect: axis_index<1>, attnx::error::lhs_extent<8>, attnx::error::rhs_extent<6>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 2, 8> a;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 3, 8> b;
#else
  attnx::tensor<float, 3, 6> b;
#endif
  attnx::tensor<float, 5, 8> y = attnx::concat<0>(a, b);
  return y(0, 0) > 0 ? 0 : 1;
}
