// Bahdanau scores: 8 hidden units but a scoring vector w of 7 elements.
// expect: attnx: additive_scores: w must have one element per hidden unit
// expect: additive_weight_size_differs<.*weight_size<7>.*hidden_extent<8>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 5> q;
  attnx::tensor<float, 6, 3> k;
  attnx::tensor<float, 5, 8> w1;
  attnx::tensor<float, 3, 8> w2;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 8, 1> w;
#else
  attnx::tensor<float, 7> w;
#endif
  auto s = attnx::additive_scores(q, k, w1, w2, w);
  return attnx::evaluate(s)(0, 0) == 0 ? 0 : 1;
}
