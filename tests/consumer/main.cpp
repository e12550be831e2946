#include <attnx/attnx.hpp>
#include <cstdio>
int main() {
  attnx::tensor<double, 2, 2> a{{1, 2}, {3, 4}};
  attnx::tensor<double, 2, 2> b = a * a;           // matmul, evaluated on assignment
  static_assert(attnx::tensor<double, 2, 2>::rank == 2);
  std::printf("%g\n", b(1, 1));
  return b(1, 1) == 22.0 ? 0 : 1;
}
