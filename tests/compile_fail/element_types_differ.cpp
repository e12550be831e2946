// float plus double: attnx converts nothing silently (the sum would run in double, off the fused path).
// expect: attnx: the operands' element types differ \(attnx converts nothing silently: convert one with attnx::cast<T>\(e\)\)
// expect: lhs_element_type<float>.*rhs_element_type<double>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 3, 4> a;
  attnx::tensor<double, 3, 4> b;
#ifdef ATTNX_CONTROL
  attnx::tensor<double, 3, 4> c = attnx::cast<double>(a) + b;
#else
  attnx::tensor<double, 3, 4> c = a + b;  // one error, here; none from the assignment
#endif
  return c(0, 0) == 0 ? 0 : 1;
}
