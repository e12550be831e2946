// attnx: row-wise reductions and the row-wise softmax.
//
// Where the row statistics are computed is decided here, explicitly (lazy reductions inside
// element-wise chains are a classic source of wrong results): a reduction or softmax node is
// evaluated one row at a time into a buffer of one row (O(row length), never O(rows x cols)); the
// element-wise nodes above it read that buffer. See docs/design.md.
#pragma once

#include <cstddef>
#include <limits>
#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/core/expression.hpp"
#include "attnx/math/constexpr_math.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/shape/shape.hpp"

namespace attnx {

namespace ops {
// NaN propagates: the max of a row containing NaN is NaN.
struct row_max {
  template <class T> static constexpr T init() { return -std::numeric_limits<T>::infinity(); }
  template <class T> constexpr T operator()(T acc, T x) const { return (x > acc || x != x) && acc == acc ? x : acc; }
};
struct row_sum {
  template <class T> static constexpr T init() { return T(0); }
  template <class T> constexpr T operator()(T acc, T x) const { return acc + x; }
};
}  // namespace ops

// Keeps the rank: the last axis becomes extent 1, so `x - row_max(x)` broadcasts.
template <class Op, class A>
class reduce_expr : public unary_node<A> {
 public:
  using shape_type = reduce_last_t<shape_of_t<A>>;
  using unary_node<A>::unary_node;
  constexpr dims_t<shape_type::rank> dims() const {
    auto d = dims_of(this->operand());
    d[shape_type::rank - 1] = 1;
    return d;
  }
};

// Row-wise softmax over the last axis, in the stable form (the row max is subtracted first).
// Semantics, also those of the fused kernel (docs/design.md): a row of only -inf (fully masked)
// gives all zeros; a row with NaN gives all NaN; +inf entries share the row's weight equally.
template <class A>
class softmax_expr : public unary_node<A> {
 public:
  using unary_node<A>::unary_node;
};

namespace rules {
template <class S, bool Quiet = false>
constexpr bool check_row_op() {
  static_assert(Quiet || S::rank >= 1 || error::holds<error::softmax_needs_rank_1<error::rank<S::rank>>>,
                "attnx: row-wise operation: the operand needs at least one axis");
  return S::rank >= 1;
}
}  // namespace rules

namespace detail {
// Node<stored A>, or a failed_expr of Shape when a rule failed or the operand had.
template <template <class> class Node, class Shape, bool Ok, class A>
constexpr auto make_row_node(A&& a) {
  if constexpr (!Ok || failed_v<A>) {
    return failed_expr<value_t<A>, Shape>{};
  } else {
    return Node<stored_t<A>>(store(std::forward<A>(a)));
  }
}
template <class Op>
struct reduce_with {
  template <class A>
  using node = reduce_expr<Op, A>;
};
}  // namespace detail

// row_max(x), row_sum(x): the maximum and the sum of each row (last axis), keeping the rank (extent 1).
template <expression A>
constexpr auto row_max(A&& a) {
  using S = shape_of_t<A>;
  constexpr bool ok = rules::check_row_op<S, failed_v<A>>();
  return detail::make_row_node<detail::reduce_with<ops::row_max>::template node, reduce_last_t<S>, ok>(std::forward<A>(a));
}
template <expression A>
constexpr auto row_sum(A&& a) {
  using S = shape_of_t<A>;
  constexpr bool ok = rules::check_row_op<S, failed_v<A>>();
  return detail::make_row_node<detail::reduce_with<ops::row_sum>::template node, reduce_last_t<S>, ok>(std::forward<A>(a));
}

// softmax(S): over the last axis.
template <expression A>
constexpr auto softmax(A&& a) {
  constexpr bool ok = rules::check_row_op<shape_of_t<A>, failed_v<A>>();
  return detail::make_row_node<softmax_expr, shape_of_t<A>, ok>(std::forward<A>(a));
}

template <class A>
  requires any_foreign<A>
constexpr auto softmax(A&&) {
  return foreign_arguments<A>();
}
template <class A>
  requires any_foreign<A>
constexpr auto row_max(A&&) {
  return foreign_arguments<A>();
}
template <class A>
  requires any_foreign<A>
constexpr auto row_sum(A&&) {
  return foreign_arguments<A>();
}

// softmax<names::seq_k>(S): over the named axis, which must be the last one (transpose first
// otherwise). Catches a softmax taken over the wrong axis of a named score matrix.
template <class AxisName, expression A>
constexpr auto softmax(A&& a) {
  using S = shape_of_t<A>;
  constexpr bool quiet = failed_v<A>;
  constexpr bool rank_ok = rules::check_row_op<S, quiet>();
  constexpr bool axis_ok = [] {
    if constexpr (S::rank >= 1) {
      return std::is_same_v<typename S::template axis_t<S::rank - 1>::name, AxisName>;
    } else {
      return false;
    }
  }();
  if constexpr (rank_ok) {
    using Last = typename S::template axis_t<S::rank - 1>::name;
    static_assert(quiet || axis_ok ||
                      error::holds<error::softmax_axis_is_not_last<error::requested_axis<AxisName>, error::last_axis<Last>>>,
                  "attnx: softmax: the requested axis is not the last axis (softmax runs along rows; transpose first)");
  }
  return detail::make_row_node<softmax_expr, S, rank_ok && axis_ok>(std::forward<A>(a));
}
template <class AxisName, class A>
  requires any_foreign<A>
constexpr auto softmax(A&&) {
  return foreign_arguments<A>();
}

}  // namespace attnx
