// attnx GEMM kernels: the run-time path of the matrix product's row evaluator (eval/evaluator.hpp).
//
// The evaluator of A * B keeps its row protocol (begin_row(r), at(j)); at run time, for float and
// double, it computes a block of consecutive output rows at once: A's rows of the block are read in
// place (or evaluated into a buffer through A's own evaluator), multiplied by B (packed once into column
// panels when the evaluator is built) with a register-blocked micro-kernel, and the block's output rows
// are kept until a row outside the block is asked for. With a context of P threads a block is P
// sub-blocks of MB rows, computed in parallel. Extra memory: the packed B, plus P x MB x (K + N) for the
// block; never the whole M x N output (the product also runs under softmax for scores Q K^T, which are
// never stored). See docs/gemm.md.
//
// The instruction set is the context's (simd/isa.hpp): AVX-512, AVX2 + FMA, or portable 16-byte vectors;
// all three are compiled into every build and chosen at run time. gemm_ops_for and gemm_into are declared here
// and defined in kernels/impl/gemm.hpp (the compiled library instantiates them; ATTNX_HEADER_ONLY includes it).
#pragma once

#include <cstddef>
#include <cstring>
#include <utility>

#include "attnx/config.hpp"
#include "attnx/util/algorithm.hpp"
#include "attnx/exec/context.hpp"
#include "attnx/exec/memory.hpp"
#include "attnx/simd/isa.hpp"

namespace attnx::kernels {

// A product with fewer static rows than this per matrix B never takes the blocked GEMM (its evaluator holds no state
// for it).
inline constexpr std::size_t gemm_min_rows = 4;
// At run time, a product of fewer rows than this per matrix B runs gemm_rows (assignment and row evaluator alike): B is
// read from memory once, where packing it for the blocked GEMM would read it, write a copy and read that; and each row
// gets the bits it would get alone (a slot of continuous batching does not depend on the others).
inline constexpr std::size_t gemm_direct_min_rows = 16;

namespace detail {

// One instruction set's kernel and its blocking, as run-time values (the evaluator picks one per product).
template <class T>
struct gemm_ops {
  simd::isa id;
  std::size_t mr, nr, kc, mb;
  void (*block)(const T* a, std::size_t lda, const T* bp, std::size_t m, std::size_t k, std::size_t n, T* c,
                std::size_t ldc, std::size_t kc_max);
  void (*pack)(const T* b, std::size_t k, std::size_t n, std::size_t ldb, std::size_t kk0, std::size_t kk1, T* out);
  void (*store)(const T* c, std::size_t ldc, std::size_t m, std::size_t n, T* dst, std::size_t ldd, const T* bias);
  // gemm_rows' loop over columns [c0, c1) of m rows (tiles/gemm_tile.hpp: rows)
  void (*rows)(const T* a, std::size_t lda, const T* b, std::size_t k, std::size_t n, std::size_t m, T* o, std::size_t ldo,
               const T* bias, std::size_t c0, std::size_t c1);
};

// The kernel of instruction set i (std::invalid_argument where this CPU cannot run it). T: float or double.
template <class T>
const gemm_ops<T>& gemm_ops_for(simd::isa i);
#if !ATTNX_HEADER_ONLY
extern template const gemm_ops<float>& gemm_ops_for<float>(simd::isa);  // (in the library: src/)
extern template const gemm_ops<double>& gemm_ops_for<double>(simd::isa);
#endif

// A 64-byte aligned run-time buffer; empty (and never allocated) in a constant evaluation.
template <class T>
class gemm_buffer {
 public:
  constexpr gemm_buffer() noexcept = default;
  gemm_buffer(const gemm_buffer&) = delete;
  gemm_buffer& operator=(const gemm_buffer&) = delete;
  constexpr gemm_buffer(gemm_buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(o.bytes_) {}
  constexpr gemm_buffer& operator=(gemm_buffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  constexpr ~gemm_buffer() {
    if (p_) release();
  }
  void allocate(std::size_t n) {
    if (p_) release();
    bytes_ = alg::max<std::size_t>(n, 1) * sizeof(T);
    p_ = static_cast<T*>(exec::allocate_bytes(bytes_));  // large blocks reused (exec/memory.hpp)
  }
  T* data() const noexcept { return p_; }

 private:
  void release() noexcept {
    exec::release_bytes(p_, bytes_);
    p_ = nullptr;
  }
  T* p_ = nullptr;
  std::size_t bytes_ = 0;
};

// Below this much work (flops) per thread, a second thread costs more in wake-up than it saves.
inline constexpr double gemm_min_flops_per_thread = 4e6;
// The same for gemm_rows, whose work is reading B: 128 KiB take about 13 us at 10 GB/s, several wake-ups.
inline constexpr double gemm_rows_min_bytes_per_thread = 128 * 1024;

}  // namespace detail

// dst = A B (+ bias): the whole product at once, for an assignment (eval/assign.hpp), not a row at a
// time. A: rows_per_b * nb rows of k, row stride lda (rows [t*rows_per_b, (t+1)*rows_per_b) times matrix t
// of B); B: nb matrices of k x n, row-major, k*n apart; dst: row stride ldd; bias: n values added to every
// row, or null. B is packed once (its rows split across the threads), then the row blocks are
// split across the threads, each computing its block into scratch of its own and writing the rows out
// (with the bias) itself: no step of the product runs on one thread while the others wait.
// Returns the number of row blocks.
template <class T>
std::size_t gemm_into(const T* a, std::size_t lda, const T* b, std::size_t nb, std::size_t k, std::size_t n,
                      std::size_t rows_per_b, T* dst, std::size_t ldd, const T* bias, simd::isa isa, unsigned threads);
#if !ATTNX_HEADER_ONLY
extern template std::size_t gemm_into<float>(const float*, std::size_t, const float*, std::size_t, std::size_t,
                                             std::size_t, std::size_t, float*, std::size_t, const float*, simd::isa,
                                             unsigned);
extern template std::size_t gemm_into<double>(const double*, std::size_t, const double*, std::size_t, std::size_t,
                                              std::size_t, std::size_t, double*, std::size_t, const double*, simd::isa,
                                              unsigned);
#endif

// dst = A B (+ bias) row by row, for products too small for the blocked GEMM (fewer than gemm_direct_min_rows rows
// per matrix B: decoding steps' projections, the LM head) and for a context with the blocked GEMM off: each output row
// an axpy over the rows of B, every element summed in the order k = 0, 1, ... with a rounded multiply and add per term
// (the row evaluator's order and bits), in vectors of instruction set isa; B is read from memory once (chunks of
// columns stay in cache for every group of 4 rows), and the columns are split across the threads when the product is
// large enough. Arguments as gemm_into's.
template <class T>
void gemm_rows(const T* a, std::size_t lda, const T* b, std::size_t nb, std::size_t k, std::size_t n, std::size_t rows_per_b,
               T* dst, std::size_t ldd, const T* bias, simd::isa isa, unsigned threads);
#if !ATTNX_HEADER_ONLY
extern template void gemm_rows<float>(const float*, std::size_t, const float*, std::size_t, std::size_t, std::size_t,
                                      std::size_t, float*, std::size_t, const float*, simd::isa, unsigned);
extern template void gemm_rows<double>(const double*, std::size_t, const double*, std::size_t, std::size_t, std::size_t,
                                       std::size_t, double*, std::size_t, const double*, simd::isa, unsigned);
#endif

// The run-time state of one product's evaluator: B packed once, and the current block of output rows.
//   init(b, nb, k, n, rows_per_b, isa, threads)
//                                   B = nb matrices of k x n, row-major, k*n apart; output rows
//                                   [t*rows_per_b, (t+1)*rows_per_b) use matrix t
//   cached(r)                       whether row r is in the current block
//   compute(r, a_rows)              computes the block holding row r and returns how many sub-blocks it
//                                   had. a_rows(first, count, buf) returns A's rows first .. first+count-1
//                                   (k elements each, row stride k): a pointer to A's own memory, or buf
//                                   after writing them there
//   row(r)                          the n values of output row r (r cached)
// Blocks are P x MB rows within each rows_per_b range (P = threads), so any order of requests is correct
// (a row outside the block recomputes its block).
template <class T>
class gemm_row_blocks {
 public:
  constexpr gemm_row_blocks() noexcept = default;

  void init(const T* b, std::size_t nb, std::size_t k, std::size_t n, std::size_t rows_per_b, simd::isa isa,
            unsigned threads) {
    ops_ = &detail::gemm_ops_for<T>(isa);
    k_ = k;
    n_ = n;
    rpb_ = rows_per_b;
    const std::size_t mr = ops_->mr, nr = ops_->nr;
    mb_ = alg::min(ops_->mb, rows_per_b);
    parts_ = alg::max<std::size_t>(1, alg::min<std::size_t>(threads, (rows_per_b + mb_ - 1) / mb_));
    threads_ = threads;
    np_ = (n + nr - 1) / nr * nr;
    mbp_ = (mb_ + mr - 1) / mr * mr;
    constexpr std::size_t line = 64 / sizeof(T);  // each part starts on a cache line
    const auto up = [](std::size_t x) { return (x + line - 1) / line * line; };
    const std::size_t bsize = up(nb * k * np_), csize = up(parts_ * mbp_ * np_), asize = (parts_ * mb_ + mr) * k;
    buf_.allocate(bsize + csize + asize);
    bp_ = buf_.data();
    c_ = bp_ + bsize;
    ap_ = c_ + csize;
    for (std::size_t t = 0; t < nb; ++t) ops_->pack(b + t * k * n, k, n, n, 0, k, bp_ + t * k * np_);
    first_ = 0;
    count_ = 0;
  }
  bool active() const noexcept { return ops_ != nullptr; }
  bool cached(std::size_t r) const noexcept { return r - first_ < count_; }
  const T* row(std::size_t r) const noexcept {
    const std::size_t i = r - first_;
    return c_ + ((i / mb_) * mbp_ + i % mb_) * np_;
  }

  template <class ARows>
  std::size_t compute(std::size_t r, ARows&& a_rows) {
    const std::size_t span = parts_ * mb_;
    const std::size_t t = r / rpb_, i0 = (r % rpb_) / span * span;
    const std::size_t rows = alg::min(span, rpb_ - i0), mr = ops_->mr;
    const std::size_t subs = (rows + mb_ - 1) / mb_;
    first_ = t * rpb_ + i0;
    count_ = 0;  // until the block is complete (a_rows may throw)
    const T* a = a_rows(first_, rows, ap_);
    // The kernel reads whole MR-row slices: past the last row of the block there must be readable zeros.
    const std::size_t last = (subs - 1) * mb_, last_rows = rows - last;
    const T* a_last = a + last * k_;
    if (last_rows % mr != 0) {
      T* pad = ap_ + last * k_;
      if (a != ap_) std::memcpy(pad, a_last, last_rows * k_ * sizeof(T));
      alg::fill(pad + last_rows * k_, pad + (last_rows + mr - 1) / mr * mr * k_, T(0));
      a_last = pad;
    }
    const T* bm = bp_ + t * k_ * np_;
    const auto sub = [&](std::size_t s, unsigned) {
      const std::size_t n_rows = s + 1 == subs ? last_rows : mb_;
      ops_->block(s + 1 == subs ? a_last : a + s * mb_ * k_, k_, bm, n_rows, k_, n_, c_ + s * mbp_ * np_, np_, ops_->kc);
    };
    const double flops = 2.0 * double(rows) * double(k_) * double(n_);
    const auto by_work = static_cast<std::size_t>(alg::max(1.0, flops / detail::gemm_min_flops_per_thread));
    exec::parallel_for(subs, static_cast<unsigned>(alg::min<std::size_t>({threads_, subs, by_work})), sub);
    count_ = rows;
    return subs;
  }

  // Which kernel this product uses (tests).
  simd::isa kernel_isa() const noexcept { return ops_->id; }
  // Rows per sub-block (tests).
  std::size_t sub_block_rows() const noexcept { return mb_; }

 private:
  const detail::gemm_ops<T>* ops_ = nullptr;
  detail::gemm_buffer<T> buf_;
  T* bp_ = nullptr;  // packed B, nb x k x np_
  T* c_ = nullptr;   // the block's output rows: parts_ sub-blocks of mbp_ x np_
  T* ap_ = nullptr;  // A's rows of the block when they are not in memory, (parts_ * mb_ + mr) x k
  std::size_t k_ = 0, n_ = 0, np_ = 0, rpb_ = 1, mb_ = 1, mbp_ = 1, parts_ = 1, first_ = 0, count_ = 0;
  unsigned threads_ = 1;
};

}  // namespace attnx::kernels

#if ATTNX_HEADER_ONLY
#include "attnx/kernels/impl/gemm.hpp"
#endif
