// attnx: operands as the kernels read them. The one place that knows where an operand's matrices lie:
// the evaluators of split_heads read their rows through it, and the fused path hands the same strides to
// the kernel (kernels::strided).
//
//   strided_operand<E> op(e);      // E of shape (lead..., rows, cols)
//   op.data()                      // element (n..., i, c) at data() + sum(n_a * lead[a]) + i * row + c
//   op.lead, op.row, op.rows, op.cols (run-time values: extents may be dyn); strided_operand<E>::group
//   op.row_ptr(r)                  // row r of E's shape, all axes but the last flattened
//   op.kernel_view<R>()            // the kernel's (batch, head) strides for scores of rank R
//
// Tensors and views are read where they are; split_heads<H>(x) reads x (in memory, or evaluated once)
// with the heads' strides; repeat_heads<G>(k) reads k and records the group (query head h uses K/V head
// h / G); anything else is evaluated once into a temporary that the operand owns.
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>

#include "attnx/eval/evaluator.hpp"
#include "attnx/core/expression.hpp"
#include "attnx/expr/heads.hpp"
#include "attnx/kernels/strided.hpp"

namespace attnx {

namespace detail {
// Row-major strides of the leading axes of a contiguous tensor of extents d.
template <std::size_t R>
constexpr std::array<std::ptrdiff_t, (R >= 2 ? R - 2 : 0)> row_major_lead(const dims_t<R>& d) {
  std::array<std::ptrdiff_t, (R >= 2 ? R - 2 : 0)> out{};
  std::ptrdiff_t s = static_cast<std::ptrdiff_t>(d[R - 2] * d[R - 1]);
  for (std::size_t a = out.size(); a-- > 0;) {
    out[a] = s;
    s *= static_cast<std::ptrdiff_t>(d[a]);
  }
  return out;
}
}  // namespace detail

// What every strided operand shares: the layout (run-time values, the operand's extents may be dyn), the
// row pointer and the kernel's view.
template <class Derived, class T, class S>
struct strided_layout {
  static constexpr std::size_t rank = S::rank;
  static constexpr std::size_t lead_rank = rank >= 2 ? rank - 2 : 0;
  std::array<std::size_t, lead_rank> lead_extent{};  // the leading axes' extents
  std::array<std::ptrdiff_t, lead_rank> lead{};       // and their strides
  std::ptrdiff_t row = 0;                             // the stride between rows
  std::size_t rows = 0, cols = 0;

  // Row r of the operand's shape (leading axes and rows flattened, row-major).
  constexpr const T* row_ptr(std::size_t r) const {
    std::ptrdiff_t off = static_cast<std::ptrdiff_t>(r % rows) * row;
    std::size_t n = r / rows;
    for (std::size_t a = lead_rank; a-- > 0;) {
      off += static_cast<std::ptrdiff_t>(n % lead_extent[a]) * lead[a];
      n /= lead_extent[a];
    }
    return static_cast<const Derived&>(*this).data() + off;
  }
  // The kernel's strides for scores of rank R: a plain matrix is shared by every (batch, head); an operand
  // with the scores' rank maps its leading axes to (batch) or (batch, head).
  template <std::size_t R>
  kernels::strided<const T> kernel_view() const {
    static_assert(rank == 2 || rank == R, "attnx: an attention operand has rank 2 or the scores' rank");
    kernels::strided<const T> v;
    v.data = static_cast<const Derived&>(*this).data();
    v.row = row;
    if constexpr (rank >= 3) v.batch = lead[0];
    if constexpr (rank >= 4) v.head = lead[1];
    return v;
  }

 protected:
  // The operand's own extents d, its row stride `row_stride` and leading strides `st`.
  constexpr void set_layout(const dims_t<rank>& d, std::ptrdiff_t row_stride,
                            const std::array<std::ptrdiff_t, lead_rank>& st) {
    for (std::size_t a = 0; a < lead_rank; ++a) lead_extent[a] = d[a];
    lead = st;
    row = row_stride;
    rows = d[rank - 2];
    cols = d[rank - 1];
  }
};

// The general case: E in memory as it is (tensors, views), or evaluated once.
template <class E>
struct strided_operand : strided_layout<strided_operand<E>, value_t<E>, shape_of_t<E>> {
  using S = shape_of_t<E>;
  static_assert(S::rank >= 2, "attnx: a strided operand is a stack of matrices (rank >= 2)");
  static constexpr std::size_t group = 1;
  constexpr explicit strided_operand(const E& e) : d(e) {
    const auto x = dims_of(e);
    this->set_layout(x, static_cast<std::ptrdiff_t>(x[S::rank - 1]), detail::row_major_lead<S::rank>(x));
  }
  constexpr const value_t<E>* data() const noexcept { return d.data(); }
  dense_operand<E> d;
};

// split_heads<H>(x): x (lead..., L, D) in memory (or evaluated once) read as (lead..., H, L, D / H):
// element (n..., h, l, c) at x + n-offset + l * D + h * (D / H) + c.
template <std::size_t H, class A>
struct strided_operand<split_heads_expr<H, A>>
    : strided_layout<strided_operand<split_heads_expr<H, A>>, value_t<A>, shape_of_t<split_heads_expr<H, A>>> {
  using SA = shape_of_t<A>;
  using base_t = strided_layout<strided_operand<split_heads_expr<H, A>>, value_t<A>, shape_of_t<split_heads_expr<H, A>>>;
  static constexpr std::size_t group = 1;
  constexpr explicit strided_operand(const split_heads_expr<H, A>& e) : d(e.operand()) {
    const auto xd = dims_of(e.operand());
    const auto outer = detail::row_major_lead<SA::rank>(xd);  // x's own leading axes
    std::array<std::ptrdiff_t, base_t::lead_rank> st{};
    for (std::size_t a = 0; a < outer.size(); ++a) st[a] = outer[a];
    st[outer.size()] = static_cast<std::ptrdiff_t>(xd[SA::rank - 1] / H);  // the heads
    this->set_layout(dims_of(e), static_cast<std::ptrdiff_t>(xd[SA::rank - 1]), st);
  }
  constexpr const value_t<A>* data() const noexcept { return d.data(); }
  dense_operand<A> d;
};

// repeat_heads<G>(k): k's layout; query head h reads K/V head h / G.
template <std::size_t G, class A>
struct strided_operand<repeat_heads_expr<G, A>> : strided_operand<A> {
  constexpr explicit strided_operand(const repeat_heads_expr<G, A>& e) : strided_operand<A>(e.operand()) {}
  static constexpr std::size_t group = G * strided_operand<A>::group;
};

// ---- the evaluator of split_heads: rows through the same strides ----------------------------------
template <std::size_t H, class A>
struct evaluator<split_heads_expr<H, A>> {
  constexpr explicit evaluator(const split_heads_expr<H, A>& e) : src(e) {}
  constexpr void begin_row(std::size_t r) { row = src.row_ptr(r); }
  constexpr auto at(std::size_t j) const { return row[j]; }
  strided_operand<split_heads_expr<H, A>> src;
  const value_t<A>* row = nullptr;
};

}  // namespace attnx
