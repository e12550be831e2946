// attnx: scaled dot-product attention, written as the expression it is.
//
//   attention(Q, K, V)             = softmax(scale(Q * transpose(K), 1 / sqrt(d_k))) * V
//   attention(Q, K, V, causal)     = softmax(mask(scale(...), causal)) * V
//   attention_weights(Q, K, ...)   = the softmax alone (L_q x L_k), for inspection
// Masks are applied in order; any mask accepted by mask() may be passed.
#pragma once

#include <utility>

#include "attnx/expr/elementwise.hpp"
#include "attnx/expr/expression.hpp"
#include "attnx/expr/mask.hpp"
#include "attnx/expr/matmul.hpp"
#include "attnx/expr/reduce.hpp"
#include "attnx/math/constexpr_math.hpp"

namespace attnx {

// Q K^T / sqrt(d_k): the scale is computed from the contracted extent.
template <expression Q, expression K>
constexpr auto scaled_scores(Q&& q, K&& k) {
  using T = value_t<Q>;
  constexpr std::size_t dk = shape_of_t<Q>::cols;
  return scale(std::forward<Q>(q) * transpose(std::forward<K>(k)), T(1) / math::sqrt(static_cast<T>(dk)));
}

namespace detail {
template <class S>
constexpr S&& apply_masks(S&& s) {
  return std::forward<S>(s);
}
template <class S, class M, class... Ms>
constexpr auto apply_masks(S&& s, M&& m, Ms&&... ms) {
  return apply_masks(mask(std::forward<S>(s), std::forward<M>(m)), std::forward<Ms>(ms)...);
}
}  // namespace detail

template <expression Q, expression K, class... Masks>
constexpr auto attention_weights(Q&& q, K&& k, Masks&&... masks) {
  return softmax(detail::apply_masks(scaled_scores(std::forward<Q>(q), std::forward<K>(k)), std::forward<Masks>(masks)...));
}

template <expression Q, expression K, expression V, class... Masks>
constexpr auto attention(Q&& q, K&& k, V&& v, Masks&&... masks) {
  return attention_weights(std::forward<Q>(q), std::forward<K>(k), std::forward<Masks>(masks)...) * std::forward<V>(v);
}

}  // namespace attnx
