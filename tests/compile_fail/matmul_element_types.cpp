// float Q with double K and V: rejected once, at Q * transpose(K); the rest of the attention says nothing more.
// expect: attnx: the operands' element types differ
// expect: lhs_element_type<float>.*rhs_element_type<double>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 5, 4> q;
  attnx::tensor<double, 6, 4> k;
  attnx::tensor<double, 6, 3> v;
#ifdef ATTNX_CONTROL
  attnx::tensor<double, 5, 3> o = attnx::attention(attnx::cast<double>(q), k, v, attnx::causal);
#else
  attnx::tensor<double, 5, 3> o = attnx::attention(q, k, v, attnx::causal);
#endif
  return o(0, 0) == 0 ? 0 : 1;
}
