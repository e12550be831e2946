// concat<0> of a matrix and a vector.
// expect: attnx: concat: the operands must have the same rank
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 2, 8> a;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 1, 8> b;
#else
  attnx::tensor<float, 8> b;
#endif
  attnx::tensor<float, 3, 8> y = attnx::concat<0>(a, b);
  return y(0, 0) > 0 ? 0 : 1;
}
