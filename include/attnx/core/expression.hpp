// attnx: what an expression is, and what it holds.
//
// THE OWNERSHIP RULE (see docs/design.md):
//   * an lvalue owning tensor is held by reference (attnx::tensor_ref): it must outlive the expression;
//   * everything else is held by value: rvalue tensors are moved in and owned, views are copied (a view
//     is a pointer; the user memory it names must outlive the expression), sub-expressions are copied
//     or moved (they are small: they hold references, views, scalars or owned temporaries).
// So `auto e = X * W;` never dangles as long as X and W (named tensors) live, and
// `auto e = make_tensor() * W;` owns its first operand.
#pragma once

#include <concepts>
#include <cstddef>
#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/shape/errors.hpp"
#include "attnx/shape/shape.hpp"
#include "attnx/util/pack.hpp"

namespace attnx {

// Every node and terminal derives from this tag.
struct expression_tag {};

// An attnx expression: a node or terminal (derived from expression_tag).
template <class E>
concept expression = std::derived_from<std::remove_cvref_t<E>, expression_tag>;

// The element type and the shape (an attnx::shape) of an expression E.
template <class E>
using value_t = typename std::remove_cvref_t<E>::value_type;
template <class E>
using shape_of_t = typename std::remove_cvref_t<E>::shape_type;

template <class T, class Shape>
class basic_tensor;

// An lvalue tensor inside an expression.
template <class T, class Shape>
class tensor_ref : public expression_tag {
 public:
  using value_type = T;
  using shape_type = Shape;
  constexpr explicit tensor_ref(const basic_tensor<T, Shape>& t) noexcept : t_(&t) {}
  constexpr const T* data() const noexcept { return t_->data(); }
  constexpr dims_t<Shape::rank> dims() const noexcept { return t_->dims(); }

 private:
  const basic_tensor<T, Shape>* t_;
};

namespace detail {
template <class E>
struct is_tensor : std::false_type {};
template <class T, class S>
struct is_tensor<basic_tensor<T, S>> : std::true_type {};
}  // namespace detail

// Whether E is a tensor (owns its elements), not a view or a node.
template <class E>
inline constexpr bool is_tensor_v = detail::is_tensor<std::remove_cvref_t<E>>::value;

// What a node stores for an operand passed as E&& (E deduced by forwarding).
template <class E>
using stored_t = std::conditional_t<is_tensor_v<E> && std::is_lvalue_reference_v<E>,
                                    tensor_ref<value_t<E>, shape_of_t<E>>, std::remove_cvref_t<E>>;

// The operand as a node stores it (stored_t<E>): a reference to an lvalue tensor, else the value moved in.
template <class E>
constexpr stored_t<E> store(E&& e) {
  if constexpr (is_tensor_v<E> && std::is_lvalue_reference_v<E>) {
    return stored_t<E>(e);
  } else {
    return std::forward<E>(e);
  }
}

// The run-time extents of an expression: its shape's when they are all static (a constant), else what
// the expression holds (every node with a dyn extent has dims(), computed from its operands').
template <class E>
constexpr dims_t<shape_of_t<E>::rank> dims_of(const E& e) {
  if constexpr (shape_of_t<E>::is_static) {
    return shape_of_t<E>::extents;
  } else {
    return e.dims();
  }
}

// The base of the nodes with one operand A (softmax, transpose, cast, the head reshapes, ...): A held by
// value, operand(), operands() for the traversals (core/traversal.hpp), element type T (A's unless given),
// and A's shape and dims(). A node of another shape declares its own shape_type and dims() (from
// operand()'s), which hide these.
template <class A, class T = value_t<A>>
class unary_node : public expression_tag {
 public:
  using value_type = T;
  using shape_type = shape_of_t<A>;
  constexpr explicit unary_node(A a) : a_(std::move(a)) {}
  constexpr const A& operand() const noexcept { return a_; }
  constexpr auto operands() const { return boost::hana::make_tuple(&a_); }
  constexpr dims_t<shape_type::rank> dims() const { return dims_of(a_); }

 private:
  A a_;
};

// The base of the nodes with two operands (element-wise operations, products, concatenation): A and B held by
// value, lhs(), rhs() and operands(); the node declares its value_type, shape_type and dims().
template <class A, class B>
class binary_node : public expression_tag {
 public:
  constexpr binary_node(A a, B b) : a_(std::move(a)), b_(std::move(b)) {}
  constexpr const A& lhs() const noexcept { return a_; }
  constexpr const B& rhs() const noexcept { return b_; }
  constexpr auto operands() const { return boost::hana::make_tuple(&a_, &b_); }

 private:
  A a_;
  B b_;
};

// Terminals: expressions whose elements sit in memory, row-major and contiguous, reachable
// through data(). Everything else is computed by an evaluator.
template <class E>
concept dense_terminal = expression<E> && requires(const std::remove_cvref_t<E>& e) {
  { e.data() } -> std::convertible_to<const value_t<E>*>;
};

// ONE ERROR PER MISTAKE. An operation whose rule fails reports it (one static_assert naming the rule
// and both sizes) and returns a failed_expr instead of its node: an expression with the shape and element
// type the node would have had, and nothing to evaluate. Every operation, assignment and evaluation that
// receives a failed_expr stays quiet and returns a failed_expr (or does nothing) in turn, so a mistake is
// reported where it is made and nowhere else: `softmax(scale(Q * K, .5f)) * V` with K not transposed
// gives the matmul error at `Q * K` and no second one at `* V`.
template <class T, class Shape>
class failed_expr : public expression_tag {
 public:
  using value_type = T;
  using shape_type = Shape;
  constexpr dims_t<Shape::rank> dims() const noexcept { return {}; }
};

namespace detail {
template <class E>
inline constexpr bool is_failed = false;
template <class T, class S>
inline constexpr bool is_failed<failed_expr<T, S>> = true;
}  // namespace detail

// Whether E is the result of an operation that already failed a rule.
template <class E>
inline constexpr bool failed_v = detail::is_failed<std::remove_cvref_t<E>>;
template <class... E>
inline constexpr bool any_failed_v = (failed_v<E> || ...);

// The element-type rule: the operands of an operation have one element type. attnx converts nothing
// silently (a float Q with a double K would otherwise run in double, off the fused path, without a word);
// cast<T>(e) converts explicitly (expr/cast.hpp). Quiet: the operands already failed a rule (or this
// operation failed another one), so the mistake has been reported. Returns whether the rule holds.
namespace rules {
template <class A, class B, bool Quiet = false>
constexpr bool check_element_types() {
  static_assert(Quiet || std::is_same_v<A, B> ||
                    error::holds<error::element_types_differ<error::lhs_element_type<A>, error::rhs_element_type<B>>>,
                "attnx: the operands' element types differ (attnx converts nothing silently: convert one with "
                "attnx::cast<T>(e))");
  return std::is_same_v<A, B>;
}
}  // namespace rules

// The argument rule: where an operation expects an expression, a foreign type (a std::vector, a pointer,
// an Eigen matrix) gets one error that says how to wrap it, rather than a list of candidates that fail the
// `expression` concept. Every public operation has a fallback overload, viable only for such arguments,
// that reports the first foreign argument (its position, counted from 1, and its type) and returns a
// failed_expr, so nothing further is reported either.
namespace rules {
template <class... Args>
constexpr std::size_t first_foreign_argument() {
  std::size_t i = 0;
  bool found = false;
  ((found = found || !expression<Args>, i += found ? 0 : 1), ...);
  return i;
}
template <class... Args>
constexpr void check_expression_arguments() {
  constexpr std::size_t i = first_foreign_argument<Args...>();
  if constexpr (i < sizeof...(Args)) {
    using Arg = std::remove_cvref_t<detail::type_at_t<i, Args...>>;
    static_assert(error::holds<error::not_an_attnx_expression<error::argument_position<i + 1>, error::argument_type<Arg>>>,
                  "attnx: this argument is not an attnx tensor, view or expression: wrap a buffer with "
                  "attnx::view<const T, extents...>(data, count) or view<const T, extents...>(range), or copy it into "
                  "an attnx::tensor");
  }
}
}  // namespace rules

// What a fallback overload returns: a failed expression (of no particular shape).
template <class... Args>
constexpr failed_expr<float, shape<>> foreign_arguments() {
  rules::check_expression_arguments<Args...>();
  return {};
}
// Functions of a score's position (expr/score_position.hpp: q_pos, k_pos, ...) derive from this tag: they are no
// expression, but no foreign argument either.
struct position_tag {};
// A position expression (derived from position_tag).
template <class P>
concept position_expression = std::derived_from<std::remove_cvref_t<P>, position_tag>;

// Whether some argument is foreign: neither an expression nor a position expression.
template <class... Args>
concept any_foreign = ((!expression<Args> && !position_expression<Args>) || ...);

// A scalar is a rank-0 expression: it broadcasts against anything.
template <class T>
class scalar : public expression_tag {
 public:
  using value_type = T;
  using shape_type = shape<>;
  constexpr explicit scalar(T v) noexcept : v_(v) {}
  constexpr T value() const noexcept { return v_; }

 private:
  T v_;
};

}  // namespace attnx
