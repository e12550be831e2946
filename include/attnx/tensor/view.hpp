// attnx: basic_view, a static shape over memory the user owns (row-major, contiguous).
//
// The shape is static, the memory is not: construction checks the element count at run time and
// throws std::length_error naming the shape and both counts. A view is a pointer: copying it is
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

#include "attnx/expr/expression.hpp"
#include "attnx/expr/traversal.hpp"
#include "attnx/tensor/tensor.hpp"

namespace attnx {

template <class T, class Shape>
class basic_view : public expression_tag {
  using element = std::remove_const_t<T>;
  static_assert(is_shape_v<Shape>, "attnx: basic_view<T, Shape> needs an attnx::shape");

 public:
  using value_type = element;
  using shape_type = Shape;
  static constexpr std::size_t rank = Shape::rank;
  static constexpr std::size_t size = Shape::size;
  static constexpr std::array<std::size_t, rank> extents = Shape::extents;

  constexpr basic_view(T* data, std::size_t count) : p_(data) {
    if (data == nullptr) throw std::invalid_argument("attnx: a view of shape " + shape_string<Shape>() + " over a null pointer");
    if (count != size) throw std::length_error(size_message(count));
  }
  constexpr explicit basic_view(std::span<T> s) : basic_view(s.data(), s.size()) {}
  // Any contiguous range of the right element type (std::vector, std::array, ...), size checked.
  // (std::data and std::size: <ranges> would cost every program that includes attnx a tenth of a second.)
  template <class R>
    requires requires(R& r) {
      { std::data(r) } -> std::convertible_to<T*>;
      { std::size(r) } -> std::convertible_to<std::size_t>;
    } &&
             (!std::same_as<std::remove_cvref_t<R>, basic_view>) && (!is_tensor_v<R>)
  constexpr explicit basic_view(R&& r) : basic_view(std::data(r), std::size(r)) {}
  template <std::size_t N>
    requires(N != std::dynamic_extent)
  constexpr basic_view(std::span<T, N> s) noexcept : p_(s.data()) {
    static_assert(N == size, "attnx: view: the span's static extent differs from the shape's element count");
  }
  // A view of a whole tensor of the same shape.
  constexpr basic_view(std::conditional_t<std::is_const_v<T>, const basic_tensor<element, Shape>&,
                                          basic_tensor<element, Shape>&> t) noexcept
      : p_(t.data()) {}
  // A tensor of another shape or element type: one error naming the rule and both shapes (or both
  // element types), instead of a list of candidate constructors. A tensor whose axes differ only in
  // names that unify (an unnamed axis takes any name) is viewed as usual.
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
    if constexpr (shape_ok && type_ok) p_ = t.data();
  }
  // A writable view converts to a read-only one.
  template <class U>
    requires(std::is_const_v<T> && std::same_as<U, element>)
  constexpr basic_view(const basic_view<U, Shape>& v) noexcept : p_(v.data()) {}

  constexpr T* data() const noexcept { return p_; }
  constexpr std::span<T, size> span() const noexcept { return std::span<T, size>(p_, size); }

  template <std::integral... I>
    requires(sizeof...(I) == rank)
  constexpr T& operator()(I... i) const noexcept {
    std::size_t off = 0, k = 0;
    ((off = off * extents[k++] + static_cast<std::size_t>(i)), ...);
    return p_[off];
  }

  // Writes an expression into the user's memory. The expression is evaluated into a fresh buffer
  // first when it reads memory the view covers, so aliasing never corrupts the result.
  template <expression E>
  constexpr const basic_view& operator=(const E& e) const
    requires(!std::is_const_v<T>)
  {
    if constexpr (check_assignable<element, Shape, E>()) {
      if (!std::is_constant_evaluated() && !reads_memory(e, p_, size)) {
        assign_into(p_, e);
      } else {
        basic_tensor<element, Shape> fresh(e);
        for (std::size_t i = 0; i < size; ++i) p_[i] = fresh.data()[i];
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

 private:
  static std::string size_message(std::size_t got) {
    return "attnx: a view of shape " + shape_string<Shape>() + " needs " + std::to_string(size) + " elements, got " +
           std::to_string(got);
  }
  T* p_;
};

// view<const float, 128, 64>: the shape written as extents, as for tensor.
template <class T, auto... E>
using view = basic_view<T, make_shape<E...>>;

}  // namespace attnx
