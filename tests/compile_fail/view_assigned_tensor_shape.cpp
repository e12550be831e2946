// A 3 x 4 tensor assigned to a writable 4 x 3 view: the assignment rule, naming both whole shapes.
// expect: attnx: assignment: the expression's extents differ from the target's
// expect: target_shape<4, 3>.*source_shape<3, 4>
#include <attnx/attnx.hpp>
#include <vector>
int main() {
  attnx::tensor<float, 3, 4> t;
  std::vector<float> buffer(12);
#ifdef ATTNX_CONTROL
  attnx::view<float, 3, 4> v(buffer);
#else
  attnx::view<float, 4, 3> v(buffer);
#endif
  v = t;
  return buffer[0] == 0 ? 0 : 1;
}
