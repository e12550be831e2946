// attnx kernels: attention row by row, the same problem as flash_attention's (kernels/attention_problem.hpp) without
// the fused kernel: each query row's scores stored whole (L_k of them), the score program applied step by step in the
// expression's order, the softmax with the row evaluator's rules for special values, then the weighted sum of V's
// rows in key order. What an evaluation with a context whose fused path is off runs (a comparison path, not a fast
// one); also the log-sum-exp when the problem asks for it. K and V in T only. Rows are split across the threads;
// each row is computed the same way on any number of them.
#pragma once

#include "attnx/config.hpp"
#include "attnx/kernels/attention_problem.hpp"

namespace attnx::kernels {

template <class T>
void attention_rows(const attention_problem<T>& p, unsigned threads);
#if !ATTNX_HEADER_ONLY
extern template void attention_rows<float>(const attention_problem<float>&, unsigned);  // (in the library: src/)
extern template void attention_rows<double>(const attention_problem<double>&, unsigned);
#endif

}  // namespace attnx::kernels

#if ATTNX_HEADER_ONLY
#include "attnx/kernels/impl/rows.hpp"
#endif
