// attnx: splitting features into heads and merging them back, and sharing K/V heads (GQA/MQA).
//
//   split_heads<H>(x)     (batch..., L, H*d)    -> (batch..., H, L, d)     head h = columns [h*d, (h+1)*d)
//   merge_heads(y)        (batch..., H, L, d)   -> (batch..., L, H*d)      the inverse
//   repeat_heads<G>(k)    (batch..., Hkv, L, d) -> (batch..., Hkv*G, L, d) query head h reads kv head h / G
//   add_unit_batch(x)     (dims...)             -> (1, dims...)            (an unbatched input run as a batch of one)
//   drop_unit_batch(y)    (1, dims...)          -> (dims...)               the inverse
// None of them copies a tensor that is already in memory: the evaluators read it with the heads'
// strides, and the fused kernel is handed those strides directly. An operand that is an expression
// (a projection X * W) is evaluated once.
#pragma once

#include <cstddef>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/core/expression.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/shape/shape.hpp"

namespace attnx {

namespace detail {
// Index helpers that stay in range for ill-formed ranks (the rule's static_assert reports those).
template <class S, std::size_t Back>
inline constexpr std::size_t from_back = S::rank >= Back ? S::rank - Back : 0;
// a * b and a / b of extents, dyn when either is.
constexpr std::size_t extent_times(std::size_t a, std::size_t b) { return a == dyn || b == dyn ? dyn : a * b; }
constexpr std::size_t extent_over(std::size_t a, std::size_t b) { return a == dyn ? dyn : a / b; }
}  // namespace detail

// The nodes of split_heads, merge_heads and repeat_heads (below); they move no data, they index.
template <std::size_t H, class A>
class split_heads_expr : public unary_node<A> {
  using S = shape_of_t<A>;

 public:
  static constexpr std::size_t heads = H;
  static constexpr std::size_t head_dim = detail::extent_over(S::cols, H);
  // (batch..., L, D) -> (batch..., H, L, D / H)
  using shape_type = shape_cat_t<take_front_t<S, detail::from_back<S, 2>>,
                                 shape<axis<names::heads, H>, typename S::template axis_t<detail::from_back<S, 2>>,
                                       axis<anon, head_dim>>>;
  using unary_node<A>::unary_node;
  constexpr dims_t<shape_type::rank> dims() const {
    const auto d = dims_of(this->operand());
    dims_t<shape_type::rank> out{};
    for (std::size_t k = 0; k + 2 < S::rank; ++k) out[k] = d[k];
    out[S::rank - 2] = H;
    out[S::rank - 1] = d[S::rank - 2];
    out[S::rank] = d[S::rank - 1] / H;
    return out;
  }
};

// merge_heads(x)'s node.
template <class A>
class merge_heads_expr : public unary_node<A> {
  using S = shape_of_t<A>;

 public:
  static constexpr std::size_t heads = S::template extent<detail::from_back<S, 3>>;
  // (batch..., H, L, d) -> (batch..., L, H * d)
  using shape_type = shape_cat_t<take_front_t<S, detail::from_back<S, 3>>,
                                 shape<typename S::template axis_t<detail::from_back<S, 2>>,
                                       axis<anon, detail::extent_times(heads, S::cols)>>>;
  using unary_node<A>::unary_node;
  constexpr dims_t<shape_type::rank> dims() const {
    const auto d = dims_of(this->operand());
    dims_t<shape_type::rank> out{};
    for (std::size_t k = 0; k + 3 < S::rank; ++k) out[k] = d[k];
    out[S::rank - 3] = d[S::rank - 2];
    out[S::rank - 2] = d[S::rank - 3] * d[S::rank - 1];
    return out;
  }
};

// repeat_heads<G>(x)'s node.
template <std::size_t G, class A>
class repeat_heads_expr : public unary_node<A> {
  using S = shape_of_t<A>;

 public:
  static constexpr std::size_t group = G;
  using shape_type =
      shape_cat_t<take_front_t<S, detail::from_back<S, 3>>,
                  shape<axis<names::heads, detail::extent_times(S::template extent<detail::from_back<S, 3>>, G)>,
                        typename S::template axis_t<detail::from_back<S, 2>>, typename S::template axis_t<detail::from_back<S, 1>>>>;
  using unary_node<A>::unary_node;
  constexpr dims_t<shape_type::rank> dims() const {
    auto d = dims_of(this->operand());
    d[S::rank - 3] *= G;
    return d;
  }
};

// split_heads<H>(x): (..., L, H * d) seen as (..., H, L, d), head h the columns [h d, (h + 1) d).
template <std::size_t H, expression A>
constexpr auto split_heads(A&& a) {
  using S = shape_of_t<A>;
  constexpr bool quiet = failed_v<A>;
  constexpr bool rank_ok = S::rank >= 2;
  constexpr bool heads_ok = H > 0 && (S::cols == dyn || S::cols % H == 0);
  static_assert(quiet || rank_ok || error::holds<error::heads_need_a_sequence_axis<error::rank<S::rank>>>,
                "attnx: split_heads: the operand needs a sequence axis and a feature axis");
  static_assert(quiet || !rank_ok || heads_ok ||
                    error::holds<error::d_model_not_divisible_by_heads<error::d_model<S::cols>, error::heads<H>>>,
                "attnx: split_heads: the feature extent (d_model) must be divisible by the number of heads");
  if constexpr (quiet || !rank_ok) {
    return failed_expr<value_t<A>, S>{};
  } else if constexpr (!heads_ok) {
    return failed_expr<value_t<A>, shape_of_t<split_heads_expr<(H > 0 ? H : 1), std::remove_cvref_t<A>>>>{};
  } else {
    if constexpr (S::cols == dyn) {
      const std::size_t d_model = dims_cols(dims_of(a));
      if (d_model % H != 0)
        detail::throw_extent_error("split_heads: the feature extent (d_model) must be divisible by the number of heads",
                                   "d_model", d_model, "heads", H);
    }
    return split_heads_expr<H, stored_t<A>>(store(std::forward<A>(a)));
  }
}

// merge_heads(x): (..., H, L, d) seen as (..., L, H * d), the inverse of split_heads.
template <expression A>
constexpr auto merge_heads(A&& a) {
  using S = shape_of_t<A>;
  constexpr bool quiet = failed_v<A>;
  static_assert(quiet || S::rank >= 3 || error::holds<error::heads_need_a_sequence_axis<error::rank<S::rank>>>,
                "attnx: merge_heads: the operand needs heads, sequence and feature axes");
  if constexpr (S::rank < 3) {
    return failed_expr<value_t<A>, S>{};
  } else if constexpr (quiet) {  // the merged shape, so that what follows (an assignment, W_O) adds no error
    return failed_expr<value_t<A>, shape_of_t<merge_heads_expr<stored_t<A>>>>{};
  } else {
    return merge_heads_expr<stored_t<A>>(store(std::forward<A>(a)));
  }
}

// repeat_heads<G>(x): (..., H, L, d) as (..., H * G, L, d), each head G times (grouped-query attention's K and V).
template <std::size_t G, expression A>
constexpr auto repeat_heads(A&& a) {
  using S = shape_of_t<A>;
  constexpr bool quiet = failed_v<A>;
  static_assert(quiet || S::rank >= 3 || error::holds<error::heads_need_a_sequence_axis<error::rank<S::rank>>>,
                "attnx: repeat_heads: the operand needs heads, sequence and feature axes");
  static_assert(G > 0, "attnx: repeat_heads: the group size must be positive");
  if constexpr (quiet || S::rank < 3) {
    return failed_expr<value_t<A>, S>{};
  } else {
    return repeat_heads_expr<G, stored_t<A>>(store(std::forward<A>(a)));
  }
}

template <std::size_t H, class A>
  requires any_foreign<A>
constexpr auto split_heads(A&&) {
  return foreign_arguments<A>();
}
template <class A>
  requires any_foreign<A>
constexpr auto merge_heads(A&&) {
  return foreign_arguments<A>();
}
template <std::size_t G, class A>
  requires any_foreign<A>
constexpr auto repeat_heads(A&&) {
  return foreign_arguments<A>();
}

// ---- a unit batch axis in front, and taken away again ----------------------------------------------
// An unbatched input (L, d_model) runs as (1, L, d_model): per-batch masks (key_lengths) then mean
// what they mean for a batch of one, and the fused kernel sees rank-4 scores (which GQA needs).
// Neither node moves data: rows are the same rows, so their evaluators forward.
template <class A>
class unit_batch_expr : public unary_node<A> {
 public:
  using shape_type = shape_cat_t<shape<axis<anon, 1>>, shape_of_t<A>>;
  using unary_node<A>::unary_node;
  constexpr dims_t<shape_type::rank> dims() const {
    const auto d = dims_of(this->operand());
    dims_t<shape_type::rank> out{};
    out[0] = 1;
    for (std::size_t k = 0; k < d.size(); ++k) out[k + 1] = d[k];
    return out;
  }
};

// drop_unit_batch(x): (1, ...) seen as (...), the inverse of add_unit_batch (the node; no data moves).
template <class A>
class drop_unit_batch_expr : public unary_node<A> {
 public:
  using shape_type = drop_front_t<shape_of_t<A>, 1>;
  using unary_node<A>::unary_node;
  constexpr dims_t<shape_type::rank> dims() const {
    const auto d = dims_of(this->operand());
    dims_t<shape_type::rank> out{};
    for (std::size_t k = 0; k < out.size(); ++k) out[k] = d[k + 1];
    return out;
  }
};

// (dims...) -> (1, dims...)
template <expression A>
constexpr auto add_unit_batch(A&& a) {
  if constexpr (failed_v<A>) {
    return failed_expr<value_t<A>, shape_cat_t<shape<axis<anon, 1>>, shape_of_t<A>>>{};
  } else {
    return unit_batch_expr<stored_t<A>>(store(std::forward<A>(a)));
  }
}
// (1, dims...) -> (dims...)
template <expression A>
constexpr auto drop_unit_batch(A&& a) {
  using S = shape_of_t<A>;
  if constexpr (failed_v<A>) {
    return failed_expr<value_t<A>, drop_front_t<S, (S::rank >= 1 ? 1 : 0)>>{};
  } else {
    static_assert(S::rank >= 2 && S::extents[0] == 1, "attnx: drop_unit_batch: the operand's first axis must have extent 1");
    return drop_unit_batch_expr<stored_t<A>>(store(std::forward<A>(a)));
  }
}

}  // namespace attnx
