// attnx: comparisons (bool expressions) and where(c, a, b).
//
// a < b, a <= b, a > b, a >= b, equal(a, b) and not_equal(a, b) compare element by element with broadcasting
// (the operands' element types must agree; a number takes the expression's type) and give an expression of
// bool: usable as a mask with its polarity said (mask(S, allowed(x > 0.f))), in where, or stored in a tensor<bool, ...>. Equality has names
// rather than == and != because == between two tensors compares them whole (a bool).
// where(c, a, b): a where c is true, else b (PyTorch's torch.where); c is a bool expression, a and b have one
// element type (either may be a number); all three broadcast together. Only the chosen operand is read.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/expr/elementwise.hpp"
#include "attnx/core/expression.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/shape/shape.hpp"

namespace attnx {

namespace ops {
// The comparisons as function objects: the elements of the comparison nodes (bool).
struct less { template <class A> constexpr bool operator()(A a, A b) const { return a < b; } };
struct less_equal { template <class A> constexpr bool operator()(A a, A b) const { return a <= b; } };
struct greater { template <class A> constexpr bool operator()(A a, A b) const { return a > b; } };
struct greater_equal { template <class A> constexpr bool operator()(A a, A b) const { return a >= b; } };
struct equal_to { template <class A> constexpr bool operator()(A a, A b) const { return a == b; } };
struct not_equal_to { template <class A> constexpr bool operator()(A a, A b) const { return a != b; } };
}  // namespace ops

// where(c, a, b): a where c is true, else b, element-wise with broadcasting (the node).
template <class C, class A, class B>
class where_expr : public expression_tag {
 public:
  using value_type = value_t<A>;
  using shape_type = broadcast_shape_t<broadcast_shape_t<shape_of_t<C>, shape_of_t<A>>, shape_of_t<B>>;
  constexpr where_expr(C c, A a, B b) : c_(std::move(c)), a_(std::move(a)), b_(std::move(b)) {}
  constexpr dims_t<shape_type::rank> dims() const {
    using CA = broadcast_shape_t<shape_of_t<C>, shape_of_t<A>>;
    return broadcast_dims<CA, shape_of_t<B>>(broadcast_dims<shape_of_t<C>, shape_of_t<A>>(dims_of(c_), dims_of(a_)), dims_of(b_));
  }
  constexpr const C& condition() const noexcept { return c_; }
  constexpr const A& if_true() const noexcept { return a_; }
  constexpr const B& if_false() const noexcept { return b_; }
  constexpr auto operands() const { return boost::hana::make_tuple(&c_, &a_, &b_); }

 private:
  C c_;
  A a_;
  B b_;
};

namespace detail {
template <class Op, class A, class B>
constexpr auto make_compare(A&& a, B&& b) {
  return make_broadcast_node<binary_expr, Op, bool>(std::forward<A>(a), std::forward<B>(b), "comparison");
}
template <class E, class S>
constexpr auto as_scalar_of(S s) {
  return scalar<value_t<E>>(static_cast<value_t<E>>(s));
}
}  // namespace detail

#define ATTNX_COMPARISON(NAME_OR_OP, OPS)                                                                                 \
  template <expression A, expression B>                                                                                   \
  constexpr auto NAME_OR_OP(A&& a, B&& b) {                                                                               \
    return detail::make_compare<ops::OPS>(std::forward<A>(a), std::forward<B>(b));                                        \
  }                                                                                                                       \
  template <expression A, arithmetic S>                                                                                   \
  constexpr auto NAME_OR_OP(A&& a, S s) {                                                                                 \
    return detail::make_compare<ops::OPS>(std::forward<A>(a), detail::as_scalar_of<A>(s));                                \
  }                                                                                                                       \
  template <expression A, arithmetic S>                                                                                   \
  constexpr auto NAME_OR_OP(S s, A&& a) {                                                                                 \
    return detail::make_compare<ops::OPS>(detail::as_scalar_of<A>(s), std::forward<A>(a));                                \
  }                                                                                                                       \
  template <class A, class B>                                                                                             \
    requires one_foreign_operand<A, B>                                                                                    \
  constexpr auto NAME_OR_OP(A&&, B&&) {                                                                                   \
    return foreign_arguments<A, B>();                                                                                     \
  }
ATTNX_COMPARISON(operator<, less)
ATTNX_COMPARISON(operator<=, less_equal)
ATTNX_COMPARISON(operator>, greater)
ATTNX_COMPARISON(operator>=, greater_equal)
ATTNX_COMPARISON(equal, equal_to)
ATTNX_COMPARISON(not_equal, not_equal_to)
#undef ATTNX_COMPARISON

namespace rules {
template <class C, bool Quiet = false>
constexpr bool check_where_condition() {
  static_assert(Quiet || std::is_same_v<C, bool> ||
                    error::holds<error::where_condition_must_be_boolean<error::condition_element_type<C>>>,
                "attnx: where(c, a, b): the condition must be a bool expression (a comparison, a mask)");
  return std::is_same_v<C, bool>;
}
}  // namespace rules

// where(c, a, b): a where c, else b.
template <expression C, expression A, expression B>
constexpr auto where(C&& c, A&& a, B&& b) {
  using SC = shape_of_t<C>;
  using SA = shape_of_t<A>;
  using SB = shape_of_t<B>;
  using SCA = broadcast_shape_t<SC, SA>;
  using SR = broadcast_shape_t<SCA, SB>;
  constexpr bool quiet = any_failed_v<C, A, B>;
  constexpr bool cond_ok = rules::check_where_condition<value_t<C>, quiet>();
  constexpr bool types_ok = rules::check_element_types<value_t<A>, value_t<B>, quiet || !cond_ok>();
  constexpr bool ca_ok = rules::check_elementwise<SC, SA, quiet || !cond_ok || !types_ok>();
  constexpr bool cab_ok = rules::check_elementwise<SCA, SB, quiet || !cond_ok || !types_ok || !ca_ok>();
  if constexpr (quiet || !cond_ok || !types_ok || !ca_ok || !cab_ok) {
    return failed_expr<value_t<A>, SR>{};
  } else {
    if constexpr (!SC::is_static || !SA::is_static || !SB::is_static) {
      rules::check_elementwise_dims<SC, SA>(dims_of(c), dims_of(a), "where");
      rules::check_elementwise_dims<SCA, SB>(broadcast_dims<SC, SA>(dims_of(c), dims_of(a)), dims_of(b), "where");
    }
    return where_expr<stored_t<C>, stored_t<A>, stored_t<B>>(store(std::forward<C>(c)), store(std::forward<A>(a)),
                                                             store(std::forward<B>(b)));
  }
}
template <expression C, expression A, arithmetic S>
constexpr auto where(C&& c, A&& a, S s) {
  return where(std::forward<C>(c), std::forward<A>(a), detail::as_scalar_of<A>(s));
}
template <expression C, arithmetic S, expression B>
constexpr auto where(C&& c, S s, B&& b) {
  return where(std::forward<C>(c), detail::as_scalar_of<B>(s), std::forward<B>(b));
}
template <class C, class A, class B>
  requires(any_foreign<C> || (any_foreign<A> && !arithmetic<A>) || (any_foreign<B> && !arithmetic<B>))
constexpr auto where(C&&, A&&, B&&) {
  return foreign_arguments<C, std::conditional_t<arithmetic<A>, scalar<float>, A>, std::conditional_t<arithmetic<B>, scalar<float>, B>>();
}

}  // namespace attnx
