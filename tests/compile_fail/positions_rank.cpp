// A position expression combined with a vector: positions are (query, key) pairs of scores of two or more axes.
// expect: attnx: positions: a function of the position needs scores of at least two axes
#include <attnx/attnx.hpp>
int main() {
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 3, 4> x{};
  attnx::tensor<float, 3, 4> y = x + 0.5f * attnx::k_pos;
  return y(0, 0) >= 0 ? 0 : 1;
#else
  attnx::tensor<float, 4> x{};
  attnx::tensor<float, 4> y = x + 0.5f * attnx::k_pos;
  return y(0) >= 0 ? 0 : 1;
#endif
}
