// A double bias for attend over a float cache (the partial_attention form: attend_cache_mask_element_type). One
// error, naming attend.
// expect: attnx: attend\(q, cache\): additive\(m\) must have the cache's type T
// expect: attend_cache_additive_mask_element_type_differs<attnx::error::element_type<double>, attnx::error::target_element_type<float>
#include <attnx/attnx.hpp>
int main() {
  attnx::kv_cache<float, 2, 8> cache(2, 8);
  attnx::tensor<float, 2, 4, 1, 8> q;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 4, 1, 8> bias;
#else
  attnx::tensor<double, 4, 1, 8> bias;
#endif
  auto y = attnx::attend(q, cache, attnx::additive(bias));
  return y.numel() > 0 ? 0 : 1;
}
