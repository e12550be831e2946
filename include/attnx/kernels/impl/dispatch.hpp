// attnx kernels: flash_attention's definition. Chooses the instruction set's path and, by the number of query
// rows, the decode or the prefill driver. Included by the compiled library's sources (src/) and, with
// ATTNX_HEADER_ONLY, by kernels/flash_attention.hpp itself.
#pragma once

#include "attnx/kernels/flash_attention.hpp"
#include "attnx/kernels/impl/decode.hpp"
#include "attnx/kernels/impl/prefill.hpp"

ATTNX_OPTIMIZE_BEGIN
namespace attnx::kernels {
namespace detail {

template <class T, simd::isa I>
void flash_attention_isa(const attention_problem<T>& p, unsigned threads);

// p (kv_shared_by_batch) as one batch item of batch x lq rows per head: the queries gathered head by head, item
// after item; the outputs and log-sum-exps scattered back.
template <class T, simd::isa I>
void batch_folded(const attention_problem<T>& p, unsigned threads) {
  const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
  const std::size_t rows = p.batch * p.lq;
  storage<T, dyn> q(uninitialized, p.heads * rows * p.dk), o(uninitialized, p.heads * rows * p.dv),
      l(uninitialized, p.lse.data ? p.heads * rows : 0);
  for (std::size_t h = 0; h < p.heads; ++h)
    for (std::size_t b = 0; b < p.batch; ++b)
      for (std::size_t i = 0; i < p.lq; ++i)
        alg::copy_n(p.q.matrix(b, h) + sz(i) * p.q.row, p.dk, q.data() + (h * rows + b * p.lq + i) * p.dk);
  attention_problem<T> f = p;
  f.batch = 1;
  f.lq = rows;
  f.q = {q.data(), 0, sz(rows * p.dk), sz(p.dk)};
  f.o = {o.data(), 0, sz(rows * p.dv), sz(p.dv)};
  if (p.lse.data) f.lse = {l.data(), 0, sz(rows), 1};
  flash_attention_isa<T, I>(f, threads);
  for (std::size_t h = 0; h < p.heads; ++h)
    for (std::size_t b = 0; b < p.batch; ++b)
      for (std::size_t i = 0; i < p.lq; ++i) {
        const std::size_t r = h * rows + b * p.lq + i;
        alg::copy_n(o.data() + r * p.dv, p.dv, p.o.matrix(b, h) + sz(i) * p.o.row);
        if (p.lse.data) p.lse.matrix(b, h)[sz(i) * p.lse.row] = l[r];
      }
}

// The kernel of one instruction set (only where simd::cpu_supports(I)).
template <class T, simd::isa I>
void flash_attention_isa(const attention_problem<T>& p, unsigned threads) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "flash_attention: float or double");
  validate(p);
  if (p.lq == 0 || p.dv == 0 || p.batch == 0 || p.heads == 0) return;
  if (kv_shared_by_batch(p)) return batch_folded<T, I>(p, threads);
  if (p.lq <= decode_max_rows && !has_tile_functions(p)) {  // (the decode loops have no tile_function step)
    if constexpr (I == simd::isa::scalar) {
      return run_decode_kv<T, simd::isa::scalar, scalar::decode_kernel>(p, threads);
    }
#if ATTNX_SIMD_X86
    else if constexpr (I == simd::isa::avx2) {
      return run_decode_kv<T, simd::isa::avx2, avx2::decode_kernel>(p, threads);
    } else {
      return run_decode_kv<T, simd::isa::avx512, avx512::decode_kernel>(p, threads);
    }
#endif
  }
  if constexpr (I == simd::isa::scalar) {
    run_flash(p, threads, kernel_ref<scalar::kernel<T>>(p));
  }
#if ATTNX_SIMD_X86
  else if constexpr (I == simd::isa::avx2) {
    run_flash_sized<T, avx2::kernel<T>, avx2::kernel<T, 1>>(p, threads);
  } else {
    run_flash_sized<T, avx512::kernel<T>, avx512::kernel<T, 1>>(p, threads);
  }
#endif
}

}  // namespace detail

// O = softmax(scores(Q K^T)) V for every (batch, head); see attention_problem. The instruction set must
// be one this CPU has (std::invalid_argument otherwise); threads: at most that many (>= 1). K and V of batch
// stride 0 (shared by every item) are read once for all the items when the score program allows it
// (detail::kv_shared_by_batch).
template <class T>
void flash_attention(const attention_problem<T>& p, simd::isa i, unsigned threads) {
  if (!simd::cpu_supports(i))
    ATTNX_THROW(std::invalid_argument("attnx::kernels::flash_attention: this CPU cannot run the " + std::string(simd::name(i)) +
                                " path"));
  switch (i) {
    case simd::isa::scalar: return detail::flash_attention_isa<T, simd::isa::scalar>(p, threads);
#if ATTNX_SIMD_X86
    case simd::isa::avx2: return detail::flash_attention_isa<T, simd::isa::avx2>(p, threads);
    case simd::isa::avx512: return detail::flash_attention_isa<T, simd::isa::avx512>(p, threads);
#else
    default: return detail::flash_attention_isa<T, simd::isa::scalar>(p, threads);
#endif
  }
}

}  // namespace attnx::kernels
ATTNX_OPTIMIZE_END
