// A (dyn, 4) tensor assigned to a rank-3 one: the rank rule names both whole shapes, the run-time axis as dyn_extent
// (a dyn extent as a number would print as 18446744073709551615).
// expect: attnx: assignment: the expression's rank differs from the target's
// expect: target_shape<2, 3, 4>.*source_extents<attnx::error::dyn_extent, attnx::error::extent<4> ?>
#include <attnx/attnx.hpp>
int main() {
  const attnx::tensor<float, attnx::dyn, 4> rows(6);
#ifdef ATTNX_CONTROL
  const attnx::tensor<float, 6, 4> copy = rows;
#else
  const attnx::tensor<float, 2, 3, 4> copy = rows;
#endif
  return copy.numel() == 0;
}
