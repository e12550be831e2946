// Bahdanau scores: W1 projects queries to 8 hidden units, W2 projects keys to 6.
// expect: attnx: additive_scores: W1 and W2 must project to the same hidden extent
// expect: additive_hidden_extents_differ<.*query_hidden<8>.*key_hidden<6>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 5> q;   // 4 decoder states of size 5
  attnx::tensor<float, 6, 3> k;   // 6 encoder states of size 3
  attnx::tensor<float, 5, 8> w1;
  attnx::tensor<float, 8> w;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 3, 8> w2;
#else
  attnx::tensor<float, 3, 6> w2;
#endif
  auto s = attnx::additive_scores(q, k, w1, w2, w);
  return attnx::evaluate(s)(0, 0) == 0 ? 0 : 1;
}
