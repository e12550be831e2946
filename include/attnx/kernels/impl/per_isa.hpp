// attnx kernels: a fragment of tile code compiled once per instruction set. The one place that says which
// instruction sets exist and how each is compiled.
//
//   #define ATTNX_PER_ISA_FRAGMENT "attnx/kernels/tiles/gemm_tile.hpp"
//   #include "attnx/kernels/impl/per_isa.hpp"
//
// includes the fragment three times, inside namespace attnx::kernels::detail::scalar, ::avx2 and ::avx512 (each
// defining isa_tag), the vector ones inside their target region (simd/target.hpp). No include guard: it is
// included once per fragment.
#include "attnx/simd/isa.hpp"
#include "attnx/simd/target.hpp"
#include "attnx/simd/vec.hpp"

#ifndef ATTNX_PER_ISA_FRAGMENT
#error "attnx/kernels/impl/per_isa.hpp: define ATTNX_PER_ISA_FRAGMENT (the fragment to include) first"
#endif

namespace attnx::kernels::detail::scalar {
using isa_tag = simd::scalar_t;
#include ATTNX_PER_ISA_FRAGMENT
}  // namespace attnx::kernels::detail::scalar

#if ATTNX_SIMD_X86
ATTNX_TARGET_AVX2_BEGIN
namespace attnx::kernels::detail::avx2 {
using isa_tag = simd::avx2_t;
#include ATTNX_PER_ISA_FRAGMENT
}  // namespace attnx::kernels::detail::avx2
ATTNX_TARGET_END
ATTNX_TARGET_AVX512_BEGIN
namespace attnx::kernels::detail::avx512 {
using isa_tag = simd::avx512_t;
#include ATTNX_PER_ISA_FRAGMENT
}  // namespace attnx::kernels::detail::avx512
ATTNX_TARGET_END
#endif  // ATTNX_SIMD_X86

#undef ATTNX_PER_ISA_FRAGMENT
