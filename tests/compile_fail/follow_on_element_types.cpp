// A float Q with a double K: the element-type rule at Q * K^T, and nothing more from the softmax, the
// product with V (float) or the float target.
// expect: attnx: the operands' element types differ
// expect: lhs_element_type<float>.*rhs_element_type<double>
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  tensor<float, 3, 4> Q;
#ifdef ATTNX_CONTROL
  tensor<float, 3, 4> K;
#else
  tensor<double, 3, 4> K;
#endif
  tensor<float, 3, 2> V;
  tensor<float, 3, 2> out = softmax(Q * transpose(K)) * V;
  return out(0, 0) == 0 ? 0 : 1;
}
