// reshape<5, 6> of 24 elements.
// expect: attnx: reshape: the new shape must have as many elements as the old one
// expect: source_size<24>, attnx::error::target_size<30>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 6> x;
#ifdef ATTNX_CONTROL
  auto v = attnx::reshape<3, 8>(x);
#else
  auto v = attnx::reshape<5, 6>(x);
#endif
  return v(0, 0) > 0 ? 0 : 1;
}
