// multi_head_attention, cross-attention: a memory with 6 features given to a module of d_model = 8.
// expect: attnx: multi_head_attention: the memory's feature extent \(its last axis\) must equal d_model
// expect: mha_memory_features_differ_from_d_model<.*memory_features<6>.*d_model<8>
#include <attnx/attnx.hpp>
int main() {
  attnx::multi_head_attention<float, 8, 2> m;
  attnx::tensor<float, 2, 3, 8> x;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 2, 5, 8> memory;
#else
  attnx::tensor<float, 2, 5, 6> memory;
#endif
  attnx::tensor<float, 2, 3, 8> y = m(x, memory);
  (void)y;
}
