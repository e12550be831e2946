// Queries and keys of different element types in a pairwise similarity.
// expect: attnx: the operands' element types differ
// expect: lhs_element_type<double>.*rhs_element_type<float>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<double, 5, 4> q;
  attnx::tensor<float, 6, 4> k;
#ifdef ATTNX_CONTROL
  attnx::tensor<double, 5, 6> s = attnx::cosine_scores(q, attnx::cast<double>(k), 0.5);
#else
  attnx::tensor<double, 5, 6> s = attnx::cosine_scores(q, k, 0.5);
#endif
  return s(0, 0) == 0 ? 0 : 1;
}
