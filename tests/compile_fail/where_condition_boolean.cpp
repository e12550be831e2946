// where(c, a, b) with a float condition (meant: x > 0).
// expect: attnx: where\(c, a, b\): the condition must be a bool expression
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 2, 3> x, y;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 2, 3> z = attnx::where(x > 0.f, x, y);
#else
  attnx::tensor<float, 2, 3> z = attnx::where(x, x, y);
#endif
  return z(0, 0) > 0 ? 0 : 1;
}
