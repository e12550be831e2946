// Both leading extents are 2, but the queries' axis is batch and the keys' is heads.
// expect: attnx: pairwise: the batch axes of Q and K have different names
// expect: pairwise_batch_axes_differ<.*axis_index<0>.*query_batch_axis<attnx::names::batch>.*key_batch_axis<attnx::names::heads>
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  tensor<float, batch<2>, seq<5>, d_k<4>> q;
#ifdef ATTNX_CONTROL
  tensor<float, batch<2>, seq<6>, d_k<4>> k;
#else
  tensor<float, heads<2>, seq<6>, d_k<4>> k;
#endif
  auto s = cosine_scores(q, k, 0.5);
  return evaluate(s)(0, 0, 0) == 0 ? 0 : 1;
}
