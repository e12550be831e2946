// Rows per item with a batched (B, n, d_model) input: the rows must come as one (N, d_model) matrix.
// expect: attnx: multi_head_attention::step: with rows per item, x must be \(N, d_model\)
#include <attnx/attnx.hpp>
int main() {
  attnx::multi_head_attention<float, 32, 4, attnx::mha_options{.kv_heads = 2}> mha;
  attnx::kv_cache<float, 2, 8> cache(2, 16);
  const std::size_t rows[2] = {1, 2};
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 3, 32> x;
#else
  attnx::tensor<float, 1, 3, 32> x;
#endif
  auto y = mha.step(x, cache, std::span<const std::size_t>(rows));
  return y.numel() == 0 ? 0 : 1;
}
