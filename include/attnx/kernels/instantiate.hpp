// attnx: the run-time kernels, instantiated here, for programs that compile them once.
//
// Every ISA path of the fused attention kernel and of the GEMM is instantiated in each translation unit
// that evaluates attention or a product at run time: several seconds of code generation per translation
// unit (docs/design.md, "Compile time"). A program may compile them once instead:
//   - define ATTNX_EXTERN_KERNELS in every translation unit (e.g. target_compile_definitions), so that
//     none of them instantiates the kernels;
//   - include this header in exactly one .cpp file, which instantiates them for float and double (or
//     split by element type, below).
// Without ATTNX_EXTERN_KERNELS this header is not needed (everything stays header-only). Including it in
// two translation units of one program breaks the one-definition rule (two explicit instantiations).
#pragma once

#include "attnx/kernels/flash_attention.hpp"
#include "attnx/kernels/gemm.hpp"

// One element type per file, to compile them in parallel: define ATTNX_INSTANTIATE_FLOAT in one file and
// ATTNX_INSTANTIATE_DOUBLE in another before including this header (neither defined: both here). The float
// kernels include the decode kernels over bf16 / f16 K and V, about half their compile (clang 14 -O1 with ASan,
// UBSan and libFuzzer's instrumentation: 316 s for all the float kernels, 114 s without those and 189 s for those
// alone; g++ 12 -O2: 44-48 s, 19-20 s and 23-24 s): define
// ATTNX_INSTANTIATE_KV16_APART beside ATTNX_INSTANTIATE_FLOAT and ATTNX_INSTANTIATE_KV16 in a third file to compile
// them apart.
#if !defined(ATTNX_INSTANTIATE_FLOAT) && !defined(ATTNX_INSTANTIATE_DOUBLE) && !defined(ATTNX_INSTANTIATE_KV16)
#define ATTNX_INSTANTIATE_FLOAT
#define ATTNX_INSTANTIATE_DOUBLE
#endif
#if defined(ATTNX_INSTANTIATE_FLOAT) && !defined(ATTNX_INSTANTIATE_KV16_APART) && !defined(ATTNX_INSTANTIATE_KV16)
#define ATTNX_INSTANTIATE_KV16
#endif

namespace attnx::kernels {
#ifdef ATTNX_INSTANTIATE_FLOAT
template void flash_attention<float>(const attention_problem<float>&, simd::isa, unsigned);
namespace detail {
template const gemm_ops<float>& gemm_ops_for<float>(simd::isa);
}
#endif
#ifdef ATTNX_INSTANTIATE_KV16
namespace detail {
template decode_kernel_ref<float> decode_ref<scalar::decode_kernel<float, bf16>, float>();
template decode_kernel_ref<float> decode_ref<scalar::decode_kernel<float, f16>, float>();
#if ATTNX_SIMD_X86
template decode_kernel_ref<float> decode_ref<avx2::decode_kernel<float, bf16>, float>();
template decode_kernel_ref<float> decode_ref<avx2::decode_kernel<float, f16>, float>();
template decode_kernel_ref<float> decode_ref<avx512::decode_kernel<float, bf16>, float>();
template decode_kernel_ref<float> decode_ref<avx512::decode_kernel<float, f16>, float>();
#endif
}  // namespace detail
#endif
#ifdef ATTNX_INSTANTIATE_DOUBLE
template void flash_attention<double>(const attention_problem<double>&, simd::isa, unsigned);
namespace detail {
template const gemm_ops<double>& gemm_ops_for<double>(simd::isa);
}
#endif
}  // namespace attnx::kernels
