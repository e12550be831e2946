// A float tensor passed as a boolean mask (an additive mask must say so).
// expect: attnx: mask: a mask expression must have bool elements
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 3, 3> s;
  attnx::tensor<float, 3, 3> m;
#ifdef ATTNX_CONTROL
  auto c = attnx::mask(s, attnx::additive(m));
#else
  auto c = attnx::mask(s, m);
#endif
  (void)c;
}
