// attnx: row-wise normalisations: layer_norm, rms_norm and log_softmax, over the last axis.
//
//   layer_norm(x, w, b, eps)  (x - mean) / sqrt(var + eps) * w + b   (var: the biased variance, as torch)
//   layer_norm(x, eps)        without the affine part
//   rms_norm(x, w, eps)       x / sqrt(mean(x^2) + eps) * w
//   rms_norm(x, eps)
//   log_softmax(x)            x - max - log(sum exp(x - max)): log of softmax(x) with its special values
//                             (a row of only -inf: all -inf; NaN anywhere: the row NaN; +inf entries:
//                             -log(count of +inf), the others -inf)
// w and b are rank-1 expressions with the extent of x's last axis (the features). Like softmax, each is
// evaluated a row at a time into a buffer of one row: x's row is read once (two passes over the buffer for
// the mean and the variance, the variance from the centred values), then w and b are applied.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/expr/elementwise.hpp"
#include "attnx/core/expression.hpp"
#include "attnx/expr/reduce.hpp"
#include "attnx/math/constexpr_math.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/shape/shape.hpp"

namespace attnx {

// The normalisations of layer_norm (mean and variance) and rms_norm (root mean square).
enum class norm_kind { layer, rms };

// W and B: rank-1 expressions, or scalar<T>(1) / scalar<T>(0) when not given.
template <norm_kind Kind, class A, class W, class B>
class norm_expr : public expression_tag {
 public:
  using value_type = value_t<A>;
  using shape_type = shape_of_t<A>;
  constexpr norm_expr(A a, W w, B b, value_type eps) : a_(std::move(a)), w_(std::move(w)), b_(std::move(b)), eps_(eps) {}
  constexpr dims_t<shape_type::rank> dims() const { return dims_of(a_); }
  constexpr const A& operand() const noexcept { return a_; }
  constexpr const W& weight() const noexcept { return w_; }
  constexpr const B& bias() const noexcept { return b_; }
  constexpr value_type eps() const noexcept { return eps_; }
  constexpr auto operands() const { return boost::hana::make_tuple(&a_, &w_, &b_); }

 private:
  A a_;
  W w_;
  B b_;
  value_type eps_;
};

// A row's statistics as layer_norm (Kind layer) and rms_norm normalise it: the mean (0 for rms) into `mean`, and
// 1 / sqrt(biased variance (rms: mean square) + eps) returned. Shared by the evaluator and the gradient's rule.
template <norm_kind Kind, class T>
constexpr T norm_statistics(const T* x, std::size_t n, T eps, T& mean) {
  mean = 0;
  if constexpr (Kind == norm_kind::layer) {
    for (std::size_t j = 0; j < n; ++j) mean += x[j];
    mean /= static_cast<T>(n);
  }
  T ss = 0;
  for (std::size_t j = 0; j < n; ++j) ss += (x[j] - mean) * (x[j] - mean);
  return T(1) / math::sqrt(ss / static_cast<T>(n) + eps);
}

// log_softmax(a) along the last axis, the node.
template <class A>
class log_softmax_expr : public unary_node<A> {
 public:
  using unary_node<A>::unary_node;
};

namespace rules {
// A normalisation's weight or bias against x's shape S: rank 1, the extent of S's last axis. `what` names it in
// the run-time message.
template <class S, class WS, bool Quiet = false>
constexpr bool check_norm_weight() {
  constexpr bool rank_ok = WS::rank == 1;
  static_assert(Quiet || rank_ok || error::holds<error::norm_weight_must_be_rank_1<error::weight_rank<WS::rank>>>,
                "attnx: layer_norm / rms_norm: the weight and the bias must have one axis (the features)");
  if constexpr (rank_ok && S::rank >= 1) {
    constexpr bool extent_ok = may_equal_extents(WS::extents[0], S::cols);
    static_assert(Quiet || extent_ok ||
                      error::holds<error::norm_weight_extent_differs<error::weight_extent<WS::extents[0]>, error::features<S::cols>>>,
                  "attnx: layer_norm / rms_norm: the weight's (or bias') extent differs from the operand's last axis");
    return extent_ok;
  } else {
    return rank_ok;
  }
}
// (a weight or bias not given is a scalar: nothing to check)
template <class S, class W, class T, bool Quiet>
constexpr bool check_norm_operand() {
  if constexpr (std::is_same_v<W, scalar<T>>) {
    return true;
  } else {
    return check_norm_weight<S, shape_of_t<W>, Quiet>();
  }
}
template <class S, class WS>
constexpr void check_norm_weight_dims(const dims_t<S::rank>& x, const dims_t<WS::rank>& w) {
  if (w[0] != x[S::rank - 1])
    detail::throw_extent_error("layer_norm / rms_norm: the weight's (or bias') extent differs from the operand's last axis",
                               "weight_extent", w[0], "features", x[S::rank - 1]);
}
}  // namespace rules

namespace detail {
template <norm_kind Kind, class A, class W, class B>
constexpr auto make_norm(A&& a, W&& w, B&& b, value_t<A> eps) {
  using S = shape_of_t<A>;
  using T = value_t<A>;
  constexpr bool quiet = any_failed_v<A, W, B>;
  constexpr bool rank_ok = rules::check_row_op<S, quiet>();
  constexpr bool w_ok = rules::check_norm_operand<S, std::remove_cvref_t<W>, T, quiet || !rank_ok>();
  constexpr bool b_ok = rules::check_norm_operand<S, std::remove_cvref_t<B>, T, quiet || !rank_ok || !w_ok>();
  constexpr bool tw_ok = rules::check_element_types<T, value_t<W>, quiet || !rank_ok || !w_ok || !b_ok>();
  constexpr bool tb_ok = rules::check_element_types<T, value_t<B>, quiet || !rank_ok || !w_ok || !b_ok || !tw_ok>();
  if constexpr (quiet || !rank_ok || !w_ok || !b_ok || !tw_ok || !tb_ok) {
    return failed_expr<T, S>{};
  } else {
    if constexpr (!std::is_same_v<std::remove_cvref_t<W>, scalar<T>> && (!S::is_static || !shape_of_t<W>::is_static))
      rules::check_norm_weight_dims<S, shape_of_t<W>>(dims_of(a), dims_of(w));
    if constexpr (!std::is_same_v<std::remove_cvref_t<B>, scalar<T>> && (!S::is_static || !shape_of_t<B>::is_static))
      rules::check_norm_weight_dims<S, shape_of_t<B>>(dims_of(a), dims_of(b));
    return norm_expr<Kind, stored_t<A>, stored_t<W>, stored_t<B>>(store(std::forward<A>(a)), store(std::forward<W>(w)),
                                                                   store(std::forward<B>(b)), eps);
  }
}
}  // namespace detail

// torch.nn.LayerNorm's default eps is 1e-5.
template <expression A, expression W, expression B>
constexpr auto layer_norm(A&& a, W&& w, B&& b, value_t<A> eps = value_t<A>(1e-5)) {
  return detail::make_norm<norm_kind::layer>(std::forward<A>(a), std::forward<W>(w), std::forward<B>(b), eps);
}
template <expression A>
constexpr auto layer_norm(A&& a, value_t<A> eps = value_t<A>(1e-5)) {
  using T = value_t<A>;
  return detail::make_norm<norm_kind::layer>(std::forward<A>(a), scalar<T>(T(1)), scalar<T>(T(0)), eps);
}
template <expression A, expression W>
constexpr auto rms_norm(A&& a, W&& w, value_t<A> eps = value_t<A>(1e-6)) {
  using T = value_t<A>;
  return detail::make_norm<norm_kind::rms>(std::forward<A>(a), std::forward<W>(w), scalar<T>(T(0)), eps);
}
template <expression A>
constexpr auto rms_norm(A&& a, value_t<A> eps = value_t<A>(1e-6)) {
  using T = value_t<A>;
  return detail::make_norm<norm_kind::rms>(std::forward<A>(a), scalar<T>(T(1)), scalar<T>(T(0)), eps);
}
template <expression A>
constexpr auto log_softmax(A&& a) {
  constexpr bool ok = rules::check_row_op<shape_of_t<A>, failed_v<A>>();
  return detail::make_row_node<log_softmax_expr, shape_of_t<A>, ok>(std::forward<A>(a));
}

namespace detail {
template <class X>
concept foreign_operand = !expression<X> && !arithmetic<X>;  // (a number is an eps, not a foreign operand)
}
template <class A, class... R>
  requires(detail::foreign_operand<A> || (detail::foreign_operand<R> || ...)) && (sizeof...(R) <= 3)
constexpr auto layer_norm(A&&, R&&...) {
  return foreign_arguments<A, std::conditional_t<arithmetic<R>, scalar<float>, R>...>();
}
template <class A, class... R>
  requires(detail::foreign_operand<A> || (detail::foreign_operand<R> || ...)) && (sizeof...(R) <= 2)
constexpr auto rms_norm(A&&, R&&...) {
  return foreign_arguments<A, std::conditional_t<arithmetic<R>, scalar<float>, R>...>();
}
template <class A>
  requires any_foreign<A>
constexpr auto log_softmax(A&&) {
  return foreign_arguments<A>();
}

}  // namespace attnx
