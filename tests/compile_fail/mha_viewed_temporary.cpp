// multi_head_attention with viewed weights: a view of a temporary tensor would dangle.
// expect: attnx: multi_head_attention \(viewed weights\): a temporary tensor would dangle
#include <attnx/attnx.hpp>
using W = attnx::tensor<float, attnx::d_model<4>, 4>;
int main() {
  W wq, wk, wv, wo;
#ifdef ATTNX_CONTROL
  attnx::multi_head_attention_view<float, 4, 2, attnx::mha_options{.bias = false}> m(wq, wk, wv, wo);
#else
  attnx::multi_head_attention_view<float, 4, 2, attnx::mha_options{.bias = false}> m(W{}, wk, wv, wo);
#endif
  (void)m;
}
