// Header-only (ATTNX_HEADER_ONLY) with -ffast-math: one error, which says why and what to do (the control, without
// ATTNX_HEADER_ONLY, compiles: the compiled library's kernels are built without -ffast-math).
// expect: ATTNX_HEADER_ONLY with -ffast-math
// expect: link the compiled library
#ifndef ATTNX_CONTROL
#define ATTNX_HEADER_ONLY 1
#endif
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 4> a{};
  attnx::tensor<float, 4, 4> b = a * a;
  return b(0, 0) == 0.0f ? 0 : 1;
}
