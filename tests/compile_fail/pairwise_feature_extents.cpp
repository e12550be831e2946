// Queries of dimension 4 compared with keys of dimension 3.
// expect: attnx: pairwise: the queries' and keys' feature extents differ
// expect: pairwise_feature_extents_differ<.*query_features<4>.*key_features<3>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 5, 4> q;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 6, 4> k;
#else
  attnx::tensor<float, 6, 3> k;
#endif
  auto s = attnx::rbf_scores(q, k, 0.5);
  return attnx::evaluate(s)(0, 0) == 0 ? 0 : 1;
}
