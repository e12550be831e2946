// d_model = 10 cannot be split into 4 heads.
// expect: attnx: split_heads: the feature extent \(d_model\) must be divisible by the number of heads
// expect: d_model<10>.*heads<4>
#include <attnx/attnx.hpp>
int main() {
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 3, 12> x;
#else
  attnx::tensor<float, 3, 10> x;
#endif
  auto h = attnx::split_heads<4>(x);
  (void)h;
}
