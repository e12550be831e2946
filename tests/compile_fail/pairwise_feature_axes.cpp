// Both feature extents are 4, but the queries' axis is d_k and the keys' is d_model: the names
// catch a key that was never projected.
// expect: attnx: pairwise: the queries' and keys' feature axes have different names
// expect: pairwise_feature_axes_differ<.*query_feature_axis<attnx::names::d_k>.*key_feature_axis<attnx::names::d_model>
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  tensor<float, seq<5>, d_k<4>> q;
#ifdef ATTNX_CONTROL
  tensor<float, seq<6>, d_k<4>> k;
#else
  tensor<float, seq<6>, d_model<4>> k;
#endif
  auto s = cosine_scores(q, k, 0.5);
  return evaluate(s)(0, 0) == 0 ? 0 : 1;
}
