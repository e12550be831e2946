// The module's evaluated forward with a bool mask of unsaid polarity: one error (merge_heads of the failed
// attention keeps the merged shape, so the assignment adds none).
// expect: attnx: mask: a bool mask must say its polarity
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  multi_head_attention<float, 16, 4> mha;
  tensor<float, 2, 5, 16> x;
  tensor<bool, 2, 1, 1, 5> m;
#ifdef ATTNX_CONTROL
  tensor<float, 2, 5, 16> y = mha.forward(x, allowed(m));
#else
  tensor<float, 2, 5, 16> y = mha.forward(x, m);
#endif
  return y(0, 0, 0) == 0 ? 0 : 1;
}
