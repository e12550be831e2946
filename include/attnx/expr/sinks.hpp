// attnx: attention sinks (gpt-oss; StreamingLLM's learned sink). A logit per head that joins every row's softmax
// denominator and carries no value:
//   o_i = sum_j e^(s_ij) v_j / (e^(sigma_h) + sum_j e^(s_ij))
//
//   attention(Q, K, V, masks..., sinks(t))   t a rank-1 tensor of one logit per head (or one for all), held by
//                                            reference: a leaf, so grad() gives its gradient too
//   attention(Q, K, V, masks..., sinks(x))   one number for every head
//   with_sinks(softmax(P) * V, t | x)        the same on attention written out
//
// It is the attention state (attnx/state.hpp) of the keys merged with a state (out 0, lse sigma_h): with
// lse_i = ln sum_j e^(s_ij), the output is f_i o_i, f_i = e^(lse_i) / (e^(lse_i) + e^(sigma_h)), and the row's
// log-sum-exp becomes ln(e^(lse_i) + e^(sigma_h)). Special values as a merge: a row with no visible key gives 0 (the
// sink takes all the weight), a +inf score keeps all of it, NaN stays NaN, a sink of -inf changes nothing. Heads are
// the scores' axis -3 (rank-4 scores); other ranks have one head.
#pragma once

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "attnx/core/expression.hpp"
#include "attnx/expr/elementwise.hpp"
#include "attnx/expr/matmul.hpp"
#include "attnx/expr/reduce.hpp"
#include "attnx/math/constexpr_math.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/tensor/tensor.hpp"

namespace attnx {

// The sinks of with_sinks: one number for every head, or a rank-1 tensor (a tensor_ref, or a view) of one per head.
template <class T>
struct sink_number {
  T value;
};
// sinks(t) / sinks(x): the argument of attention().
template <class Sk>
struct sink_logits {
  Sk s;
};
template <class T, class S>
constexpr auto sinks(const basic_tensor<T, S>& t) {
  static_assert(S::rank == 1 || error::holds<error::sinks_need_rank_1<error::rank<S::rank>>>,
                "attnx: sinks(t): t must have one axis (one logit per head)");
  return sink_logits<tensor_ref<T, S>>{tensor_ref<T, S>(t)};
}
template <class T, class S>
constexpr auto sinks(basic_tensor<T, S>&&) = delete;  // a temporary would dangle
template <arithmetic U>
constexpr auto sinks(U x) {
  return sink_logits<sink_number<U>>{{x}};
}

namespace detail {
template <class X>
inline constexpr bool is_sink_logits = false;
template <class Sk>
inline constexpr bool is_sink_logits<sink_logits<Sk>> = true;
template <class X>
inline constexpr bool is_softmax_times = false;
template <class P, class V>
inline constexpr bool is_softmax_times<matmul_expr<softmax_expr<P>, V>> = true;

// The weight e^(x - m) with softmax's rules (kernels/attention_state.hpp's weight_of, in constexpr).
template <class T>
constexpr T sink_weight(T x, T m) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  if (x == -inf) return T(0);
  if (m == inf) return x == inf ? T(1) : (x != x ? x : T(0));
  return math::exp(x - m);
}
// A row's log-sum-exp merged with a sink: the factor of its output (first) and its new log-sum-exp (second).
template <class T>
struct sunk_row {
  T factor, lse, sink;  // sink: the sink's weight, 1 - factor but for special values
};
template <class T>
constexpr sunk_row<T> sink_merge(T lse, T sigma) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  constexpr T nan = std::numeric_limits<T>::quiet_NaN();
  if (lse != lse || sigma != sigma) return {nan, nan, nan};
  const T big = lse > sigma ? lse : sigma;
  if (big == -inf) return {T(0), -inf, T(0)};  // no key and no sink
  const T a = sink_weight(lse, big), b = sink_weight(sigma, big);
  return {a / (a + b), big == inf ? inf : big + math::log(a + b), b / (a + b)};
}
// The log-sum-exp of n scores with softmax's rules (-inf: none visible; +inf: a +inf score; NaN: a NaN).
template <class T, class At>
constexpr T row_log_sum_exp(std::size_t n, const At& at) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  T m = -inf;
  for (std::size_t j = 0; j < n; ++j) {
    const T x = at(j);
    if (x != x) return x;
    m = x > m ? x : m;
  }
  if (m == -inf || m == inf) return m;
  T sum = 0;
  for (std::size_t j = 0; j < n; ++j) sum += math::exp(at(j) - m);
  return m + math::log(sum);
}
}  // namespace detail

// with_sinks(A, s): A = softmax(P) * V with the sinks s (sink_number or a rank-1 tensor_ref / view); the node.
template <class A, class Sk>
class sinks_expr : public unary_node<A> {
 public:
  constexpr sinks_expr(A a, Sk s) : unary_node<A>(std::move(a)), s_(std::move(s)) {}
  constexpr const Sk& sinks() const noexcept { return s_; }
  // Head h's sink logit.
  constexpr value_t<A> sink(std::size_t h) const {
    if constexpr (requires { s_.value; }) {
      return static_cast<value_t<A>>(s_.value);
    } else {
      return s_.data()[dims_of(s_)[0] == 1 ? 0 : h];
    }
  }
  // The scores' head count (axis -3 of rank-4 scores; 1 otherwise).
  constexpr std::size_t heads() const {
    using S = shape_of_t<A>;
    if constexpr (S::rank >= 4) return dims_of(this->operand())[S::rank - 3];
    else return 1;
  }
  constexpr auto operands() const {
    if constexpr (requires { s_.value; }) return boost::hana::make_tuple(&this->operand());
    else return boost::hana::make_tuple(&this->operand(), &s_);
  }

 private:
  Sk s_;
};

namespace rules {
template <class A, bool Quiet = false>
constexpr bool check_sinks_operand() {
  constexpr bool ok = detail::is_softmax_times<std::remove_cvref_t<A>>;
  static_assert(Quiet || ok || error::holds<error::sinks_need_softmax_times_v<error::rank<shape_of_t<A>::rank>>>,
                "attnx: with_sinks(A, s): A must be attention written as softmax(P) * V");
  return ok;
}
}  // namespace rules

namespace detail {
template <class A, class Sk>
constexpr auto make_sinks(A&& a, Sk s) {
  constexpr bool ok = rules::check_sinks_operand<A, failed_v<A>>();
  if constexpr (!ok || failed_v<A>) {
    return failed_expr<value_t<A>, shape_of_t<A>>{};
  } else {
    using T = value_t<A>;
    if constexpr (requires { s.value; }) {
      return sinks_expr<stored_t<A>, sink_number<T>>(store(std::forward<A>(a)), sink_number<T>{static_cast<T>(s.value)});
    } else {
      static_assert(std::is_same_v<value_t<Sk>, T> ||
                        error::holds<error::element_types_differ<error::lhs_element_type<T>, error::rhs_element_type<value_t<Sk>>>>,
                    "attnx: with_sinks(A, s): the sinks' element type must be the attention's");
      sinks_expr<stored_t<A>, Sk> e(store(std::forward<A>(a)), std::move(s));
      const std::size_t n = dims_of(e.sinks())[0], h = e.heads();
      if (n != 1 && n != h)
        ATTNX_THROW(std::invalid_argument("attnx: sinks: " + std::to_string(n) + " sink logits for " + std::to_string(h) +
                                          " heads (one per head, or one for all)"));
      return e;
    }
  }
}
}  // namespace detail

// with_sinks(softmax(P) * V, sinks(t) | t | x): the attention with the sinks.
template <expression A, class Sk>
constexpr auto with_sinks(A&& a, sink_logits<Sk> s) {
  return detail::make_sinks(std::forward<A>(a), std::move(s.s));
}
template <expression A, class T, class S>
constexpr auto with_sinks(A&& a, const basic_tensor<T, S>& t) {
  return with_sinks(std::forward<A>(a), sinks(t));
}
template <expression A, arithmetic U>
constexpr auto with_sinks(A&& a, U x) {
  return with_sinks(std::forward<A>(a), sinks(x));
}

}  // namespace attnx
