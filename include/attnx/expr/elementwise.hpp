// attnx: element-wise nodes (+ - x / with broadcasting, scalars, exp, tanh, activations, maximum / minimum).
//
// Element-wise nodes never compute anything themselves: their evaluator composes the operands'
// element accessors, so a chain like exp(a - b) * 2 + c becomes one loop with no temporaries.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/core/expression.hpp"
#include "attnx/math/constexpr_math.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/shape/shape.hpp"

namespace attnx {

namespace ops {
// The element-wise operations of the nodes: one function object per operation, applied to one element (or a pair).
struct plus { template <class A, class B> constexpr auto operator()(A a, B b) const { return a + b; } };
struct minus { template <class A, class B> constexpr auto operator()(A a, B b) const { return a - b; } };
struct multiplies { template <class A, class B> constexpr auto operator()(A a, B b) const { return a * b; } };
struct divides { template <class A, class B> constexpr auto operator()(A a, B b) const { return a / b; } };
struct negate { template <class A> constexpr A operator()(A a) const { return -a; } };
struct exp { template <class A> constexpr A operator()(A a) const { return math::exp(a); } };
struct log { template <class A> constexpr A operator()(A a) const { return math::log(a); } };
struct tanh { template <class A> constexpr A operator()(A a) const { return math::tanh(a); } };
struct sqrt { template <class A> constexpr A operator()(A a) const { return math::sqrt(a); } };
struct abs { template <class A> constexpr A operator()(A a) const { return a < A(0) ? -a : a; } };
struct square { template <class A> constexpr A operator()(A a) const { return a * a; } };
struct logical_not { constexpr bool operator()(bool a) const { return !a; } };
// Activations (PyTorch's definitions; NaN stays NaN). At -inf, silu, gelu and gelu_tanh give their limit 0
// (the formulas, and PyTorch, give -inf * 0 = NaN there).
struct relu { template <class A> constexpr A operator()(A a) const { return a < A(0) ? A(0) : a; } };
// 1 / (1 + e^-a), from e^-|a| so that no exp overflows (constant evaluation refuses an infinite intermediate).
struct sigmoid {
  template <class A> constexpr A operator()(A a) const {
    if (a >= A(0)) return A(1) / (A(1) + math::exp(-a));
    const A e = math::exp(a);  // a < 0 or NaN
    return e / (A(1) + e);
  }
};
struct silu {
  template <class A> constexpr A operator()(A a) const { return a == -std::numeric_limits<A>::infinity() ? A(0) : a * sigmoid{}(a); }
};
// GELU, exact: a Phi(a) = a/2 (1 + erf(a / sqrt 2)) (torch.nn.GELU()).
struct gelu {
  template <class A> constexpr A operator()(A a) const {
    if (a == -std::numeric_limits<A>::infinity()) return A(0);
    return A(0.5) * a * (A(1) + math::erf(a * A(0.70710678118654752440)));
  }
};
// GELU, tanh form: a/2 (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))) (torch.nn.GELU(approximate='tanh'); GPT-2's
// "gelu_new"), computed as a / (1 + e^(-2u)) with u = sqrt(2/pi) (a + 0.044715 a^3) (the same function: 1 + tanh u
// = 2 / (1 + e^-2u)), in double: no cancellation in 1 + tanh, and one exp instead of a tanh (glibc's tanhf is about
// 2.5 times slower than a double exp; this is the MLP's activation in GPT-2). For |a| >= 10 the result is a, or -0
// (what the formula gives in float and double), without cubing a large a into an overflow.
struct gelu_tanh {
  template <class A> constexpr A operator()(A a) const {
    if (a >= A(10)) return a;
    if (a <= A(-10)) return -A(0);
    const double x = static_cast<double>(a);
    const double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
    return static_cast<A>(x / (1.0 + math::exp(-2.0 * u)));
  }
};
// The derivatives of silu and gelu_tanh as functions of a (their gradients' rules, grad/backward.hpp).
struct d_silu {
  template <class A> constexpr A operator()(A a) const {
    if (a == -std::numeric_limits<A>::infinity()) return A(0);
    const A s = ops::sigmoid{}(a);
    return s * (A(1) + a * (A(1) - s));
  }
};
struct d_gelu_tanh {  // 1/2 (1 + tanh u) + 1/2 a (1 - tanh^2 u) u', u = sqrt(2/pi) (a + 0.044715 a^3); in double
  template <class A> constexpr A operator()(A a) const {
    if (a >= A(10)) return A(1);
    if (a <= A(-10)) return A(0);
    const double x = static_cast<double>(a);
    const double c = 0.79788456080286535588;
    const double t = math::tanh(c * (x + 0.044715 * x * x * x));
    return static_cast<A>(0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x));
  }
};
// NaN in either operand gives NaN (torch.maximum / torch.minimum).
struct maximum { template <class A> constexpr A operator()(A a, A b) const { return a != a ? a : b != b ? b : a < b ? b : a; } };
struct minimum { template <class A> constexpr A operator()(A a, A b) const { return a != a ? a : b != b ? b : b < a ? b : a; } };
}  // namespace ops

// Op(a) element-wise: exp, log, tanh, sqrt, abs, square, the activations, logical not.
template <class Op, class A>
class unary_expr : public unary_node<A> {
 public:
  using unary_node<A>::unary_node;
};

// Op's result type on operands of type T: bool for a comparison, else T.
template <class Op, class T>
using op_result_t = std::conditional_t<std::is_same_v<decltype(Op{}(T{}, T{})), bool>, bool, T>;

// Op(a, b) element-wise, with broadcasting: the arithmetic operators, maximum / minimum, comparisons (a bool
// result, expr/select.hpp).
template <class Op, class A, class B>
class binary_expr : public binary_node<A, B> {
 public:
  using operand_type = std::common_type_t<value_t<A>, value_t<B>>;
  using value_type = op_result_t<Op, operand_type>;
  using shape_type = broadcast_shape_t<shape_of_t<A>, shape_of_t<B>>;
  using binary_node<A, B>::binary_node;
  constexpr dims_t<shape_type::rank> dims() const;
};

namespace rules {
// The broadcasting rule, right-aligned: per axis, equal extents (with unifiable names) or one of them 1.
// Returns the first offending axis of the result, or the result's rank when there is none.
template <class A, class B>
constexpr std::size_t first_broadcast_mismatch(bool names) {
  constexpr std::size_t R = A::rank > B::rank ? A::rank : B::rank;
  std::size_t bad = R;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((bad == R && [&] {
       using ax = detail::aligned_axis_t<A, R, I>;
       using ay = detail::aligned_axis_t<B, R, I>;
       // Matched axes (equal extents, or a dyn one against anything but a static 1) must have unifiable names;
       // two static extents must be equal or one of them 1 (a dyn one is checked at run time).
       constexpr bool stretched = (ax::extent == 1) != (ay::extent == 1);  // one side a static 1, not both
       if (names) return may_equal_extents(ax::extent, ay::extent) && !stretched && !names_unify_v<typename ax::name, typename ay::name>;
       return !may_equal_extents(ax::extent, ay::extent) && ax::extent != 1 && ay::extent != 1;
     }() ? (bad = I, 0) : 0),
     ...);
  }(std::make_index_sequence<R>{});
  return bad;
}

// The run-time half, for axes where an extent is dyn: equal extents unless one side is a static 1. `what`
// names the operation in the message.
template <class A, class B>
constexpr void check_elementwise_dims(const dims_t<A::rank>& a, const dims_t<B::rank>& b,
                                      const char* what = "element-wise operation") {
  constexpr std::size_t R = A::rank > B::rank ? A::rank : B::rank;
  for (std::size_t i = 0; i < R; ++i) {
    const bool in_a = i + A::rank >= R, in_b = i + B::rank >= R;
    const std::size_t sa = in_a ? A::extents[i + A::rank - R] : 1, sb = in_b ? B::extents[i + B::rank - R] : 1;
    if ((sa != dyn && sb != dyn) || sa == 1 || sb == 1) continue;
    const std::size_t ea = a[i + A::rank - R], eb = b[i + B::rank - R];
    if (ea != eb)
      detail::throw_extent_error(std::string(what) + ": the operands' extents differ on axis " + std::to_string(i) +
                                     " (lhs " + shape_string<A>(a) + ", rhs " + shape_string<B>(b) + ")",
                                 "lhs_extent", ea, "rhs_extent", eb);
  }
}

template <class A, class B, bool Quiet = false>
constexpr bool check_elementwise() {
  constexpr std::size_t R = A::rank > B::rank ? A::rank : B::rank;
  constexpr std::size_t e = first_broadcast_mismatch<A, B>(false);
  constexpr std::size_t n = first_broadcast_mismatch<A, B>(true);
  using EX = detail::aligned_axis_t<A, R, (e < R ? e : 0)>;
  using EY = detail::aligned_axis_t<B, R, (e < R ? e : 0)>;
  static_assert(Quiet || e == R ||
                    error::holds<error::elementwise_extents_differ<error::axis_index<e>, error::lhs_extent<EX::extent>,
                                                                   error::rhs_extent<EY::extent>>>,
                "attnx: element-wise operation: the operands' extents differ on an axis where neither is 1");
  using NX = detail::aligned_axis_t<A, R, (n < R ? n : 0)>;
  using NY = detail::aligned_axis_t<B, R, (n < R ? n : 0)>;
  static_assert(Quiet || e < R || n == R ||
                    error::holds<error::elementwise_axes_differ<error::axis_index<n>, error::lhs_axis<typename NX::name>,
                                                                error::rhs_axis<typename NY::name>>>,
                "attnx: element-wise operation: the operands' axis names differ");
  return e == R && n == R;
}
}  // namespace rules

// Node<Op, stored A, stored B> of element type R (element-wise with broadcasting), or a
// failed_expr when a rule failed (reported unless an operand had failed). `what` names the operation in a
// run-time extent error.
template <template <class, class, class> class Node, class Op, class R, class A, class B>
constexpr auto make_broadcast_node(A&& a, B&& b, const char* what) {
  using SA = shape_of_t<A>;
  using SB = shape_of_t<B>;
  constexpr bool quiet = any_failed_v<A, B>;
  constexpr bool shapes_ok = rules::check_elementwise<SA, SB, quiet>();
  constexpr bool types_ok = rules::check_element_types<value_t<A>, value_t<B>, quiet || !shapes_ok>();
  if constexpr (quiet || !shapes_ok || !types_ok) {
    return failed_expr<R, broadcast_shape_t<SA, SB>>{};
  } else {
    if constexpr (!SA::is_static || !SB::is_static) rules::check_elementwise_dims<SA, SB>(dims_of(a), dims_of(b), what);
    return Node<Op, stored_t<A>, stored_t<B>>(store(std::forward<A>(a)), store(std::forward<B>(b)));
  }
}
template <class Op, class A, class B>
constexpr auto make_binary(A&& a, B&& b) {
  return make_broadcast_node<binary_expr, Op, op_result_t<Op, std::common_type_t<value_t<A>, value_t<B>>>>(
      std::forward<A>(a), std::forward<B>(b), "element-wise operation");
}

// The extents of a broadcast result: per axis, the operand's that is not a static 1.
template <class SA, class SB>
constexpr dims_t<broadcast_shape_t<SA, SB>::rank> broadcast_dims(const dims_t<SA::rank>& a, const dims_t<SB::rank>& b) {
  constexpr std::size_t R = SA::rank > SB::rank ? SA::rank : SB::rank;
  dims_t<R> out{};
  for (std::size_t i = 0; i < R; ++i) {
    const bool in_a = i + SA::rank >= R, in_b = i + SB::rank >= R;
    const std::size_t sa = in_a ? SA::extents[i + SA::rank - R] : 1;
    const std::size_t eb = in_b ? b[i + SB::rank - R] : 1;
    out[i] = sa == 1 ? eb : a[i + SA::rank - R];
  }
  return out;
}
template <class Op, class A, class B>
constexpr dims_t<binary_expr<Op, A, B>::shape_type::rank> binary_expr<Op, A, B>::dims() const {
  return broadcast_dims<shape_of_t<A>, shape_of_t<B>>(dims_of(this->lhs()), dims_of(this->rhs()));
}
template <class Op, class A>
constexpr auto make_unary(A&& a) {
  if constexpr (failed_v<A>) {
    return std::remove_cvref_t<A>{};
  } else {
    return unary_expr<Op, stored_t<A>>(store(std::forward<A>(a)));
  }
}

// A number (an integer or floating-point type): the other operand of expression (op) number.
template <class S>
concept arithmetic = std::is_arithmetic_v<std::remove_cvref_t<S>>;

// Expression (op) expression, element-wise with broadcasting. (`*` between two expressions is the
// matrix product: see matmul.hpp; the element-wise product is hadamard(a, b).)
template <expression A, expression B>
constexpr auto operator+(A&& a, B&& b) { return make_binary<ops::plus>(std::forward<A>(a), std::forward<B>(b)); }
template <expression A, expression B>
constexpr auto operator-(A&& a, B&& b) { return make_binary<ops::minus>(std::forward<A>(a), std::forward<B>(b)); }
template <expression A, expression B>
constexpr auto operator/(A&& a, B&& b) { return make_binary<ops::divides>(std::forward<A>(a), std::forward<B>(b)); }
template <expression A, expression B>
constexpr auto hadamard(A&& a, B&& b) { return make_binary<ops::multiplies>(std::forward<A>(a), std::forward<B>(b)); }

// Expression (op) number: the number becomes a scalar of the expression's element type.
template <expression A, arithmetic S>
constexpr auto operator+(A&& a, S s) { return std::forward<A>(a) + scalar<value_t<A>>(static_cast<value_t<A>>(s)); }
template <expression A, arithmetic S>
constexpr auto operator+(S s, A&& a) { return scalar<value_t<A>>(static_cast<value_t<A>>(s)) + std::forward<A>(a); }
template <expression A, arithmetic S>
constexpr auto operator-(A&& a, S s) { return std::forward<A>(a) - scalar<value_t<A>>(static_cast<value_t<A>>(s)); }
template <expression A, arithmetic S>
constexpr auto operator-(S s, A&& a) { return scalar<value_t<A>>(static_cast<value_t<A>>(s)) - std::forward<A>(a); }
template <expression A, arithmetic S>
constexpr auto operator*(A&& a, S s) { return hadamard(std::forward<A>(a), scalar<value_t<A>>(static_cast<value_t<A>>(s))); }
template <expression A, arithmetic S>
constexpr auto operator*(S s, A&& a) { return hadamard(std::forward<A>(a), scalar<value_t<A>>(static_cast<value_t<A>>(s))); }
template <expression A, arithmetic S>
constexpr auto operator/(A&& a, S s) { return std::forward<A>(a) / scalar<value_t<A>>(static_cast<value_t<A>>(s)); }
template <expression A, arithmetic S>
constexpr auto operator/(S s, A&& a) { return scalar<value_t<A>>(static_cast<value_t<A>>(s)) / std::forward<A>(a); }
template <expression A>
constexpr auto operator-(A&& a) { return make_unary<ops::negate>(std::forward<A>(a)); }

// An attnx expression combined with a foreign type (a std::vector, a span, another library's matrix): one
// error saying how to wrap it (see rules::check_expression_arguments).
template <class A, class B>
concept one_foreign_operand = (expression<A> != expression<B>) && !arithmetic<A> && !arithmetic<B> &&
                              !position_expression<A> && !position_expression<B>;
template <class A, class B>
  requires one_foreign_operand<A, B>
constexpr auto operator+(A&&, B&&) { return foreign_arguments<A, B>(); }
template <class A, class B>
  requires one_foreign_operand<A, B>
constexpr auto operator-(A&&, B&&) { return foreign_arguments<A, B>(); }
template <class A, class B>
  requires one_foreign_operand<A, B>
constexpr auto operator*(A&&, B&&) { return foreign_arguments<A, B>(); }
template <class A, class B>
  requires one_foreign_operand<A, B>
constexpr auto operator/(A&&, B&&) { return foreign_arguments<A, B>(); }
template <class A, class B>
  requires any_foreign<A, B>
constexpr auto hadamard(A&&, B&&) { return foreign_arguments<A, B>(); }

// Multiplication by a number: scale(S, 0.5).
template <expression A, arithmetic S>
constexpr auto scale(A&& a, S s) { return std::forward<A>(a) * s; }
// Division by a temperature: smaller tau, sharper softmax.
template <expression A, arithmetic S>
constexpr auto temperature(A&& a, S tau) { return std::forward<A>(a) / tau; }
template <class A, arithmetic S>
  requires any_foreign<A>
constexpr auto scale(A&&, S) { return foreign_arguments<A>(); }
template <class A, arithmetic S>
  requires any_foreign<A>
constexpr auto temperature(A&&, S) { return foreign_arguments<A>(); }

// exp, log, tanh, sqrt, abs, square and the activations (relu, sigmoid, silu, gelu, gelu_tanh: ops above) element-wise.
template <expression A> constexpr auto exp(A&& a) { return make_unary<ops::exp>(std::forward<A>(a)); }
template <expression A> constexpr auto log(A&& a) { return make_unary<ops::log>(std::forward<A>(a)); }
template <expression A> constexpr auto tanh(A&& a) { return make_unary<ops::tanh>(std::forward<A>(a)); }
template <expression A> constexpr auto sqrt(A&& a) { return make_unary<ops::sqrt>(std::forward<A>(a)); }
template <expression A> constexpr auto abs(A&& a) { return make_unary<ops::abs>(std::forward<A>(a)); }
template <expression A> constexpr auto square(A&& a) { return make_unary<ops::square>(std::forward<A>(a)); }
template <expression A> constexpr auto relu(A&& a) { return make_unary<ops::relu>(std::forward<A>(a)); }
template <expression A> constexpr auto sigmoid(A&& a) { return make_unary<ops::sigmoid>(std::forward<A>(a)); }
template <expression A> constexpr auto silu(A&& a) { return make_unary<ops::silu>(std::forward<A>(a)); }
template <expression A> constexpr auto gelu(A&& a) { return make_unary<ops::gelu>(std::forward<A>(a)); }
template <expression A> constexpr auto gelu_tanh(A&& a) { return make_unary<ops::gelu_tanh>(std::forward<A>(a)); }

// maximum(a, b), minimum(a, b): element-wise with broadcasting (a number becomes a scalar of the expression's type).
template <expression A, expression B>
constexpr auto maximum(A&& a, B&& b) { return make_binary<ops::maximum>(std::forward<A>(a), std::forward<B>(b)); }
template <expression A, expression B>
constexpr auto minimum(A&& a, B&& b) { return make_binary<ops::minimum>(std::forward<A>(a), std::forward<B>(b)); }
template <expression A, arithmetic S>
constexpr auto maximum(A&& a, S s) { return maximum(std::forward<A>(a), scalar<value_t<A>>(static_cast<value_t<A>>(s))); }
template <expression A, arithmetic S>
constexpr auto maximum(S s, A&& a) { return maximum(scalar<value_t<A>>(static_cast<value_t<A>>(s)), std::forward<A>(a)); }
template <expression A, arithmetic S>
constexpr auto minimum(A&& a, S s) { return minimum(std::forward<A>(a), scalar<value_t<A>>(static_cast<value_t<A>>(s))); }
template <expression A, arithmetic S>
constexpr auto minimum(S s, A&& a) { return minimum(scalar<value_t<A>>(static_cast<value_t<A>>(s)), std::forward<A>(a)); }
template <class A, class B>
  requires one_foreign_operand<A, B>
constexpr auto maximum(A&&, B&&) { return foreign_arguments<A, B>(); }
template <class A, class B>
  requires one_foreign_operand<A, B>
constexpr auto minimum(A&&, B&&) { return foreign_arguments<A, B>(); }

}  // namespace attnx
