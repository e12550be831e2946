// step(x, cache, ctx, mask): the context comes after the masks. One error.
// expect: attnx: multi_head_attention::step: a mask must be allowed\(m\), blocked\(m\) or additive\(m\)
// expect: and a context comes last
// expect: argument_position<1>, attnx::error::argument_type<attnx::context>
#include <attnx/attnx.hpp>
int main() {
  attnx::multi_head_attention<float, 16, 4> mha;
  attnx::kv_cache<float, 4, 4> cache(2, 8);
  attnx::tensor<float, 2, 1, 16> x;
  attnx::tensor<bool, 2, 1, 1, 8> pad;
  attnx::context ctx;
#ifdef ATTNX_CONTROL
  auto y = mha.step(x, cache, attnx::blocked(pad), ctx);
#else
  auto y = mha.step(x, cache, ctx, attnx::blocked(pad));
#endif
  return y.numel() > 0 ? 0 : 1;
}
