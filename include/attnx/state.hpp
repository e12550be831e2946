// attnx: attention states, the partial result of attention over a subset of the keys, and their merge.
//
//   auto a = attnx::partial_attention(attention(Q, K1, V1));   // keys and values held here
//   auto b = attnx::partial_attention(attention(Q, K2, V2));   // ... and there (another thread, process)
//   auto s = attnx::merge(a, b);                               // == attention(Q, [K1; K2], [V1; V2])
//   s.out   // (..., L_q, d_v): the attention output over the keys merged so far
//   s.lse   // (..., L_q):      ln sum_j exp(s_ij) over those keys (the softmax's normaliser)
//
// A state is (out, lse) per query row; two states of disjoint key sets merge exactly (up to rounding):
// with M = max(lse_a, lse_b), w = exp(lse - M), out = (w_a out_a + w_b out_b) / (w_a + w_b) and
// lse = M + ln(w_a + w_b). It is the mechanism the decode kernel uses between its chunks of keys
// (kernels/attention_state.hpp) and what sequence-parallel attention sends between processes
// (examples/mpi_attention.cpp). The score program (scale, masks) applies within each subset, so a mask
// must be expressed on each subset's own keys (key j of a shard is key offset + j of the whole).
// Special values: a row with no visible key in a subset has out 0 and lse -inf and adds nothing; a NaN row
// stays NaN; a +inf score gives lse +inf, and merging states with lse +inf averages their outputs with
// equal weight (the whole-row softmax would weight them by their number of +inf scores: a state does not
// keep that count).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <limits>
#include <ranges>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "attnx/util/algorithm.hpp"
#include "attnx/eval/assign.hpp"
#include "attnx/eval/fused.hpp"
#include "attnx/exec/context.hpp"
#include "attnx/kernels/attention_state.hpp"
#include "attnx/tensor/storage.hpp"
#include "attnx/tensor/tensor.hpp"

namespace attnx {

template <class T, class OutShape>
struct attention_state;

namespace detail {
template <class X>
inline constexpr bool is_attention_state_v = false;
template <class T, class S>
inline constexpr bool is_attention_state_v<attention_state<T, S>> = true;
template <class E>
inline constexpr bool is_softmax_times_v = false;
template <class P, class V>
inline constexpr bool is_softmax_times_v<matmul_expr<softmax_expr<P>, V>> = true;
template <class P, class V, class Sk>  // with sinks: the sink is one more key of this state (expr/sinks.hpp)
inline constexpr bool is_softmax_times_v<sinks_expr<matmul_expr<softmax_expr<P>, V>, Sk>> = true;
template <std::size_t R>
dims_t<R - 1> drop_last_dim(const dims_t<R>& d) {
  dims_t<R - 1> r{};
  alg::copy_n(d.begin(), R - 1, r.begin());
  return r;
}
}  // namespace detail

// An attention's output with each row's log-sum-exp: what merge_states combines (attention over split keys).
template <class T, class OutShape>
struct attention_state {
  using out_shape = OutShape;
  using lse_shape = take_front_t<OutShape, OutShape::rank - 1>;
  basic_tensor<T, OutShape> out;
  basic_tensor<T, lse_shape> lse;
};

namespace detail {
template <class E>
auto partial_attention_of(const E& e, const context& ctx) {
  using T = value_t<E>;
  using O = shape_of_t<E>;
  const auto d = dims_of(e);
  attention_state<T, O> s{basic_tensor<T, O>(d, uninitialized), basic_tensor<T, typename attention_state<T, O>::lse_shape>(
                                                                     detail::drop_last_dim(d), uninitialized)};
  fused::run(s.out.data(), e, ctx, s.lse.data());
  return s;
}
}  // namespace detail

// The attention state of an attention expression (softmax(scores) * V with Q, K, V in memory or
// projections: the forms the fused kernel takes, is_fused_v), computed by the fused kernel. With sinks
// (with_sinks, sinks(t)) the sink counts as one more key of this state: merging states of split keys, give the
// sinks to one part only.
template <class E>
auto partial_attention(const E& e, const context& ctx = current_context()) {
  constexpr bool ok = is_fused_v<E> && detail::is_softmax_times_v<E>;
  static_assert(ok,
                "attnx: partial_attention: the expression must be an attention softmax(scores) * V that the fused kernel "
                "takes (attnx::is_fused_v)");
  if constexpr (ok) {
    return detail::partial_attention_of(e, ctx);
  } else {
    return attention_state<float, make_shape<1, 1>>{};
  }
}

namespace detail {
// The state of the union of the key sets of n states (all of one shape; n >= 1).
template <class T, class S>
attention_state<T, S> merge_states(const attention_state<T, S>* const* states, std::size_t n) {
  if (n == 0) ATTNX_THROW(std::invalid_argument("attnx: merge: no attention state to merge"));
  const auto d = states[0]->out.dims();
  const auto ld = drop_last_dim(d);
  const std::size_t dv = d[S::rank - 1];
  for (std::size_t c = 0; c < n; ++c) {
    const auto dc = states[c]->out.dims();
    for (std::size_t i = 0; i < S::rank; ++i)
      if (dc[i] != d[i])
        throw_extent_error("merge: the attention states' outputs must have one shape (state " + std::to_string(c) +
                               ", axis " + std::to_string(i) + ")",
                           "extent", dc[i], "first_state_extent", d[i]);
    const auto lc = states[c]->lse.dims();
    for (std::size_t i = 0; i + 1 < S::rank; ++i)
      if (lc[i] != ld[i])
        throw_extent_error("merge: a state's lse must have its output's shape without the last axis (state " +
                               std::to_string(c) + ", axis " + std::to_string(i) + ")",
                           "lse_extent", lc[i], "out_extent", ld[i]);
  }
  attention_state<T, S> m{basic_tensor<T, S>(d, uninitialized),
                          basic_tensor<T, typename attention_state<T, S>::lse_shape>(ld, uninitialized)};
  const std::size_t rows = m.lse.numel();
  storage<T, dyn> parts(uninitialized, n * (dv + 2));  // each state's row as a partial state: m = lse, l = 1, o = out
  for (std::size_t r = 0; r < rows; ++r) {
    std::size_t used = 0;
    for (std::size_t c = 0; c < n; ++c) {
      const T lse = states[c]->lse.data()[r];
      if (lse == -std::numeric_limits<T>::infinity()) continue;  // no visible key: adds nothing, whatever its out
      T* part = parts.data() + used++ * (dv + 2);
      part[0] = lse;
      part[1] = T(1);
      alg::copy_n(states[c]->out.data() + r * dv, dv, part + 2);
    }
    T* o = m.out.data() + r * dv;
    m.lse.data()[r] = kernels::finish_row(kernels::merge_partials(used, parts.data(), static_cast<std::ptrdiff_t>(dv + 2), dv, o), o, dv);
  }
  return m;
}
}  // namespace detail

// The state of the union of the key sets of the given states (all of one shape; at least one): extent_error
// naming the state, the axis and both extents when an output differs from the first's or an lse from its output's
// shape without the last axis.
template <class T, class S>
attention_state<T, S> merge(std::span<const attention_state<T, S>> states) {
  storage<const attention_state<T, S>*, dyn> ptrs(uninitialized, states.size());
  for (std::size_t i = 0; i < states.size(); ++i) ptrs[i] = &states[i];
  return detail::merge_states(ptrs.data(), states.size());
}
// A contiguous range of states (std::vector, std::array, a std::span of non-const states, ...).
template <class R>
  requires std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
           detail::is_attention_state_v<std::remove_cv_t<std::ranges::range_value_t<R>>>
auto merge(const R& states) {
  using state = std::remove_cv_t<std::ranges::range_value_t<R>>;
  return merge(std::span<const state>(std::ranges::data(states), std::ranges::size(states)));
}
template <class T, class S, class... More>
  requires(std::is_same_v<More, attention_state<T, S>> && ...)
attention_state<T, S> merge(const attention_state<T, S>& first, const More&... more) {
  const attention_state<T, S>* const ptrs[] = {&first, &more...};
  return detail::merge_states(ptrs, 1 + sizeof...(More));
}
// States of different types (element type or shape type: a state of static tensors and one from a KV cache, say):
// one error naming the rule and the types.
template <class A, class... More>
  requires detail::is_attention_state_v<A> && (detail::is_attention_state_v<More> && ...) &&
           (!std::is_same_v<More, A> || ...)
A merge(const A& first, const More&...) {
  static_assert(error::holds<error::merge_state_types_differ<error::first_state<A>, error::other_states<More...>>>,
                "attnx: merge: the states must have one type (element type and shape type); convert the others to the "
                "first's: attention_state<T, S>{s.out, s.lse}");
  return first;
}

}  // namespace attnx
