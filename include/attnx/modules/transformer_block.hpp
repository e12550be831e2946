// attnx::nn::transformer_block: self-attention and a feed-forward layer, each with a residual connection and a
// layer norm, before (pre-norm: GPT-2, most decoders) or after (post-norm: the original Transformer, BERT).
//
//   pre-norm:   h = x + attn(ln_1(x), masks...);   y = h + mlp(ln_2(h))
//   post-norm:  h = ln_1(x + attn(x, masks...));   y = ln_2(h + mlp(h))
//
// forward(x, masks...) runs a whole sequence: an encoder with key-padding masks, a decoder with `causal`.
// step(x, cache[, b]) decodes with a KV cache (multi_head_attention::step: causal within each item's own
// length), so stepping token by token gives the rows of forward(x, causal). Both return evaluated tensors:
// each residual stream is read twice (the residual and the normalised branch), so it is computed once.
// Cross-attention (a decoder reading an encoder's memory) is not part of this block yet.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

#include "attnx/eval/assign.hpp"
#include "attnx/exec/context.hpp"
#include "attnx/modules/kv_cache.hpp"
#include "attnx/modules/layers.hpp"
#include "attnx/modules/multi_head_attention.hpp"

namespace attnx::nn {

enum class norm_position { pre, post };

template <class T, std::size_t D, std::size_t Heads, std::size_t Hidden, activation Act = activation::gelu,
          norm_position Norm = norm_position::pre, mha_options Opt = mha_options{}>
struct transformer_block {
  using attention_type = multi_head_attention<T, D, Heads, Opt>;
  using feed_forward_type = feed_forward<T, D, Hidden, Act>;
  static constexpr std::size_t d_model = D, heads = Heads, hidden = Hidden;
  static constexpr norm_position norm = Norm;

  layer_norm<T, D> ln_1{};
  attention_type attn{};
  layer_norm<T, D> ln_2{};
  feed_forward_type mlp{};

  // x: (L, D) or (B, L, D); masks as for multi_head_attention (causal, key_padding<N>, key_lengths, bool tensors).
  template <expression X, class... Masks>
  constexpr auto forward(const X& x, Masks&&... masks) const {
    using S = shape_of_t<X>;
    constexpr bool ok = detail::check_features<S, D, failed_v<X>>();
    if constexpr (!ok || failed_v<X>) {
      return basic_tensor<T, S>{};
    } else {
      detail::check_features_at_run_time(x, D);
      basic_tensor<T, S> h = x;
      if constexpr (Norm == norm_position::pre) {
        h += attn(ln_1(h), std::forward<Masks>(masks)...);
        h += mlp(ln_2(h));
      } else {
        h = ln_1(h + attn(h, std::forward<Masks>(masks)...));
        h = ln_2(h + mlp(h));
      }
      return h;
    }
  }

  // Decoding: x (B, n, D), the n new tokens of every item, or (n, D) those of item b; cache: this block's.
  template <expression X, class Cache>
  auto step(const X& x, Cache& cache, const context& ctx = current_context()) const {
    return step_impl(x, [&](const auto& a) { return attn.step(a, cache, ctx); }, ctx);
  }
  template <expression X, class Cache>
  auto step(const X& x, Cache& cache, std::size_t b, const context& ctx = current_context()) const {
    return step_impl(x, [&](const auto& a) { return attn.step(a, cache, b, ctx); }, ctx);
  }

 private:
  template <class X, class Attend>
  auto step_impl(const X& x, const Attend& attend, const context& ctx) const {
    using S = shape_of_t<X>;
    constexpr bool ok = detail::check_features<S, D, failed_v<X>>();
    if constexpr (!ok || failed_v<X>) {
      return basic_tensor<T, S>{};
    } else {
      const context_scope use(ctx);
      basic_tensor<T, S> h = x;
      if constexpr (Norm == norm_position::pre) {
        h += attend(ln_1(h));
        h += mlp(ln_2(h));
      } else {
        h = ln_1(h + attend(h));
        h = ln_2(h + mlp(h));
      }
      return h;
    }
  }
};

}  // namespace attnx::nn
