// attnx: the matrix product and the transpose.
//
// A * B contracts A's last axis with B's second-to-last: (batch..., M, K) x (K, N) -> (batch..., M, N),
// or with a batched B of the same batch axes: (batch..., K, N). The contracted axes must have equal
// extents and unifiable names (so Q * K, without the transpose, is rejected when Q is (seq, d_k)
// and K is (seq, d_k), even if seq == d_k).
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/core/expression.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/shape/shape.hpp"

namespace attnx {

// a * b between two expressions: the matrix product (batched over leading axes), the node.
template <class A, class B>
class matmul_expr : public binary_node<A, B> {
 public:
  using value_type = std::common_type_t<value_t<A>, value_t<B>>;
  using shape_type = matmul_shape_t<shape_of_t<A>, shape_of_t<B>>;
  // The contracted extent (d_k for Q K^T; dyn when it is known at run time only).
  static constexpr std::size_t inner = shape_of_t<A>::cols;
  using binary_node<A, B>::binary_node;
  constexpr dims_t<shape_type::rank> dims() const {
    const auto a = dims_of(this->lhs());
    dims_t<shape_type::rank> out{};
    for (std::size_t k = 0; k + 1 < shape_type::rank; ++k) out[k] = a[k];
    out[shape_type::rank - 1] = dims_cols(dims_of(this->rhs()));
    return out;
  }
};

// Swaps the last two axes.
template <class A>
class transpose_expr : public unary_node<A> {
 public:
  using shape_type = transpose_t<shape_of_t<A>>;
  using unary_node<A>::unary_node;
  constexpr dims_t<shape_type::rank> dims() const {
    auto d = dims_of(this->operand());
    std::swap(d[shape_type::rank - 1], d[shape_type::rank - 2]);
    return d;
  }
};

namespace rules {
// The matmul rules; Quiet: an operand already failed a rule (reported there). Returns whether they hold.
template <class A, class B, bool Quiet = false>
constexpr bool check_matmul() {
  constexpr bool ranks_ok = A::rank >= 2 && B::rank >= 2;
  static_assert(Quiet || ranks_ok ||
                    error::holds<error::matmul_needs_rank_2_operands<error::lhs_rank<A::rank>, error::rhs_rank<B::rank>>>,
                "attnx: matmul: both operands need at least two axes (use a 1 x N tensor for a row vector)");
  if constexpr (ranks_ok) {
    using AK = typename A::template axis_t<A::rank - 1>;
    using BK = typename B::template axis_t<B::rank - 2>;
    constexpr bool extents_ok = may_equal_extents(AK::extent, BK::extent);
    constexpr bool names_ok = names_unify_v<typename AK::name, typename BK::name>;
    static_assert(Quiet || extents_ok ||
                      error::holds<error::matmul_inner_extents_differ<error::lhs_columns<AK::extent>, error::rhs_rows<BK::extent>>>,
                  "attnx: matmul: the lhs column count must equal the rhs row count");
    static_assert(Quiet || !extents_ok || names_ok ||
                      error::holds<error::matmul_inner_axes_differ<error::lhs_column_axis<typename AK::name>,
                                                                   error::rhs_row_axis<typename BK::name>>>,
                  "attnx: matmul: the contracted axes have different names");
    using AB = batch_axes_t<A>;
    using BB = batch_axes_t<B>;
    constexpr bool batch_ok = BB::rank == 0 || may_equal_shapes<AB, BB>();
    static_assert(Quiet || !extents_ok || !names_ok || batch_ok ||
                      error::holds<error::matmul_batch_axes_differ<error::lhs_rank<A::rank>, error::rhs_rank<B::rank>>>,
                  "attnx: matmul: a batched rhs must have the lhs's batch axes (or be a plain matrix shared by all)");
    return extents_ok && names_ok && batch_ok;
  } else {
    return false;
  }
}
// The run-time half, where an extent is dyn: the inner extents, then the batch axes of a batched rhs.
template <class A, class B>
constexpr void check_matmul_dims(const dims_t<A::rank>& a, const dims_t<B::rank>& b) {
  if (a[A::rank - 1] != b[B::rank - 2])
    detail::throw_extent_error("matmul: the inner extents differ", "lhs_columns", a[A::rank - 1], "rhs_rows", b[B::rank - 2]);
  if constexpr (B::rank > 2) {
    for (std::size_t k = 0; k + 2 < B::rank; ++k)
      if (a[k] != b[k])
        detail::throw_extent_error("matmul: a batched rhs must have the lhs's batch axes; they differ on axis " +
                                       std::to_string(k),
                                   "lhs_extent", a[k], "rhs_extent", b[k]);
  }
}
}  // namespace rules

namespace detail {
// The product node, or a failed_expr when a rule failed (reported unless Quiet).
template <bool Quiet, class A, class B>
constexpr auto make_matmul(A&& a, B&& b) {
  using SA = shape_of_t<A>;
  using SB = shape_of_t<B>;
  constexpr bool quiet = Quiet || any_failed_v<A, B>;
  constexpr bool shapes_ok = rules::check_matmul<SA, SB, quiet>();
  constexpr bool types_ok = rules::check_element_types<value_t<A>, value_t<B>, quiet || !shapes_ok>();
  if constexpr (quiet || !shapes_ok || !types_ok) {
    return failed_expr<std::common_type_t<value_t<A>, value_t<B>>, matmul_shape_t<SA, SB>>{};
  } else {
    if constexpr (!SA::is_static || !SB::is_static) rules::check_matmul_dims<SA, SB>(dims_of(a), dims_of(b));
    return matmul_expr<stored_t<A>, stored_t<B>>(store(std::forward<A>(a)), store(std::forward<B>(b)));
  }
}
}  // namespace detail

// The matrix product of two expressions.
template <expression A, expression B>
constexpr auto operator*(A&& a, B&& b) {
  return detail::make_matmul<false>(std::forward<A>(a), std::forward<B>(b));
}
template <expression A, expression B>
constexpr auto matmul(A&& a, B&& b) {
  return std::forward<A>(a) * std::forward<B>(b);
}
template <class A, class B>
  requires any_foreign<A, B>
constexpr auto matmul(A&&, B&&) {
  return foreign_arguments<A, B>();
}

// transpose(a): a's last two axes swapped (a view of the operand, no copy).
template <expression A>
constexpr auto transpose(A&& a) {
  using S = shape_of_t<A>;
  constexpr bool quiet = failed_v<A>;
  static_assert(quiet || S::rank >= 2 || error::holds<error::transpose_needs_rank_2<error::rank<S::rank>>>,
                "attnx: transpose: the operand needs at least two axes");
  if constexpr (quiet || S::rank < 2) {
    return failed_expr<value_t<A>, transpose_t<S>>{};
  } else {
    return transpose_expr<stored_t<A>>(store(std::forward<A>(a)));
  }
}
template <class A>
  requires any_foreign<A>
constexpr auto transpose(A&&) {
  return foreign_arguments<A>();
}

}  // namespace attnx
