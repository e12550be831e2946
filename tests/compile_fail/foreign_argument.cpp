// A std::vector passed to attention: one error that names the argument, its type and view<> as the
// way to wrap a buffer (not a list of candidates failing a concept).
// expect: attnx: this argument is not an attnx tensor, view or expression: wrap a buffer with attnx::view
// expect: argument_position<2>.*argument_type<std::vector<float
#include <attnx/attnx.hpp>
#include <vector>
int main() {
  attnx::tensor<float, 3, 4> Q, V;
  std::vector<float> k(12);
#ifdef ATTNX_CONTROL
  attnx::view<const float, 3, 4> K(k);
#else
  auto& K = k;
#endif
  attnx::tensor<float, 3, 4> out = attnx::attention(Q, K, V);
  return out(0, 0) == 0 ? 0 : 1;
}
