// attnx: map(f, e), an element-wise node that applies any callable to each element.
//
// f is stored in the node (by value: a lambda's captures travel with the expression) and called once per
// element of the result, on e's element read once; e's chain stays one loop. f may be a constexpr lambda, and
// then the whole expression evaluates at compile time. The result's element type is what f returns (bool
// included, e.g. a mask); it must be an arithmetic type.
//
// map(f, S) with f(score, b, h, i, j), f taking the element and its position (expr/score_position.hpp: b, h, i, j
// std::ptrdiff_t each), over scores of rank >= 2: FlexAttention's score_mod. Its result is converted to S's element
// type, so that softmax(map(f, S)) * V stays one fused attention (eval/fused.hpp).
#pragma once

#include <concepts>
#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/core/expression.hpp"
#include "attnx/shape/errors.hpp"

namespace attnx {

// map(a, f): f applied to each element of a (the node).
template <class F, class A>
class map_expr : public unary_node<A, std::remove_cvref_t<std::invoke_result_t<const F&, value_t<A>>>> {
 public:
  constexpr map_expr(F f, A a) : map_expr::unary_node(std::move(a)), f_(std::move(f)) {}
  constexpr const F& function() const noexcept { return f_; }

 private:
  [[no_unique_address]] F f_;
};

// map(a, f) with f(score, b, h, i, j): the node (value type a's).
template <class F, class A>
class score_map_expr : public unary_node<A> {
 public:
  constexpr score_map_expr(F f, A a) : score_map_expr::unary_node(std::move(a)), f_(std::move(f)) {}
  constexpr const F& function() const noexcept { return f_; }

 private:
  [[no_unique_address]] F f_;
};

// Whether f takes an element of type T and its position (b, h, i, j).
template <class F, class T>
concept position_callable = std::is_invocable_v<const F&, T, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t>;

namespace rules {
template <class F, class T, bool Quiet = false>
constexpr bool check_score_map(std::size_t rank) {
  using R = std::remove_cvref_t<std::invoke_result_t<const F&, T, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t>>;
  static_assert(Quiet || std::is_arithmetic_v<R> || error::holds<error::map_result_not_arithmetic<error::result_type<R>>>,
                "attnx: map(f, e): f must return an arithmetic type (the element type of the result)");
  return std::is_arithmetic_v<R> && rank >= 2;
}
template <class F, class T, bool Quiet = false>
constexpr bool check_map() {
  constexpr bool callable = std::is_invocable_v<const F&, T>;
  static_assert(Quiet || callable || error::holds<error::map_function_not_callable<error::element_type<T>>>,
                "attnx: map(f, e): f cannot be called with e's element type (f must take one element by value or const&)");
  if constexpr (callable) {
    using R = std::remove_cvref_t<std::invoke_result_t<const F&, T>>;
    static_assert(Quiet || std::is_arithmetic_v<R> || error::holds<error::map_result_not_arithmetic<error::result_type<R>>>,
                  "attnx: map(f, e): f must return an arithmetic type (the element type of the result)");
    return std::is_arithmetic_v<R>;
  } else {
    return false;
  }
}
}  // namespace rules

namespace detail {
template <class Fn, class F, class A>
constexpr auto map_plain(F&& f, A&& a) {
  constexpr bool ok = rules::check_map<Fn, value_t<A>, failed_v<A>>();
  if constexpr (!ok || failed_v<A>) {
    return failed_expr<value_t<A>, shape_of_t<A>>{};
  } else {
    return map_expr<Fn, stored_t<A>>(std::forward<F>(f), store(std::forward<A>(a)));
  }
}
}  // namespace detail

// map(f, e): f(x) for every element x of e.
template <class F, expression A>
constexpr auto map(F&& f, A&& a) {
  using Fn = std::decay_t<F>;  // (a function becomes a function pointer)
  if constexpr (position_callable<Fn, value_t<A>> && !std::is_invocable_v<const Fn&, value_t<A>>) {
    constexpr std::size_t rank = shape_of_t<A>::rank;
    static_assert(failed_v<A> || rank >= 2 || error::holds<error::positions_need_rank_2_scores<error::rank<rank>>>,
                  "attnx: positions: a function of the position needs scores of at least two axes (queries x keys)");
    constexpr bool ok = rules::check_score_map<Fn, value_t<A>, failed_v<A> || rank < 2>(rank);
    if constexpr (!ok || failed_v<A>) return failed_expr<value_t<A>, shape_of_t<A>>{};
    else return score_map_expr<Fn, stored_t<A>>(std::forward<F>(f), store(std::forward<A>(a)));
  } else {
    return detail::map_plain<Fn>(std::forward<F>(f), std::forward<A>(a));
  }
}
template <class F, class A>
  requires any_foreign<A>
constexpr auto map(F&&, A&&) {
  return foreign_arguments<A>();
}

}  // namespace attnx
