// slice<1, 6, 4> of rows of 8: elements 6 .. 9 do not exist.
// expect: attnx: slice: the range \[Begin, Begin \+ Count\) exceeds the axis' extent
// expect: slice_end<10>, attnx::error::extent<8>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 8> x;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 4, 4> y = attnx::slice<1, 4, 4>(x);
#else
  attnx::tensor<float, 4, 4> y = attnx::slice<1, 6, 4>(x);
#endif
  return y(0, 0) > 0 ? 0 : 1;
}
