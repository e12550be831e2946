// A view of a 3 x 4 tensor declared as 4 x 3: one error naming both shapes (not a list of constructors).
// expect: attnx: view: the tensor's shape differs from the view's
// expect: view_shape<4, 3>.*tensor_shape<3, 4>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 3, 4> t;
#ifdef ATTNX_CONTROL
  attnx::view<const float, 3, 4> v = t;
#else
  attnx::view<const float, 4, 3> v = t;
#endif
  return v(0, 0) == 0 ? 0 : 1;
}
