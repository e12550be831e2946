// attnx kernels: attention with its scores stored, the same problem as flash_attention's (kernels/attention_problem.hpp)
// without the fused kernel: each query row's scores stored whole (L_k of them), the score program applied step by step
// in the expression's order, the softmax with the row evaluator's rules for special values, then the weighted sum of
// V's rows. What an evaluation with a context whose fused path is off runs: the materialised attention a framework
// without a fused kernel computes, the baseline the fused kernel is measured against. With the blocked GEMM on, the
// two products go through it (instruction set i), a block of query rows at a time; off, each row's dot products and
// its sum over V's rows in key order in plain loops. Also the log-sum-exp when the problem asks for it. K and V in T
// only. Work is split across the threads; each row is computed the same way on any number of them.
#pragma once

#include "attnx/config.hpp"
#include "attnx/exec/context.hpp"
#include "attnx/kernels/attention_problem.hpp"
#include "attnx/simd/isa.hpp"

namespace attnx::kernels {

// The problem with its scores stored (the path above); i: the GEMM's instruction set, blocked_gemm: the context's setting.
template <class T>
void attention_rows(const attention_problem<T>& p, simd::isa i, bool blocked_gemm, unsigned threads);
#if !ATTNX_HEADER_ONLY
extern template void attention_rows<float>(const attention_problem<float>&, simd::isa, bool, unsigned);  // (src/)
extern template void attention_rows<double>(const attention_problem<double>&, simd::isa, bool, unsigned);
#endif

template <class T>
void attention_rows(const attention_problem<T>& p, const context& ctx) {
  attention_rows(p, ctx.isa(), ctx.blocked_gemm(), ctx.threads());
}

}  // namespace attnx::kernels

#if ATTNX_HEADER_ONLY
#include "attnx/kernels/impl/rows.hpp"
#endif
