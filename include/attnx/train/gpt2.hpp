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
// The gradients are derived from the model's own expressions (grad/backward.hpp), the attention by the fused
// backward kernel. With memory::keep (the default) the forward keeps every activation the backward reads (the
// normalised rows, Q and K (rotated with RoPE), V, the attention's output, the MLP's pre-activation and
// activation) and each product, norm and the attention are differentiated on their own, so each matrix product
// runs once forward and its two gradient products once backward. With memory::recompute it keeps two residual streams per block and differentiates each
// sub-layer as a whole, x + attn(ln_1(x), causal) and h + mlp(ln_2(h)) (post-norm: ln_1(x + attn(x, causal)),
// ln_2(h + mlp(h))), recomputing the rest: block-by-block recomputation, for memory. Blocks with score variants or a
// gated MLP, and post-norm blocks, always take the second form. The LM head is tied: its gradient is added to
// wte's, and the caller re-ties after an optimizer step (model.tie_lm_head()).
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
// Blocks whose training forward can keep every activation (memory::keep): pre-norm, attention without score
// variants (RoPE allowed), an MLP without a gate. Others recompute inside each sub-layer whatever the policy.
template <class B>
inline constexpr bool keeps_activations = [] {
  constexpr mha_options o = B::attention_type::options;
  return B::norm == nn::norm_position::pre && o.softcap == 0 && o.window == 0 && !o.alibi && !o.sinks &&
         !B::feed_forward_type::gated;
}();
// d loss / d (heads before RoPE) from d loss / d (rotated heads) dr; t a tensor of the heads' type (RoPE is a
// rotation per position: its backward reads only the positions, not t's values).
template <class A, class H>
H unrope(const H& t, H&& dr) {
  if constexpr (A::options.rope == rope_style::none) return std::move(dr);
  else return std::get<0>(backward(A::template rotate<true>(t), dr, wrt(t)));
}
// K or V heads as the queries read them: each of the kv_heads serves heads / kv_heads query heads (GQA).
// (A reference to the tensor itself, never a copy: the backward finds its leaves by their memory.)
template <class A, class E>
decltype(auto) shared_kv(const E& e) {
  if constexpr (A::group == 1) return (e);
  else return repeat_heads<A::group>(e);
}
}  // namespace detail

// What a training forward keeps for the backward.
//   keep       every activation the backward reads (the normalised rows, Q, K and V, the attention's output, the
//              MLP's input, pre-activation and activation, the attention's row log-sum-exps): each product and the
//              attention are computed once forward and their gradients once backward. With an MLP of 4 d_model,
//              17 d_model values per token and block.
//   recompute  each block's input and its stream after the attention sub-layer (2 d_model per token and block);
//              the backward recomputes the rest from them, sub-layer by sub-layer (about one more forward).
enum class memory { keep, recompute };

// Options of a training forward: what it keeps, and the target that marks a row to leave out of the loss.
struct train_options {
  memory activations = memory::keep;
  std::int32_t ignore_index = default_ignore_index;
};

// What a block's training forward keeps for its backward: its input x and the stream h after the attention
// sub-layer (tensors of x's type); with memory::keep also a1 = ln_1(x), q, k, v (split into heads), o (the
// attention's output, heads merged), a2 = ln_2(h) u, the MLP's pre-activation, and f = act(u).
template <class B, class X>
struct block_activations {
  using attention_type = typename B::attention_type;
  template <std::size_t H, class W>
  using heads_t = decltype(evaluate(split_heads<H>(std::declval<const X&>() * std::declval<const W&>())));
  X x, h;
  bool kept = false;  // (whether the forward kept the rest)
  X a1, o, a2;
  heads_t<attention_type::heads, typename attention_type::w_q_type> q;
  heads_t<attention_type::kv_heads, typename attention_type::w_k_type> k;
  heads_t<attention_type::kv_heads, typename attention_type::w_v_type> v;
  decltype(evaluate(std::declval<const typename B::feed_forward_type&>().up(std::declval<const X&>()))) u, f;
  // the attention's value (heads split) and its log-sum-exps, for the backward kernel
  using k_t = heads_t<attention_type::kv_heads, typename attention_type::w_k_type>;
  using v_t = heads_t<attention_type::kv_heads, typename attention_type::w_v_type>;
  saved_attention<decltype(attention(std::declval<const decltype(q)&>(), detail::shared_kv<attention_type>(std::declval<const k_t&>()),
                                     detail::shared_kv<attention_type>(std::declval<const v_t&>()), causal))>
      att;
};

namespace detail {
// x w (+ bias), and its parameters as a tuple of references.
template <bool Bias, class X, class W, class C>
auto projection(const X& x, const W& w, const C& c) {
  if constexpr (Bias) return x * w + c;
  else return x * w;
}
template <bool Bias, class W, class C>
auto projection_params(W& w, C& c) {
  if constexpr (Bias) return std::tie(w, c);
  else return std::tie(w);
}

// The backward of a block whose forward kept every activation: each product's two gradients, once.
template <class B, class Acts, class X>
X kept_backward(const B& b, const Acts& a, const X& dy, B& g) {
  using A = typename B::attention_type;
  constexpr bool bias = A::has_bias;
  constexpr nn::activation act = B::feed_forward_type::act;
  // u = up(a2), a2 = ln_2(h)
  // y = h + down(f), f = act(u): the product's gradients from the kept f, then act's from u
  const auto df = sublayer_backward(b.mlp.down(a.f), a.f, dy, linear_params(b.mlp.down), linear_params(g.mlp.down));
  const auto du = std::get<0>(backward(nn::activate<act>(a.u), df, wrt(a.u)));
  const X da2 = sublayer_backward(b.mlp.up(a.a2), a.a2, du, linear_params(b.mlp.up), linear_params(g.mlp.up));
  const X dh_norm = sublayer_backward(b.ln_2(a.h), a.h, da2, norm_params(b.ln_2), norm_params(g.ln_2));
  const X dh = evaluate(dy + dh_norm);
  // h = x + o w_o (+ b_o), o = merge_heads(attention(q, k, v, causal)), q = split_heads(a1 w_q (+ b_q)), ...
  const X d_o = sublayer_backward(projection<bias>(a.o, b.attn.w_o, b.attn.b_o), a.o, dh,
                                  projection_params<bias>(b.attn.w_o, b.attn.b_o), projection_params<bias>(g.attn.w_o, g.attn.b_o));
  auto [dq_r, dk_r, dv] = backward(attention(a.q, shared_kv<A>(a.k), shared_kv<A>(a.v), causal), split_heads<A::heads>(d_o),
                                   wrt(a.q, a.k, a.v), a.att);
  const auto dq = unrope<A>(a.q, std::move(dq_r));  // (q and k are kept rotated)
  const auto dk = unrope<A>(a.k, std::move(dk_r));
  X da1 = sublayer_backward(projection<bias>(a.a1, b.attn.w_q, b.attn.b_q), a.a1, merge_heads(dq),
                            projection_params<bias>(b.attn.w_q, b.attn.b_q), projection_params<bias>(g.attn.w_q, g.attn.b_q));
  add_into(da1, sublayer_backward(projection<bias>(a.a1, b.attn.w_k, b.attn.b_k), a.a1, merge_heads(dk),
                                  projection_params<bias>(b.attn.w_k, b.attn.b_k), projection_params<bias>(g.attn.w_k, g.attn.b_k)));
  add_into(da1, sublayer_backward(projection<bias>(a.a1, b.attn.w_v, b.attn.b_v), a.a1, merge_heads(dv),
                                  projection_params<bias>(b.attn.w_v, b.attn.b_v), projection_params<bias>(g.attn.w_v, g.attn.b_v)));
  const X dx_norm = sublayer_backward(b.ln_1(a.x), a.x, da1, norm_params(b.ln_1), norm_params(g.ln_1));
  return evaluate(dh + dx_norm);
}
}  // namespace detail

// y = block(x, causal), as nn::transformer_block::forward(x, causal) computes it, keeping what the backward reads
// in a: with memory::keep everything, where the block allows it (pre-norm, no score variants, no gated MLP);
// else x and h.
template <class B, class X>
X block_forward(const B& b, const X& x, block_activations<B, X>& a, const context& ctx = current_context(),
                memory keep = memory::keep) {
  detail::check_block<B>();
  a.x = x;
  a.kept = false;
  if constexpr (detail::keeps_activations<B>) {
    if (keep == memory::keep) {
      using A = typename B::attention_type;
      constexpr bool bias = A::has_bias;
      const auto& at = b.attn;
      a.kept = true;
      a.a1 = evaluate(b.ln_1(a.x), ctx);
      a.q = evaluate(A::template rotate<true>(split_heads<A::heads>(detail::projection<bias>(a.a1, at.w_q, at.b_q))),
                     ctx);
      a.k = evaluate(A::template rotate<true>(split_heads<A::kv_heads>(detail::projection<bias>(a.a1, at.w_k, at.b_k))),
                     ctx);
      a.v = evaluate(split_heads<A::kv_heads>(detail::projection<bias>(a.a1, at.w_v, at.b_v)), ctx);
      a.att = attention_forward(attention(a.q, detail::shared_kv<A>(a.k), detail::shared_kv<A>(a.v), causal));
      a.o = evaluate(merge_heads(a.att.o), ctx);
      a.h = evaluate(a.x + detail::projection<bias>(a.o, at.w_o, at.b_o), ctx);
      a.a2 = evaluate(b.ln_2(a.h), ctx);
      a.u = evaluate(b.mlp.up(a.a2), ctx);
      a.f = evaluate(nn::activate<B::feed_forward_type::act>(a.u), ctx);
      return evaluate(a.h + b.mlp.down(a.f), ctx);
    }
  }
  a.h = evaluate(detail::attention_sublayer(b, a.x), ctx);
  return evaluate(detail::mlp_sublayer(b, a.h), ctx);
}

// d loss / d x from dy = d loss / d y of block_forward, each parameter's gradient added to grads (a block of b's
// type). The sub-layers (or, where the forward kept everything, each product, norm and the attention) are
// differentiated as expressions with respect to their inputs and parameters (pre- and post-norm; the attention's
// options: heads, grouped-query K/V, RoPE, biases or none).
template <class B, class X>
X block_backward(const B& b, const block_activations<B, X>& a, const X& dy, B& grads, const context& ctx = current_context()) {
  detail::check_block<B>();
  const context_scope use(ctx);
  if constexpr (detail::keeps_activations<B>) {
    if (a.kept) return detail::kept_backward(b, a, dy, grads);
  }
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
                                        const train_options& o = {}) {
  const std::int32_t ignore_index = o.ignore_index;
  using T = typename M::value_type;
  constexpr std::size_t D = M::d_model, L = M::layers;
  detail::check_model(m);
  const std::size_t len = detail::sequence_length<M>(ids, targets, batch);
  detail::check_targets(ids.size(), M::vocab, targets, ignore_index);
  const context_scope use(ctx);
  using X = tensor<T, dyn, dyn, D>;
  std::vector<block_activations<typename M::block_type, X>> keep(L);
  X top = detail::embed(m, ids, batch, len);
  for (std::size_t i = 0; i < L; ++i) top = block_forward(m.h[i], top, keep[i], ctx, o.activations);
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
