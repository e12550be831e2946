// A causal mask needs query and key axes.
// expect: attnx: mask: the scores need at least two axes
// expect: rank<1>
#include <attnx/attnx.hpp>
int main() {
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 1, 3> s;
#else
  attnx::tensor<float, 3> s;
#endif
  auto c = attnx::mask(s, attnx::causal);
  (void)c;
}
