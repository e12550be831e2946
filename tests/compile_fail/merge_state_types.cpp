// merge of two states of different shape types (a dynamic and a static batch axis): convert one first.
// expect: attnx: merge: the states must have one type \(element type and shape type\)
// expect: merge_state_types_differ
#include <attnx/attnx.hpp>
int main() {
  using dyn_state = attnx::attention_state<float, attnx::make_shape<attnx::dyn, 4>>;
  using static_state = attnx::attention_state<float, attnx::make_shape<2, 4>>;
  const dyn_state a{attnx::tensor<float, attnx::dyn, 4>(2), attnx::tensor<float, attnx::dyn>(2)};
  const static_state b{};
#ifdef ATTNX_CONTROL
  const auto m = attnx::merge(a, dyn_state{b.out, b.lse});
#else
  const auto m = attnx::merge(a, b);
#endif
  return int(m.out.numel()) - 8;
}
