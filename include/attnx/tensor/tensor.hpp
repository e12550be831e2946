// attnx: basic_tensor, the owning tensor with a static shape.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "attnx/expr/expression.hpp"
#include "attnx/expr/traversal.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/shape/shape.hpp"
#include "attnx/tensor/storage.hpp"

namespace attnx {

namespace detail {
template <class T, std::size_t R>
struct nested_list {
  using type = std::initializer_list<typename nested_list<T, R - 1>::type>;
};
template <class T>
struct nested_list<T, 1> {
  using type = std::initializer_list<T>;
};
template <class T>
struct nested_list<T, 0> {
  using type = T;
};

template <class Shape>
constexpr std::array<std::size_t, Shape::rank> row_major_strides() {
  std::array<std::size_t, Shape::rank> s{};
  std::size_t acc = 1;
  for (std::size_t i = Shape::rank; i-- > 0;) {
    s[i] = acc;
    acc *= Shape::extents[i];
  }
  return s;
}

// The assignment rule: the source's shape must be the target's (names unify, extents equal).
// Returns the first offending axis, or rank if none.
template <class Target, class Source>
constexpr std::size_t first_assignment_mismatch() {
  if constexpr (Target::rank != Source::rank) {
    return 0;
  } else {
    std::size_t bad = Target::rank;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((bad == Target::rank &&
                (Target::template extent<I> != Source::template extent<I> ||
                 !names_unify_v<typename Target::template axis_t<I>::name, typename Source::template axis_t<I>::name>)
            ? (bad = I, 0)
            : 0),
       ...);
    }(std::make_index_sequence<Target::rank>{});
    return bad;
  }
}
}  // namespace detail

// Checks, at compile time, that an expression of shape Source may be written into Target. Quiet: the
// expression already failed a rule (reported where it happened). Returns whether the rule holds.
template <class Target, class Source, bool Quiet = false>
constexpr bool check_assignment() {
  static_assert(Quiet || Target::rank == Source::rank ||
                    error::holds<error::assignment_ranks_differ<error::lhs_rank<Target::rank>, error::rhs_rank<Source::rank>,
                                                                error::target_shape_of<Target>, error::source_shape_of<Source>>>,
                "attnx: assignment: the expression's rank differs from the target's");
  if constexpr (Target::rank == Source::rank) {
    constexpr std::size_t i = detail::first_assignment_mismatch<Target, Source>();
    constexpr std::size_t j = i < Target::rank ? i : 0;
    if constexpr (Target::rank > 0) {
      using TA = typename Target::template axis_t<j>;
      using SA = typename Source::template axis_t<j>;
      static_assert(Quiet || i == Target::rank || TA::extent == SA::extent ||
                        error::holds<error::assignment_extents_differ<error::axis_index<j>, error::target_extent<TA::extent>,
                                                                      error::source_extent<SA::extent>,
                                                                      error::target_shape_of<Target>, error::source_shape_of<Source>>>,
                    "attnx: assignment: the expression's extents differ from the target's");
      static_assert(Quiet || i == Target::rank || TA::extent != SA::extent ||
                        error::holds<error::assignment_axes_differ<error::axis_index<j>, error::target_axis<typename TA::name>,
                                                                   error::source_axis<typename SA::name>>>,
                    "attnx: assignment: the expression's axis names differ from the target's");
    }
    return i == Target::rank;
  } else {
    return false;
  }
}

// Checks, at compile time, that an expression of element type value_t<E> may be written into elements
// of type T: the same type (attnx converts nothing silently; cast<T>(e) converts). Quiet as above.
template <class T, class E, bool Quiet = false>
constexpr bool check_assignment_type() {
  static_assert(Quiet || std::is_same_v<T, value_t<E>> ||
                    error::holds<error::assignment_element_types_differ<error::target_element_type<T>,
                                                                       error::source_element_type<value_t<E>>>>,
                "attnx: assignment: the expression's element type differs from the target's (convert it with "
                "attnx::cast<T>(e))");
  return std::is_same_v<T, value_t<E>>;
}

// Both assignment rules, quiet when the expression already failed; true when E may be evaluated into
// elements of type T and shape Target.
template <class T, class Target, class E>
constexpr bool check_assignable() {
  constexpr bool quiet = failed_v<E>;
  constexpr bool shape_ok = check_assignment<Target, shape_of_t<E>, quiet>();
  constexpr bool type_ok = check_assignment_type<T, E, quiet || !shape_ok>();
  return !quiet && shape_ok && type_ok;
}

// Evaluation entry point (defined in attnx/eval/assign.hpp): writes the expression's elements,
// row-major, to dst.
template <class T, class E>
constexpr void assign_into(T* dst, const E& e);

template <class T, class Shape>
class basic_tensor : public expression_tag {
  static_assert(is_shape_v<Shape>, "attnx: basic_tensor<T, Shape> needs an attnx::shape");
  static_assert(std::is_arithmetic_v<T>, "attnx: tensor elements must be arithmetic (float, double, bool, ...)");

 public:
  using value_type = T;
  using shape_type = Shape;
  static constexpr std::size_t rank = Shape::rank;
  static constexpr std::size_t size = Shape::size;
  static constexpr std::array<std::size_t, rank> extents = Shape::extents;
  static constexpr std::array<std::size_t, rank> strides = detail::row_major_strides<Shape>();

  // Zero-filled.
  constexpr basic_tensor() = default;
  constexpr explicit basic_tensor(uninitialized_t) : s_(uninitialized) {}

  // Nested braces, one level per axis: tensor<double, 2, 3> a{{1, 2, 3}, {4, 5, 6}};
  // A wrong count throws std::invalid_argument (a compile error in a constant expression).
  constexpr basic_tensor(typename detail::nested_list<T, rank>::type init)
    requires(rank >= 1)
      : s_(uninitialized) {
    std::size_t pos = 0;
    fill_nested<0>(init, pos);
  }

  // Evaluates an expression (see attnx/eval/assign.hpp).
  template <expression E>
    requires(!std::is_same_v<std::remove_cvref_t<E>, basic_tensor>)
  constexpr basic_tensor(const E& e) : s_(uninitialized) {
    if constexpr (check_assignable<T, Shape, E>()) assign_into(data(), e);
  }

  // Evaluates into a fresh buffer first, so `a = a * b` reads the old `a` throughout.
  template <expression E>
    requires(!std::is_same_v<std::remove_cvref_t<E>, basic_tensor>)
  constexpr basic_tensor& operator=(const E& e) {
    if constexpr (check_assignable<T, Shape, E>()) {
      if (!std::is_constant_evaluated() && !reads_memory(e, data(), size)) {
        assign_into(data(), e);
      } else {
        basic_tensor fresh(e);
        s_ = std::move(fresh.s_);
      }
    }
    return *this;
  }

  // Elements from a flat row-major range of exactly `size` values.
  static constexpr basic_tensor from_flat(std::span<const T> flat) {
    if (flat.size() != size) throw std::length_error(size_message(flat.size()));
    basic_tensor t(uninitialized);
    for (std::size_t i = 0; i < size; ++i) t.data()[i] = flat[i];
    return t;
  }
  // Element (i, j, ...) = f(i, j, ...).
  template <class F>
  static constexpr basic_tensor generate(F&& f) {
    basic_tensor t(uninitialized);
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      for (std::size_t flat = 0; flat < size; ++flat) t.data()[flat] = static_cast<T>(f((flat / strides[I] % extents[I])...));
    }(std::make_index_sequence<rank>{});
    return t;
  }
  static constexpr basic_tensor filled(T v) {
    basic_tensor t(uninitialized);
    for (std::size_t i = 0; i < size; ++i) t.data()[i] = v;
    return t;
  }

  template <std::integral... I>
    requires(sizeof...(I) == rank)
  constexpr T& operator()(I... i) noexcept {
    return data()[offset(i...)];
  }
  template <std::integral... I>
    requires(sizeof...(I) == rank)
  constexpr const T& operator()(I... i) const noexcept {
    return data()[offset(i...)];
  }
  // Bounds-checked access: std::out_of_range names the axis, the index and the extent.
  template <std::integral... I>
    requires(sizeof...(I) == rank)
  constexpr const T& at(I... i) const {
    check_bounds(i...);
    return data()[offset(i...)];
  }
  template <std::integral... I>
    requires(sizeof...(I) == rank)
  constexpr T& at(I... i) {
    check_bounds(i...);
    return data()[offset(i...)];
  }

  constexpr T* data() noexcept { return s_.data(); }
  constexpr const T* data() const noexcept { return s_.data(); }
  constexpr T* begin() noexcept { return data(); }
  constexpr T* end() noexcept { return data() + size; }
  constexpr const T* begin() const noexcept { return data(); }
  constexpr const T* end() const noexcept { return data() + size; }
  constexpr std::span<T, size> span() noexcept { return std::span<T, size>(data(), size); }
  constexpr std::span<const T, size> span() const noexcept { return std::span<const T, size>(data(), size); }

  friend constexpr bool operator==(const basic_tensor& a, const basic_tensor& b) {
    for (std::size_t i = 0; i < size; ++i)
      if (!(a.data()[i] == b.data()[i])) return false;
    return true;
  }

 private:
  template <class... I>
  static constexpr std::size_t offset(I... i) noexcept {
    std::size_t off = 0, k = 0;
    ((off += static_cast<std::size_t>(i) * strides[k++]), ...);
    return off;
  }
  template <class... I>
  static constexpr void check_bounds(I... i) {
    std::size_t k = 0;
    ((static_cast<std::size_t>(i) >= extents[k]
          ? throw std::out_of_range("attnx: index " + std::to_string(static_cast<long long>(i)) + " is out of range on axis " +
                                    std::to_string(k) + " of a tensor of shape " + shape_string<Shape>())
          : void(++k)),
     ...);
  }
  static std::string size_message(std::size_t got) {
    return "attnx: a tensor of shape " + shape_string<Shape>() + " needs " + std::to_string(size) +
           " elements, got " + std::to_string(got);
  }
  template <std::size_t Level, class List>
  constexpr void fill_nested(const List& list, std::size_t& pos) {
    if (list.size() != extents[Level])
      throw std::invalid_argument("attnx: an initializer list has the wrong number of elements for its axis");
    for (const auto& item : list) {
      if constexpr (Level + 1 == rank) {
        data()[pos++] = item;
      } else {
        fill_nested<Level + 1>(item, pos);
      }
    }
  }

  storage<T, size> s_;
};

// tensor<float, 3, 4>, tensor<float, seq<3>, d_model<4>>: the shape written as extents.
template <class T, auto... E>
using tensor = basic_tensor<T, make_shape<E...>>;

// The owning tensor an expression evaluates to.
template <class E>
using result_t = basic_tensor<value_t<E>, shape_of_t<E>>;

}  // namespace attnx
