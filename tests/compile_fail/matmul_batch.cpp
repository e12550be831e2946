// A batched rhs must have the lhs's batch axes: (2, 3, 4) x (5, 4, 6) is rejected.
// expect: attnx: matmul: a batched rhs must have the lhs's batch axes
// expect: lhs_rank<3>.*rhs_rank<3>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 2, 3, 4> a;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 2, 4, 6> b;
#else
  attnx::tensor<float, 5, 4, 6> b;
#endif
  auto c = a * b;
  (void)c;
}
