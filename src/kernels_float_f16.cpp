// The attnx library: the decode kernels over f16 keys and values (float queries), every instruction-set path;
// referred to by kernels_float.cpp's flash_attention<float>. (bf16: kernels_float_bf16.cpp; one translation unit
// each, so that the library's largest parts compile in parallel.)
#include "attnx/kernels/impl/decode.hpp"

namespace attnx::kernels::detail {
template decode_kernel_ref<float> decode_ref<scalar::decode_kernel<float, f16>, float>();
#if ATTNX_SIMD_X86
template decode_kernel_ref<float> decode_ref<avx2::decode_kernel<float, f16>, float>();
template decode_kernel_ref<float> decode_ref<avx512::decode_kernel<float, f16>, float>();
#endif
}  // namespace attnx::kernels::detail
