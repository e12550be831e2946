// attnx: the matrix product and the transpose.
//
// A * B contracts A's last axis with B's second-to-last: (batch..., M, K) x (K, N) -> (batch..., M, N),
// or with a batched B of the same batch axes: (batch..., K, N). The contracted axes must have equal
// extents and unifiable names (so Q * K, without the transpose, is rejected when Q is (seq, d_k)
// and K is (seq, d_k), even if seq == d_k).
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/expr/expression.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/shape/shape.hpp"

namespace attnx {

template <class A, class B>
class matmul_expr : public expression_tag {
 public:
  using value_type = std::common_type_t<value_t<A>, value_t<B>>;
  using shape_type = matmul_shape_t<shape_of_t<A>, shape_of_t<B>>;
  static constexpr bool element_type_error = !std::is_same_v<value_t<A>, value_t<B>>;
  // The contracted extent (d_k for Q K^T).
  static constexpr std::size_t inner = shape_of_t<A>::cols;
  constexpr matmul_expr(A a, B b) : a_(std::move(a)), b_(std::move(b)) {}
  constexpr const A& lhs() const noexcept { return a_; }
  constexpr const B& rhs() const noexcept { return b_; }
  constexpr auto operands() const { return boost::hana::make_tuple(&a_, &b_); }

 private:
  A a_;
  B b_;
};

// Swaps the last two axes.
template <class A>
class transpose_expr : public expression_tag {
 public:
  using value_type = value_t<A>;
  using shape_type = transpose_t<shape_of_t<A>>;
  constexpr explicit transpose_expr(A a) : a_(std::move(a)) {}
  constexpr const A& operand() const noexcept { return a_; }
  constexpr auto operands() const { return boost::hana::make_tuple(&a_); }

 private:
  A a_;
};

namespace rules {
template <class A, class B>
constexpr void check_matmul() {
  static_assert((A::rank >= 2 && B::rank >= 2) ||
                    error::holds<error::matmul_needs_rank_2_operands<error::lhs_rank<A::rank>, error::rhs_rank<B::rank>>>,
                "attnx: matmul: both operands need at least two axes (use a 1 x N tensor for a row vector)");
  if constexpr (A::rank >= 2 && B::rank >= 2) {
    using AK = typename A::template axis_t<A::rank - 1>;
    using BK = typename B::template axis_t<B::rank - 2>;
    static_assert(AK::extent == BK::extent ||
                      error::holds<error::matmul_inner_extents_differ<error::lhs_columns<AK::extent>, error::rhs_rows<BK::extent>>>,
                  "attnx: matmul: the lhs column count must equal the rhs row count");
    static_assert(AK::extent != BK::extent || names_unify_v<typename AK::name, typename BK::name> ||
                      error::holds<error::matmul_inner_axes_differ<error::lhs_column_axis<typename AK::name>,
                                                                   error::rhs_row_axis<typename BK::name>>>,
                  "attnx: matmul: the contracted axes have different names");
    using AB = batch_axes_t<A>;
    using BB = batch_axes_t<B>;
    constexpr bool batch_ok = BB::rank == 0 || same_extents_v<AB, BB>;
    static_assert(batch_ok || error::holds<error::matmul_batch_axes_differ<error::lhs_rank<A::rank>, error::rhs_rank<B::rank>>>,
                  "attnx: matmul: a batched rhs must have the lhs's batch axes (or be a plain matrix shared by all)");
  }
}
}  // namespace rules

// The matrix product of two expressions.
template <expression A, expression B>
constexpr auto operator*(A&& a, B&& b) {
  rules::check_matmul<shape_of_t<A>, shape_of_t<B>>();
  rules::check_element_types<value_t<A>, value_t<B>>();
  return matmul_expr<stored_t<A>, stored_t<B>>(store(std::forward<A>(a)), store(std::forward<B>(b)));
}
template <expression A, expression B>
constexpr auto matmul(A&& a, B&& b) {
  return std::forward<A>(a) * std::forward<B>(b);
}

template <expression A>
constexpr auto transpose(A&& a) {
  using S = shape_of_t<A>;
  static_assert(S::rank >= 2 || error::holds<error::transpose_needs_rank_2<error::rank<S::rank>>>,
                "attnx: transpose: the operand needs at least two axes");
  return transpose_expr<stored_t<A>>(store(std::forward<A>(a)));
}

}  // namespace attnx
