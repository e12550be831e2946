// expect: attnx: grad: this node has no derivative
// expect: no_derivative<.*node_type<
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 3, 4> x;
#ifdef ATTNX_CONTROL
  auto [dx] = attnx::grad(x * 2.0f, attnx::wrt(x));
#else
  auto [dx] = attnx::grad(attnx::cast<float>(x > 0.5f), attnx::wrt(x));  // a comparison read as a value
#endif
  return dx(0, 0) == 0 ? 0 : 1;
}
