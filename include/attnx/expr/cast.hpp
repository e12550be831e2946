// attnx: cast<T>(e), the one way to change an expression's element type.
//
// attnx never converts element types silently: an operation on operands of different types, or an
// assignment of an expression to a tensor or view of another type, is a compile error naming both types
// (rule element_types_differ). cast<T>(e) converts element by element (static_cast), lazily like any
// other node; cast<T>(attention(...)) still runs the fused kernel in the expression's own type and
// converts the result as it is stored.
#pragma once

#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/core/expression.hpp"

namespace attnx {

// cast<T>(a): a's elements converted to T (the node).
template <class T, class A>
class cast_expr : public unary_node<A, T> {
 public:
  using unary_node<A, T>::unary_node;
};

// cast<double>(x): x's elements as double. Casting to the type an expression already has returns it as it is.
template <class T, expression A>
constexpr auto cast(A&& a) {
  static_assert(std::is_arithmetic_v<T>, "attnx: cast<T>: T must be an arithmetic type (float, double, bool, ...)");
  if constexpr (failed_v<A>) {
    return failed_expr<T, shape_of_t<A>>{};
  } else if constexpr (std::is_same_v<T, value_t<A>>) {
    return store(std::forward<A>(a));
  } else {
    return cast_expr<T, stored_t<A>>(store(std::forward<A>(a)));
  }
}

template <class T, class A>
  requires any_foreign<A>
constexpr auto cast(A&&) {
  return foreign_arguments<A>();
}

}  // namespace attnx
