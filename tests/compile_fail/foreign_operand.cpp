// A std::vector on one side of a product with a tensor: the same rule as for attention's arguments.
// expect: attnx: this argument is not an attnx tensor, view or expression
// expect: argument_position<1>.*argument_type<std::vector<float
#include <attnx/attnx.hpp>
#include <vector>
int main() {
  std::vector<float> x(6);
  attnx::tensor<float, 3, 4> W;
#ifdef ATTNX_CONTROL
  attnx::view<const float, 2, 3> X(x);
#else
  auto& X = x;
#endif
  attnx::tensor<float, 2, 4> y = X * W;
  return y(0, 0) == 0 ? 0 : 1;
}
