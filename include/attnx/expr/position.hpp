// attnx: position encodings. Sinusoidal (added to the embeddings: Vaswani et al.) and rotary (RoPE: the
// query and key rows of each head rotated by their position; Su et al.).
//
//   sinusoidal_positions<T, L, D>(offset = 0, base = 10000)    a (L, D) tensor:
//   sinusoidal_positions<T, D>(length, offset = 0, base)        PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i),
//                                                               w_i = base^(-2i/D), p = offset + row
//   rotary(x, style, offset = 0, base = 10000)                  x (..., L, D), D even: row l of every matrix is at
//                                                               position offset + l; the pairs rotated by p w_i
//
// RoPE's two layouts of the pairs, both common in published weights (the style has no default, since either
// silently gives a different model):
//   rope_style::interleaved   (x[2i], x[2i+1])    RoFormer, GPT-J, Meta's LLaMA reference code
//   rope_style::half          (x[i], x[i + D/2])  GPT-NeoX, Hugging Face LLaMA / Mistral / Qwen ("rotate_half")
// and rope_style::none, the identity (so that a module can take the style as an option).
//
// Angles are computed in double (p w_i, then sin and cos, rounded to T once): a float32 angle can be off by about
// p * 2^-24 radians, 2.4e-4 at p = 4096 (a bound from float rounding, not measured). The frequencies w_i are computed
// once per table; the rotary node builds its L x D/2 table of cos and sin when it is evaluated, then rotates row by
// row; in a constant evaluation too.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/core/expression.hpp"
#include "attnx/expr/reduce.hpp"
#include "attnx/math/constexpr_math.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/shape/shape.hpp"
#include "attnx/tensor/tensor.hpp"

namespace attnx {

// Rotary position embedding layouts: none, interleaved pairs (2i, 2i + 1; GPT-J, the RoFormer paper), halves (i, i + d/2; GPT-NeoX, Llama).
enum class rope_style { none, interleaved, half };

namespace detail {
// The frequencies of both encodings, w_i = base^(-2i/d) for i < ceil(d / 2), into w (computed once per table).
constexpr void position_frequencies(std::size_t d, double base, double* w) {
  const double log_base = math::log(base);
  for (std::size_t i = 0; 2 * i < d; ++i)
    w[i] = math::exp(-static_cast<double>(2 * i) / static_cast<double>(d) * log_base);
}
// cos(p w_i) and sin(p w_i), i < h, into c[i] and s[i].
template <class T>
constexpr void rope_angles(std::size_t p, std::size_t h, const double* w, T* c, T* s) {
  for (std::size_t i = 0; i < h; ++i) {
    const double a = static_cast<double>(p) * w[i];
    c[i] = static_cast<T>(math::cos(a));
    s[i] = static_cast<T>(math::sin(a));
  }
}
// x (d elements, d even) rotated in place by the angles of one position.
template <class T>
constexpr void rope_rotate(T* x, std::size_t d, const T* c, const T* s, rope_style style) {
  const std::size_t h = d / 2;
  const auto turn = [](T& x0, T& x1, T ci, T si) {
    const T a = x0, b = x1;
    x0 = a * ci - b * si;
    x1 = a * si + b * ci;
  };
  if (style == rope_style::interleaved) {
    for (std::size_t i = 0; i < h; ++i) turn(x[2 * i], x[2 * i + 1], c[i], s[i]);
  } else if (style == rope_style::half) {
    for (std::size_t i = 0; i < h; ++i) turn(x[i], x[i + h], c[i], s[i]);
  }
}
[[noreturn]] inline void throw_rotary_odd(std::size_t d) {
  ATTNX_THROW(extent_error("attnx: rotary: the feature extent (the last axis) must be even: features " + std::to_string(d)));
}
}  // namespace detail

// rotary(a, style, offset, base): the node.
template <class A>
class rotary_expr : public unary_node<A> {
 public:
  constexpr rotary_expr(A a, rope_style style, std::size_t offset, double base)
      : unary_node<A>(std::move(a)), style_(style), offset_(offset), base_(base) {}
  constexpr rope_style style() const noexcept { return style_; }
  constexpr std::size_t offset() const noexcept { return offset_; }
  constexpr double base() const noexcept { return base_; }

 private:
  rope_style style_;
  std::size_t offset_;
  double base_;
};

namespace rules {
template <class S, bool Quiet = false>
constexpr bool check_rotary() {
  if constexpr (!check_row_op<S, Quiet>()) {
    return false;
  } else {
    constexpr bool even = S::cols == dyn || S::cols % 2 == 0;
    static_assert(Quiet || even || error::holds<error::rotary_features_must_be_even<error::features<S::cols>>>,
                  "attnx: rotary: the feature extent (the last axis) must be even (pairs of features are rotated)");
    return even;
  }
}
}  // namespace rules

// rotary(a, style, offset = 0, base = 10000): RoPE applied to a's rows, row i at position offset + i.
template <expression A>
constexpr auto rotary(A&& a, rope_style style, std::size_t offset = 0, double base = 10000.0) {
  using shape_a = shape_of_t<A>;
  constexpr bool ok = rules::check_rotary<shape_a, failed_v<A>>();
  static_assert(std::is_floating_point_v<value_t<A>> || !ok, "attnx: rotary: the operand must be floating point");
  if constexpr (!ok || failed_v<A>) {
    return failed_expr<value_t<A>, shape_a>{};
  } else {
    if constexpr (shape_a::cols == dyn) {
      const std::size_t d = dims_cols(dims_of(a));
      if (d % 2 != 0) detail::throw_rotary_odd(d);
    }
    return rotary_expr<stored_t<A>>(store(std::forward<A>(a)), style, offset, base);
  }
}
template <class A>
  requires any_foreign<A>
constexpr auto rotary(A&&, rope_style, std::size_t = 0, double = 10000.0) {
  return foreign_arguments<A>();
}

// ---- sinusoidal ----------------------------------------------------------------------------------------
namespace detail {
template <class T, class S, bool RunTime = false>
constexpr void fill_sinusoidal(basic_tensor<T, S>& t, std::size_t offset, double base);
// The same at run time, not constexpr: constant folding of a table in a default member initializer
// (nn::sinusoidal_encoding) would otherwise make it one store per element.
template <class T, class S>
void fill_sinusoidal_at_run_time(basic_tensor<T, S>& t, std::size_t offset, double base) {
  fill_sinusoidal<T, S, true>(t, offset, base);
}
template <class T, class S, bool RunTime>
constexpr void fill_sinusoidal(basic_tensor<T, S>& t, std::size_t offset, double base) {  // (declared above)
  if constexpr (!RunTime) {
    if (!std::is_constant_evaluated()) return fill_sinusoidal_at_run_time(t, offset, base);
  }
  constexpr std::size_t d = S::cols;
  const std::size_t rows = t.dims()[0];
  std::array<double, (d + 1) / 2> w{};
  position_frequencies(d, base, w.data());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < d; ++j) {
      const double a = static_cast<double>(offset + r) * w[j / 2];
      t.data()[r * d + j] = static_cast<T>(j % 2 == 0 ? math::sin(a) : math::cos(a));
    }
}
}  // namespace detail

// The sinusoidal position table of "Attention Is All You Need" (L x D), rows from position offset.
template <class T, std::size_t L, std::size_t D>
constexpr auto sinusoidal_positions(std::size_t offset = 0, double base = 10000.0) {
  static_assert(L != dyn, "attnx: sinusoidal_positions<T, L, D>: L must be static; for a run-time length use "
                          "sinusoidal_positions<T, D>(length, offset)");
  static_assert(std::is_floating_point_v<T>, "attnx: sinusoidal_positions: T must be floating point");
  if constexpr (L == dyn) {
    return basic_tensor<T, shape<axis<anon, dyn>, axis<anon, D>>>{};  // (reported above)
  } else {
    basic_tensor<T, shape<axis<anon, L>, axis<anon, D>>> t(uninitialized);
    detail::fill_sinusoidal(t, offset, base);
    return t;
  }
}
template <class T, std::size_t D>
constexpr auto sinusoidal_positions(std::size_t length, std::size_t offset = 0, double base = 10000.0) {
  static_assert(std::is_floating_point_v<T>, "attnx: sinusoidal_positions: T must be floating point");
  basic_tensor<T, shape<axis<anon, dyn>, axis<anon, D>>> t(uninitialized, length);
  detail::fill_sinusoidal(t, offset, base);
  return t;
}

}  // namespace attnx
