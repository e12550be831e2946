// (2, 5, 4) queries with (3, 6, 4) keys: two batch items against three.
// expect: attnx: pairwise: the batch extents of Q and K differ
// expect: pairwise_batch_extents_differ<.*axis_index<0>.*query_batch_extent<2>.*key_batch_extent<3>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 2, 5, 4> q;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 2, 6, 4> k;
#else
  attnx::tensor<float, 3, 6, 4> k;
#endif
  auto s = attnx::dot_scores(q, k);
  return attnx::evaluate(s)(0, 0, 0) == 0 ? 0 : 1;
}
