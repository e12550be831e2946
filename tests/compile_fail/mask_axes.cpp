// A (seq_k, seq_q) mask on (seq_q, seq_k) scores of equal extents.
// expect: attnx: mask: the mask's axis names differ from the scores'
// expect: axis_index<0>.*lhs_axis<attnx::names::seq_q>.*rhs_axis<attnx::names::seq_k>
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  tensor<float, seq_q<3>, seq_k<3>> s;
#ifdef ATTNX_CONTROL
  tensor<bool, seq_q<3>, seq_k<3>> m;
#else
  tensor<bool, seq_k<3>, seq_q<3>> m;
#endif
  auto c = mask(s, allowed(m));
  (void)c;
}
