// attnx fused attention kernel: O = softmax(mask(scale * Q K^T)) V in one pass over K and V
// (FlashAttention-2 loop order, online softmax), vectorised and threaded. Run-time only.
//
// The instruction set is chosen at compile time from the target macros (__AVX512F__, then
// __AVX2__ + __FMA__, else portable scalar code). The other paths stay reachable through
// detail::flash_attention_isa for tests and benchmarks; they are compiled with per-function
// target attributes, so calling one is only valid where detail::isa_supported() says so.
// Semantics, numerics and tuning: docs/fused_kernel.md.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "attnx/kernels/detail/thread_pool.hpp"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define ATTNX_KERNELS_X86 1
#include <immintrin.h>
#else
#define ATTNX_KERNELS_X86 0
#endif

namespace attnx::kernels {

enum class causal_kind {
  none,
  top_left,     // key j visible to query i iff j <= i                (PyTorch is_causal)
  bottom_right  // key j visible to query i iff j <= i + (Lk - Lq)    (FlashAttention-2)
};

template <class T>  // float and double
struct attention_problem {
  // Problem (b, h) for b < batch, h < heads. Pointers to element [0][0] of each (b,h) matrix:
  //   q  + b*q_batch_stride + h*q_head_stride, rows of length dk, row i at + i*q_row_stride   (Lq x dk)
  //   k  + b*k_batch_stride + (h / (heads/kv_heads))*k_head_stride, row j at + j*k_row_stride (Lk x dk)
  //   v  same with v_* strides (Lk x dv);  o + b*o_batch_stride + h*o_head_stride, row stride o_row_stride (Lq x dv)
  const T* q; std::ptrdiff_t q_batch_stride, q_head_stride, q_row_stride;
  const T* k; std::ptrdiff_t k_batch_stride, k_head_stride, k_row_stride;
  const T* v; std::ptrdiff_t v_batch_stride, v_head_stride, v_row_stride;
  T* o;       std::ptrdiff_t o_batch_stride, o_head_stride, o_row_stride;
  std::size_t batch = 1, heads = 1, kv_heads = 1, lq, lk, dk, dv;
  T scale;                                  // multiplies q.k (1/sqrt(dk), or 1/tau)
  causal_kind causal = causal_kind::none;
  const std::size_t* key_lengths = nullptr; // optional, per batch item: keys j >= key_lengths[b] are blocked
  // optional boolean mask (true = allowed), element (b,h,i,j) at
  // bool_mask[b*bm_batch_stride + h*bm_head_stride + i*bm_row_stride + j*bm_col_stride] (strides may be 0 to broadcast)
  const bool* bool_mask = nullptr; std::ptrdiff_t bm_batch_stride = 0, bm_head_stride = 0, bm_row_stride = 0, bm_col_stride = 1;
  // optional additive mask added to the scaled score, same stride scheme
  const T* add_mask = nullptr; std::ptrdiff_t am_batch_stride = 0, am_head_stride = 0, am_row_stride = 0, am_col_stride = 1;
  unsigned threads = 0;                     // 0 = std::thread::hardware_concurrency()
};

namespace detail {

enum class isa { scalar, avx2, avx512 };

#if ATTNX_KERNELS_X86 && defined(__AVX512F__)
inline constexpr isa native_isa = isa::avx512;
#elif ATTNX_KERNELS_X86 && defined(__AVX2__) && defined(__FMA__)
inline constexpr isa native_isa = isa::avx2;
#else
inline constexpr isa native_isa = isa::scalar;
#endif

// Whether this build contains the path at all, and whether this CPU can run it.
constexpr bool isa_compiled(isa i) { return i == isa::scalar || ATTNX_KERNELS_X86; }
inline bool isa_supported(isa i) {
#if ATTNX_KERNELS_X86
  switch (i) {
    case isa::scalar: return true;
    case isa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return false;
#else
  return i == isa::scalar;
#endif
}
constexpr const char* isa_name(isa i) {
  return i == isa::avx512 ? "avx512" : i == isa::avx2 ? "avx2" : "scalar";
}

// 2^f on |f| <= 1/2: near-minimax (Chebyshev) fits, max abs error 2.0e-9 (float, degree 6) and
// 3.2e-18 (double, degree 11); lowest degree first.
template <class T>
inline constexpr auto exp2_coefficients = std::array<T, 0>{};
template <>
inline constexpr auto exp2_coefficients<float> = std::array<float, 7>{
    1.0f, 0.69314720670283259577f, 0.24022650922288758071f, 0.055503272266703020589f,
    0.0096180566785246380754f, 0.001340042817761583794f, 0.00015461444698569129083f};
template <>
inline constexpr auto exp2_coefficients<double> = std::array<double, 12>{
    1.0, 0.69314718055994530925, 0.24022650695910159567, 0.055504108664821627039,
    0.0096181291075872566681, 0.0013333558146406470697, 0.00015403530463724354209,
    0.000015252733841556772589, 1.3215432535912376166e-6, 1.0178057087733941105e-7,
    7.0741942972885210056e-9, 4.455817908336064493e-10};

// Keys j >= key_limit(p, b, i) are blocked for query i of batch item b (causal and key lengths;
// the boolean and additive masks come on top, element by element).
template <class T>
std::size_t key_limit(const attention_problem<T>& p, std::size_t b, std::size_t i) {
  std::size_t lim = p.lk;
  if (p.key_lengths) lim = std::min(lim, p.key_lengths[b]);
  if (p.causal == causal_kind::top_left) {
    lim = std::min(lim, i + 1);
  } else if (p.causal == causal_kind::bottom_right) {
    const auto end = static_cast<std::ptrdiff_t>(i + 1 + p.lk) - static_cast<std::ptrdiff_t>(p.lq);
    lim = end <= 0 ? 0 : std::min(lim, static_cast<std::size_t>(end));
  }
  return lim;
}

}  // namespace detail
}  // namespace attnx::kernels

#if defined(__clang__)
#define ATTNX_KERNEL_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define ATTNX_KERNEL_UNROLL _Pragma("GCC unroll 16")
#else
#define ATTNX_KERNEL_UNROLL
#endif

// --- the tile algorithm, once per instruction set ------------------------------------------------
namespace attnx::kernels::detail::scalar {
#include "attnx/kernels/detail/simd_scalar.inc"
#include "attnx/kernels/detail/flash_tile.inc"
}  // namespace attnx::kernels::detail::scalar

#if ATTNX_KERNELS_X86
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace attnx::kernels::detail::avx2 {
#include "attnx/kernels/detail/simd_avx2.inc"
#include "attnx/kernels/detail/flash_tile.inc"
}  // namespace attnx::kernels::detail::avx2
#if defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma"))), apply_to = function)
#else
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")
#endif
namespace attnx::kernels::detail::avx512 {
#include "attnx/kernels/detail/simd_avx512.inc"
#include "attnx/kernels/detail/flash_tile.inc"
}  // namespace attnx::kernels::detail::avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif  // ATTNX_KERNELS_X86

#undef ATTNX_KERNEL_UNROLL

namespace attnx::kernels {
namespace detail {

struct aligned_free {
  void operator()(void* p) const { ::operator delete[](p, std::align_val_t{64}); }
};

// Splits the problem into (batch, head, query block) work items, longest first (causal blocks
// near the diagonal are short), and lets the threads take them from an atomic counter.
template <class T, class Kernel>
void run_flash(const attention_problem<T>& p) {
  if (p.kv_heads == 0 || p.heads % p.kv_heads != 0)
    throw std::invalid_argument("attnx::kernels::flash_attention: heads must be a multiple of kv_heads");
  if (p.lq == 0 || p.dv == 0 || p.batch == 0 || p.heads == 0) return;

  struct item {
    std::size_t cost, i0, blocks;
    std::uint32_t b, h;
  };
  constexpr std::size_t MQ = Kernel::MQ;
  const std::size_t blocks = (p.lq + MQ - 1) / MQ;
  unsigned threads = p.threads ? p.threads : std::max(1u, std::thread::hardware_concurrency());

  // Query blocks per work item: up to Kernel::G (fewer passes over K and V), but at least about 8
  // items per thread for the load balance. A last block of fewer than MQ rows is an item of its own
  // (it may run with a narrower kernel).
  const std::size_t full = p.lq / MQ;
  const std::size_t group = std::clamp<std::size_t>(p.batch * p.heads * full / (8 * std::size_t{threads}), 1, Kernel::G);
  std::vector<item> items;
  items.reserve(p.batch * p.heads * (full / group + 2));
  for (std::size_t b = 0; b < p.batch; ++b)
    for (std::size_t qb = 0; qb < blocks; qb += (qb < full ? std::min(group, full - qb) : 1)) {
      const std::size_t n = qb < full ? std::min(group, full - qb) : 1;
      // Limits grow with the row, so the last row of each block has the most keys.
      std::size_t cost = 0;
      for (std::size_t g = qb; g < qb + n; ++g) {
        const std::size_t last = std::min(p.lq, (g + 1) * MQ) - 1;
        cost += (key_limit(p, b, last) + 1) * (last + 1 - g * MQ);
      }
      for (std::size_t h = 0; h < p.heads; ++h)
        items.push_back({cost, qb * MQ, n, static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(h)});
    }
  // Longest first: with the atomic counter below this balances causal problems.
  std::stable_sort(items.begin(), items.end(), [](const item& x, const item& y) { return x.cost > y.cost; });
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, items.size()));

  // Per thread: the tile scratch, then the key limits. Allocated here so that workers cannot throw.
  const std::size_t tile_bytes = Kernel::scratch_elems(p.dk, p.dv) * sizeof(T);
  const std::size_t bytes = (tile_bytes + Kernel::limit_elems() * sizeof(std::size_t) + 63) / 64 * 64;
  std::unique_ptr<std::byte[], aligned_free> buf(
      static_cast<std::byte*>(::operator new[](bytes * threads, std::align_val_t{64})));

  std::atomic<std::size_t> next{0};
  const std::function<void(unsigned)> job = [&](unsigned t) {
    std::byte* mine = buf.get() + bytes * t;
    T* tile = reinterpret_cast<T*>(mine);
    auto* limits = reinterpret_cast<std::size_t*>(mine + tile_bytes);
    for (std::size_t n; (n = next.fetch_add(1, std::memory_order_relaxed)) < items.size();)
      Kernel::run_block(p, items[n].b, items[n].h, items[n].i0, items[n].blocks, tile, limits);
  };
  parallel_run(threads, job);
}

// The kernel for one instruction set (see isa_supported before calling a non-native one).
template <class T, isa I>
void flash_attention_isa(const attention_problem<T>& p) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "flash_attention: float or double");
  static_assert(isa_compiled(I), "flash_attention_isa: this instruction set is not compiled for this target");
  if constexpr (I == isa::scalar) {
    run_flash<T, scalar::kernel<T>>(p);
  }
#if ATTNX_KERNELS_X86
  else if constexpr (I == isa::avx2) {
    run_flash<T, avx2::kernel<T>>(p);
  } else {
    run_flash<T, avx512::kernel<T>>(p);
  }
#endif
}

}  // namespace detail

// O = softmax(mask(scale * Q K^T)) V for every (batch, head); see attention_problem.
template <class T>
void flash_attention(const attention_problem<T>& p) {
  detail::flash_attention_isa<T, detail::native_isa>(p);
}

}  // namespace attnx::kernels
