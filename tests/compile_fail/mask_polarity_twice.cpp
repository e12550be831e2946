// A mask wrapped twice (blocked(allowed(m)), meant as "not allowed"): one error saying to wrap it once.
// expect: attnx: allowed\(m\) / blocked\(m\): m already says its polarity
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 4> s;
  attnx::tensor<bool, 4, 4> m;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 4, 4> p = attnx::softmax(attnx::mask(s, attnx::blocked(m)));
#else
  attnx::tensor<float, 4, 4> p = attnx::softmax(attnx::mask(s, attnx::blocked(attnx::allowed(m))));
#endif
  return p(0, 0) > 0 ? 0 : 1;
}
