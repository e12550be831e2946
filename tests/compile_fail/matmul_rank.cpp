// A product needs matrices: a rank-1 operand is rejected.
// expect: attnx: matmul: both operands need at least two axes
// expect: lhs_rank<1>.*rhs_rank<2>
#include <attnx/attnx.hpp>
int main() {
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 1, 4> a;
#else
  attnx::tensor<float, 4> a;
#endif
  attnx::tensor<float, 4, 2> b;
  auto c = a * b;
  (void)c;
}
