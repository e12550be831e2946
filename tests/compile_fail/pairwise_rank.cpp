// pairwise scores need matrices: a rank-1 query is rejected (write a 1 x d tensor for one vector).
// expect: attnx: pairwise: Q and K need at least two axes
// expect: pairwise_needs_rank_2_operands<.*query_rank<1>.*key_rank<2>
#include <attnx/attnx.hpp>
int main() {
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 1, 4> q;
#else
  attnx::tensor<float, 4> q;
#endif
  attnx::tensor<float, 6, 4> k;
  auto s = attnx::cosine_scores(q, k, 0.5);
  return attnx::evaluate(s)(0, 0) == 0 ? 0 : 1;
}
