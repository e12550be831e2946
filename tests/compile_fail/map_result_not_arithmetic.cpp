// map(f, e) with an f that returns something other than a number (a pointer).
// expect: attnx: map\(f, e\): f must return an arithmetic type
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 2, 3> x;
  static const float one = 1;
#ifdef ATTNX_CONTROL
  auto e = attnx::map([](float v) { return v * one; }, x);
#else
  auto e = attnx::map([](float) { return &one; }, x);
#endif
  attnx::tensor<float, 2, 3> y = e;
  return y(0, 0) > 0 ? 0 : 1;
}
