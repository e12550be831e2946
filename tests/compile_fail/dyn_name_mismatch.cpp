// Q * K without the transpose, with every extent known at run time only: Q's d_k axis would be
// contracted with K's seq axis. The extents cannot be compared at compile time (both are dyn), but the
// names can: a name mismatch stays a compile error, it is not deferred to a run-time extent_error.
// expect: attnx: matmul: the contracted axes have different names
// expect: lhs_column_axis<attnx::names::d_k>.*rhs_row_axis<attnx::names::seq>
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  tensor<float, seq<dyn>, d_k<dyn>> q(3, 4);
  tensor<float, seq<dyn>, d_k<dyn>> k(5, 4);
#ifdef ATTNX_CONTROL
  auto s = q * transpose(k);
#else
  auto s = q * k;
#endif
  return evaluate(s)(0, 0) == 0 ? 0 : 1;
}
