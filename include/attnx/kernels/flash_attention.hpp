// attnx fused attention kernel: O = softmax(scores(Q K^T)) V in one pass over K and V (FlashAttention-2
// loop order, online softmax), vectorised and threaded. Run-time only.
//
//   kernels::flash_attention(problem)        // the current context's instruction set and threads
//   kernels::flash_attention(problem, ctx)
// The problem (kernels/attention_problem.hpp) names the operands as strided matrix stacks and the
// score program step by step. The instruction set (AVX-512, AVX2 + FMA, or portable code) is the
// context's, which defaults to the best this CPU has (simd/isa.hpp); all three are in every build.
// Semantics, numerics and tuning: docs/fused_kernel.md.
//
// Declared here, defined in kernels/impl/dispatch.hpp: the compiled library (src/) instantiates it for float and
// double once, so that a program's translation units compile none of the kernels; with ATTNX_HEADER_ONLY this
// header includes the definition and every translation unit that runs attention instantiates it.
#pragma once

#include "attnx/config.hpp"
#include "attnx/exec/context.hpp"
#include "attnx/kernels/attention_problem.hpp"
#include "attnx/simd/isa.hpp"

namespace attnx::kernels {

// O = softmax(scores(Q K^T)) V for every (batch, head); see attention_problem. The instruction set must
// be one this CPU has (std::invalid_argument otherwise); threads: at most that many (>= 1). K and V of batch
// stride 0 (shared by every item) are read once for all the items when the score program allows it.
// T: float or double.
template <class T>
void flash_attention(const attention_problem<T>& p, simd::isa i, unsigned threads);
#if !ATTNX_HEADER_ONLY
// In the library (src/): no translation unit that sees the definition (a test of the tiles, the library's own)
// instantiates it again.
extern template void flash_attention<float>(const attention_problem<float>&, simd::isa, unsigned);
extern template void flash_attention<double>(const attention_problem<double>&, simd::isa, unsigned);
#endif

// Keys and values stored as bf16 or f16 (KV = attnx::bf16 or attnx::f16, float queries): the compiled library has
// their decode kernels; a header-only program compiles them only where this is called (a kv_cache of that storage
// calls it), and flash_attention throws std::invalid_argument over such a problem otherwise.
#if ATTNX_HEADER_ONLY
template <class KV>
void use_kv16() noexcept;
#else
template <class KV>
void use_kv16() noexcept {}
#endif

template <class T>
void flash_attention(const attention_problem<T>& p, const context& ctx) {
  flash_attention(p, ctx.isa(), ctx.threads());
}
template <class T>
void flash_attention(const attention_problem<T>& p) {
  flash_attention(p, current_context());
}

}  // namespace attnx::kernels

#if ATTNX_HEADER_ONLY
#include "attnx/kernels/impl/dispatch.hpp"
#endif
