// sinks(t) with a matrix: one sink logit per head, a tensor of one axis.
// expect: attnx: sinks\(t\): t must have one axis
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 4> q, k, v;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 1> t{};
#else
  attnx::tensor<float, 1, 2> t{};
#endif
  attnx::tensor<float, 4, 4> o = attnx::attention(q, k, v, attnx::causal, attnx::sinks(t));
  return o(0, 0) > 0 ? 0 : 1;
}
