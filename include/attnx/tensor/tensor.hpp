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

#include "attnx/util/algorithm.hpp"
#include "attnx/core/expression.hpp"
#include "attnx/core/traversal.hpp"
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

// The assignment rule: the source's shape must be the target's (names unify, extents equal; a dyn extent
// is checked at run time). Returns the first offending axis, or rank if none.
template <class Target, class Source>
constexpr std::size_t first_assignment_mismatch() {
  if constexpr (Target::rank != Source::rank) {
    return 0;
  } else {
    std::size_t bad = Target::rank;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((bad == Target::rank &&
                (!may_equal_extents(Target::template extent<I>, Source::template extent<I>) ||
                 !names_unify_v<typename Target::template axis_t<I>::name, typename Source::template axis_t<I>::name>)
            ? (bad = I, 0)
            : 0),
       ...);
    }(std::make_index_sequence<Target::rank>{});
    return bad;
  }
}

// The run-time half of the assignment rule: extents `source` written into a target of shape Target with
// extents `target` (Target's static extents where it has them).
template <class Target>
constexpr void check_assignment_dims(const dims_t<Target::rank>& target, const dims_t<Target::rank>& source,
                                     const char* what = "assignment") {
  for (std::size_t k = 0; k < Target::rank; ++k)
    if (target[k] != source[k])
      throw_extent_error(std::string(what) + ": the expression's extents differ from the target's on axis " + std::to_string(k) +
                             " (target " + shape_string<Target>(target) + ")",
                         "target_extent", target[k], "source_extent", source[k]);
}

// d with Shape's static extents where it has them (the extents a target of shape Shape would need).
template <class Shape>
constexpr dims_t<Shape::rank> with_static_extents(dims_t<Shape::rank> d) noexcept {
  for (std::size_t k = 0; k < Shape::rank; ++k)
    if (Shape::extents[k] != dyn) d[k] = Shape::extents[k];
  return d;
}

// Run-time extents given for a shape (to a constructor) must be its static extents where it has them.
template <class Shape>
constexpr void check_given_extents(const char* what, const dims_t<Shape::rank>& d) {
  for (std::size_t k = 0; k < Shape::rank; ++k)
    if (Shape::extents[k] != dyn && Shape::extents[k] != d[k])
      throw_extent_error(std::string(what) + ": an extent given for a static axis differs from it (axis " + std::to_string(k) +
                             " of " + shape_string<Shape>() + ")",
                         "static_extent", Shape::extents[k], "given_extent", d[k]);
}

// What a tensor or view knows of its extents. A static shape: constants (size, extents, strides) and
// nothing stored. A shape with a dyn extent: the run-time extents, read with dims() and numel() (no size,
// extents or strides constants). Owning (a tensor): a moved-from holder is empty, as its storage is;
// a view's extents are copied with its pointer.
template <class Shape, bool Owning, bool Static = Shape::is_static>
struct extents_holder {
  static constexpr std::size_t size = Shape::size;
  static constexpr std::array<std::size_t, Shape::rank> extents = Shape::extents;
  static constexpr std::array<std::size_t, Shape::rank> strides = row_major_strides<Shape>();
  // The extents (run-time values of the dyn axes included), the element count, one extent.
  static constexpr dims_t<Shape::rank> dims() noexcept { return Shape::extents; }
  static constexpr std::size_t numel() noexcept { return Shape::size; }
  static constexpr std::size_t extent(std::size_t k) noexcept { return Shape::extents[k]; }

 protected:
  constexpr extents_holder() noexcept = default;
  constexpr explicit extents_holder(const dims_t<Shape::rank>&) noexcept {}
  constexpr void set_dims(const dims_t<Shape::rank>&) noexcept {}
};
template <class Shape, bool Owning>
struct extents_holder<Shape, Owning, false> {
  constexpr dims_t<Shape::rank> dims() const noexcept { return d_; }
  constexpr std::size_t numel() const noexcept { return dims_size<Shape::rank>(d_); }
  constexpr std::size_t extent(std::size_t k) const noexcept { return d_[k]; }

 protected:
  constexpr extents_holder() noexcept : d_(with_static_extents<Shape>({})) {}  // dyn axes 0
  constexpr explicit extents_holder(const dims_t<Shape::rank>& d) noexcept : d_(d) {}
  constexpr extents_holder(const extents_holder&) noexcept = default;
  constexpr extents_holder& operator=(const extents_holder&) noexcept = default;
  constexpr extents_holder(extents_holder&& o) noexcept : d_(o.d_) {
    if constexpr (Owning) o.d_ = with_static_extents<Shape>({});
  }
  constexpr extents_holder& operator=(extents_holder&& o) noexcept {
    if constexpr (Owning) {
      std::swap(d_, o.d_);  // as storage's move assignment swaps the buffers
    } else {
      d_ = o.d_;
    }
    return *this;
  }
  constexpr void set_dims(const dims_t<Shape::rank>& d) noexcept { d_ = d; }

 private:
  dims_t<Shape::rank> d_;
};

// Full extents from the run-time values given for a shape's dyn axes (or for all its axes); a value given
// for a static axis must be that axis's extent.
// Not constexpr, so that no constant folding turns a filled or generated tensor (a default member initializer, say)
// into one store per element (basic_tensor::filled, generate).
template <class T>
void fill_at_run_time(T* p, std::size_t n, T v) {
  for (std::size_t i = 0; i < n; ++i) p[i] = v;
}
template <class F>
void for_each_at_run_time(std::size_t n, const F& f) {
  for (std::size_t i = 0; i < n; ++i) f(i);
}

template <class Shape, class... I>
constexpr dims_t<Shape::rank> dims_from(const char* what, I... given) {
  static_assert(sizeof...(I) == Shape::dynamic_count || sizeof...(I) == Shape::rank,
                "attnx: give one run-time extent per dyn axis (or one per axis)");
  ((static_cast<long long>(given) < 0 ? ATTNX_THROW(extent_error(std::string("attnx: ") + what + ": a negative extent")) : void()), ...);
  const std::size_t g[sizeof...(I) + 1] = {static_cast<std::size_t>(given)..., 0};
  dims_t<Shape::rank> d{};
  if constexpr (sizeof...(I) == Shape::rank) {
    for (std::size_t k = 0; k < Shape::rank; ++k) d[k] = g[k];
    check_given_extents<Shape>(what, d);
  } else {
    std::size_t next = 0;
    for (std::size_t k = 0; k < Shape::rank; ++k) d[k] = Shape::extents[k] == dyn ? g[next++] : Shape::extents[k];
  }
  return d;
}

// Row-major offset of (i...) in extents d.
template <std::size_t R, class... I>
constexpr std::size_t row_major_offset(const dims_t<R>& d, I... i) noexcept {
  std::size_t off = 0, k = 0;
  ((off = off * d[k++] + static_cast<std::size_t>(i)), ...);
  return off;
}
}  // namespace detail

// Checks, at compile time, that an expression of shape Source may be written into Target. Quiet: the
// expression already failed a rule (reported where it happened). Returns whether the rule holds (a dyn
// extent on either side is checked at run time, detail::check_assignment_dims).
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
      constexpr bool extents_ok = may_equal_extents(TA::extent, SA::extent);
      static_assert(Quiet || i == Target::rank || extents_ok ||
                        error::holds<error::assignment_extents_differ<error::axis_index<j>, error::target_extent<TA::extent>,
                                                                      error::source_extent<SA::extent>,
                                                                      error::target_shape_of<Target>, error::source_shape_of<Source>>>,
                    "attnx: assignment: the expression's extents differ from the target's");
      static_assert(Quiet || i == Target::rank || !extents_ok ||
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

// An owning tensor. With a static shape the elements live inside the object up to inline_bytes (a
// literal type: constexpr variables), beyond that on the heap. With a dyn extent they live on the heap and
// the tensor keeps its run-time extents: tensor<float, dyn, 64> x(37) is 37 x 64 zeros; assigning an
// expression takes the expression's extents on the dyn axes.
template <class T, class Shape>
class basic_tensor : public expression_tag, public detail::extents_holder<Shape, true> {
  static_assert(is_shape_v<Shape>, "attnx: basic_tensor<T, Shape> needs an attnx::shape");
  static_assert(std::is_arithmetic_v<T>, "attnx: tensor elements must be arithmetic (float, double, bool, ...)");
  static constexpr bool dynamic = !Shape::is_static;
  using extents_base = detail::extents_holder<Shape, true>;
  using store_t = storage<T, (dynamic ? dyn : Shape::size)>;

 public:
  using value_type = T;
  using shape_type = Shape;
  static constexpr std::size_t rank = Shape::rank;

  // Zero-filled (a dyn axis has extent 0 until the tensor is given extents or assigned).
  constexpr basic_tensor() = default;
  constexpr explicit basic_tensor(uninitialized_t)
    requires(!dynamic)
      : s_(uninitialized) {}

  // tensor<float, dyn, 64> x(37): zero-filled, one run-time extent per dyn axis (or one per axis).
  template <std::integral... I>
    requires(dynamic && sizeof...(I) >= 1 && (sizeof...(I) == Shape::dynamic_count || sizeof...(I) == rank))
  constexpr explicit basic_tensor(I... e) : basic_tensor(uninitialized, e...) {
    alg::fill_n(data(), numel(), T{});
  }
  template <std::integral... I>
    requires(dynamic && sizeof...(I) >= 1 && (sizeof...(I) == Shape::dynamic_count || sizeof...(I) == rank))
  constexpr basic_tensor(uninitialized_t, I... e) : basic_tensor(detail::dims_from<Shape>("tensor", e...), uninitialized) {}
  // The same with the extents as an array (all axes).
  constexpr basic_tensor(const dims_t<rank>& d, uninitialized_t) : extents_base(checked(d)), s_(uninitialized, numel()) {}

  // Nested braces, one level per axis: tensor<double, 2, 3> a{{1, 2, 3}, {4, 5, 6}}; a dyn axis takes
  // the braces' count. A wrong count throws std::invalid_argument (a compile error in a constant expression).
  constexpr basic_tensor(typename detail::nested_list<T, rank>::type init)
    requires(rank >= 1)
      : extents_base(nested_dims(init)), s_(uninitialized, numel()) {
    std::size_t pos = 0;
    fill_nested<0>(init, pos);
  }

  // Evaluates an expression (see attnx/eval/assign.hpp).
  template <expression E>
    requires(!std::is_same_v<std::remove_cvref_t<E>, basic_tensor>)
  constexpr basic_tensor(const E& e) : basic_tensor(e, source_dims(e)) {}

  // Evaluates into a fresh buffer first, so `a = a * b` reads the old `a` throughout. A dyn axis takes the
  // expression's extent; a static one must match it.
  template <expression E>
    requires(!std::is_same_v<std::remove_cvref_t<E>, basic_tensor>)
  constexpr basic_tensor& operator=(const E& e) {
    if constexpr (check_assignable<T, Shape, E>()) {
      const auto d = source_dims(e);
      if (!std::is_constant_evaluated() && d == dims() && !reads_memory(e, data(), numel())) {
        assign_into(data(), e);
      } else {
        *this = basic_tensor(e, d);
      }
    }
    return *this;
  }

  // Compound assignment: y += e and y -= e (an expression, broadcast to y's shape, or a number), y *= s and y /= s
  // (a number; the element-wise product of two expressions is hadamard). The same rules as y = y + e; computed in
  // place, one pass, unless e reads y's memory (then into a fresh buffer first, as `=` does).
  template <class E>
    requires(expression<E> || std::is_arithmetic_v<E>)
  constexpr basic_tensor& operator+=(const E& e) { return compound(*this + e, e); }
  template <class E>
    requires(expression<E> || std::is_arithmetic_v<E>)
  constexpr basic_tensor& operator-=(const E& e) { return compound(*this - e, e); }
  template <class S>
    requires std::is_arithmetic_v<S>
  constexpr basic_tensor& operator*=(S s) { return compound(*this * s, s); }
  template <class S>
    requires std::is_arithmetic_v<S>
  constexpr basic_tensor& operator/=(S s) { return compound(*this / s, s); }

  // Elements from a flat row-major range of exactly numel() values (and the dyn axes' extents).
  template <std::integral... I>
  static constexpr basic_tensor from_flat(std::span<const T> flat, I... e) {
    basic_tensor t = make_uninitialized(e...);
    if (flat.size() != t.numel()) ATTNX_THROW(std::length_error(t.size_message(flat.size())));
    alg::copy_n(flat.data(), flat.size(), t.data());
    return t;
  }
  // Element (i, j, ...) = f(i, j, ...) (then the dyn axes' extents).
  template <class F, std::integral... I>
  static constexpr basic_tensor generate(F&& f, I... e) {
    basic_tensor t = make_uninitialized(e...);
    const auto d = t.dims();
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      dims_t<rank> st{};
      std::size_t acc = 1;
      for (std::size_t k = rank; k-- > 0;) {
        st[k] = acc;
        acc *= d[k];
      }
      const std::size_t n = t.numel();
      const auto fill = [&](std::size_t flat) { t.data()[flat] = static_cast<T>(f((flat / st[K] % d[K])...)); };
      if (std::is_constant_evaluated()) {
        for (std::size_t flat = 0; flat < n; ++flat) fill(flat);
      } else {
        detail::for_each_at_run_time(n, fill);  // (see fill_at_run_time)
      }
    }(std::make_index_sequence<rank>{});
    return t;
  }
  template <std::integral... I>
  static constexpr basic_tensor filled(T v, I... e) {
    basic_tensor t = make_uninitialized(e...);
    // At run time a loop the compiler keeps: folded as a constant (a default member initializer, say), a filled
    // tensor would become one store per element.
    if (std::is_constant_evaluated()) alg::fill_n(t.data(), t.numel(), v);
    else detail::fill_at_run_time(t.data(), t.numel(), v);
    return t;
  }

  using extents_base::dims;
  using extents_base::extent;
  using extents_base::numel;

  template <std::integral... I>
    requires(sizeof...(I) == rank)
  constexpr T& operator()(I... i) noexcept {
    return data()[detail::row_major_offset<rank>(dims(), i...)];
  }
  template <std::integral... I>
    requires(sizeof...(I) == rank)
  constexpr const T& operator()(I... i) const noexcept {
    return data()[detail::row_major_offset<rank>(dims(), i...)];
  }
  // Bounds-checked access: std::out_of_range names the axis, the index and the extent.
  template <std::integral... I>
    requires(sizeof...(I) == rank)
  constexpr const T& at(I... i) const {
    check_bounds(i...);
    return data()[detail::row_major_offset<rank>(dims(), i...)];
  }
  template <std::integral... I>
    requires(sizeof...(I) == rank)
  constexpr T& at(I... i) {
    check_bounds(i...);
    return data()[detail::row_major_offset<rank>(dims(), i...)];
  }

  constexpr T* data() noexcept { return s_.data(); }
  constexpr const T* data() const noexcept { return s_.data(); }
  constexpr T* begin() noexcept { return data(); }
  constexpr T* end() noexcept { return data() + numel(); }
  constexpr const T* begin() const noexcept { return data(); }
  constexpr const T* end() const noexcept { return data() + numel(); }
  constexpr auto span() noexcept {
    if constexpr (dynamic) {
      return std::span<T>(data(), numel());
    } else {
      return std::span<T, Shape::size>(data(), Shape::size);
    }
  }
  constexpr auto span() const noexcept {
    if constexpr (dynamic) {
      return std::span<const T>(data(), numel());
    } else {
      return std::span<const T, Shape::size>(data(), Shape::size);
    }
  }

  friend constexpr bool operator==(const basic_tensor& a, const basic_tensor& b) {
    return a.dims() == b.dims() && alg::equal(a.begin(), a.end(), b.begin());
  }

 private:
  // x = *this (op) e.
  template <class X, class E>
  constexpr basic_tensor& compound(const X& x, const E& e) {
    if constexpr (check_assignable<T, Shape, X>()) {
      const auto d = source_dims(x);
      bool in_place = d == dims();
      if constexpr (expression<E>) in_place = in_place && !std::is_constant_evaluated() && !reads_memory(e, data(), numel());
      if (in_place) {
        assign_into(data(), x);
      } else {
        *this = basic_tensor(x, d);
      }
    }
    return *this;
  }

  // The expression evaluated into extents d (source_dims(e), checked).
  template <class E>
  constexpr basic_tensor(const E& e, const dims_t<rank>& d) : extents_base(d), s_(uninitialized, numel()) {
    if constexpr (check_assignable<T, Shape, E>()) assign_into(data(), e);
  }
  static constexpr const dims_t<rank>& checked(const dims_t<rank>& d) {
    detail::check_given_extents<Shape>("tensor", d);
    return d;
  }
  // The extents an expression gives this tensor (the assignment rule's run-time half where one is dyn).
  template <class E>
  static constexpr dims_t<rank> source_dims(const E& e) {
    if constexpr (failed_v<E> || shape_of_t<E>::rank != rank) {
      return detail::with_static_extents<Shape>({});  // reported at compile time
    } else if constexpr (shape_of_t<E>::is_static) {
      return shape_of_t<E>::extents;  // checked at compile time
    } else {
      const auto d = dims_of(e);
      detail::check_assignment_dims<Shape>(detail::with_static_extents<Shape>(d), d);
      return d;
    }
  }
  template <class... I>
  static constexpr basic_tensor make_uninitialized(I... e) {
    if constexpr (dynamic) {
      return basic_tensor(uninitialized, e...);
    } else {
      static_assert(sizeof...(I) == 0, "attnx: a tensor of static shape takes no run-time extents");
      return basic_tensor(uninitialized);
    }
  }
  template <class... I>
  constexpr void check_bounds(I... i) const {
    const auto d = dims();
    std::size_t k = 0;
    ((static_cast<std::size_t>(i) >= d[k]
          ? ATTNX_THROW(std::out_of_range("attnx: index " + std::to_string(static_cast<long long>(i)) + " is out of range on axis " +
                                    std::to_string(k) + " of a tensor of shape " + shape_string<Shape>(d)))
          : void(++k)),
     ...);
  }
  std::string size_message(std::size_t got) const {
    return "attnx: a tensor of shape " + shape_string<Shape>(dims()) + " needs " + std::to_string(numel()) +
           " elements, got " + std::to_string(got);
  }
  // The extents the nested braces give (dyn axes from the first list at each level).
  template <class List>
  static constexpr dims_t<rank> nested_dims(const List& init) {
    dims_t<rank> d = detail::with_static_extents<Shape>({});
    if constexpr (dynamic) read_nested_dims<0>(init, d);
    return d;
  }
  template <std::size_t Level, class List>
  static constexpr void read_nested_dims(const List& list, dims_t<rank>& d) {
    if (Shape::extents[Level] == dyn) d[Level] = list.size();
    if constexpr (Level + 1 < rank) {
      if (list.size() > 0) read_nested_dims<Level + 1>(*list.begin(), d);
    }
  }
  template <std::size_t Level, class List>
  constexpr void fill_nested(const List& list, std::size_t& pos) {
    if (list.size() != dims()[Level])
      ATTNX_THROW(std::invalid_argument("attnx: an initializer list has the wrong number of elements for its axis"));
    for (const auto& item : list) {
      if constexpr (Level + 1 == rank) {
        data()[pos++] = item;
      } else {
        fill_nested<Level + 1>(item, pos);
      }
    }
  }

  store_t s_;
};

// tensor<float, 3, 4>, tensor<float, seq<3>, d_model<4>>: the shape written as extents.
template <class T, auto... E>
using tensor = basic_tensor<T, make_shape<E...>>;

// The owning tensor an expression evaluates to.
template <class E>
using result_t = basic_tensor<value_t<E>, shape_of_t<E>>;

}  // namespace attnx
