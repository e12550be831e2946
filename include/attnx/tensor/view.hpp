// attnx: basic_view, a static shape over memory the user owns (row-major, contiguous).
//
// The shape is static, the memory is not: construction checks the element count at run time and
// throws std::length_error naming the shape and both counts. A view is a pointer: copying it is
// free, and it never owns. basic_view<const float, S> reads; basic_view<float, S> can also be
// assigned an expression.
#pragma once

#include <concepts>
#include <cstddef>
#include <ranges>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

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
  template <std::ranges::contiguous_range R>
    requires std::ranges::sized_range<R> && std::convertible_to<std::ranges::range_value_t<R>*, T*> &&
             (!std::same_as<std::remove_cvref_t<R>, basic_view>) && (!is_tensor_v<R>)
  constexpr explicit basic_view(R&& r) : basic_view(std::ranges::data(r), std::ranges::size(r)) {}
  template <std::size_t N>
    requires(N != std::dynamic_extent)
  constexpr basic_view(std::span<T, N> s) noexcept : p_(s.data()) {
    static_assert(N == size, "attnx: view: the span's static extent differs from the shape's element count");
  }
  // A view of a whole tensor of the same shape.
  constexpr basic_view(std::conditional_t<std::is_const_v<T>, const basic_tensor<element, Shape>&,
                                          basic_tensor<element, Shape>&> t) noexcept
      : p_(t.data()) {}
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
    check_assignment<Shape, shape_of_t<E>>();
    check_assignment_type<element, E>();
    if (!std::is_constant_evaluated() && !reads_memory(e, p_, size)) {
      assign_into(p_, e);
      return *this;
    }
    basic_tensor<element, Shape> fresh(e);
    for (std::size_t i = 0; i < size; ++i) p_[i] = fresh.data()[i];
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
