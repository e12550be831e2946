// block_mask of a temporary tensor: the summary refers to the mask, which would be gone.
// expect: attnx: block_mask\(M\): M must be a named tensor
#include <attnx/attnx.hpp>
attnx::tensor<bool, 4, 4> make() { return {}; }
int main() {
  attnx::tensor<float, 4, 4> q, k, v;
#ifdef ATTNX_CONTROL
  const attnx::tensor<bool, 4, 4> m = make();
  const attnx::block_mask bm(m);
#else
  const attnx::block_mask<attnx::shape_of_t<attnx::tensor<bool, 4, 4>>> bm(make());
#endif
  attnx::tensor<float, 4, 4> o = attnx::attention(q, k, v, attnx::allowed(bm));
  return o(0, 0) > 0 ? 0 : 1;
}
