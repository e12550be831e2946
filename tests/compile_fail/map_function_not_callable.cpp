// map(f, e) with an f that cannot take the element type (a float tensor, f wants a pointer).
// expect: attnx: map\(f, e\): f cannot be called with e's element type
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 2, 3> x;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 2, 3> y = attnx::map([](float v) { return v + 1; }, x);
#else
  attnx::tensor<float, 2, 3> y = attnx::map([](const char* s) { return float(*s); }, x);
#endif
  return y(0, 0) > 0 ? 0 : 1;
}
