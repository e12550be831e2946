// multi_head_attention: d_model = 10 cannot be split into 4 heads of d_model / heads features (d_k and d_v
// left to their default). Giving d_k and d_v explicitly lifts the rule.
// expect: attnx: multi_head_attention: d_model must be divisible by the number of heads when d_k or d_v is left to its default
// expect: mha_d_model_not_divisible_by_heads<.*d_model<10>.*heads<4>
#include <attnx/attnx.hpp>
int main() {
#ifdef ATTNX_CONTROL
  attnx::multi_head_attention<float, 12, 4> m;
  attnx::tensor<float, 2, 3, 12> x;
  attnx::tensor<float, 2, 3, 12> y = m(x);
#else
  attnx::multi_head_attention<float, 10, 4> m;
  attnx::tensor<float, 2, 3, 10> x;
  attnx::tensor<float, 2, 3, 10> y = m(x);
#endif
  (void)y;
}
