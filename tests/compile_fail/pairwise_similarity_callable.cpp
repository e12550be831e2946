// A similarity must take two std::span<const T> (the rows compared) and return a number.
// expect: attnx: pairwise: the similarity must be callable as f\(std::span<const T> q, std::span<const T> k\)
// expect: pairwise_similarity_not_callable<.*element_type<float>
#include <attnx/attnx.hpp>
#include <span>
int main() {
  attnx::tensor<float, 5, 4> q;
  attnx::tensor<float, 6, 4> k;
#ifdef ATTNX_CONTROL
  auto f = [](std::span<const float> a, std::span<const float> b) { return a[0] * b[0]; };
#else
  auto f = [](const float* a, const float* b) { return a[0] * b[0]; };  // not a span: rejected
#endif
  auto s = attnx::pairwise(q, k, f);
  return attnx::evaluate(s)(0, 0) == 0 ? 0 : 1;
}
