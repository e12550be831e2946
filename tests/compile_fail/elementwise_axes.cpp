// Adding a (seq, d_k) tensor to a (d_k, seq) one with equal extents: the names catch the transposition.
// expect: attnx: element-wise operation: the operands' axis names differ
// expect: axis_index<0>.*lhs_axis<attnx::names::seq>.*rhs_axis<attnx::names::d_k>
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  tensor<float, seq<4>, d_k<4>> a;
#ifdef ATTNX_CONTROL
  tensor<float, seq<4>, d_k<4>> b;
#else
  tensor<float, d_k<4>, seq<4>> b;
#endif
  auto c = a + b;
  (void)c;
}
