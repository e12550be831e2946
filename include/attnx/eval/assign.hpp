// attnx: assignment, the one loop every expression becomes.
//
// An expression recognised as attention, softmax(mask(scale(Q K^T))) V, goes to the fused kernel
// at run time (eval/fused.hpp). Everything else:
// assign_into(dst, e) walks the rows of e's shape: begin_row(r), then dst[r][j] = at(j) for each j.
// Element-wise chains are therefore a single loop; row-wise nodes fill one-row buffers in
// begin_row. Nothing of size rows x cols is ever allocated unless an operand that is read at random
// (the rhs of a product) is itself an unevaluated expression. Results always go to fresh storage
// (tensor construction / assignment evaluates into a new buffer), so `a = a * b` is safe.
#pragma once

#include <cstddef>

#include "attnx/eval/evaluator.hpp"
#include "attnx/eval/fused.hpp"
#include "attnx/expr/expression.hpp"

namespace attnx {

template <class T, class E>
constexpr void assign_into(T* dst, const E& e) {
  using S = shape_of_t<E>;
  // softmax(mask(scale(Q K^T))) V at run time: the fused kernel (eval/fused.hpp).
  if constexpr (fused::is_fusable_v<E> && std::is_same_v<T, value_t<E>>) {
    if (!std::is_constant_evaluated() && fused::run(dst, e)) return;
  }
  evaluator<E> ev(e);
  for (std::size_t r = 0; r < S::rows; ++r) {
    ev.begin_row(r);
    T* d = dst + r * S::cols;
    for (std::size_t j = 0; j < S::cols; ++j) d[j] = static_cast<T>(ev.at(j));
  }
}

// The value of an expression, as an owning tensor of its shape and element type.
template <expression E>
constexpr result_t<E> evaluate(const E& e) {
  return result_t<E>(e);
}

}  // namespace attnx
