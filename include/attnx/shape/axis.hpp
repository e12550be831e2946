// attnx: axes. An axis is an extent, optionally with a name. The extent is known at compile time, or
// is attnx::dyn: known at run time only (a sequence or batch length that comes from data).
//
// Unnamed axes are written as plain numbers:       attnx::tensor<float, 3, 4>
// Named axes are written with a variable template:  attnx::tensor<float, attnx::seq<3>, attnx::d_model<4>>
// Run-time extents are written attnx::dyn:          attnx::tensor<float, attnx::seq<attnx::dyn>, attnx::d_model<4>>
// A name is any type; its only job is to make two axes distinguishable (contracting `seq` with `d_k`
// is an error even when both extents are 4). Names print readably in compiler messages because
// they are types (a string template argument prints as character codes in clang 14).
#pragma once

#include <concepts>
#include <cstddef>
#include <type_traits>

namespace attnx {

// The name of every unnamed axis. It unifies with any name.
struct anon {};

// The extent of an axis whose length is known at run time only (std::dynamic_extent's value, as in
// C++23's std::extents). Rules between two compile-time extents are compile errors; a rule that involves
// a dyn extent is checked once, when the expression node is built, and throws attnx::extent_error.
inline constexpr std::size_t dyn = static_cast<std::size_t>(-1);

// An axis: its name (anon for none) and its extent (a number or dyn), as a type.
template <class Name, std::size_t N>
struct axis {
  using name = Name;
  static constexpr std::size_t extent = N;
};

// The extent of an axis as a value: a compile-time constant (no storage) or, for dyn, a run-time one.
template <std::size_t N>
struct extent_value {
  static constexpr std::size_t value = N;
  constexpr extent_value() noexcept = default;
  constexpr explicit extent_value(std::size_t) noexcept {}
  constexpr operator std::size_t() const noexcept { return N; }
};
template <>
struct extent_value<dyn> {
  std::size_t value = 0;
  constexpr extent_value() noexcept = default;
  constexpr explicit extent_value(std::size_t v) noexcept : value(v) {}
  constexpr operator std::size_t() const noexcept { return value; }
};

// Whether T is an axis<Name, N>.
template <class T>
inline constexpr bool is_axis_v = false;
template <class Name, std::size_t N>
inline constexpr bool is_axis_v<axis<Name, N>> = true;

// Predefined names for the axes of attention. Users add their own: `struct tokens {};` and then
// `attnx::ax<tokens, 7>`.
namespace names {
struct batch {};
struct heads {};
struct seq {};
struct seq_q {};
struct seq_k {};
struct d_model {};
struct d_k {};
struct d_v {};
}  // namespace names

// An axis of any name as a template argument: attnx::ax<tokens, 7>.
template <class Name, std::size_t N>
inline constexpr axis<Name, N> ax{};

// The predefined names as template arguments: tensor<float, batch<2>, seq<dyn>, d_model<512>>.
template <std::size_t N> inline constexpr axis<names::batch, N> batch{};
template <std::size_t N> inline constexpr axis<names::heads, N> heads{};
template <std::size_t N> inline constexpr axis<names::seq, N> seq{};
template <std::size_t N> inline constexpr axis<names::seq_q, N> seq_q{};
template <std::size_t N> inline constexpr axis<names::seq_k, N> seq_k{};
template <std::size_t N> inline constexpr axis<names::d_model, N> d_model{};
template <std::size_t N> inline constexpr axis<names::d_k, N> d_k{};
template <std::size_t N> inline constexpr axis<names::d_v, N> d_v{};

namespace detail {
template <auto E>
struct unnamed_axis {
  static_assert(std::integral<decltype(E)> && E > 0,
                "attnx: an extent must be a positive integer or an attnx::axis<Name, N>{} value");
  using type = axis<anon, static_cast<std::size_t>(E)>;
};
}  // namespace detail

// The axis type written as the template argument E: a number, or a named axis value.
template <auto E>
using axis_of = typename std::conditional_t<is_axis_v<std::remove_cvref_t<decltype(E)>>,
                                            std::type_identity<std::remove_cvref_t<decltype(E)>>,
                                            detail::unnamed_axis<E>>::type;

// Unification of two names (element-wise operations, contractions): equal names, or one unnamed.
template <class A, class B>
inline constexpr bool names_unify_v = std::is_same_v<A, B> || std::is_same_v<A, anon> || std::is_same_v<B, anon>;

// The name two unifying names give: the named one (or anon when both are unnamed).
template <class A, class B>
using unified_name_t = std::conditional_t<std::is_same_v<A, anon>, B, A>;

}  // namespace attnx
