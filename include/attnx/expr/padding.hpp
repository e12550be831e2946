// attnx: PyTorch's key_padding_mask as PyTorch gives it: a bool tensor or view of (B, L_k), or (L_k) for one
// sequence, true = the key is padding (masked out), as nn.MultiheadAttention and its state files have it.
//
//   attention(Q, K, V, causal, key_padding_mask(kpm))    mha(x, key_padding_mask(kpm))    mask(S, key_padding_mask(kpm))
//
// For scores of (B, H, L_q, L_k), (B, L_q, L_k) or (L_q, L_k), mask() applies it as blocked(m) over m seen as
// (B, 1, 1, L_k), (B, 1, L_k) or (1, L_k): item b's row masks the keys of item b, for every head and query row.
// (blocked(m) on the (B, L_k) itself broadcasts right-aligned and would set B against L_q.) The mask reads the
// tensor's memory when the expression is evaluated: a tensor must be named (an lvalue), as for reshape.
#pragma once

#include <cstddef>
#include <limits>
#include <type_traits>
#include <utility>

#include "attnx/core/expression.hpp"
#include "attnx/expr/mask.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/shape/shape.hpp"
#include "attnx/tensor/view.hpp"

namespace attnx {

// What key_padding_mask(m) returns: m's memory as a (B, L_k) view of bool; mask() gives it the scores' rank.
template <std::size_t B, std::size_t Lk>
struct padding_mask {
  const bool* data;
  std::size_t batch, keys;
};

namespace rules {
template <class M, bool Quiet = false>
constexpr bool check_key_padding_operand() {
  using S = shape_of_t<M>;
  constexpr bool ok = std::is_same_v<value_t<M>, bool> && (S::rank == 1 || S::rank == 2);
  static_assert(Quiet || ok || error::holds<error::key_padding_mask_shape<error::element_type<value_t<M>>, error::rank<S::rank>>>,
                "attnx: key_padding_mask: m must be as PyTorch gives it: bool elements, shape (B, L_k), or (L_k) for one "
                "sequence");
  return ok;
}
template <class M, bool Quiet = false>
constexpr bool check_key_padding_lifetime() {
  constexpr bool ok = !is_tensor_v<M> || std::is_lvalue_reference_v<M>;
  static_assert(Quiet || ok || error::holds<error::key_padding_mask_temporary<error::argument_type<std::remove_cvref_t<M>>>>,
                "attnx: key_padding_mask: the mask of a temporary tensor would dangle (name the tensor first)");
  return ok;
}
template <std::size_t Rank, std::size_t B, bool Quiet = false>
constexpr bool check_key_padding_scores() {
  constexpr bool ok = Rank >= 3 || B == 1 || B == dyn;
  static_assert(Quiet || ok || error::holds<error::key_padding_mask_unbatched_scores<error::mask_batch<B>, error::rank<Rank>>>,
                "attnx: key_padding_mask: scores without a batch axis take the mask of one sequence, (L_k) or (1, L_k)");
  return ok;
}
}  // namespace rules

// key_padding_mask(m): PyTorch's key_padding_mask (bool (B, L_k) or (L_k), true = padding), for mask() and attention().
template <expression M>
  requires dense_terminal<M>
constexpr auto key_padding_mask(M&& m) {
  using S = shape_of_t<M>;
  constexpr bool ok = rules::check_key_padding_operand<M, failed_v<M>>() &&
                      rules::check_key_padding_lifetime<M, failed_v<M>>();
  if constexpr (!ok || failed_v<M>) {
    return padding_mask<1, dyn>{nullptr, 1, 0};  // (reported above; a mask whose use reports nothing more)
  } else if constexpr (S::rank == 1) {
    return padding_mask<1, S::cols>{m.data(), 1, dims_of(m)[0]};
  } else {
    const auto d = dims_of(m);
    return padding_mask<S::extents[0], S::cols>{m.data(), d[0], d[1]};
  }
}

namespace detail {
template <std::size_t B, std::size_t Lk, class Ones>
struct padding_view;
template <std::size_t B, std::size_t Lk, std::size_t... I>
struct padding_view<B, Lk, std::index_sequence<I...>> {  // (B, 1 x sizeof...(I), L_k)
  using shape_type = make_shape<B, ((void)I, std::size_t{1})..., Lk>;
  using type = basic_view<const bool, shape_type>;
  static type make(const bool* p, std::size_t b, std::size_t lk) {
    if constexpr (shape_type::is_static) return type(p, shape_type::size);
    else return type(p, b, ((void)I, std::size_t{1})..., lk);
  }
};
template <std::size_t B, std::size_t Lk>
inline constexpr bool is_mask_kind<padding_mask<B, Lk>> = true;
}  // namespace detail

// mask(S, key_padding_mask(m)): blocked(m) with m seen as (B, 1, ..., 1, L_k), of S's rank.
template <expression A, std::size_t B, std::size_t Lk>
constexpr auto mask(A&& a, padding_mask<B, Lk> m, value_t<A> fill = -std::numeric_limits<value_t<A>>::infinity()) {
  constexpr std::size_t R = shape_of_t<A>::rank;
  constexpr bool quiet = failed_v<A>;
  constexpr bool rank_ok = rules::check_matrix_scores<shape_of_t<A>, quiet>();
  constexpr bool ok = rules::check_key_padding_scores<R, B, quiet || !rank_ok>();
  if constexpr (!rank_ok || !ok || quiet) {
    return failed_expr<value_t<A>, shape_of_t<A>>{};
  } else {
    if constexpr (R == 2 && B == dyn) {
      if (m.batch != 1)
        detail::throw_extent_error("key_padding_mask: scores without a batch axis take the mask of one sequence, (L_k) or "
                                   "(1, L_k)", "mask_batch", m.batch, "rank", R);
    }
    using V = detail::padding_view<R >= 3 ? B : 1, Lk, std::make_index_sequence<R - 2>>;
    return mask(std::forward<A>(a), blocked(V::make(m.data, m.batch, m.keys)), fill);
  }
}

}  // namespace attnx
