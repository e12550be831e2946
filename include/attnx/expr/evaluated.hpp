// attnx: evaluated_once(e), an operand computed once into memory and then read as memory.
//
// A sub-expression used as an operand is normally computed where it is read (element-wise chains in one
// loop, row-wise nodes a row at a time). evaluated_once(e) instead evaluates e whole, once, into a buffer
// the expression owns, when the expression is evaluated: for an operand read many times, or read in an
// order its own evaluator serves badly. (multi_head_attention's output projection multiplies
// merge_heads(attention(...)) by W_O: read through merge_heads' evaluator, strided with one division per
// element, g++ 12 -O3 compiled the row-by-row product into a gather loop about 5x slower than over a
// tensor; evaluated once, the merged heads are written by the fused kernel directly in their layout.)
#pragma once

#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/core/expression.hpp"

namespace attnx {

// evaluated_once(a): a computed once into a temporary when the expression is evaluated, then read from it.
template <class A>
class evaluated_once_expr : public unary_node<A> {
 public:
  using unary_node<A>::unary_node;
};

// evaluated_once(a): a computed once per evaluation and read from there (a sub-expression read many times).
template <expression A>
constexpr auto evaluated_once(A&& a) {
  if constexpr (failed_v<A>) {
    return std::remove_cvref_t<A>{};
  } else {
    return evaluated_once_expr<stored_t<A>>(store(std::forward<A>(a)));
  }
}

}  // namespace attnx
