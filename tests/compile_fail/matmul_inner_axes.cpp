// Q * K without the transpose: Q's d_k axis would be contracted with K's seq axis. Both extents
// are 4, so only the names catch it.
// expect: attnx: matmul: the contracted axes have different names
// expect: lhs_column_axis<attnx::names::d_k>.*rhs_row_axis<attnx::names::seq>
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  tensor<float, seq<4>, d_k<4>> q;
  tensor<float, seq<4>, d_k<4>> k;
#ifdef ATTNX_CONTROL
  auto s = q * transpose(k);
#else
  auto s = q * k;
#endif
  return evaluate(s)(0, 0) == 0 ? 0 : 1;
}
