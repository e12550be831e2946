// multi_head_attention, cross-attention: 2 queries' batch items against a memory of 3.
// expect: attnx: multi_head_attention: the memory's batch extent must equal the input's
// expect: mha_memory_batch_differs_from_input<.*input_batch<2>.*memory_batch<3>
#include <attnx/attnx.hpp>
int main() {
  attnx::multi_head_attention<float, 8, 2> m;
  attnx::tensor<float, 2, 3, 8> x;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 2, 5, 8> memory;
#else
  attnx::tensor<float, 3, 5, 8> memory;
#endif
  attnx::tensor<float, 2, 3, 8> y = m(x, memory);
  (void)y;
}
