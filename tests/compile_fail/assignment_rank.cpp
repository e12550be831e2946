// expect: attnx: assignment: the expression's rank differs from the target's
// expect: lhs_rank<3>.*rhs_rank<2>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 3, 4> x;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 3, 4> y = x + 1.0f;
#else
  attnx::tensor<float, 1, 3, 4> y = x + 1.0f;
#endif
  return y.data()[0] == 0 ? 0 : 1;
}
