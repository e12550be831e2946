// attnx: functions of a score's position. The placeholders batch_pos, head_pos, q_pos and k_pos, what is built from
// them, and the nodes that apply such functions to scores (..., L_q, L_k):
//
//   S + 0.5 * (q_pos - k_pos)                         scores (+ - * /) a position expression p: S(b,h,i,j) op p(b,h,i,j)
//   S - index_select(slopes, head_pos) * (q_pos - k_pos)   a table read at a position (ALiBi written out)
//   S + index_select(rel, k_pos - q_pos + 127)        a relative bias table (T5, Shaw et al.)
//   map([](float s, auto b, auto h, auto i, auto j) { return ...; }, S)    any function of the score and its position
//   mask(S, mask_fn(abs(q_pos - k_pos) <= 64))        a mask as a function of the position (true = allowed), or
//   mask(S, mask_fn([](auto b, auto h, auto i, auto j) { return ...; }))
//   position_fn([](auto b, auto h, auto i, auto j) { return ...; })   a user function as a position expression
//
// Positions, as the kernel numbers them: j is the key (the last axis) and i the query (axis -2). For rank-4 scores h is
// axis -3 (the query head, under GQA too) and b axis -4 (the leading axes flattened for rank 5 and more); rank 3 has b
// on axis 0 and h = 0; rank 2 has b = h = 0. All four are std::ptrdiff_t, so q_pos - k_pos is signed. A position
// expression's value is converted to the scores' element type, then combined with the score in that type.
//
// Tables are read at the index clamped into [0, n): a relative distance beyond the table takes its last (or first)
// entry, as T5's largest bucket and Shaw et al.'s clipping do. A table is held by pointer: it must outlive the
// expression.
//
// The fused kernel runs all of these tile by tile (eval/fused.hpp): the function is compiled where the expression is
// written, into a loop over a tile of scores that the kernel calls once per tile, and mask_fn's tiles that are
// blocked entirely are skipped. In a constant evaluation the row evaluators compute the same values.
#pragma once

#include <cstddef>
#include <limits>
#include <type_traits>
#include <utility>

#include "attnx/core/expression.hpp"
#include "attnx/expr/elementwise.hpp"
#include "attnx/expr/mask.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/shape/shape.hpp"

namespace attnx {

// A function of a score's position, p(b, h, i, j) (each a std::ptrdiff_t): the placeholders and what is built from them.
template <class F>
struct position_function : position_tag {
  [[no_unique_address]] F f;
  constexpr auto operator()(std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t i, std::ptrdiff_t j) const {
    return f(b, h, i, j);
  }
};

namespace detail {
template <std::size_t Which>  // 0: b, 1: h, 2: i, 3: j
struct position_index {
  constexpr std::ptrdiff_t operator()(std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t i, std::ptrdiff_t j) const {
    return Which == 0 ? b : Which == 1 ? h : Which == 2 ? i : j;
  }
};
template <class U>
struct position_constant {
  U v;
  constexpr U operator()(std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t) const { return v; }
};
template <class X>
constexpr auto as_position(X x) {
  if constexpr (position_expression<X>) return x;
  else return position_function<position_constant<X>>{{}, {x}};
}
template <class Op, class X, class Y>
struct position_binary {
  X x;
  Y y;
  constexpr auto operator()(std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t i, std::ptrdiff_t j) const {
    return Op{}(x(b, h, i, j), y(b, h, i, j));
  }
};
template <class Op, class X>
struct position_unary {
  X x;
  constexpr auto operator()(std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t i, std::ptrdiff_t j) const {
    return Op{}(x(b, h, i, j));
  }
};
namespace pos_ops {
struct plus { template <class A, class B> constexpr auto operator()(A a, B b) const { return a + b; } };
struct minus { template <class A, class B> constexpr auto operator()(A a, B b) const { return a - b; } };
struct multiplies { template <class A, class B> constexpr auto operator()(A a, B b) const { return a * b; } };
struct divides { template <class A, class B> constexpr auto operator()(A a, B b) const { return a / b; } };
struct modulus { template <class A, class B> constexpr auto operator()(A a, B b) const { return a % b; } };
struct less { template <class A, class B> constexpr bool operator()(A a, B b) const { return a < b; } };
struct less_equal { template <class A, class B> constexpr bool operator()(A a, B b) const { return a <= b; } };
struct greater { template <class A, class B> constexpr bool operator()(A a, B b) const { return a > b; } };
struct greater_equal { template <class A, class B> constexpr bool operator()(A a, B b) const { return a >= b; } };
struct equal_to { template <class A, class B> constexpr bool operator()(A a, B b) const { return a == b; } };
struct not_equal_to { template <class A, class B> constexpr bool operator()(A a, B b) const { return a != b; } };
struct logical_and { template <class A, class B> constexpr bool operator()(A a, B b) const { return a && b; } };
struct logical_or { template <class A, class B> constexpr bool operator()(A a, B b) const { return a || b; } };
struct maximum { template <class A, class B> constexpr auto operator()(A a, B b) const { return a < b ? b : a; } };
struct minimum { template <class A, class B> constexpr auto operator()(A a, B b) const { return b < a ? b : a; } };
struct negate { template <class A> constexpr auto operator()(A a) const { return -a; } };
struct logical_not { template <class A> constexpr bool operator()(A a) const { return !a; } };
struct abs { template <class A> constexpr auto operator()(A a) const { return a < A(0) ? -a : a; } };
}  // namespace pos_ops
template <class Op, class X, class Y>
constexpr auto position_op(X x, Y y) {
  auto px = as_position(x);
  auto py = as_position(y);
  return position_function<position_binary<Op, decltype(px), decltype(py)>>{{}, {px, py}};
}
}  // namespace detail

// The placeholders: the batch item, the head, the query and the key of a score.
inline constexpr position_function<detail::position_index<0>> batch_pos{};
inline constexpr position_function<detail::position_index<1>> head_pos{};
inline constexpr position_function<detail::position_index<2>> q_pos{};
inline constexpr position_function<detail::position_index<3>> k_pos{};

// position_fn(f): f(b, h, i, j) (std::ptrdiff_t each, returning a number or a bool) as a position expression.
template <class F>
  requires std::is_invocable_v<const F&, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t>
constexpr auto position_fn(F f) {
  return position_function<F>{{}, std::move(f)};
}

// Position expressions with each other and with numbers: arithmetic, comparisons, logic, abs, minimum, maximum.
template <class X, class Y>
concept position_operands = (position_expression<X> || position_expression<Y>) &&
                            (position_expression<X> || arithmetic<X>) && (position_expression<Y> || arithmetic<Y>);
#define ATTNX_POSITION_OPERATOR(SYMBOL, OP)                                            \
  template <class X, class Y>                                                          \
    requires position_operands<X, Y>                                                   \
  constexpr auto operator SYMBOL(X x, Y y) {                                           \
    return detail::position_op<detail::pos_ops::OP>(x, y);                             \
  }
ATTNX_POSITION_OPERATOR(+, plus)
ATTNX_POSITION_OPERATOR(-, minus)
ATTNX_POSITION_OPERATOR(*, multiplies)
ATTNX_POSITION_OPERATOR(/, divides)
ATTNX_POSITION_OPERATOR(%, modulus)
ATTNX_POSITION_OPERATOR(<, less)
ATTNX_POSITION_OPERATOR(<=, less_equal)
ATTNX_POSITION_OPERATOR(>, greater)
ATTNX_POSITION_OPERATOR(>=, greater_equal)
ATTNX_POSITION_OPERATOR(==, equal_to)
ATTNX_POSITION_OPERATOR(!=, not_equal_to)
ATTNX_POSITION_OPERATOR(&&, logical_and)
ATTNX_POSITION_OPERATOR(||, logical_or)
#undef ATTNX_POSITION_OPERATOR
template <class X, class Y>
  requires position_operands<X, Y>
constexpr auto maximum(X x, Y y) { return detail::position_op<detail::pos_ops::maximum>(x, y); }
template <class X, class Y>
  requires position_operands<X, Y>
constexpr auto minimum(X x, Y y) { return detail::position_op<detail::pos_ops::minimum>(x, y); }
template <position_expression X>
constexpr auto operator-(X x) { return position_function<detail::position_unary<detail::pos_ops::negate, X>>{{}, {x}}; }
template <position_expression X>
constexpr auto operator!(X x) { return position_function<detail::position_unary<detail::pos_ops::logical_not, X>>{{}, {x}}; }
template <position_expression X>
constexpr auto abs(X x) { return position_function<detail::position_unary<detail::pos_ops::abs, X>>{{}, {x}}; }

namespace detail {
template <class U, class P>
struct position_table {
  const U* data;
  std::ptrdiff_t n;
  P index;
  constexpr U operator()(std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t i, std::ptrdiff_t j) const {
    const auto k = static_cast<std::ptrdiff_t>(index(b, h, i, j));
    return data[k < 0 ? 0 : k >= n ? n - 1 : k];
  }
};
}  // namespace detail

namespace rules {
template <class S, bool Quiet = false>
constexpr bool check_position_table() {
  static_assert(Quiet || S::rank == 1 || error::holds<error::position_table_needs_rank_1<error::rank<S::rank>>>,
                "attnx: index_select(table, position): the table must have one axis (one entry per index)");
  return S::rank == 1;
}
}  // namespace rules

// index_select(table, p): table[p(b, h, i, j)], the index clamped into [0, n) (above); table a rank-1 tensor or view
// of at least one entry, which must outlive the expression.
template <expression X, position_expression P>
  requires dense_terminal<X>
constexpr auto index_select(const X& table, P p) {
  using U = std::remove_cv_t<std::remove_pointer_t<decltype(table.data())>>;
  constexpr bool ok = rules::check_position_table<shape_of_t<X>>();
  const std::size_t n = ok ? dims_of(table)[0] : 1;
  if (n == 0) ATTNX_THROW(std::invalid_argument("attnx: index_select(table, position): the table is empty"));
  return position_function<detail::position_table<U, P>>{{}, {table.data(), static_cast<std::ptrdiff_t>(n), p}};
}
template <class T, class S, position_expression P>
constexpr auto index_select(basic_tensor<T, S>&& table, P p) = delete;  // a temporary table would dangle

// ---- scores with a position expression -------------------------------------------------------------------------
// S op p (PositionFirst: p op S), element-wise over scores S (rank >= 2); the node.
template <class Op, class A, class P, bool PositionFirst>
class position_op_expr : public unary_node<A> {
 public:
  constexpr position_op_expr(A a, P p) : unary_node<A>(std::move(a)), p_(std::move(p)) {}
  constexpr const P& positions() const noexcept { return p_; }

 private:
  P p_;
};

namespace rules {
template <class S, bool Quiet = false>
constexpr bool check_position_scores() {
  static_assert(Quiet || S::rank >= 2 || error::holds<error::positions_need_rank_2_scores<error::rank<S::rank>>>,
                "attnx: positions: a function of the position needs scores of at least two axes (queries x keys)");
  return S::rank >= 2;
}
}  // namespace rules

namespace detail {
template <class Op, bool PositionFirst, class A, class P>
constexpr auto make_position_op(A&& a, P p) {
  constexpr bool ok = rules::check_position_scores<shape_of_t<A>, failed_v<A>>();
  if constexpr (!ok || failed_v<A>) {
    return failed_expr<value_t<A>, shape_of_t<A>>{};
  } else {
    return position_op_expr<Op, stored_t<A>, P, PositionFirst>(store(std::forward<A>(a)), std::move(p));
  }
}
}  // namespace detail

// S + p and p + S: the scores with a position expression.
template <expression A, position_expression P>
constexpr auto operator+(A&& a, P p) { return detail::make_position_op<ops::plus, false>(std::forward<A>(a), p); }
template <expression A, position_expression P>
constexpr auto operator+(P p, A&& a) { return detail::make_position_op<ops::plus, true>(std::forward<A>(a), p); }
// S - p and p - S: the scores with a position expression.
template <expression A, position_expression P>
constexpr auto operator-(A&& a, P p) { return detail::make_position_op<ops::minus, false>(std::forward<A>(a), p); }
template <expression A, position_expression P>
constexpr auto operator-(P p, A&& a) { return detail::make_position_op<ops::minus, true>(std::forward<A>(a), p); }
// S * p and p * S: the scores with a position expression.
template <expression A, position_expression P>
constexpr auto operator*(A&& a, P p) { return detail::make_position_op<ops::multiplies, false>(std::forward<A>(a), p); }
template <expression A, position_expression P>
constexpr auto operator*(P p, A&& a) { return detail::make_position_op<ops::multiplies, true>(std::forward<A>(a), p); }
// S / p and p / S: the scores with a position expression.
template <expression A, position_expression P>
constexpr auto operator/(A&& a, P p) { return detail::make_position_op<ops::divides, false>(std::forward<A>(a), p); }
template <expression A, position_expression P>
constexpr auto operator/(P p, A&& a) { return detail::make_position_op<ops::divides, true>(std::forward<A>(a), p); }

// ---- masks as functions of the position --------------------------------------------------------------------------
// mask_fn(f): the key j is allowed for query i (batch item b, head h) iff f(b, h, i, j); f a position expression of
// bool, or any callable of four std::ptrdiff_t returning bool.
template <class F>
struct function_mask {
  F f;
};
namespace rules {
template <class F, bool Quiet = false>
constexpr bool check_mask_function() {
  using R = std::invoke_result_t<const F&, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t>;
  constexpr bool ok = std::is_same_v<std::remove_cvref_t<R>, bool>;
  static_assert(Quiet || ok || error::holds<error::mask_function_not_boolean<error::result_type<R>>>,
                "attnx: mask_fn(f): f(b, h, i, j) must return bool (true = the key is allowed)");
  return ok;
}
}  // namespace rules
template <class F>
  requires std::is_invocable_v<const F&, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t>
constexpr auto mask_fn(F f) {
  if constexpr (position_expression<F>) {
    return function_mask<F>{std::move(f)};
  } else {
    return function_mask<position_function<F>>{{{}, std::move(f)}};
  }
}
template <expression A, class F>
constexpr auto mask(A&& a, function_mask<F> m, value_t<A> fill = -std::numeric_limits<value_t<A>>::infinity()) {
  constexpr bool quiet = failed_v<A>;
  constexpr bool rank_ok = rules::check_matrix_scores<shape_of_t<A>, quiet>();
  constexpr bool fn_ok = rules::check_mask_function<F, quiet || !rank_ok>();
  return detail::make_masked<rank_ok && fn_ok>(std::forward<A>(a), std::move(m), fill);
}

// score_mod(f): f(score, b, h, i, j) among attention()'s masks, in order (map(f, S) on the scores there).
template <class F>
struct score_mod_fn {
  F f;
};
template <class F>
constexpr score_mod_fn<F> score_mod(F f) {
  return {std::move(f)};
}

namespace detail {
// The kernel's (b, h, i) of row r of scores of shape S (extents d), j being the column.
template <class S>
struct score_rows {
  constexpr explicit score_rows(const dims_t<S::rank>& d) : lq(d[S::rank - 2]) {
    if constexpr (S::rank >= 4) heads = d[S::rank - 3];
  }
  constexpr void row(std::size_t r) {
    i = static_cast<std::ptrdiff_t>(r % lq.value);
    const std::size_t q = r / lq.value;
    if constexpr (S::rank >= 4) {
      h = static_cast<std::ptrdiff_t>(q % heads);
      b = static_cast<std::ptrdiff_t>(q / heads);
    } else {
      b = static_cast<std::ptrdiff_t>(q);
    }
  }
  [[no_unique_address]] extent_value<S::extents[S::rank - 2]> lq;
  std::size_t heads = 1;
  std::ptrdiff_t b = 0, h = 0, i = 0;
};
}  // namespace detail

}  // namespace attnx
