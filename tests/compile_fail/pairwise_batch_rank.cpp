// (2, 3, 5, 4) queries with (3, 6, 4) keys: a batched K must have all of Q's batch axes.
// expect: attnx: pairwise: a batched K must have Q's batch axes
// expect: pairwise_batch_ranks_differ<.*query_rank<4>.*key_rank<3>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 2, 3, 5, 4> q;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 2, 3, 6, 4> k;
#else
  attnx::tensor<float, 3, 6, 4> k;
#endif
  auto s = attnx::rbf_scores(q, k, 1.0);
  return attnx::evaluate(s)(0, 0, 0, 0) == 0 ? 0 : 1;
}
