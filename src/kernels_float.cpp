// The attnx library: the float kernels (prefill, decode over fp32 K and V, GEMM, pointwise), every instruction-set path.
// The decode kernels over bf16 / f16 K and V are in kernels_float_bf16.cpp and kernels_float_f16.cpp, compiled in
// parallel with this one.
#define ATTNX_KERNELS_KV16_ELSEWHERE 1
#include "attnx/kernels/impl/dispatch.hpp"
#include "attnx/kernels/impl/gemm.hpp"
#include "attnx/kernels/impl/pointwise.hpp"
#include "attnx/kernels/impl/rows.hpp"

namespace attnx::kernels {
template void flash_attention<float>(const attention_problem<float>&, simd::isa, unsigned);
template void attention_rows<float>(const attention_problem<float>&, simd::isa, bool, unsigned);
template std::size_t gemm_into<float>(const float*, std::size_t, const float*, std::size_t, std::size_t, std::size_t,
                                      std::size_t, float*, std::size_t, const float*, simd::isa, unsigned);
template void gemm_rows<float>(const float*, std::size_t, const float*, std::size_t, std::size_t, std::size_t, std::size_t,
                            float*, std::size_t, const float*, simd::isa, unsigned);
template void pointwise_map<float>(pointwise, const float*, float*, std::size_t, simd::isa);
namespace detail {
template const gemm_ops<float>& gemm_ops_for<float>(simd::isa);
}
}  // namespace attnx::kernels
