// multi_head_attention: 4 query heads cannot share 3 key/value heads (GQA needs heads % kv_heads == 0).
// expect: attnx: multi_head_attention: the number of heads must be a multiple of kv_heads
// expect: mha_heads_not_divisible_by_kv_heads<.*heads<4>.*kv_heads<3>
#include <attnx/attnx.hpp>
int main() {
#ifdef ATTNX_CONTROL
  attnx::multi_head_attention<float, 12, 4, attnx::mha_options{.kv_heads = 2}> m;
#else
  attnx::multi_head_attention<float, 12, 4, attnx::mha_options{.kv_heads = 3}> m;
#endif
  attnx::tensor<float, 2, 3, 12> x;
  attnx::tensor<float, 2, 3, 12> y = m(x, attnx::causal);
  (void)y;
}
