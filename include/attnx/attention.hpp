// attnx: scaled dot-product attention, written as the expression it is.
//
//   attention(Q, K, V)             = softmax(scale(Q * transpose(K), 1 / sqrt(d_k))) * V
//   attention(Q, K, V, causal)     = softmax(mask(scale(...), causal)) * V
//   attention_weights(Q, K, ...)   = the softmax alone (L_q x L_k), for inspection
// Masks are applied in order; any mask accepted by mask() may be passed, and softcap(c) (soft-capping, expr/mask.hpp).
#pragma once

#include <tuple>
#include <utility>

#include "attnx/expr/elementwise.hpp"
#include "attnx/core/expression.hpp"
#include "attnx/expr/mask.hpp"
#include "attnx/expr/map.hpp"
#include "attnx/expr/score_position.hpp"
#include "attnx/expr/sinks.hpp"
#include "attnx/expr/matmul.hpp"
#include "attnx/expr/reduce.hpp"
#include "attnx/math/constexpr_math.hpp"

namespace attnx {

namespace rules {
// The value rule of attention: V has one row per key, so V's rows (its second-to-last extent) equal
// L_k, K's rows. (Stated as its own rule, naming V: the matmul rule would only say "lhs columns".)
template <class SK, class SV, bool Quiet = false>
constexpr bool check_attention_values() {
  if constexpr (SK::rank >= 2 && SV::rank >= 2) {
    constexpr std::size_t lk = SK::extents[SK::rank - 2];
    constexpr std::size_t rows = SV::extents[SV::rank - 2];
    constexpr bool ok = may_equal_extents(rows, lk);  // a dyn one: checked at run time
    static_assert(Quiet || ok ||
                      error::holds<error::attention_value_rows_differ_from_keys<error::value_rows<rows>, error::L_k<lk>>>,
                  "attnx: attention: V must have one row per key (V's row count must equal L_k, the row count of K)");
    return ok;
  } else {
    return true;  // a rank below 2 is the matmul rule's to report
  }
}
}  // namespace rules

// Q K^T / sqrt(d_k): the scale is computed from the contracted extent.
template <expression Q, expression K>
constexpr auto scaled_scores(Q&& q, K&& k) {
  using T = value_t<Q>;
  const std::size_t dk = dims_cols(dims_of(q));  // d_k may be dyn
  return scale(std::forward<Q>(q) * transpose(std::forward<K>(k)), T(1) / math::sqrt(static_cast<T>(dk)));
}
template <class Q, class K>
  requires any_foreign<Q, K>
constexpr auto scaled_scores(Q&&, K&&) {
  return foreign_arguments<Q, K>();
}

namespace detail {
template <class S, class M>
constexpr auto apply_one(S&& s, M&& m) {
  return mask(std::forward<S>(s), std::forward<M>(m));
}
template <class S>
constexpr auto apply_one(S&& s, softcap_value c) {
  return softcap(std::forward<S>(s), static_cast<value_t<S>>(c.cap));
}
template <class S, class F>
constexpr auto apply_one(S&& s, score_mod_fn<F> m) {
  return map(std::move(m.f), std::forward<S>(s));
}
template <class S>
constexpr S&& apply_masks(S&& s) {
  return std::forward<S>(s);
}
template <class S, class M, class... Ms>
constexpr auto apply_masks(S&& s, M&& m, Ms&&... ms) {
  return apply_masks(apply_one(std::forward<S>(s), std::forward<M>(m)), std::forward<Ms>(ms)...);
}
}  // namespace detail

// softmax(mask(Q K^T / sqrt(d_k))) with the masks in order: the attention weights (L_q x L_k per head), lazy.
template <expression Q, expression K, class... Masks>
constexpr auto attention_weights(Q&& q, K&& k, Masks&&... masks) {
  return softmax(detail::apply_masks(scaled_scores(std::forward<Q>(q), std::forward<K>(k)), std::forward<Masks>(masks)...));
}
template <class Q, class K, class... Masks>
  requires any_foreign<Q, K>
constexpr auto attention_weights(Q&&, K&&, Masks&&...) {
  return foreign_arguments<Q, K>();
}

namespace detail {
template <expression Q, expression K, expression V, class... Masks>
constexpr auto attention_of(Q&& q, K&& k, V&& v, Masks&&... masks) {
  using SK = shape_of_t<K>;
  using SV = shape_of_t<V>;
  constexpr bool quiet = any_failed_v<K, V>;
  constexpr bool values_ok = rules::check_attention_values<SK, SV, quiet>();
  if constexpr (values_ok && !quiet && SK::rank >= 2 && SV::rank >= 2 && (!SK::is_static || !SV::is_static)) {
    const std::size_t rows = dims_of(v)[SV::rank - 2], lk = dims_of(k)[SK::rank - 2];
    if (rows != lk)
      detail::throw_extent_error("attention: V must have one row per key (V's row count must equal L_k, the row count of K)",
                                 "value_rows", rows, "L_k", lk);
  }
  return detail::make_matmul<!values_ok>(attention_weights(std::forward<Q>(q), std::forward<K>(k), std::forward<Masks>(masks)...),
                                         std::forward<V>(v));
}
template <class... Ms>
inline constexpr bool last_is_sinks = false;
template <class M>
inline constexpr bool last_is_sinks<M> = is_sink_logits<std::remove_cvref_t<M>>;
template <class M0, class M1, class... Ms>
inline constexpr bool last_is_sinks<M0, M1, Ms...> = last_is_sinks<M1, Ms...>;
}  // namespace detail

// Scaled dot-product attention: attention_weights(Q, K, masks...) * V, lazy (the fused kernel where it applies); with
// sinks(t) last, with_sinks of it (expr/sinks.hpp).
template <expression Q, expression K, expression V, class... Masks>
constexpr auto attention(Q&& q, K&& k, V&& v, Masks&&... masks) {
  if constexpr (detail::last_is_sinks<Masks...>) {
    constexpr std::size_t n = sizeof...(Masks);
    auto args = std::forward_as_tuple(std::forward<Masks>(masks)...);
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return with_sinks(detail::attention_of(std::forward<Q>(q), std::forward<K>(k), std::forward<V>(v),
                                             std::get<I>(std::move(args))...),
                        std::get<n - 1>(args));
    }(std::make_index_sequence<n - 1>{});
  } else {
    return detail::attention_of(std::forward<Q>(q), std::forward<K>(k), std::forward<V>(v), std::forward<Masks>(masks)...);
  }
}
template <class Q, class K, class V, class... Masks>
  requires any_foreign<Q, K, V>
constexpr auto attention(Q&&, K&&, V&&, Masks&&...) {
  return foreign_arguments<Q, K, V>();
}

}  // namespace attnx
