// A 3x4 times a 3x4 product: the inner extents 4 and 3 differ.
// expect: attnx: matmul: the lhs column count must equal the rhs row count
// expect: lhs_columns<4>.*rhs_rows<3>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 3, 4> a;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 4, 3> b;
#else
  attnx::tensor<float, 3, 4> b;
#endif
  auto c = a * b;  // one error, here; no follow-on errors from the node
  return attnx::evaluate(c)(0, 0) == 0 ? 0 : 1;
}
