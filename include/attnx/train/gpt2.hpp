// attnx::train for models::gpt2 and its transformer blocks: a training forward, the backward of every parameter,
// and the loss alone (evaluation).
//
//   auto grads = std::make_unique<Model>();  train::zero(*grads);
//   T loss = train::forward_backward(model, ids, targets, batch, *grads);   // grads += d loss / d parameters
//   T held_out = train::loss(model, ids, targets, batch);
//
// ids and targets hold `batch` sequences of L tokens each, one after another (L = ids.size() / batch, at most the
// context); the loss is the mean cross-entropy of every position's logits against its target (train/loss.hpp,
// ignore_index rows excluded), as PyTorch's GPT2LMHeadModel computes it with the targets shifted by the caller.
//
// The gradients are derived from the model's own expressions (grad/backward.hpp): each block's two sub-layers,
// x + attn(ln_1(x), causal) and h + mlp(ln_2(h)) (post-norm: ln_1(x + attn(x, causal)), ln_2(h + mlp(h))), are
// differentiated with respect to their input and their parameters, the attention by the fused backward kernel.
// The forward keeps what the sub-layers read, two residual streams per block (B L D values each); the rest (the
// normalised rows, the projections, the MLP's hidden layer, the attention's O and log-sum-exp) is recomputed by
// the backward, sub-layer by sub-layer: activation memory is that of block-by-block recomputation. The LM head is
// tied: its gradient is added to wte's, and the caller re-ties after an optimizer step (model.tie_lm_head()).
// Results are bit-identical for any thread count (the kernels' rule).
//
// block_forward / block_backward do the same for one nn::transformer_block (pre- or post-norm, any attention options
// but sinks; no cross-attention): any model built of such blocks can be trained with them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attnx/eval/assign.hpp"
#include "attnx/exec/context.hpp"
#include "attnx/expr/mask.hpp"
#include "attnx/grad/backward.hpp"
#include "attnx/models/gpt2.hpp"
#include "attnx/train/loss.hpp"
#include "attnx/train/parameters.hpp"

namespace attnx::train {

namespace detail {
// The parameters of a sub-layer, as a tuple of references, in for_each_parameter's order.
template <class N>
auto norm_params(N& n) {
  if constexpr (requires { n.bias; }) return std::tie(n.weight, n.bias);
  else return std::tie(n.weight);
}
template <class L>
auto linear_params(L& l) {
  if constexpr (std::remove_cv_t<L>::has_bias) return std::tie(l.weight, l.bias);
  else return std::tie(l.weight);
}
template <class A>
auto attention_params(A& a) {
  using M = std::remove_cv_t<A>;
  static_assert(!M::options.sinks,
                "attnx: train: attention sinks have no gradient yet");
  if constexpr (M::has_bias) return std::tie(a.w_q, a.w_k, a.w_v, a.w_o, a.b_q, a.b_k, a.b_v, a.b_o);
  else return std::tie(a.w_q, a.w_k, a.w_v, a.w_o);
}
template <class B>
auto attention_sublayer_params(B& b) {
  return std::tuple_cat(norm_params(b.ln_1), attention_params(b.attn));
}
template <class B>
auto mlp_sublayer_params(B& b) {
  if constexpr (std::remove_cv_t<B>::feed_forward_type::gated)
    return std::tuple_cat(norm_params(b.ln_2), linear_params(b.mlp.up), linear_params(b.mlp.gate), linear_params(b.mlp.down));
  else
    return std::tuple_cat(norm_params(b.ln_2), linear_params(b.mlp.up), linear_params(b.mlp.down));
}

template <class D, class S>
void add_into(D& dst, const S& src) {
  auto* d = dst.data();
  const auto* s = src.data();
  for (std::size_t i = 0, n = dst.numel(); i < n; ++i) d[i] += s[i];
}

// d y / d x for the sub-layer y (an expression of x and params), with dy; each parameter's gradient added to the
// matching tensor of grads (the same sub-layer's parameters in a module of gradients).
template <class Y, class X, class DY, class P, class G>
X sublayer_backward(const Y& y, const X& x, const DY& dy, const P& params, const G& grads) {
  return std::apply(
      [&](const auto&... p) {
        auto r = backward(y, dy, wrt(x, p...));
        [&]<std::size_t... I>(std::index_sequence<I...>) {
          (add_into(std::get<I>(grads), std::get<I + 1>(r)), ...);
        }(std::make_index_sequence<sizeof...(p)>{});
        return std::move(std::get<0>(r));
      },
      params);
}

// A block's sub-layers as expressions of their input.
template <class B, class X>
auto attention_sublayer(const B& b, const X& x) {
  if constexpr (B::norm == nn::norm_position::pre) return x + b.attn(b.ln_1(x), causal);
  else return b.ln_1(x + b.attn(x, causal));
}
template <class B, class X>
auto mlp_sublayer(const B& b, const X& x) {
  if constexpr (B::norm == nn::norm_position::pre) return x + b.mlp(b.ln_2(x));
  else return b.ln_2(x + b.mlp(x));
}

template <class M>
std::size_t sequence_length(std::span<const std::int32_t> ids, std::span<const std::int32_t> targets, std::size_t batch) {
  if (batch == 0 || ids.empty() || ids.size() % batch != 0)
    attnx::detail::throw_extent_error("train: ids must hold `batch` sequences of one length", "ids", ids.size(), "batch",
                                      batch);
  if (targets.size() != ids.size())
    attnx::detail::throw_extent_error("train: one target per id", "targets", targets.size(), "ids", ids.size());
  const std::size_t len = ids.size() / batch;
  if (len > M::context_length)
    ATTNX_THROW(std::length_error("attnx: train: sequences of " + std::to_string(len) + " tokens exceed the context of " +
                                  std::to_string(M::context_length)));
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || static_cast<std::size_t>(ids[i]) >= M::vocab)
      ATTNX_THROW(std::out_of_range("attnx: train: id " + std::to_string(ids[i]) + " at " + std::to_string(i) +
                                    " is outside [0, " + std::to_string(M::vocab) + ")"));
  return len;
}

// h = wte[ids] + wpe[positions], (batch, L, D).
template <class M>
auto embed(const M& m, std::span<const std::int32_t> ids, std::size_t batch, std::size_t len) {
  using T = typename M::value_type;
  constexpr std::size_t D = M::d_model;
  tensor<T, dyn, dyn, D> x(batch, len, D);
  T* out = x.data();
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t t = 0; t < len; ++t, out += D) {
      const T* e = m.wte.weight.data() + static_cast<std::size_t>(ids[b * len + t]) * D;
      const T* p = m.wpe.data() + t * D;
      for (std::size_t j = 0; j < D; ++j) out[j] = e[j] + p[j];
    }
  return x;
}

template <class B>
void check_block() {
  static_assert(!B::cross_attention, "attnx: train: blocks with cross-attention are not trained here yet");
}
template <class M>
void check_model(const M&) {
  check_block<typename M::block_type>();
}
}  // namespace detail

// What a block's training forward keeps for its backward: its input x and the stream h after the attention
// sub-layer (tensors of x's type).
template <class X>
struct block_activations {
  X x, h;
};

// y = block(x, causal), as nn::transformer_block::forward(x, causal) computes it, keeping x and h in a.
template <class B, class X>
X block_forward(const B& b, const X& x, block_activations<X>& a, const context& ctx = current_context()) {
  detail::check_block<B>();
  a.x = x;
  a.h = evaluate(detail::attention_sublayer(b, a.x), ctx);
  return evaluate(detail::mlp_sublayer(b, a.h), ctx);
}
// d loss / d x from dy = d loss / d y of block_forward, each parameter's gradient added to grads (a block of b's
// type). The sub-layers are differentiated as expressions, with respect to their input and their parameters
// (pre- and post-norm; the attention's options: heads, grouped-query K/V, RoPE, biases or none).
template <class B, class X>
X block_backward(const B& b, const block_activations<X>& a, const X& dy, B& grads, const context& ctx = current_context()) {
  detail::check_block<B>();
  const context_scope use(ctx);
  X dh = detail::sublayer_backward(detail::mlp_sublayer(b, a.h), a.h, dy, detail::mlp_sublayer_params(b),
                                   detail::mlp_sublayer_params(grads));
  return detail::sublayer_backward(detail::attention_sublayer(b, a.x), a.x, dh, detail::attention_sublayer_params(b),
                                   detail::attention_sublayer_params(grads));
}

// The mean cross-entropy of the model's logits over `batch` sequences of ids against targets, and every parameter's
// gradient added to grads (a module of the model's type; zero it first, train::zero, or accumulate several
// batches). Throws before anything is written for bad sizes (ids not batch sequences of one length at most the
// context, a target count other than the id count), an id outside [0, vocab) or a target outside [0, vocab) that is
// not ignore_index. A NaN or infinite loss is returned as such (train::check_finite), its gradients as they come.
template <class M>
typename M::value_type forward_backward(const M& m, std::span<const std::int32_t> ids, std::span<const std::int32_t> targets,
                                        std::size_t batch, M& grads, const context& ctx = current_context(),
                                        std::int32_t ignore_index = default_ignore_index) {
  using T = typename M::value_type;
  constexpr std::size_t D = M::d_model, L = M::layers;
  detail::check_model(m);
  const std::size_t len = detail::sequence_length<M>(ids, targets, batch);
  detail::check_targets(ids.size(), M::vocab, targets, ignore_index);
  const context_scope use(ctx);
  using X = tensor<T, dyn, dyn, D>;
  std::vector<block_activations<X>> keep(L);
  X top = detail::embed(m, ids, batch, len);
  for (std::size_t i = 0; i < L; ++i) top = block_forward(m.h[i], top, keep[i], ctx);
  auto logits = evaluate(m.ln_f(top) * m.lm_head, ctx);
  const T loss = cross_entropy_backward(logits, targets, ignore_index);  // logits: now d loss / d logits

  auto [dx_top, d_lnf_w, d_lnf_b, d_head] = backward(m.ln_f(top) * m.lm_head, logits, wrt(top, m.ln_f.weight, m.ln_f.bias, m.lm_head));
  detail::add_into(grads.ln_f.weight, d_lnf_w);
  detail::add_into(grads.ln_f.bias, d_lnf_b);
  T* dwte = grads.wte.weight.data();
  for (std::size_t j = 0; j < D; ++j)  // the tied head: wte's gradient += d_head^T
    for (std::size_t v = 0; v < M::vocab; ++v) dwte[v * D + j] += d_head(j, v);
  X dx = std::move(dx_top);
  for (std::size_t i = L; i-- > 0;) dx = block_backward(m.h[i], keep[i], dx, grads.h[i], ctx);
  const T* d = dx.data();
  for (std::size_t r = 0; r < ids.size(); ++r, d += D) {
    T* e = dwte + static_cast<std::size_t>(ids[r]) * D;
    T* p = grads.wpe.data() + (r % len) * D;
    for (std::size_t j = 0; j < D; ++j) {
      e[j] += d[j];
      p[j] += d[j];
    }
  }
  return loss;
}

// The loss alone (held-out evaluation): the same forward, no gradients kept.
template <class M>
typename M::value_type loss(const M& m, std::span<const std::int32_t> ids, std::span<const std::int32_t> targets,
                            std::size_t batch, const context& ctx = current_context(),
                            std::int32_t ignore_index = default_ignore_index) {
  detail::check_model(m);
  const std::size_t len = detail::sequence_length<M>(ids, targets, batch);
  detail::check_targets(ids.size(), M::vocab, targets, ignore_index);
  const context_scope use(ctx);
  auto x = detail::embed(m, ids, batch, len);
  for (std::size_t i = 0; i < M::layers; ++i) {
    x = evaluate(detail::attention_sublayer(m.h[i], x), ctx);
    x = evaluate(detail::mlp_sublayer(m.h[i], x), ctx);
  }
  auto logits = evaluate(m.ln_f(x) * m.lm_head, ctx);
  return cross_entropy(logits, targets, ignore_index);
}

}  // namespace attnx::train
