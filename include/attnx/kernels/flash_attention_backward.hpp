// attnx fused attention backward: the gradients of O = softmax(scores(Q K^T)) V with respect to Q, K and V
// from dO, the forward's O and its row log-sum-exps, with P recomputed tile by tile and never stored
// (FlashAttention-2's backward). Run-time only.
//
//   kernels::flash_attention_backward(problem, gradients)        // the current context's instruction set, threads
//   kernels::flash_attention_backward(problem, gradients, ctx)
//
// For each tile of BQ query rows and BK keys: P = exp(s - lse) from the saved lse, dV += P^T dO, dP = dO V^T,
// dS = P o (dP - D) with D = rowsum(dO o O), dQ += s' dS K, dK += s' dS^T Q (s' the score program's factors' product). Work
// items are (batch, K/V head, key chunk): each owns its keys' dK and dV (a K/V head's query heads summed inside it,
// GQA), and its share of dQ goes to a buffer of its own, summed chunk by chunk in a fixed order at the end. The split
// depends on the problem only, so results are bit-identical for any thread count; no atomics. Tiles that every row's
// masks block are skipped. Memory beyond inputs and outputs: packed copies of Q and dO and the per-chunk dQ buffers
// (at most 8 of them), O(L d).
//
// Declared here, defined in kernels/impl/backward.hpp (compiled into the library, or included with
// ATTNX_HEADER_ONLY), as flash_attention is.
#pragma once

#include "attnx/config.hpp"
#include "attnx/exec/context.hpp"
#include "attnx/kernels/attention_problem.hpp"
#include "attnx/simd/isa.hpp"

namespace attnx::kernels {

// What the backward reads besides the forward's problem, and what it writes.
template <class T>
struct attention_gradients {
  strided<const T> o;    // (batch, heads, lq, dv): the forward's output
  strided<const T> d_o;  // (batch, heads, lq, dv): the gradient of the loss with respect to it
  strided<const T> lse;  // (batch, heads, lq): the forward's log-sum-exps, at lse.matrix(b, h)[i * lse.row]
  strided<T> dq;         // (batch, heads, lq, dk)
  // (batch, kv_heads, lk, dk / dv). A batch or head stride of 0 (K, V shared by every batch item or head): the
  // gradients of the items (heads) that share it summed there, in order.
  strided<T> dk, dv;
};

// Writes dq, dk and dv and returns true, or writes nothing and returns false where the fused backward does not apply
// and the caller differentiates the expression unfused: 16-bit K/V, or a row whose lse is NaN or +inf (a NaN or +inf
// score: the unfused rules give such rows their documented values). Every score program runs: a multiplication by a
// positive number and masks that fill with -inf on the fast path (the factor folded into the exponent), any other
// program (finite fills, biases, several or negative factors) element by element on each tile, a replaced score
// passing no gradient. A row whose lse is -inf (every key masked) has zero gradients. The instruction set must be one this CPU has
// (std::invalid_argument otherwise); threads: at most that many. T: float or double.
template <class T>
bool flash_attention_backward(const attention_problem<T>& p, const attention_gradients<T>& g, simd::isa i,
                              unsigned threads);
#if !ATTNX_HEADER_ONLY
extern template bool flash_attention_backward<float>(const attention_problem<float>&, const attention_gradients<float>&,
                                                     simd::isa, unsigned);
extern template bool flash_attention_backward<double>(const attention_problem<double>&,
                                                      const attention_gradients<double>&, simd::isa, unsigned);
#endif

template <class T>
bool flash_attention_backward(const attention_problem<T>& p, const attention_gradients<T>& g, const context& ctx) {
  return flash_attention_backward(p, g, ctx.isa(), ctx.threads());
}
template <class T>
bool flash_attention_backward(const attention_problem<T>& p, const attention_gradients<T>& g) {
  return flash_attention_backward(p, g, current_context());
}

}  // namespace attnx::kernels

#if ATTNX_HEADER_ONLY
#include "attnx/kernels/impl/backward.hpp"
#endif
