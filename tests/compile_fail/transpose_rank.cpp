// expect: attnx: transpose: the operand needs at least two axes
// expect: rank<1>
#include <attnx/attnx.hpp>
int main() {
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 1, 4> a;
#else
  attnx::tensor<float, 4> a;
#endif
  auto t = attnx::transpose(a);
  (void)t;
}
