// A float tensor compared with a double tensor (attnx converts nothing silently).
// expect: attnx: the operands' element types differ
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 2, 3> x;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 2, 3> t;
#else
  attnx::tensor<double, 2, 3> t;
#endif
  attnx::tensor<bool, 2, 3> m = x < t;
  return m(0, 0) ? 0 : 1;
}
