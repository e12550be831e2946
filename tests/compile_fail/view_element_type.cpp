// A view of double over a float tensor: one error naming both element types.
// expect: attnx: view: the tensor's element type differs from the view's
// expect: target_element_type<double>.*source_element_type<float>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 3, 4> t;
#ifdef ATTNX_CONTROL
  attnx::view<const float, 3, 4> v = t;
#else
  attnx::view<const double, 3, 4> v = t;
#endif
  return v(0, 0) == 0 ? 0 : 1;
}
