// A float expression assigned to a double tensor: a compile error naming both types, cast<double> converts.
// expect: attnx: assignment: the expression's element type differs from the target's \(convert it with attnx::cast<T>\(e\)\)
// expect: target_element_type<double>.*source_element_type<float>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 4> q, k, v;
#ifdef ATTNX_CONTROL
  attnx::tensor<double, 4, 4> o = attnx::cast<double>(attnx::attention(q, k, v));
#else
  attnx::tensor<double, 4, 4> o = attnx::attention(q, k, v);
#endif
  return o(0, 0) == 0 ? 0 : 1;
}
