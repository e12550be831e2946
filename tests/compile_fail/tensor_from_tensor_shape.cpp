// A 4 x 3 tensor initialised from a 3 x 4 tensor: the assignment rule, naming both whole shapes.
// expect: attnx: assignment: the expression's extents differ from the target's
// expect: target_shape<4, 3>.*source_shape<3, 4>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 3, 4> t;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 3, 4> u = t;
#else
  attnx::tensor<float, 4, 3> u = t;
#endif
  return u(0, 0) == 0 ? 0 : 1;
}
