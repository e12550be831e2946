// mask_fn(f) with an f that returns a number: a mask says allowed or not, as a bool.
// expect: attnx: mask_fn\(f\): f\(b, h, i, j\) must return bool
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 4> q, k, v;
#ifdef ATTNX_CONTROL
  const auto m = attnx::mask_fn(attnx::q_pos >= attnx::k_pos);
#else
  const auto m = attnx::mask_fn(attnx::q_pos - attnx::k_pos);
#endif
  attnx::tensor<float, 4, 4> o = attnx::softmax(attnx::mask(q * attnx::transpose(k), m)) * v;
  return o(0, 0) > 0 ? 0 : 1;
}
