// attnx::train: visiting a module's parameters, by name, in a fixed order.
//
//   train::for_each_parameter(model, [](const std::string& name, auto& w) { ... });
//   train::for_each_parameter(model, grads, [](const std::string& name, auto& w, auto& g) { ... });
//
// With several modules of one type (the model, its gradients, an optimizer's moments: each a module of the same
// type), f sees the same parameter of each, side by side. The order is the modules' declaration order and is the
// same on every call: optimizers keep their state in it and a run is reproducible. Names are the members' names
// joined by dots ("h.0.attn.w_q", "h.0.mlp.up.bias", "wte.weight"); absent parameters (a layer without biases) are
// not visited. A gpt2's lm_head is not a parameter: it is tied to wte (models::gpt2::tie_lm_head).
#pragma once

#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "attnx/modules/layers.hpp"
#include "attnx/modules/multi_head_attention.hpp"
#include "attnx/modules/transformer_block.hpp"

namespace attnx::train {

namespace detail {
template <class P>
inline constexpr bool is_parameter = is_tensor_v<std::remove_cvref_t<P>>;

// One parameter of each module (tensors), or nothing where the slot is absent (no bias).
template <class F, class P, class... Q>
void leaf(const std::string& name, F& f, P& p, Q&... q) {
  if constexpr (is_parameter<P>) f(name, p, q...);
}

template <class F, class M0, class... M>
void visit_module(const std::string& p, F& f, M0& m0, M&... m) {
  using X = std::remove_cv_t<M0>;
  if constexpr (requires { X::in_features; X::out_features; X::has_bias; m0.weight; }) {  // nn::linear
    leaf(p + "weight", f, m0.weight, m.weight...);
    if constexpr (X::has_bias) leaf(p + "bias", f, m0.bias, m.bias...);
  } else if constexpr (requires { X::hidden; X::gated; m0.up; m0.down; }) {  // nn::feed_forward
    visit_module(p + "up.", f, m0.up, m.up...);
    if constexpr (X::gated) visit_module(p + "gate.", f, m0.gate, m.gate...);
    visit_module(p + "down.", f, m0.down, m.down...);
  } else if constexpr (requires { m0.w_q; m0.w_k; m0.w_v; m0.w_o; }) {  // multi_head_attention
    leaf(p + "w_q", f, m0.w_q, m.w_q...);
    leaf(p + "w_k", f, m0.w_k, m.w_k...);
    leaf(p + "w_v", f, m0.w_v, m.w_v...);
    leaf(p + "w_o", f, m0.w_o, m.w_o...);
    leaf(p + "b_q", f, m0.b_q, m.b_q...);
    leaf(p + "b_k", f, m0.b_k, m.b_k...);
    leaf(p + "b_v", f, m0.b_v, m.b_v...);
    leaf(p + "b_o", f, m0.b_o, m.b_o...);
    leaf(p + "sinks", f, m0.sinks, m.sinks...);
  } else if constexpr (requires { m0.ln_1; m0.attn; m0.ln_2; m0.mlp; }) {  // nn::transformer_block
    visit_module(p + "ln_1.", f, m0.ln_1, m.ln_1...);
    visit_module(p + "attn.", f, m0.attn, m.attn...);
    if constexpr (X::cross_attention) {
      visit_module(p + "ln_x.", f, m0.ln_x, m.ln_x...);
      visit_module(p + "cross_attn.", f, m0.cross_attn, m.cross_attn...);
    }
    visit_module(p + "ln_2.", f, m0.ln_2, m.ln_2...);
    visit_module(p + "mlp.", f, m0.mlp, m.mlp...);
  } else if constexpr (requires { m0.wte; m0.wpe; m0.h; m0.ln_f; }) {  // models::gpt2
    visit_module(p + "wte.", f, m0.wte, m.wte...);
    leaf(p + "wpe", f, m0.wpe, m.wpe...);
    for (std::size_t i = 0; i < X::layers; ++i) visit_module(p + "h." + std::to_string(i) + ".", f, m0.h[i], m.h[i]...);
    visit_module(p + "ln_f.", f, m0.ln_f, m.ln_f...);
  } else if constexpr (requires { m0.weight; m0.eps; }) {  // nn::layer_norm, nn::rms_norm
    leaf(p + "weight", f, m0.weight, m.weight...);
    if constexpr (requires { m0.bias; }) leaf(p + "bias", f, m0.bias, m.bias...);
  } else if constexpr (requires { X::vocab; m0.weight; }) {  // nn::embedding
    leaf(p + "weight", f, m0.weight, m.weight...);
  } else {
    static_assert(sizeof(X) == 0, "attnx: train::for_each_parameter: a module type it does not know");
  }
}

// The last argument is the function; the ones before it the modules (all of one type).
template <std::size_t... I, class Tuple>
void visit_all(std::index_sequence<I...>, Tuple&& t) {
  constexpr std::size_t n = sizeof...(I);
  auto& f = std::get<n>(t);
  visit_module(std::string(), f, std::get<I>(t)...);
}
}  // namespace detail

// for_each_parameter(m..., f): f(name, p...) for each parameter, p the parameter of each module m (tensors). The
// modules are of one type (a model and its gradients, say).
template <class... A>
void for_each_parameter(A&&... a) {
  static_assert(sizeof...(A) >= 2, "attnx: train::for_each_parameter(modules..., f): at least one module and the function");
  detail::visit_all(std::make_index_sequence<sizeof...(A) - 1>{}, std::forward_as_tuple(a...));
}

// The number of scalar parameters of a module (what for_each_parameter visits).
template <class M>
std::size_t parameter_count(const M& m) {
  std::size_t n = 0;
  for_each_parameter(m, [&](const std::string&, const auto& w) { n += w.numel(); });
  return n;
}

// Every parameter of m set to 0 (gradients before accumulating a step's).
template <class M>
void zero(M& m) {
  for_each_parameter(m, [](const std::string&, auto& w) {
    auto* p = w.data();
    for (std::size_t i = 0, n = w.numel(); i < n; ++i) p[i] = 0;
  });
}

}  // namespace attnx::train
