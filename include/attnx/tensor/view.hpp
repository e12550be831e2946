// attnx: basic_view, a shape over memory the user owns (row-major, contiguous).
//
// Construction checks the element count at run time and throws std::length_error naming the shape and
// both counts. A dyn axis takes its extent at construction (view<const float, dyn, 64>(p, L)). A view is a pointer: copying it is
// free, and it never owns. basic_view<const float, S> reads; basic_view<float, S> can also be
// assigned an expression.
#pragma once

#include <concepts>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "attnx/util/algorithm.hpp"
#include "attnx/core/expression.hpp"
#include "attnx/core/traversal.hpp"
#include "attnx/tensor/tensor.hpp"

namespace attnx {

// A shape over memory the caller owns (row-major, contiguous): view<const float, L, D>(p, n) reads, view<float, ...> writes.
template <class T, class Shape>
class basic_view : public expression_tag, public detail::extents_holder<Shape, false> {
  using element = std::remove_const_t<T>;
  static_assert(is_shape_v<Shape>, "attnx: basic_view<T, Shape> needs an attnx::shape");
  static constexpr bool dynamic = !Shape::is_static;
  using extents_base = detail::extents_holder<Shape, false>;

 public:
  using value_type = element;
  using shape_type = Shape;
  static constexpr std::size_t rank = Shape::rank;

  // A static shape over `count` elements (count must be the shape's size).
  constexpr basic_view(T* data, std::size_t count)
    requires(!dynamic)
      : p_(data) {
    if (data == nullptr) ATTNX_THROW(std::invalid_argument("attnx: a view of shape " + shape_string<Shape>() + " over a null pointer"));
    if (count != Shape::size) ATTNX_THROW(std::length_error(size_message(count)));
  }
  // A shape with dyn axes over a pointer and their run-time extents (one per dyn axis, or one per axis):
  // view<const float, dyn, dyn, 64>(p, batch, length).
  template <std::integral... I>
    requires(dynamic && sizeof...(I) >= 1 && (sizeof...(I) == Shape::dynamic_count || sizeof...(I) == rank))
  constexpr basic_view(T* data, I... e) : extents_base(detail::dims_from<Shape>("view", e...)), p_(data) {
    if (data == nullptr && numel() > 0)
      ATTNX_THROW(std::invalid_argument("attnx: a view of shape " + shape_string<Shape>(dims()) + " over a null pointer"));
  }
  constexpr explicit basic_view(std::span<T> s)
    requires(!dynamic)
      : basic_view(s.data(), s.size()) {}
  // Any contiguous range of the right element type (std::vector, std::array, ...), size checked. With one
  // dyn axis its extent is the range's size divided by the other extents' product (which must divide it).
  // (std::data and std::size: <ranges> would cost every program that includes attnx a tenth of a second.)
  template <class R>
    requires requires(R& r) {
      { std::data(r) } -> std::convertible_to<T*>;
      { std::size(r) } -> std::convertible_to<std::size_t>;
    } &&
             (!std::same_as<std::remove_cvref_t<R>, basic_view>) && (!is_tensor_v<R>) && (!expression<R>) &&
             (!dynamic || Shape::dynamic_count == 1)
  constexpr explicit basic_view(R&& r) : basic_view(from_range(std::data(r), std::size(r))) {}
  // A range and the dyn axes' extents: the range's size must be the shape's element count.
  template <class R, std::integral... I>
    requires requires(R& r) {
      { std::data(r) } -> std::convertible_to<T*>;
      { std::size(r) } -> std::convertible_to<std::size_t>;
    } && dynamic && (!expression<R>) && (sizeof...(I) >= 1)
  constexpr basic_view(R&& r, I... e) : basic_view(std::data(r), e...) {
    if (std::size(r) != numel()) ATTNX_THROW(std::length_error(size_message(std::size(r))));
  }
  template <std::size_t N>
    requires(N != std::dynamic_extent && !dynamic)
  constexpr basic_view(std::span<T, N> s) noexcept : p_(s.data()) {
    static_assert(N == Shape::size, "attnx: view: the span's static extent differs from the shape's element count");
  }
  // A view of a whole tensor of the same shape.
  constexpr basic_view(std::conditional_t<std::is_const_v<T>, const basic_tensor<element, Shape>&,
                                          basic_tensor<element, Shape>&> t) noexcept
      : extents_base(t.dims()), p_(t.data()) {}
  // A tensor of another shape or element type: one error naming the rule and both shapes (or both
  // element types), instead of a list of candidate constructors. A tensor whose axes differ only in
  // names that unify (an unnamed axis takes any name), or in a dyn extent on either side (checked at run
  // time), is viewed as usual: view<const float, dyn, 64> of a tensor<float, 37, 64>.
  template <class Tn>
    requires(is_tensor_v<Tn> && !std::is_same_v<std::remove_cvref_t<Tn>, basic_tensor<element, Shape>> &&
             (std::is_const_v<T> || !std::is_const_v<std::remove_reference_t<Tn>>))
  constexpr basic_view(Tn&& t) : p_(nullptr) {
    using S2 = shape_of_t<Tn>;
    using U = value_t<Tn>;
    constexpr bool shape_ok = S2::rank == rank && detail::first_assignment_mismatch<Shape, S2>() == rank;
    constexpr bool type_ok = std::is_same_v<U, element>;
    static_assert(shape_ok || error::holds<error::view_shape_differs_from_tensor<error::view_shape_of<Shape>,
                                                                               error::tensor_shape_of<S2>>>,
                  "attnx: view: the tensor's shape differs from the view's (view a tensor with its own shape, or "
                  "reinterpret its memory explicitly: view<T, ...>(t.data(), t.size))");
    static_assert(!shape_ok || type_ok ||
                      error::holds<error::view_element_type_differs_from_tensor<error::target_element_type<element>,
                                                                                error::source_element_type<U>>>,
                  "attnx: view: the tensor's element type differs from the view's (attnx converts nothing silently)");
    if constexpr (shape_ok && type_ok) {
      adopt<S2>(t.data(), t.dims());
    }
  }
  // A writable view converts to a read-only one, and a view to one of a compatible shape (static extents
  // to dyn ones; dyn to static, checked at run time).
  template <class U, class S2>
    requires((std::is_const_v<T> || !std::is_const_v<U>) && std::same_as<std::remove_const_t<U>, element> &&
             (!std::is_same_v<basic_view<U, S2>, basic_view>) && S2::rank == Shape::rank &&
             (detail::first_assignment_mismatch<Shape, S2>() == Shape::rank))
  constexpr basic_view(const basic_view<U, S2>& v) : p_(nullptr) {
    adopt<S2>(v.data(), v.dims());
  }

  constexpr T* data() const noexcept { return p_; }
  using extents_base::dims;
  using extents_base::extent;
  using extents_base::numel;
  constexpr auto span() const noexcept {
    if constexpr (dynamic) {
      return std::span<T>(p_, numel());
    } else {
      return std::span<T, Shape::size>(p_, Shape::size);
    }
  }

  template <std::integral... I>
    requires(sizeof...(I) == rank)
  constexpr T& operator()(I... i) const noexcept {
    return p_[detail::row_major_offset<rank>(dims(), i...)];
  }

  // Writes an expression into the user's memory. The expression is evaluated into a fresh buffer
  // first when it reads memory the view covers, so aliasing never corrupts the result. A dyn extent of the
  // expression must equal the view's (a view never resizes).
  template <expression E>
  constexpr const basic_view& operator=(const E& e) const
    requires(!std::is_const_v<T>)
  {
    if constexpr (check_assignable<element, Shape, E>()) {
      if constexpr (dynamic || !shape_of_t<E>::is_static) detail::check_assignment_dims<Shape>(dims(), dims_of(e));
      if (!std::is_constant_evaluated() && !reads_memory(e, p_, numel())) {
        assign_into(p_, e);
      } else {
        const basic_tensor<element, Shape> fresh(e);
        alg::copy_n(fresh.data(), fresh.numel(), p_);
      }
    }
    return *this;
  }
  // The same on a non-const view: without it, assigning a tensor to a view would also consider the
  // implicit copy assignment through the converting constructor (an ambiguity instead of the rule).
  // Assigning a view of the same type still rebinds it (the implicit copy assignment is preferred).
  template <expression E>
  constexpr basic_view& operator=(const E& e)
    requires(!std::is_const_v<T>)
  {
    std::as_const(*this) = e;
    return *this;
  }

  // Compound assignment into the viewed memory (as basic_tensor's: y += e, y -= e, y *= s, y /= s).
  template <class E>
    requires((expression<E> || std::is_arithmetic_v<E>) && !std::is_const_v<T>)
  constexpr const basic_view& operator+=(const E& e) const { return compound(*this + e, e); }
  template <class E>
    requires((expression<E> || std::is_arithmetic_v<E>) && !std::is_const_v<T>)
  constexpr const basic_view& operator-=(const E& e) const { return compound(*this - e, e); }
  template <class S>
    requires(std::is_arithmetic_v<S> && !std::is_const_v<T>)
  constexpr const basic_view& operator*=(S s) const { return compound(*this * s, s); }
  template <class S>
    requires(std::is_arithmetic_v<S> && !std::is_const_v<T>)
  constexpr const basic_view& operator/=(S s) const { return compound(*this / s, s); }

 private:
  template <class X, class E>
  constexpr const basic_view& compound(const X& x, const E& e) const {
    if constexpr (check_assignable<element, Shape, X>()) {
      if constexpr (dynamic || !shape_of_t<X>::is_static) detail::check_assignment_dims<Shape>(dims(), dims_of(x));
      bool in_place = true;
      if constexpr (expression<E>) in_place = !std::is_constant_evaluated() && !reads_memory(e, p_, numel());
      if (in_place) {
        assign_into(p_, x);
      } else {
        const basic_tensor<element, Shape> fresh(x);
        alg::copy_n(fresh.data(), fresh.numel(), p_);
      }
    }
    return *this;
  }

 private:
  // Another tensor's or view's memory, of extents d (the assignment rule's run-time half where one is dyn).
  template <class S2>
  constexpr void adopt(T* p, const dims_t<rank>& d) {
    if constexpr (dynamic || !S2::is_static) detail::check_assignment_dims<Shape>(detail::with_static_extents<Shape>(d), d, "view");
    this->set_dims(d);
    p_ = p;
  }
  static constexpr basic_view from_range(T* data, std::size_t count) {
    if constexpr (!dynamic) {
      return basic_view(data, count);
    } else {
      std::size_t known = 1;
      for (std::size_t e : Shape::extents)
        if (e != dyn) known *= e;
      if (known == 0 || count % known != 0)
        ATTNX_THROW(std::length_error("attnx: a view of shape " + shape_string<Shape>() + " needs a multiple of " +
                                std::to_string(known) + " elements, got " + std::to_string(count)));
      return basic_view(data, count / known);
    }
  }
  std::string size_message(std::size_t got) const {
    return "attnx: a view of shape " + shape_string<Shape>(dims()) + " needs " + std::to_string(numel()) + " elements, got " +
           std::to_string(got);
  }
  T* p_;
};

// view<const float, 128, 64>: the shape written as extents, as for tensor.
template <class T, auto... E>
using view = basic_view<T, make_shape<E...>>;

}  // namespace attnx
