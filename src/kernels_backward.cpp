// The attnx library: the fused attention backward (float and double), every instruction-set path. A file of its
// own, compiled in parallel with the forward kernels.
#include "attnx/kernels/impl/backward.hpp"

namespace attnx::kernels {
template bool flash_attention_backward<float>(const attention_problem<float>&, const attention_gradients<float>&,
                                              simd::isa, unsigned);
template bool flash_attention_backward<double>(const attention_problem<double>&, const attention_gradients<double>&,
                                               simd::isa, unsigned);
}  // namespace attnx::kernels
