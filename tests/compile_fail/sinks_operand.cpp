// with_sinks of something that is not softmax(P) * V: a sink joins a softmax's denominator.
// expect: attnx: with_sinks\(A, s\): A must be attention written as softmax\(P\) \* V
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 4> q, k, v;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 4, 4> o = attnx::with_sinks(attnx::softmax(q * attnx::transpose(k)) * v, 0.5f);
#else
  attnx::tensor<float, 4, 4> o = attnx::with_sinks(q * attnx::transpose(k) * v, 0.5f);
#endif
  return o(0, 0) > 0 ? 0 : 1;
}
