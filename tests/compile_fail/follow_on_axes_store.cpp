// The issue-9 case: Q * K with K not transposed contracts d_k<4> with seq<4> (same extent, different
// axis names), and the result is stored as the scores the user meant. The matmul names rule reports
// it; the assignment (correct code for the intended Q * K^T) is not reported a second time.
// expect: attnx: matmul: the contracted axes have different names
// expect: lhs_column_axis<attnx::names::d_k>.*rhs_row_axis<attnx::names::seq>
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  tensor<float, seq<4>, d_k<4>> Q;
  tensor<float, seq<4>, d_k<4>> K;
#ifdef ATTNX_CONTROL
  tensor<float, seq<4>, seq<4>> S = Q * transpose(K);
#else
  tensor<float, seq<4>, seq<4>> S = Q * K;
#endif
  return S(0, 0) == 0 ? 0 : 1;
}
