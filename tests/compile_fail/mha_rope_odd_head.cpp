// A module with RoPE whose heads have an odd width (d_model 15, 3 heads: d_k 5): one error, when the module's
// type is instantiated (so step, which does not build a rotary expression, is covered too).
// expect: attnx: multi_head_attention: RoPE rotates pairs of features: d_k must be even
// expect: rotary_features_must_be_even<.*features<5>
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
#ifdef ATTNX_CONTROL
  multi_head_attention<float, 18, 3, mha_options{.rope = rope_style::interleaved}> mha;
  tensor<float, 4, 18> x;
  tensor<float, 4, 18> y = mha(x, causal);
#else
  multi_head_attention<float, 15, 3, mha_options{.rope = rope_style::interleaved}> mha;
  tensor<float, 4, 15> x;
  tensor<float, 4, 15> y = mha(x, causal);
  kv_cache<float, 3, 5> cache(1, 8);
  y = mha.step(x, cache, 0);
#endif
  return y(0, 0) == 0 ? 0 : 1;
}
