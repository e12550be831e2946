// attnx GEMM kernels: the run-time path of the matrix product's row evaluator (eval/evaluator.hpp).
//
// The evaluator of A * B keeps its row protocol (begin_row(r), at(j)); at run time, for float and
// double, it computes a block of up to MB consecutive output rows at once: A's rows of the block are
// evaluated into a packed buffer through A's own evaluator, multiplied by B (packed once into column
// panels when the evaluator is built) with a register-blocked micro-kernel, and the block's output rows
// are kept until a row outside the block is asked for. Extra memory: the packed B, plus
// MB x (K + N) for the block; never the whole M x N output (the product also runs under softmax for
// scores Q K^T, which are never stored). See docs/gemm.md.
//
// The instruction set is chosen at compile time like the fused kernel's (flash_attention.hpp):
// __AVX512F__, then __AVX2__ + __FMA__, else portable code. The other paths are compiled with
// per-function target attributes and stay reachable (tests, benchmarks) through
// detail::gemm_isa_override; they run only where detail::isa_supported() says so.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include "attnx/kernels/flash_attention.hpp"  // detail::isa, native_isa, isa_supported; vec<T> per instruction set

namespace attnx::kernels {

// Turn the blocked path off (comparisons, benchmarks, tests): products then run as the row-by-row axpy
// loop of a constant evaluation. Read when a product's evaluator is built.
inline std::atomic<bool> gemm_enabled{true};

// How many row blocks the blocked path has computed (observability for tests and benchmarks).
inline std::atomic<std::size_t> gemm_blocks{0};

// Below this many rows per matrix B, packing B costs more than it saves: the axpy loop runs.
inline constexpr std::size_t gemm_min_rows = 4;

namespace detail {

// -1: the compile-time choice (native_isa). Otherwise an isa (as int) that products' evaluators built
// from now on use, if this CPU supports it (tests and benchmarks).
inline std::atomic<int> gemm_isa_override{-1};

}  // namespace detail
}  // namespace attnx::kernels

#if defined(__clang__)
#define ATTNX_GEMM_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define ATTNX_GEMM_UNROLL _Pragma("GCC unroll 16")
#else
#define ATTNX_GEMM_UNROLL
#endif

// --- register tiles and blocking, once per instruction set -----------------------------------------
// MR rows x NV vectors of accumulators; KC: K chunk (0: all of K); MB: rows per block of the evaluator.
namespace attnx::kernels::detail::scalar {
// The portable path: 16-byte vectors of the GCC/Clang vector extension (SSE2 on any x86-64, NEON on
// AArch64, plain code elsewhere), one lane with other compilers. The compiler's auto-vectorisation of
// plain loops was slower than the axpy loop at -O3 (g++ 12).
#if defined(__GNUC__) || defined(__clang__)
template <class T>
struct vector16;
template <>
struct vector16<float> {
  typedef float type __attribute__((vector_size(16)));
};
template <>
struct vector16<double> {
  typedef double type __attribute__((vector_size(16)));
};
template <class T>
struct gemm_vec {
  using reg = typename vector16<T>::type;
  static constexpr std::size_t W = 16 / sizeof(T);
  static reg zero() { return reg{}; }
  static reg set1(T x) { return reg{} + x; }
  static reg load(const T* p) {
    reg r;
    std::memcpy(&r, p, sizeof r);
    return r;
  }
  static void store(T* p, reg x) { std::memcpy(p, &x, sizeof x); }
  static reg fmadd(reg a, reg b, reg c) { return a * b + c; }
};
#else
template <class T>
using gemm_vec = vec<T>;
#endif
// 16 registers (SSE2): 12 accumulators, 2 loads of B, 1 broadcast of A.
template <class T>
struct gemm_shape {
  static constexpr std::size_t MR = 6, NV = 2, KC = 0, MB = 96;
};
#include "attnx/kernels/detail/gemm_tile.inc"
}  // namespace attnx::kernels::detail::scalar

#if ATTNX_KERNELS_X86
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace attnx::kernels::detail::avx2 {
template <class T>
using gemm_vec = vec<T>;
// 16 registers: 12 accumulators, 2 loads of B, 1 broadcast of A.
template <class T>
struct gemm_shape {
  static constexpr std::size_t MR = 6, NV = 2, KC = 256, MB = 96;
};
#include "attnx/kernels/detail/gemm_tile.inc"
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
template <class T>
using gemm_vec = vec<T>;
// 32 registers: 24 accumulators, 2 loads of B, broadcasts of A.
template <class T>
struct gemm_shape {
  static constexpr std::size_t MR = 12, NV = 2, KC = 0, MB = 96;
};
#include "attnx/kernels/detail/gemm_tile.inc"
}  // namespace attnx::kernels::detail::avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif  // ATTNX_KERNELS_X86

#undef ATTNX_GEMM_UNROLL

namespace attnx::kernels {
namespace detail {

// One instruction set's kernel and its blocking, as run-time values (the evaluator picks one per product).
template <class T>
struct gemm_ops {
  isa id;
  std::size_t mr, nr, kc, mb;
  void (*block)(const T* a, std::size_t lda, const T* bp, std::size_t m, std::size_t k, std::size_t n, T* c,
                std::size_t ldc, std::size_t kc_max);
};

template <class G, class T>
constexpr gemm_ops<T> gemm_ops_from(isa id) {
  return {id, G::MR, G::NR, G::KC, G::MB, &G::block};
}

// The kernel of one instruction set; only valid to run where isa_supported(i).
template <class T, isa I>
const gemm_ops<T>& gemm_ops_isa() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "attnx::kernels::gemm: float or double");
  static_assert(isa_compiled(I), "gemm_ops_isa: this instruction set is not compiled for this target");
  if constexpr (I == isa::scalar) {
    static constexpr gemm_ops<T> ops = gemm_ops_from<scalar::gemm<T>, T>(I);
    return ops;
  }
#if ATTNX_KERNELS_X86
  else if constexpr (I == isa::avx2) {
    static constexpr gemm_ops<T> ops = gemm_ops_from<avx2::gemm<T>, T>(I);
    return ops;
  } else {
    static constexpr gemm_ops<T> ops = gemm_ops_from<avx512::gemm<T>, T>(I);
    return ops;
  }
#endif
}

// native_isa, or the override when one is set and this CPU can run it.
template <class T>
const gemm_ops<T>& gemm_ops_selected() {
  const int o = gemm_isa_override.load(std::memory_order_relaxed);
#if ATTNX_KERNELS_X86
  if (o == static_cast<int>(isa::avx512) && isa_supported(isa::avx512)) return gemm_ops_isa<T, isa::avx512>();
  if (o == static_cast<int>(isa::avx2) && isa_supported(isa::avx2)) return gemm_ops_isa<T, isa::avx2>();
#endif
  if (o == static_cast<int>(isa::scalar)) return gemm_ops_isa<T, isa::scalar>();
  return gemm_ops_isa<T, native_isa>();
}

// B (k x n, row stride ldb) into panels of nr columns: out[q*nr*k + kk*nr + j] = B[kk][q*nr + j], zero
// past column n. out holds round_up(n, nr) * k elements.
template <class T>
void gemm_pack_b(const T* b, std::size_t k, std::size_t n, std::size_t ldb, std::size_t nr, T* out) {
  for (std::size_t j0 = 0; j0 < n; j0 += nr) {
    const std::size_t w = std::min(nr, n - j0);
    T* p = out + j0 * k;
    for (std::size_t kk = 0; kk < k; ++kk, p += nr) {
      std::memcpy(p, b + kk * ldb + j0, w * sizeof(T));
      for (std::size_t j = w; j < nr; ++j) p[j] = T(0);
    }
  }
}

// A 64-byte aligned run-time buffer; empty (and never allocated) in a constant evaluation.
template <class T>
class gemm_buffer {
 public:
  constexpr gemm_buffer() noexcept = default;
  gemm_buffer(const gemm_buffer&) = delete;
  gemm_buffer& operator=(const gemm_buffer&) = delete;
  constexpr gemm_buffer(gemm_buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  constexpr gemm_buffer& operator=(gemm_buffer&& o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  constexpr ~gemm_buffer() {
    if (p_) release();
  }
  void allocate(std::size_t n) {
    if (p_) release();
    p_ = static_cast<T*>(::operator new(std::max<std::size_t>(n, 1) * sizeof(T), std::align_val_t{64}));
  }
  T* data() const noexcept { return p_; }

 private:
  void release() noexcept {
    ::operator delete(p_, std::align_val_t{64});
    p_ = nullptr;
  }
  T* p_ = nullptr;
};

}  // namespace detail

// The run-time state of one product's evaluator: B packed once, and the current block of output rows.
//   init(b, nb, k, n, rows_per_b)   B = nb matrices of k x n, row-major, k*n apart; output rows
//                                   [t*rows_per_b, (t+1)*rows_per_b) use matrix t
//   cached(r)                       whether row r is in the current block
//   compute(r, a_rows)              computes the block holding row r. a_rows(first, count, buf) returns
//                                   A's rows first .. first+count-1 (k elements each, row stride k):
//                                   a pointer to A's own memory, or buf after writing them there
//   row(r)                          the n values of output row r (r cached)
// Rows are blocked within each rows_per_b range: [t*rows_per_b + i*MB, ...), so any order of requests is
// correct (a row outside the block recomputes its block).
template <class T>
class gemm_row_blocks {
 public:
  constexpr gemm_row_blocks() noexcept = default;

  void init(const T* b, std::size_t nb, std::size_t k, std::size_t n, std::size_t rows_per_b) {
    ops_ = &detail::gemm_ops_selected<T>();
    k_ = k;
    n_ = n;
    rpb_ = rows_per_b;
    const std::size_t mr = ops_->mr, nr = ops_->nr;
    mb_ = std::min(ops_->mb, rows_per_b);
    np_ = (n + nr - 1) / nr * nr;
    const std::size_t mbp = (mb_ + mr - 1) / mr * mr;
    constexpr std::size_t line = 64 / sizeof(T);  // each part starts on a cache line
    const auto up = [](std::size_t x) { return (x + line - 1) / line * line; };
    const std::size_t bsize = up(nb * k * np_), csize = up(mbp * np_), asize = mbp * k;
    buf_.allocate(bsize + csize + asize);
    bp_ = buf_.data();
    c_ = bp_ + bsize;
    ap_ = c_ + csize;
    for (std::size_t t = 0; t < nb; ++t) detail::gemm_pack_b(b + t * k * n, k, n, n, nr, bp_ + t * k * np_);
    first_ = 0;
    count_ = 0;
  }
  bool active() const noexcept { return ops_ != nullptr; }
  bool cached(std::size_t r) const noexcept { return r - first_ < count_; }
  const T* row(std::size_t r) const noexcept { return c_ + (r - first_) * np_; }

  template <class ARows>
  void compute(std::size_t r, ARows&& a_rows) {
    const std::size_t t = r / rpb_, i0 = (r % rpb_) / mb_ * mb_;
    const std::size_t rows = std::min(mb_, rpb_ - i0), mr = ops_->mr;
    first_ = t * rpb_ + i0;
    count_ = 0;  // until the block is complete (a_rows may throw)
    const T* a = a_rows(first_, rows, ap_);
    if (rows % mr != 0) {  // the kernel reads whole MR-row slices: zero rows after the last
      if (a != ap_) std::memcpy(ap_, a, rows * k_ * sizeof(T));
      std::fill(ap_ + rows * k_, ap_ + (rows + mr - 1) / mr * mr * k_, T(0));
      a = ap_;
    }
    ops_->block(a, k_, bp_ + t * k_ * np_, rows, k_, n_, c_, np_, ops_->kc);
    count_ = rows;
    gemm_blocks.fetch_add(1, std::memory_order_relaxed);
  }

  // Which kernel this product uses (tests).
  detail::isa kernel_isa() const noexcept { return ops_->id; }

 private:
  const detail::gemm_ops<T>* ops_ = nullptr;
  detail::gemm_buffer<T> buf_;
  T* bp_ = nullptr;  // packed B, nb x k x np_
  T* c_ = nullptr;   // the block's output rows, round_up(mb_, mr) x np_
  T* ap_ = nullptr;  // A's rows of the block when they are not in memory, round_up(mb_, mr) x k
  std::size_t k_ = 0, n_ = 0, np_ = 0, rpb_ = 1, mb_ = 1, first_ = 0, count_ = 0;
};

}  // namespace attnx::kernels
