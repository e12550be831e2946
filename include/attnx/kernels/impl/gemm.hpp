// attnx GEMM kernels: gemm_ops_for's and gemm_into's definitions, the register tiles per instruction set and the
// micro-kernels (tiles/gemm_tile.hpp, once per instruction set).
#pragma once

#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "attnx/kernels/gemm.hpp"
#include "attnx/simd/target.hpp"
#include "attnx/simd/vec.hpp"

ATTNX_OPTIMIZE_BEGIN
namespace attnx::kernels::detail {
// Register tiles and blocking per instruction set: MR rows x NV vectors of accumulators; KC: K chunk
// (0: all of K); MB: rows per sub-block.
template <class T, class I>
struct gemm_shape;
template <class T>
struct gemm_shape<T, simd::scalar_t> {  // 16 registers (SSE2): 12 accumulators, 2 loads of B, 1 broadcast of A
  static constexpr std::size_t MR = 6, NV = 2, KC = 0, MB = 96;
  using vec = simd::portable_vec<T>;
};
template <class T>
struct gemm_shape<T, simd::avx2_t> {  // 16 registers: 12 accumulators, 2 loads of B, 1 broadcast of A
  static constexpr std::size_t MR = 6, NV = 2, KC = 256, MB = 96;
  using vec = simd::vec<T, simd::avx2_t>;
};
template <class T>
struct gemm_shape<T, simd::avx512_t> {  // 32 registers: 24 accumulators, 2 loads of B, broadcasts of A
  static constexpr std::size_t MR = 12, NV = 2, KC = 0, MB = 96;
  using vec = simd::vec<T, simd::avx512_t>;
};
}  // namespace attnx::kernels::detail

#define ATTNX_PER_ISA_FRAGMENT "attnx/kernels/tiles/gemm_tile.hpp"
#include "attnx/kernels/impl/per_isa.hpp"

namespace attnx::kernels {
namespace detail {

template <class G, class T>
constexpr gemm_ops<T> gemm_ops_from(simd::isa id) {
  return {id, G::MR, G::NR, G::KC, G::MB, &G::block, &G::pack, &G::store, &G::rows};
}

// The kernel of one instruction set; only valid to run where simd::cpu_supports(I).
template <class T, simd::isa I>
const gemm_ops<T>& gemm_ops_isa() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "attnx::kernels::gemm: float or double");
  if constexpr (I == simd::isa::scalar) {
    static constexpr gemm_ops<T> ops = gemm_ops_from<scalar::gemm<T>, T>(I);
    return ops;
  }
#if ATTNX_SIMD_X86
  else if constexpr (I == simd::isa::avx2) {
    static constexpr gemm_ops<T> ops = gemm_ops_from<avx2::gemm<T>, T>(I);
    return ops;
  } else {
    static constexpr gemm_ops<T> ops = gemm_ops_from<avx512::gemm<T>, T>(I);
    return ops;
  }
#endif
}

template <class T>
const gemm_ops<T>& gemm_ops_for(simd::isa i) {
  if (!simd::cpu_supports(i))
    ATTNX_THROW(std::invalid_argument("attnx::kernels::gemm: this CPU cannot run the " + std::string(simd::name(i)) + " path"));
#if ATTNX_SIMD_X86
  if (i == simd::isa::avx512) return gemm_ops_isa<T, simd::isa::avx512>();
  if (i == simd::isa::avx2) return gemm_ops_isa<T, simd::isa::avx2>();
#endif
  return gemm_ops_isa<T, simd::isa::scalar>();
}

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
                      std::size_t rows_per_b, T* dst, std::size_t ldd, const T* bias, simd::isa isa, unsigned threads) {
  const detail::gemm_ops<T>& ops = detail::gemm_ops_for<T>(isa);
  const std::size_t mr = ops.mr, nr = ops.nr, mb = alg::min(ops.mb, alg::max<std::size_t>(rows_per_b, 1));
  const std::size_t np = (n + nr - 1) / nr * nr, mbp = (mb + mr - 1) / mr * mr;
  const std::size_t rows = rows_per_b * nb;
  if (rows == 0 || n == 0) return 0;
  const double flops = 2.0 * double(rows) * double(k) * double(n);
  const auto most = static_cast<unsigned>(alg::max(1.0, alg::min(double(threads), flops / detail::gemm_min_flops_per_thread)));

  detail::gemm_buffer<T> packed;
  packed.allocate(nb * k * np);
  // B's rows in chunks of 32 (each chunk into every panel), split across the threads.
  constexpr std::size_t pack_rows = 32;
  const std::size_t chunks = (k + pack_rows - 1) / pack_rows;
  exec::parallel_for(nb * chunks, alg::min<unsigned>(most, static_cast<unsigned>(alg::min<std::size_t>(nb * chunks, 64))),
                     [&](std::size_t i, unsigned) {
                       const std::size_t t = i / chunks, kk0 = i % chunks * pack_rows;
                       ops.pack(b + t * k * n, k, n, n, kk0, alg::min(k, kk0 + pack_rows), packed.data() + t * k * np);
                     });

  // Row blocks of whole MR-row micro-panels, as even as possible (sizes differ by at most one panel), and,
  // when there are few, a multiple of the threads: blocks of a fixed MB rows would leave one thread a
  // block more than the other (512 rows = 5 x 96 + 32: 288 rows against 224, at most 1.78x on two).
  const std::size_t panels_per_b = (rows_per_b + mr - 1) / mr;
  std::size_t per_b = (rows_per_b + mb - 1) / mb;
  if (most > 1 && nb * per_b < 8 * std::size_t(most)) {
    const std::size_t mult = alg::max<std::size_t>(1, most / alg::gcd(std::size_t(most), nb));
    per_b = alg::min(panels_per_b, (per_b + mult - 1) / mult * mult);
  }
  const std::size_t blocks = nb * per_b;
  const unsigned slots = static_cast<unsigned>(alg::min<std::size_t>(most, blocks));
  const std::size_t scratch = (mbp * np + mbp * k + 15) / 16 * 16;  // C of a block, and a padded copy of A's rows
  detail::gemm_buffer<T> buf;
  buf.allocate(scratch * slots);
  exec::parallel_for(blocks, slots, [&](std::size_t blk, unsigned slot) {
    T* c = buf.data() + scratch * slot;
    T* apad = c + mbp * np;
    const std::size_t t = blk / per_b, part = blk % per_b;
    const std::size_t i0 = part * panels_per_b / per_b * mr;
    const std::size_t m = alg::min((part + 1) * panels_per_b / per_b * mr, rows_per_b) - i0;
    const T* ab = a + (t * rows_per_b + i0) * lda;
    std::size_t ld = lda;
    if (m % mr != 0) {  // the kernel reads whole MR-row slices: a copy with zero rows after the last
      for (std::size_t r = 0; r < m; ++r) std::memcpy(apad + r * k, ab + r * lda, k * sizeof(T));
      alg::fill(apad + m * k, apad + (m + mr - 1) / mr * mr * k, T(0));
      ab = apad;
      ld = k;
    }
    ops.block(ab, ld, packed.data() + t * k * np, m, k, n, c, np, ops.kc);
    ops.store(c, np, m, n, dst + (t * rows_per_b + i0) * ldd, ldd, bias);
  });
  return blocks;
}

template <class T>
void gemm_rows(const T* a, std::size_t lda, const T* b, std::size_t nb, std::size_t k, std::size_t n, std::size_t rows_per_b,
               T* dst, std::size_t ldd, const T* bias, simd::isa isa, unsigned threads) {
  const std::size_t rows = rows_per_b * nb;
  if (rows == 0 || n == 0) return;
  const detail::gemm_ops<T>& ops = detail::gemm_ops_for<T>(isa);
  // Columns in spans of whole cache lines, as many spans as the work fills threads with (each span every row). With
  // few rows the product streams B from memory: the work is its bytes.
  constexpr std::size_t line = 64 / sizeof(T), min_span = 4 * line;
  const double bytes = double(nb) * double(k) * double(n) * sizeof(T);
  const std::size_t by_work = static_cast<std::size_t>(alg::max(1.0, bytes / detail::gemm_rows_min_bytes_per_thread));
  const std::size_t spans = alg::max<std::size_t>(1, alg::min<std::size_t>({threads, by_work, (n + min_span - 1) / min_span}));
  const std::size_t span = (n + spans - 1) / spans;
  const std::size_t step = (span + line - 1) / line * line;
  // More than one group of 4 rows: the span in chunks of columns whose rows of B (k x chunk) stay in cache while
  // every group reads them, so that B comes from memory once; at least 256 columns, so that each row of B is read
  // in runs of whole kilobytes the prefetcher follows.
  const std::size_t by_cache = std::size_t(512) * 1024 / sizeof(T) / alg::max<std::size_t>(k, 1) / line * line;
  const std::size_t chunk = rows_per_b <= 4 ? n : alg::max(std::size_t(256), by_cache);
  exec::parallel_for(spans, static_cast<unsigned>(spans), [&](std::size_t s, unsigned) {
    const std::size_t c0 = alg::min(n, s * step), c1 = alg::min(n, c0 + step);
    for (std::size_t t = 0; t < nb; ++t)  // the rows of each matrix B, in groups of 4
      for (std::size_t cc = c0; cc < c1; cc += chunk)
        ops.rows(a + t * rows_per_b * lda, lda, b + t * k * n, k, n, rows_per_b, dst + t * rows_per_b * ldd, ldd,
                 bias, cc, alg::min(c1, cc + chunk));
  });
}

}  // namespace attnx::kernels
ATTNX_OPTIMIZE_END
