// multi_head_attention: an input with 6 features given to a module of d_model = 8.
// expect: attnx: multi_head_attention: the input's feature extent \(its last axis\) must equal d_model
// expect: mha_input_features_differ_from_d_model<.*input_features<6>.*d_model<8>
#include <attnx/attnx.hpp>
int main() {
  attnx::multi_head_attention<float, 8, 2> m;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 2, 3, 8> x;
#else
  attnx::tensor<float, 2, 3, 6> x;
#endif
  attnx::tensor<float, 2, 3, 8> y = m(x, attnx::causal);
  (void)y;
}
