// multi_head_attention, cross-attention: a batched input (B, L_q, d_model) with an unbatched memory.
// expect: attnx: multi_head_attention: the memory must have the input's rank
// expect: mha_memory_rank_differs_from_input<.*input_rank<3>.*memory_rank<2>
#include <attnx/attnx.hpp>
int main() {
  attnx::multi_head_attention<float, 8, 2> m;
  attnx::tensor<float, 2, 3, 8> x;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 2, 5, 8> memory;
#else
  attnx::tensor<float, 5, 8> memory;
#endif
  attnx::tensor<float, 2, 3, 8> y = m(x, memory);
  (void)y;
}
