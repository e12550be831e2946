// attnx::nn: the layers of a transformer around attention (torch.nn's vocabulary).
//
//   nn::linear<T, In, Out, Bias>         y = x W + b, W stored (In, Out) (attnx's layout; PyTorch's nn.Linear
//                                        stores (Out, In): the loaders take the layout explicitly)
//   nn::layer_norm<T, D>, nn::rms_norm<T, D>   weight (ones) and bias (zeros), eps
//   nn::embedding<T, Vocab, D>           rows of a table by token id
//   nn::sinusoidal_encoding<T, MaxLen, D>  x + the sinusoidal position table's rows offset .. offset + L - 1
//                                        (rotary encoding is an option of multi_head_attention: mha_options::rope)
//   nn::feed_forward<T, D, Hidden, Act, Gated, Bias>   down(act(up(x))), or the gated form (SwiGLU with silu):
//                                        down(act(gate(x)) * up(x))
// Each owns its parameters (tensors: a constexpr module when they are small), and operator() returns a lazy
// expression that refers to them (the module must outlive it, as for multi_head_attention). An input whose
// feature extent is not the layer's is one compile error naming both sizes.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "attnx/eval/assign.hpp"
#include "attnx/expr/elementwise.hpp"
#include "attnx/core/expression.hpp"
#include "attnx/expr/matmul.hpp"
#include "attnx/expr/norm.hpp"
#include "attnx/expr/position.hpp"
#include "attnx/expr/slice.hpp"
#include "attnx/modules/errors.hpp"
#include "attnx/tensor/tensor.hpp"

namespace attnx::nn {

// The activations of feed_forward (gelu_tanh: GPT-2's "gelu_new").
enum class activation { relu, gelu, gelu_tanh, silu };

// The slot of a parameter a layer does not have (no storage with [[no_unique_address]]).
template <char Slot>
struct absent {
  friend constexpr bool operator==(absent, absent) noexcept { return true; }
};

// The activation applied to an expression.
template <activation A, class E>
constexpr auto activate(E&& e) {
  if constexpr (A == activation::relu) return relu(std::forward<E>(e));
  else if constexpr (A == activation::gelu) return gelu(std::forward<E>(e));
  else if constexpr (A == activation::gelu_tanh) return gelu_tanh(std::forward<E>(e));
  else return silu(std::forward<E>(e));
}

namespace detail {
// The layer rule: x's last extent must be the layer's input features. Returns whether it holds (a dyn extent
// is checked at run time by check_features).
template <class S, std::size_t Features, bool Quiet = false>
constexpr bool check_features() {
  constexpr bool rank_ok = S::rank >= 1;
  static_assert(Quiet || rank_ok || error::holds<error::layer_input_needs_an_axis<error::rank<S::rank>>>,
                "attnx: nn layer: the input needs at least one axis (its features)");
  if constexpr (rank_ok) {
    constexpr bool ok = may_equal_extents(S::cols, Features);
    static_assert(Quiet || ok ||
                      error::holds<error::layer_input_features_differ<error::input_features<S::cols>, error::features<Features>>>,
                  "attnx: nn layer: the input's feature extent (its last axis) differs from the layer's");
    return ok;
  } else {
    return false;
  }
}
template <class X>
constexpr void check_features_at_run_time(const X& x, std::size_t features) {
  using S = shape_of_t<X>;
  if constexpr (S::cols == dyn) {
    const std::size_t n = dims_cols(dims_of(x));
    if (n != features)
      attnx::detail::throw_extent_error("nn layer: the input's feature extent (its last axis) differs from the layer's",
                                        "input_features", n, "features", features);
  }
}
// f(x) when x has the layer's Features (the rule checked at compile time, a dyn extent at run time), else Failed
// (the rule's error was reported, or an earlier one: no follow-on error).
template <std::size_t Features, class Failed, class X, class F>
constexpr auto with_features(X&& x, F&& f) {
  constexpr bool ok = check_features<shape_of_t<X>, Features, failed_v<X>>();
  if constexpr (!ok || failed_v<X>) {
    return Failed{};
  } else {
    check_features_at_run_time(x, Features);
    return f(std::forward<X>(x));
  }
}
// A failed_expr for a layer's output of Out features on an input shaped S (no follow-on error).
template <class T, class S, std::size_t Out>
using failed_layer_output = failed_expr<T, std::conditional_t<(S::rank >= 1), with_extent_t<S, (S::rank >= 1 ? S::rank - 1 : 0), Out>, shape<axis<anon, Out>>>>;
}  // namespace detail

// ---- linear -----------------------------------------------------------------------------------------------
template <class T, std::size_t In, std::size_t Out, bool Bias = true>
struct linear {
  using value_type = T;
  static constexpr std::size_t in_features = In, out_features = Out;
  static constexpr bool has_bias = Bias;
  tensor<T, In, Out> weight{};
  [[no_unique_address]] std::conditional_t<Bias, tensor<T, Out>, absent<'b'>> bias{};

  template <expression X>
  constexpr auto operator()(X&& x) const {
    return detail::with_features<In, detail::failed_layer_output<T, shape_of_t<X>, Out>>(std::forward<X>(x), [this](auto&& v) {
      if constexpr (Bias) return std::forward<decltype(v)>(v) * weight + bias;
      else return std::forward<decltype(v)>(v) * weight;
    });
  }
};

// ---- normalisations ----------------------------------------------------------------------------------------
template <class T, std::size_t D>
struct layer_norm {
  using value_type = T;
  static constexpr std::size_t features = D;
  tensor<T, D> weight = ones();
  tensor<T, D> bias{};
  T eps = T(1e-5);

  template <expression X>
  constexpr auto operator()(X&& x) const {
    return detail::with_features<D, failed_expr<T, shape_of_t<X>>>(
        std::forward<X>(x), [this](auto&& v) { return attnx::layer_norm(std::forward<decltype(v)>(v), weight, bias, eps); });
  }
  static constexpr tensor<T, D> ones() { return tensor<T, D>::filled(T(1)); }
};

// x / sqrt(mean(x^2) + eps) * gain, over the last axis (Llama's RMSNorm).
template <class T, std::size_t D>
struct rms_norm {
  using value_type = T;
  static constexpr std::size_t features = D;
  tensor<T, D> weight = layer_norm<T, D>::ones();
  T eps = T(1e-6);

  template <expression X>
  constexpr auto operator()(X&& x) const {
    return detail::with_features<D, failed_expr<T, shape_of_t<X>>>(
        std::forward<X>(x), [this](auto&& v) { return attnx::rms_norm(std::forward<decltype(v)>(v), weight, eps); });
  }
};

// ---- embedding -------------------------------------------------------------------------------------------
template <class T, std::size_t Vocab, std::size_t D>
struct embedding {
  using value_type = T;
  static constexpr std::size_t vocab = Vocab, features = D;
  tensor<T, Vocab, D> weight{};

  // (n, D): row ids[i] of the table for each i (ids: a contiguous range of integers, kept alive by the caller
  // until the expression is evaluated; an id outside [0, Vocab) throws std::out_of_range).
  template <class R>
  constexpr auto operator()(const R& ids) const {
    return index_select(weight, ids);
  }
};

// ---- sinusoidal position encoding --------------------------------------------------------------------------
// The table of sinusoidal_positions (MaxLen, D), computed once; operator()(x, offset) adds rows offset .. offset+L-1
// to x (L, D) or (B, L, D) (broadcast over the batch). Positions past MaxLen throw std::out_of_range.
template <class T, std::size_t MaxLen, std::size_t D>
struct sinusoidal_encoding {
  static constexpr std::size_t max_length = MaxLen, features = D;
  tensor<T, MaxLen, D> table = sinusoidal_positions<T, MaxLen, D>();

  template <expression X>
  constexpr auto operator()(X&& x, std::size_t offset = 0) const {
    return detail::with_features<D, failed_expr<T, shape_of_t<X>>>(std::forward<X>(x), [this, offset](auto&& v) {
      const std::size_t len = dims_matrix_rows(dims_of(v));
      if (offset > MaxLen || len > MaxLen - offset)
        ATTNX_THROW(std::out_of_range("attnx: nn::sinusoidal_encoding: the positions run past max_length: end " +
                                std::to_string(offset > MaxLen ? offset : offset + len) + ", max_length " +
                                std::to_string(MaxLen)));
      return std::forward<decltype(v)>(v) + slice<0>(table, offset, len);
    });
  }
};

// ---- feed-forward ----------------------------------------------------------------------------------------
template <class T, std::size_t D, std::size_t Hidden, activation Act = activation::gelu, bool Gated = false, bool Bias = true>
struct feed_forward {
  using value_type = T;
  static constexpr std::size_t features = D, hidden = Hidden;
  static constexpr bool gated = Gated;
  static constexpr activation act = Act;
  linear<T, D, Hidden, Bias> up{};
  linear<T, Hidden, D, Bias> down{};
  [[no_unique_address]] std::conditional_t<Gated, linear<T, D, Hidden, Bias>, absent<'g'>> gate{};

  // down(act(up(x))), or down(act(gate(x)) * up(x)). In the gated form x is read by two products: an x that is
  // not in memory (an expression, or a temporary tensor) is evaluated (moved) once first, and the expression owns it.
  template <expression X>
  constexpr auto operator()(X&& x) const {
    return detail::with_features<D, failed_expr<T, shape_of_t<X>>>(std::forward<X>(x), [this](auto&& v) {
      using input_type = decltype(v);
      if constexpr (!Gated) {
        return down(activate<Act>(up(std::forward<input_type>(v))));
      } else if constexpr (dense_terminal<input_type> && (!is_tensor_v<input_type> || std::is_lvalue_reference_v<input_type>)) {
        return down(hadamard(activate<Act>(gate(v)), up(v)));
      } else {
        auto once = evaluate(std::forward<input_type>(v));
        auto copy = once;
        return down(hadamard(activate<Act>(gate(std::move(copy))), up(std::move(once))));
      }
    });
  }
};

}  // namespace attnx::nn
