// expect: attnx: wrt\(\.\.\.\): each argument must be a named tensor or view
// expect: wrt_needs_named_tensors<.*argument_position<2>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 3, 4> x;
  attnx::tensor<float, 4, 2> w;
#ifdef ATTNX_CONTROL
  auto [dx, dw] = attnx::grad(x * w, attnx::wrt(x, w));
#else
  auto [dx, dw] = attnx::grad(x * w, attnx::wrt(x, w * 1.0f));  // an expression, not a leaf
#endif
  return dx(0, 0) == dw(0, 0) ? 0 : 1;
}
