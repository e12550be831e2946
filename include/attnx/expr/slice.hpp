// attnx: slicing, concatenation, row selection and reshaping.
//
//   slice<Axis, Begin, Count>(e)   a static range of one axis (the result's extent there is Count)
//   slice<Axis>(e, begin, count)   a run-time range (the result's extent there is dyn; checked when built)
//   concat<Axis>(a, b)             a, then b, along Axis (the other extents must agree)
//   index_select(table, ids)       the rows of a (rows, cols) table named by integer ids (an embedding lookup,
//                                  PyTorch's index_select(table, 0, ids)); ids is a contiguous range of
//                                  integers the caller keeps alive until the expression is evaluated
//   reshape<E...>(t)               a tensor's or view's contiguous memory as another shape of the same size
//                                  (a view: nothing is copied; dyn extents given as arguments)
// Slices and concatenations are lazy like any node: no copy, their evaluators map rows and columns onto the
// operands'. Axis counts from 0; a negative-free index keeps the rules simple (the last axis of a rank-R
// expression is R - 1).
#pragma once

#include <cstddef>
#include <span>  // std::data, std::size (also declared by <span>; <iterator> brings <streambuf>)
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/expr/elementwise.hpp"
#include "attnx/core/expression.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/shape/shape.hpp"
#include "attnx/tensor/view.hpp"

namespace attnx {

// S with axis I's extent replaced by N (its name kept).
template <class S, std::size_t I, std::size_t N>
using with_extent_t = shape_cat_t<shape_cat_t<take_front_t<S, I>, shape<axis<typename S::template axis_t<I>::name, N>>>,
                                  drop_front_t<S, I + 1>>;

namespace detail {
// How a row index of a result maps onto an operand's when one leading axis (not the last) has a different extent
// there: rows = (outer, i on the axis, inner) with inner the product of the leading extents after the axis.
struct axis_rows {
  std::size_t inner = 1, count = 1;  // count: the result's extent on the axis
  constexpr std::size_t outer(std::size_t r) const noexcept { return r / (count * inner); }
  constexpr std::size_t index(std::size_t r) const noexcept { return r / inner % count; }
  constexpr std::size_t rest(std::size_t r) const noexcept { return r % inner; }
  // the row of an operand whose extent on the axis is n, at index i of it
  constexpr std::size_t row(std::size_t r, std::size_t n, std::size_t i) const noexcept {
    return (outer(r) * n + i) * inner + rest(r);
  }
};
template <std::size_t R>
constexpr axis_rows make_axis_rows(const dims_t<R>& d, std::size_t axis) {
  axis_rows m;
  for (std::size_t k = axis + 1; k + 1 < R; ++k) m.inner *= d[k];
  m.count = d[axis];
  return m;
}
}  // namespace detail

// ---- slice ----------------------------------------------------------------------------------------------
template <std::size_t Axis, std::size_t Count, class A>
class slice_expr : public unary_node<A> {
 public:
  using shape_type = with_extent_t<shape_of_t<A>, Axis, Count>;
  constexpr slice_expr(A a, std::size_t begin, std::size_t count) : unary_node<A>(std::move(a)), begin_(begin), count_(count) {}
  constexpr dims_t<shape_type::rank> dims() const {
    auto d = dims_of(this->operand());
    d[Axis] = count_;
    return d;
  }
  constexpr std::size_t begin() const noexcept { return begin_; }

 private:
  std::size_t begin_, count_;
};

namespace rules {
template <class S, std::size_t Axis, bool Quiet = false>
constexpr bool check_axis_index(const char*) {
  constexpr bool ok = Axis < S::rank;
  static_assert(Quiet || ok || error::holds<error::axis_index_out_of_range<error::axis_index<Axis>, error::rank<S::rank>>>,
                "attnx: slice / concat: the axis index must be less than the operand's rank");
  return ok;
}
template <class S, std::size_t Axis, std::size_t Begin, std::size_t Count, bool Quiet = false>
constexpr bool check_static_slice() {
  constexpr std::size_t n = S::extents[Axis];
  constexpr bool ok = n == dyn || (Count != dyn && Count <= n && Begin <= n - Count);
  static_assert(Quiet || ok ||
                    error::holds<error::slice_exceeds_extent<error::axis_index<Axis>, error::slice_end<Begin + Count>,
                                                             error::extent<n>>>,
                "attnx: slice: the range [Begin, Begin + Count) exceeds the axis' extent");
  return ok;
}
inline constexpr void check_slice_range(std::size_t axis, std::size_t begin, std::size_t count, std::size_t n) {
  if (begin > n || count > n - begin)
    detail::throw_extent_error("slice: the range [begin, begin + count) exceeds axis " + std::to_string(axis) + "'s extent",
                               "slice_end", count > ~begin ? ~std::size_t{0} : begin + count, "extent", n);  // (saturated)
}
}  // namespace rules

// slice<Axis, Begin, Count>(e): elements Begin .. Begin + Count - 1 of axis Axis.
template <std::size_t Axis, std::size_t Begin, std::size_t Count, expression A>
constexpr auto slice(A&& a) {
  using S = shape_of_t<A>;
  constexpr bool quiet = failed_v<A>;
  constexpr bool axis_ok = rules::check_axis_index<S, Axis, quiet>("slice");
  if constexpr (!axis_ok || quiet) {
    return failed_expr<value_t<A>, S>{};
  } else {
    constexpr bool range_ok = rules::check_static_slice<S, Axis, Begin, Count>();
    if constexpr (!range_ok) {
      return failed_expr<value_t<A>, with_extent_t<S, Axis, Count>>{};
    } else {
      if constexpr (S::extents[Axis] == dyn) rules::check_slice_range(Axis, Begin, Count, dims_of(a)[Axis]);
      return slice_expr<Axis, Count, stored_t<A>>(store(std::forward<A>(a)), Begin, Count);
    }
  }
}
// slice<Axis>(e, begin, count): a range known at run time (the result's extent on Axis is dyn).
template <std::size_t Axis, expression A>
constexpr auto slice(A&& a, std::size_t begin, std::size_t count) {
  using S = shape_of_t<A>;
  constexpr bool quiet = failed_v<A>;
  constexpr bool axis_ok = rules::check_axis_index<S, Axis, quiet>("slice");
  if constexpr (!axis_ok || quiet) {
    return failed_expr<value_t<A>, S>{};
  } else {
    rules::check_slice_range(Axis, begin, count, dims_of(a)[Axis]);
    return slice_expr<Axis, dyn, stored_t<A>>(store(std::forward<A>(a)), begin, count);
  }
}
template <std::size_t Axis, std::size_t Begin, std::size_t Count, class A>
  requires any_foreign<A>
constexpr auto slice(A&&) {
  return foreign_arguments<A>();
}

// ---- concat ---------------------------------------------------------------------------------------------
template <std::size_t Axis, class A, class B>
class concat_expr : public binary_node<A, B> {
  static constexpr std::size_t ea = shape_of_t<A>::extents[Axis], eb = shape_of_t<B>::extents[Axis];

 public:
  using value_type = value_t<A>;
  using shape_type = with_extent_t<shape_of_t<A>, Axis, (ea == dyn || eb == dyn ? dyn : ea + eb)>;
  using binary_node<A, B>::binary_node;
  constexpr dims_t<shape_type::rank> dims() const {
    auto d = dims_of(this->lhs());
    d[Axis] += dims_of(this->rhs())[Axis];
    return d;
  }
};

namespace rules {
// Same rank; every axis but Axis of equal extent (a dyn one is checked at run time).
template <class SA, class SB, std::size_t Axis, bool Quiet = false>
constexpr bool check_concat() {
  constexpr bool rank_ok = SA::rank == SB::rank;
  static_assert(Quiet || rank_ok || error::holds<error::concat_ranks_differ<error::lhs_rank<SA::rank>, error::rhs_rank<SB::rank>>>,
                "attnx: concat: the operands must have the same rank");
  if constexpr (!rank_ok) {
    return false;
  } else {
    constexpr std::size_t bad = [] {
      for (std::size_t k = 0; k < SA::rank; ++k)
        if (k != Axis && !may_equal_extents(SA::extents[k], SB::extents[k])) return k;
      return SA::rank;
    }();
    constexpr std::size_t k = bad < SA::rank ? bad : 0;
    static_assert(Quiet || bad == SA::rank ||
                      error::holds<error::concat_extents_differ<error::axis_index<k>, error::lhs_extent<SA::extents[k]>,
                                                                error::rhs_extent<SB::extents[k]>>>,
                  "attnx: concat: the operands' extents differ on an axis other than the one concatenated");
    return bad == SA::rank;
  }
}
template <class SA, class SB, std::size_t Axis>
constexpr void check_concat_dims(const dims_t<SA::rank>& a, const dims_t<SB::rank>& b) {
  for (std::size_t k = 0; k < SA::rank; ++k)
    if (k != Axis && a[k] != b[k])
      detail::throw_extent_error("concat: the operands' extents differ on axis " + std::to_string(k) +
                                     ", not the one concatenated",
                                 "lhs_extent", a[k], "rhs_extent", b[k]);
}
}  // namespace rules

// concat<Axis>(a, b): a and b one after the other along Axis (the other extents equal).
template <std::size_t Axis, expression A, expression B>
constexpr auto concat(A&& a, B&& b) {
  using SA = shape_of_t<A>;
  using SB = shape_of_t<B>;
  constexpr bool quiet = any_failed_v<A, B>;
  constexpr bool axis_ok = rules::check_axis_index<SA, Axis, quiet>("concat");
  constexpr bool ok = axis_ok && rules::check_concat<SA, SB, Axis, quiet || !axis_ok>();
  constexpr bool types_ok = rules::check_element_types<value_t<A>, value_t<B>, quiet || !ok>();
  if constexpr (quiet || !ok || !types_ok) {
    return failed_expr<value_t<A>, SA>{};
  } else {
    if constexpr (!SA::is_static || !SB::is_static) rules::check_concat_dims<SA, SB, Axis>(dims_of(a), dims_of(b));
    return concat_expr<Axis, stored_t<A>, stored_t<B>>(store(std::forward<A>(a)), store(std::forward<B>(b)));
  }
}
template <std::size_t Axis, class A, class B>
  requires any_foreign<A, B>
constexpr auto concat(A&&, B&&) {
  return foreign_arguments<A, B>();
}

// ---- index_select ----------------------------------------------------------------------------------------
template <class A, class I>
class index_select_expr : public unary_node<A> {
 public:
  using shape_type = shape<axis<anon, dyn>, typename shape_of_t<A>::template axis_t<1>>;
  constexpr index_select_expr(A a, const I* ids, std::size_t n) : unary_node<A>(std::move(a)), ids_(ids), n_(n) {}
  constexpr dims_t<2> dims() const { return {n_, dims_of(this->operand())[1]}; }
  constexpr const I* ids() const noexcept { return ids_; }

 private:
  const I* ids_;
  std::size_t n_;
};

namespace rules {
template <class S, bool Quiet = false>
constexpr bool check_table() {
  static_assert(Quiet || S::rank == 2 || error::holds<error::index_select_needs_a_matrix<error::rank<S::rank>>>,
                "attnx: index_select: the table must be a matrix (rows, cols)");
  return S::rank == 2;
}
}  // namespace rules

// index_select(table, ids): row ids[i] of table as row i. Every id is checked now: one outside [0, rows) throws
// std::out_of_range naming its position, its value and the table's row count.
template <expression A, class R>
  requires requires(const R& r) {
    std::data(r);
    std::size(r);
    requires std::is_integral_v<std::remove_cvref_t<decltype(*std::data(r))>>;
  }
constexpr auto index_select(A&& table, const R& ids) {
  using S = shape_of_t<A>;
  using I = std::remove_cvref_t<decltype(*std::data(ids))>;
  constexpr bool ok = rules::check_table<S, failed_v<A>>();
  if constexpr (!ok || failed_v<A>) {
    return failed_expr<value_t<A>, shape<axis<anon, dyn>, axis<anon, (S::rank >= 2 ? S::cols : 1)>>>{};
  } else {
    const std::size_t rows = dims_of(table)[0], n = std::size(ids);
    const I* p = std::data(ids);
    for (std::size_t i = 0; i < n; ++i)
      if ((std::is_signed_v<I> && p[i] < I(0)) || static_cast<std::size_t>(p[i]) >= rows)
        ATTNX_THROW(std::out_of_range("attnx: index_select: id " + std::to_string(p[i]) + " at position " + std::to_string(i) +
                                " is outside the table's " + std::to_string(rows) + " rows"));
    return index_select_expr<stored_t<A>, I>(store(std::forward<A>(table)), p, n);
  }
}

// ---- reshape ----------------------------------------------------------------------------------------------
namespace rules {
template <std::size_t From, std::size_t To, bool Quiet = false>
constexpr bool check_reshape() {
  constexpr bool ok = From == dyn || To == dyn || From == To;
  static_assert(Quiet || ok || error::holds<error::reshape_sizes_differ<error::source_size<From>, error::target_size<To>>>,
                "attnx: reshape: the new shape must have as many elements as the old one");
  return ok;
}
}  // namespace rules

// reshape<E...>(t): t's memory (a tensor or a view: contiguous, row-major) seen with extents E... (numbers, dyn,
// or named axes); dyn extents are given as arguments. A view of const elements for a tensor or a view of const,
// of writable elements for a writable view. The element count must not change (a compile error for static
// shapes, std::length_error otherwise).
template <auto... E, class X, std::integral... D>
  requires dense_terminal<X>
constexpr auto reshape(X&& x, D... dyn_extents) {
  using S = shape_of_t<X>;
  using To = make_shape<E...>;
  using P = std::remove_pointer_t<decltype(x.data())>;
  using V = basic_view<std::conditional_t<is_tensor_v<X>, const value_t<X>, P>, To>;
  static_assert(sizeof...(D) == To::dynamic_count, "attnx: reshape: give one extent per dyn axis of the new shape");
  static_assert(!is_tensor_v<X> || std::is_lvalue_reference_v<X>,
                "attnx: reshape: the view of a temporary tensor would dangle (name the tensor first)");
  constexpr bool ok = rules::check_reshape<S::size, To::size>();
  if constexpr (sizeof...(D) != To::dynamic_count) {
    return failed_expr<value_t<X>, To>{};  // (reported above)
  } else if constexpr (!ok) {
    return V(x.data(), To::size);  // (never runs: the rule failed; a view, so that its use reports nothing more)
  } else {
    const std::size_t n = dims_size(dims_of(x));
    if constexpr (To::is_static) {
      if (n != To::size)
        ATTNX_THROW(std::length_error("attnx: reshape: " + std::to_string(n) + " elements cannot be seen as " + shape_string<To>() +
                                " (" + std::to_string(To::size) + " elements)"));
      return V(x.data(), n);
    } else {
      const V v(x.data(), dyn_extents...);
      if (v.numel() != n)
        ATTNX_THROW(std::length_error("attnx: reshape: " + std::to_string(n) + " elements cannot be seen as " +
                                shape_string<To>(v.dims()) + " (" + std::to_string(v.numel()) + " elements)"));
      return v;
    }
  }
}

}  // namespace attnx
