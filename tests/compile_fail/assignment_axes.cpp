// A (seq, d_k) result assigned to a (seq, d_v) tensor of the same extents.
// expect: attnx: assignment: the expression's axis names differ from the target's
// expect: axis_index<1>.*target_axis<attnx::names::d_v>.*source_axis<attnx::names::d_k>
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  tensor<float, seq<3>, d_model<4>> x;
  tensor<float, d_model<4>, d_k<2>> w;
#ifdef ATTNX_CONTROL
  tensor<float, seq<3>, d_k<2>> y = x * w;
#else
  tensor<float, seq<3>, d_v<2>> y = x * w;
#endif
  return y(0, 0) == 0 ? 0 : 1;
}
