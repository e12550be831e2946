// attnx kernels: pointwise_map's definition, the loop of tiles/pointwise_tile.hpp per instruction set.
#pragma once

#include "attnx/kernels/impl/tiles.hpp"
#include "attnx/kernels/pointwise.hpp"

#define ATTNX_PER_ISA_FRAGMENT "attnx/kernels/tiles/pointwise_tile.hpp"
#include "attnx/kernels/impl/per_isa.hpp"

ATTNX_OPTIMIZE_BEGIN
namespace attnx::kernels {

template <class T>
void pointwise_map(pointwise f, const T* x, T* y, std::size_t n, simd::isa i) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "pointwise_map: float or double");
#if ATTNX_SIMD_X86
  if (i == simd::isa::avx512) return detail::avx512::pointwise_kernel<T>::run(f, x, y, n);
  if (i == simd::isa::avx2) return detail::avx2::pointwise_kernel<T>::run(f, x, y, n);
#endif
  (void)i;
  detail::scalar::pointwise_kernel<T>::run(f, x, y, n);
}

}  // namespace attnx::kernels
ATTNX_OPTIMIZE_END
