// attnx: shapes. A shape is a list of axes; an extent is a compile-time constant or dyn (run time).
// A shape with a dyn extent has no compile-time size; its run-time extents travel with the expression
// (attnx::dims_of(e), expr/expression.hpp).
//
// Shape arithmetic (transpose, reductions, broadcasting, matmul) is done with plain templates and
// constexpr std::array rather than Hana containers: it runs for every node of every expression, and
// Hana's heterogeneous containers cost several times more compile time for this kind of work.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "attnx/config.hpp"
#include "attnx/shape/axis.hpp"
#include "attnx/util/pack.hpp"

namespace attnx {

// A shape: its axes (names and extents) as types; rank, extents, size, whether every extent is static.
template <class... Axes>
struct shape {
  static_assert((is_axis_v<Axes> && ...), "attnx: shape<...> takes attnx::axis types");
  static constexpr std::size_t rank = sizeof...(Axes);
  static constexpr std::array<std::size_t, rank> extents{Axes::extent...};
  // Every extent known at compile time; the number of dyn extents.
  static constexpr bool is_static = ((Axes::extent != dyn) && ...);
  static constexpr std::size_t dynamic_count = ((Axes::extent == dyn ? 1 : 0) + ... + 0);
  // dyn when an extent is.
  static constexpr std::size_t size = is_static ? (std::size_t{1} * ... * (Axes::extent == dyn ? 1 : Axes::extent)) : dyn;
  // Evaluation walks a tensor row by row: `cols` is the extent of the last axis (dyn when it is), `rows`
  // the product of all the others (1 for rank 0 and 1; dyn when one of them is).
  static constexpr std::size_t cols = rank == 0 ? 1 : extents[rank == 0 ? 0 : rank - 1];
  static constexpr std::size_t rows = !is_static ? dyn : cols == 0 ? 0 : size / cols;
  template <std::size_t I>
  using axis_t = detail::type_at_t<I, Axes...>;
  template <std::size_t I>
  static constexpr std::size_t extent = axis_t<I>::extent;
};

// Whether T is an attnx::shape.
template <class T>
inline constexpr bool is_shape_v = false;
template <class... A>
inline constexpr bool is_shape_v<shape<A...>> = true;

// The shape of template arguments E...: numbers, dyn or named axes (tensor<float, seq<dyn>, 64>'s shape).
template <auto... E>
using make_shape = shape<axis_of<E>...>;

// Two extents that may be equal: equal, or one of them dyn (then compared at run time). The compile-time
// half of every rule that asks for equal extents.
constexpr bool may_equal_extents(std::size_t a, std::size_t b) noexcept { return a == b || a == dyn || b == dyn; }

namespace detail {

template <class S, class Seq>
struct select_axes;
template <class S, std::size_t... I>
struct select_axes<S, std::index_sequence<I...>> {
  using type = shape<typename S::template axis_t<I>...>;
};

template <class A, class B>
struct shape_cat;
template <class... A, class... B>
struct shape_cat<shape<A...>, shape<B...>> {
  using type = shape<A..., B...>;
};

template <std::size_t Offset, class Seq>
struct offset_seq;
template <std::size_t Offset, std::size_t... I>
struct offset_seq<Offset, std::index_sequence<I...>> {
  using type = std::index_sequence<(Offset + I)...>;
};

}  // namespace detail

// The first N axes, and the axes from N on.
template <class S, std::size_t N>
using take_front_t = typename detail::select_axes<S, std::make_index_sequence<N>>::type;
template <class S, std::size_t N>
using drop_front_t =
    typename detail::select_axes<S, typename detail::offset_seq<N, std::make_index_sequence<S::rank - N>>::type>::type;
template <class A, class B>
using shape_cat_t = typename detail::shape_cat<A, B>::type;

// The leading ("batch") axes of a matrix-shaped tensor: all but the last two.
template <class S>
using batch_axes_t = take_front_t<S, (S::rank >= 2 ? S::rank - 2 : 0)>;

// Last two axes swapped. Rank < 2 is rejected by the transpose rule; this stays well formed.
template <class S>
using transpose_t = std::conditional_t<
    (S::rank >= 2),
    shape_cat_t<batch_axes_t<S>,
                shape<typename S::template axis_t<(S::rank >= 2 ? S::rank - 1 : 0)>,
                      typename S::template axis_t<(S::rank >= 2 ? S::rank - 2 : 0)>>>,
    S>;

// The last axis reduced to extent 1 (row-wise max and sum keep the rank, so they broadcast back).
template <class S>
using reduce_last_t = std::conditional_t<(S::rank >= 1),
                                         shape_cat_t<take_front_t<S, (S::rank >= 1 ? S::rank - 1 : 0)>, shape<axis<anon, 1>>>,
                                         S>;

// A @ B: (batch..., M, K) x (K, N) or (batch..., K, N)  ->  (batch..., M, N).
// Ill-formed inputs (caught by the matmul rule) still give a well-formed shape so that no second
// error follows the first.
template <class A, class B>
using matmul_shape_t = shape_cat_t<
    batch_axes_t<A>,
    shape<typename A::template axis_t<(A::rank >= 2 ? A::rank - 2 : 0)>,
          typename B::template axis_t<(B::rank >= 1 ? B::rank - 1 : 0)>>>;

// Broadcasting for element-wise operations, right-aligned as in NumPy: axes of extent 1 (or missing)
// stretch to the other operand's extent; names unify (an unnamed axis takes the other's name).
namespace detail {
struct absent_axis {
  using name = anon;
  static constexpr std::size_t extent = 1;
};
template <class S, std::size_t R, std::size_t I, bool Present = (I + S::rank >= R)>
struct aligned_axis {
  using type = typename S::template axis_t<I + S::rank - R>;
};
template <class S, std::size_t R, std::size_t I>
struct aligned_axis<S, R, I, false> {
  using type = absent_axis;
};
// Axis I of S when S is right-aligned in a rank-R shape (an absent axis of extent 1 in front).
template <class S, std::size_t R, std::size_t I>
using aligned_axis_t = typename aligned_axis<S, R, I>::type;
// A dyn extent stretches only from a compile-time 1 (or a missing axis); against a compile-time extent
// N it must be N at run time, and the result's extent is N.
template <class X, class Y>
struct broadcast_axis {
  static constexpr bool may_equal = may_equal_extents(X::extent, Y::extent);
  static constexpr bool x_wins = (X::extent != 1 || Y::extent == 1) && !(X::extent == dyn && Y::extent != 1);
  using name = std::conditional_t<(may_equal && X::extent != 1 && Y::extent != 1) || X::extent == Y::extent,
                                  unified_name_t<typename X::name, typename Y::name>,
                                  std::conditional_t<x_wins, typename X::name, typename Y::name>>;
  using type = axis<name, (x_wins ? X::extent : Y::extent)>;
};
template <class A, class B, class Seq>
struct broadcast_shape;
template <class A, class B, std::size_t... I>
struct broadcast_shape<A, B, std::index_sequence<I...>> {
  static constexpr std::size_t R = sizeof...(I);
  using type = shape<typename broadcast_axis<aligned_axis_t<A, R, I>, aligned_axis_t<B, R, I>>::type...>;
};
}  // namespace detail

// The shape of an element-wise operation on shapes A and B (right-aligned; an extent of 1 repeats).
template <class A, class B>
using broadcast_shape_t =
    typename detail::broadcast_shape<A, B, std::make_index_sequence<(A::rank > B::rank ? A::rank : B::rank)>>::type;

// ---- run-time extents ------------------------------------------------------------------------
// The extents of an expression at run time: S::extents when S is static, else what the expression holds.
template <std::size_t R>
using dims_t = std::array<std::size_t, R>;

// The element count of extents d, and its last extent (the columns; 1 for rank 0).
template <std::size_t R>
constexpr std::size_t dims_size(const dims_t<R>& d) noexcept {
  std::size_t n = 1;
  for (std::size_t e : d) n *= e;
  return n;
}
template <std::size_t R>
constexpr std::size_t dims_cols(const dims_t<R>& d) noexcept {
  if constexpr (R == 0) {
    return 1;
  } else {
    return d[R - 1];
  }
}
// The rows of each matrix: the extent of the axis before the last (1 for rank < 2).
template <std::size_t R>
constexpr std::size_t dims_matrix_rows(const dims_t<R>& d) noexcept {
  if constexpr (R < 2) {
    return 1;
  } else {
    return d[R - 2];
  }
}
template <std::size_t R>
constexpr std::size_t dims_rows(const dims_t<R>& d) noexcept {
  std::size_t n = 1;
  for (std::size_t k = 0; k + 1 < R; ++k) n *= d[k];
  return n;
}
// Equal ranks, and extents that may be equal (names aside; a dyn one is compared at run time).
template <class A, class B>
constexpr bool may_equal_shapes() {
  if constexpr (A::rank != B::rank) {
    return false;
  } else {
    for (std::size_t k = 0; k < A::rank; ++k)
      if (!may_equal_extents(A::extents[k], B::extents[k])) return false;
    return true;
  }
}

// Printable names, for run-time messages ("[seq=3, d_model=4]"). The name of a type is read from
// the compiler's function signature, so user-defined name types need nothing extra.
template <class Name>
constexpr std::string_view name_of() {
#if defined(__clang__) || defined(__GNUC__)
  std::string_view f = __PRETTY_FUNCTION__;
  // g++: "... [with Name = attnx::names::seq; ...]", clang: "... [Name = attnx::names::seq]"
  auto start = f.find("Name = ");
  if (start == std::string_view::npos) return "?";
  start += 7;
  auto end = f.find_first_of(";]", start);
  auto full = f.substr(start, end - start);
  auto colon = full.rfind("::");
  return colon == std::string_view::npos ? full : full.substr(colon + 2);
#else
  return "?";
#endif
}

namespace detail {
// The axes' names of S for messages (empty for an unnamed axis).
template <class S>
inline constexpr auto axis_names = []<std::size_t... I>(std::index_sequence<I...>) {
  return std::array<std::string_view, S::rank>{
      (std::is_same_v<typename S::template axis_t<I>::name, anon> ? std::string_view() : name_of<typename S::template axis_t<I>::name>())...};
}(std::make_index_sequence<S::rank>{});
// "[name=extent, ...]" of rank axes, an extent dyn as "dyn" (in the library: the messages' text is built once, not
// once per shape).
std::string format_shape(const std::string_view* names, const std::size_t* extents, std::size_t rank);
}  // namespace detail

template <class S>
std::string shape_string() {
  return detail::format_shape(detail::axis_names<S>.data(), S::extents.data(), S::rank);
}

// The same with the run-time extents d ("[seq=37, d_model=4]").
template <class S>
std::string shape_string(const dims_t<S::rank>& d) {
  return detail::format_shape(detail::axis_names<S>.data(), d.data(), S::rank);
}

}  // namespace attnx

#if ATTNX_HEADER_ONLY
#include "attnx/shape/impl/format.hpp"
#endif
