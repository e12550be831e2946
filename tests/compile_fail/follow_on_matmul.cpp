// The issue-9 case: K not transposed in softmax(scale(Q * K, .5f)) * V. The product Q * K fails the
// matmul rule (4 columns vs 3 rows); the `* V`, the softmax and the assignment that follow are not
// reported again (one mistake, one error).
// expect: attnx: matmul: the lhs column count must equal the rhs row count
// expect: lhs_columns<4>.*rhs_rows<3>
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  tensor<float, seq<3>, d_k<4>> Q;
  tensor<float, seq<3>, d_k<4>> K;
  tensor<float, seq<3>, d_v<2>> V;
#ifdef ATTNX_CONTROL
  tensor<float, seq<3>, d_v<2>> out = softmax(scale(Q * transpose(K), .5f)) * V;
#else
  tensor<float, seq<3>, d_v<2>> out = softmax(scale(Q * K, .5f)) * V;
#endif
  return out(0, 0) == 0 ? 0 : 1;
}
