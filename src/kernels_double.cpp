// The attnx library: the double kernels (prefill, decode, GEMM, pointwise), every instruction-set path.
#include "attnx/kernels/impl/dispatch.hpp"
#include "attnx/kernels/impl/gemm.hpp"
#include "attnx/kernels/impl/pointwise.hpp"
#include "attnx/kernels/impl/rows.hpp"

namespace attnx::kernels {
template void flash_attention<double>(const attention_problem<double>&, simd::isa, unsigned);
template void attention_rows<double>(const attention_problem<double>&, simd::isa, bool, unsigned);
template std::size_t gemm_into<double>(const double*, std::size_t, const double*, std::size_t, std::size_t, std::size_t,
                                       std::size_t, double*, std::size_t, const double*, simd::isa, unsigned);
template void gemm_rows<double>(const double*, std::size_t, const double*, std::size_t, std::size_t, std::size_t, std::size_t,
                            double*, std::size_t, const double*, simd::isa, unsigned);
template void pointwise_map<double>(pointwise, const double*, double*, std::size_t, simd::isa);
namespace detail {
template const gemm_ops<double>& gemm_ops_for<double>(simd::isa);
}
}  // namespace attnx::kernels
