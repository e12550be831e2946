// attnx::nn::transformer_block: self-attention and a feed-forward layer, each with a residual connection and a
// layer norm, before (pre-norm: GPT-2, most decoders) or after (post-norm: the original Transformer, BERT).
//
//   pre-norm:   h = x + attn(ln_1(x), masks...);   y = h + mlp(ln_2(h))
//   post-norm:  h = ln_1(x + attn(x, masks...));   y = ln_2(h + mlp(h))
//
// forward(x, masks...) runs a whole sequence: an encoder with key-padding masks, a decoder with `causal`.
// step(x, cache[, b | rows], masks...) decodes with a KV cache (multi_head_attention::step: causal within each item's
// own length, and its masks over the cache: a sliding window, say; rows per item for continuous batching), so stepping token by token gives the rows of
// forward(x, causal). Both return evaluated tensors:
// each residual stream is read twice (the residual and the normalised branch), so it is computed once.
//
// Cross-attention (CrossAttention = true: a decoder reading an encoder's output, the memory) adds a third
// sub-layer between the two, with its own layer norm ln_x:
//   pre-norm:   h = x + attn(ln_1(x), masks...);  h = h + cross_attn(ln_x(h), m, memory masks...);  y = h + mlp(ln_2(h))
//   post-norm:  h = ln_1(x + attn(x, masks...));  h = ln_x(h + cross_attn(h, m, memory masks...));  y = ln_2(h + mlp(h))
// The memory and its masks travel together: forward(x, nn::cross(memory, key_lengths(src)), causal) and
// step(x, cache, nn::cross(memory)[, b]) (with a batch item b, memory is that item's (L_m, D)). cross_attn has the
// block's heads and options without RoPE. nn::cross(memory) projects the memory's keys and values at every call;
// for decoding, project them once into a KV cache, cross_attn.project_memory(memory, memory_cache), and pass
// nn::cross(memory_cache) (the same values, no projection per token).
#pragma once

#include <cstddef>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/hana/tuple.hpp>
#include <boost/hana/unpack.hpp>

#include "attnx/eval/assign.hpp"
#include "attnx/exec/context.hpp"
#include "attnx/modules/kv_cache.hpp"
#include "attnx/modules/layers.hpp"
#include "attnx/modules/multi_head_attention.hpp"

namespace attnx::nn {

// Where a block normalises: before each sublayer (pre-norm, GPT-2) or after its residual sum (post-norm, the original Transformer).
enum class norm_position { pre, post };

// The memory of a cross-attention sub-layer and its masks (key_lengths(...), key_padding<N>, allowed(m) / blocked(m)): an lvalue
// memory is referred to, an rvalue moved in; the masks are copied (key_lengths refers to the caller's lengths).
template <class M, class... Masks>
struct cross_memory {
  M memory;
  boost::hana::tuple<Masks...> masks;
};
template <expression M, class... Masks>
constexpr auto cross(M&& memory, Masks&&... masks) {
  using stored = std::conditional_t<std::is_lvalue_reference_v<M>, const std::remove_reference_t<M>&, std::remove_cvref_t<M>>;
  return cross_memory<stored, std::decay_t<Masks>...>{std::forward<M>(memory), {std::forward<Masks>(masks)...}};
}
// A memory whose keys and values the block's cross-attention has projected once into a KV cache
// (block.cross_attn.project_memory(memory, memory_cache)): forward(x, nn::cross(memory_cache), masks...) and
// step(x, cache, nn::cross(memory_cache)[, b]) read them instead of projecting the memory at every call. Each
// item's keys are the ones it holds, so no memory masks. The cache is referred to (it must outlive the call).
template <class Cache>
struct cross_cached {
  const Cache* cache;
};
template <class T, std::size_t G, std::size_t Dk, std::size_t Dv, class S>
constexpr auto cross(const kv_cache<T, G, Dk, Dv, S>& memory_cache) {
  return cross_cached<kv_cache<T, G, Dk, Dv, S>>{&memory_cache};
}
// A temporary cache would be gone before the call reads it; masks have nothing to mask (the cache holds each item's
// keys and nothing else). One error each; the block then adds none.
template <class T, std::size_t G, std::size_t Dk, std::size_t Dv, class S>
constexpr auto cross(const kv_cache<T, G, Dk, Dv, S>&& memory_cache) {
  static_assert(error::holds<error::block_memory_cache_is_temporary<error::argument_type<const kv_cache<T, G, Dk, Dv, S>&&>>>,
                "attnx: nn::cross: a temporary KV cache would be gone before the block reads it: keep the memory cache "
                "in a variable");
  return cross_cached<kv_cache<T, G, Dk, Dv, S>>{&memory_cache};
}
template <class T, std::size_t G, std::size_t Dk, std::size_t Dv, class S, class Mask, class... Masks>
constexpr auto cross(const kv_cache<T, G, Dk, Dv, S>& memory_cache, const Mask&, const Masks&...) {
  static_assert(error::holds<error::block_memory_cache_takes_no_masks<error::mask_count<1 + sizeof...(Masks)>>>,
                "attnx: nn::cross(memory_cache) takes no masks: each item attends to the keys it holds (project each "
                "item's memory at its own length)");
  return cross_cached<kv_cache<T, G, Dk, Dv, S>>{&memory_cache};
}
namespace detail {
template <class A>
inline constexpr bool is_cross_memory = false;
template <class M, class... Masks>
inline constexpr bool is_cross_memory<cross_memory<M, Masks...>> = true;
template <class C>
inline constexpr bool is_cross_memory<cross_cached<C>> = true;
// Rows per item (a std::vector, std::array or span of std::size_t counts).
template <class A>
concept is_row_counts = !std::is_integral_v<std::remove_cvref_t<A>> && std::is_convertible_v<const A&, std::span<const std::size_t>>;
// An argument of a block's step that takes the overload with masks: not a memory, a batch item, rows per item or a
// context (a mask, or anything else for the module's step to name).
template <class A>
concept step_extra = !is_cross_memory<std::remove_cvref_t<A>> && !std::is_integral_v<std::remove_cvref_t<A>> &&
                     !attnx::detail::is_context_arg<A> && !is_row_counts<A>;
template <class A>
inline constexpr bool is_cross_cached = false;
template <class C>
inline constexpr bool is_cross_cached<cross_cached<C>> = true;
template <class... A>
inline constexpr bool first_is_cross = false;
template <class A, class... R>
inline constexpr bool first_is_cross<A, R...> = is_cross_memory<std::remove_cvref_t<A>>;
template <class... A>
inline constexpr bool any_is_cross = (is_cross_memory<std::remove_cvref_t<A>> || ...);
// The block's options for its cross-attention: the same heads and widths, no RoPE.
constexpr mha_options without_rope(mha_options o) {
  o.rope = rope_style::none;
  return o;
}
}  // namespace detail

// A transformer block: self-attention (and cross-attention when CrossAttention) and a feed-forward sublayer, each
// with a residual connection and a layer norm (before or after, Norm).
template <class T, std::size_t D, std::size_t Heads, std::size_t Hidden, activation Act = activation::gelu,
          norm_position Norm = norm_position::pre, mha_options Opt = mha_options{}, bool CrossAttention = false>
struct transformer_block {
  using value_type = T;
  using attention_type = multi_head_attention<T, D, Heads, Opt>;
  using cross_attention_type = multi_head_attention<T, D, Heads, detail::without_rope(Opt)>;
  using feed_forward_type = feed_forward<T, D, Hidden, Act>;
  static constexpr std::size_t d_model = D, heads = Heads, hidden = Hidden;
  static constexpr norm_position norm = Norm;
  static constexpr bool cross_attention = CrossAttention;

  layer_norm<T, D> ln_1{};
  attention_type attn{};
  [[no_unique_address]] std::conditional_t<CrossAttention, layer_norm<T, D>, absent<'n'>> ln_x{};
  [[no_unique_address]] std::conditional_t<CrossAttention, cross_attention_type, absent<'x'>> cross_attn{};
  layer_norm<T, D> ln_2{};
  feed_forward_type mlp{};

  // x: (L, D) or (B, L, D); masks as for multi_head_attention (causal, key_padding<N>, key_lengths, allowed(m), blocked(m)).
  // With cross-attention: forward(x, nn::cross(memory, memory masks...), masks...).
  template <expression X, class... Args>
  constexpr auto forward(const X& x, const Args&... args) const {
    using S = shape_of_t<X>;
    constexpr bool features_ok = detail::check_features<S, D, failed_v<X>>();
    constexpr bool ok = features_ok && check_type<X, !features_ok || failed_v<X>>() && check_cross<Args...>();
    if constexpr (!ok || failed_v<X>) {
      return basic_tensor<T, S>{};
    } else {
      detail::check_features_at_run_time(x, D);
      basic_tensor<T, S> h = x;
      if constexpr (CrossAttention) {
        forward_sublayers(h, args...);
      } else {
        sublayers(h, [&](const auto& a) { return attn(a, args...); }, none{});
      }
      return h;
    }
  }

  // Decoding: x (B, n, D), the n new tokens of every item, or (n, D) those of item b; cache: this block's.
  // With cross-attention: step(x, cache, nn::cross(memory, masks...)[, b]) or step(x, cache, nn::cross(memory_cache)[, b]).
  // Whatever throws once the self-attention appended (the feed-forward's allocations, or a memory given as such,
  // whose rules (batch, features, masks) are checked where the cross-attention reads it), the new tokens are taken
  // out of the cache again; a memory cache is checked before anything is appended.
  template <expression X, class Cache>
  auto step(const X& x, Cache& cache, const context& ctx = current_context()) const {
    return step_with(x, cache, ctx);
  }
  template <expression X, class Cache>
  auto step(const X& x, Cache& cache, std::size_t b, const context& ctx = current_context()) const {
    return step_with(x, cache, b, ctx);
  }
  template <expression X, class Cache, class M, class... MM>
  auto step(const X& x, Cache& cache, const cross_memory<M, MM...>& c, const context& ctx = current_context()) const {
    return step_with(x, cache, c, ctx);
  }
  template <expression X, class Cache, class M, class... MM>
  auto step(const X& x, Cache& cache, const cross_memory<M, MM...>& c, std::size_t b,
            const context& ctx = current_context()) const {
    return step_with(x, cache, c, b, ctx);
  }
  template <expression X, class Cache, class C>
  auto step(const X& x, Cache& cache, const cross_cached<C>& c, const context& ctx = current_context()) const {
    return step_with(x, cache, c, ctx);
  }
  template <expression X, class Cache, class C>
  auto step(const X& x, Cache& cache, const cross_cached<C>& c, std::size_t b, const context& ctx = current_context()) const {
    return step_with(x, cache, c, b, ctx);
  }
  // Rows per item (continuous batching through the block): x (N, D), rows[b] new tokens of item b, the items' rows
  // one after another (multi_head_attention::step's rows per item); with cross-attention each item's rows read its
  // own memory, from a memory cache: step(x, cache, nn::cross(memory_cache), rows).
  template <expression X, class Cache>
  auto step(const X& x, Cache& cache, std::span<const std::size_t> rows, const context& ctx = current_context()) const {
    return step_with(x, cache, rows, ctx);
  }
  template <expression X, class Cache, class M, class... MM>
  auto step(const X& x, Cache& cache, const cross_memory<M, MM...>& c, std::span<const std::size_t> rows,
            const context& ctx = current_context()) const {
    return step_with(x, cache, c, rows, ctx);
  }
  template <expression X, class Cache, class C>
  auto step(const X& x, Cache& cache, const cross_cached<C>& c, std::span<const std::size_t> rows,
            const context& ctx = current_context()) const {
    return step_with(x, cache, c, rows, ctx);
  }

  // With masks on the self-attention: step(x, cache[, b | rows], masks...[, ctx]), with cross-attention step(x,
  // cache, nn::cross(...)[, b | rows], masks...[, ctx]). The masks are multi_head_attention::step's: allowed(m),
  // blocked(m) or additive(m) over the self-attention's scores, (B, heads, n, keys) for x (B, n, D), (heads, n, keys)
  // for item b's x (n, D), (heads, N, keys) with rows per item, the key axis indexing cache positions (a sliding window, padding inside the cache, a tree of draft
  // tokens); at most six. Its rules on them apply, one error each (an argument that is not a mask, a context not
  // last: the module's step names them).
  template <expression X, class Cache, class A0, class... A>
    requires is_kv_cache_v<Cache> && (detail::step_extra<A0> || (detail::step_extra<A> || ...))
  auto step(const X& x, Cache& cache, const A0& a0, const A&... a) const {
    return step_with(x, cache, a0, a...);
  }

 private:
  struct none {};
  // Every step: a (perhaps a memory, then perhaps a batch item or the rows per item, then the masks, if any, and
  // perhaps a context).
  template <class X, class Cache, class... A>
  auto step_with(const X& x, Cache& cache, const A&... a) const {
    constexpr bool cross_given = detail::first_is_cross<A...>;
    using args_t = std::tuple<A...>;
    constexpr std::size_t n = sizeof...(A), c = cross_given ? 1 : 0;
    constexpr bool item = [] {
      if constexpr (c < n) return std::is_integral_v<std::remove_cvref_t<std::tuple_element_t<c, args_t>>>;
      else return false;
    }();
    constexpr bool by_rows = [] {
      if constexpr (c < n) return detail::is_row_counts<std::tuple_element_t<c, args_t>>;
      else return false;
    }();
    if constexpr (!check_cross<A...>() || !check_rows_memory<by_rows, A...>()) {
      return basic_tensor<T, shape_of_t<X>>{};
    } else {
      constexpr std::size_t first = c + (item || by_rows ? 1 : 0);  // the first mask (or the context)
      constexpr bool has_ctx = [] {
        if constexpr (n > 0) return attnx::detail::is_context_arg<std::tuple_element_t<n - 1, args_t>>;
        else return false;
      }();
      const auto args = std::forward_as_tuple(a...);
      const context& ctx = [&]() -> const context& {
        if constexpr (has_ctx) return std::get<n - 1>(args);
        else return current_context();
      }();
      // Where the rows go: item b, the rows per item, or (neither) the whole batch from item 0.
      const auto where = [&] {
        if constexpr (item) return static_cast<std::size_t>(std::get<c>(args));
        else if constexpr (by_rows) return std::span<const std::size_t>(std::get<c>(args));
        else return std::size_t{0};
      }();
      const auto self = [&](const auto& in) {
        return [&]<std::size_t... I>(std::index_sequence<I...>) {
          if constexpr (item || by_rows) return attn.step(in, cache, where, std::get<first + I>(args)...);
          else return attn.step(in, cache, std::get<first + I>(args)...);
        }(std::make_index_sequence<n - first>{});
      };
      // The cross-attention sub-layer (none without a memory); a memory cache checked before the self-attention appends.
      const auto cross = [&] {
        if constexpr (!cross_given) {
          return none{};
        } else {
          const auto& mem = std::get<0>(args);
          if constexpr (detail::is_cross_cached<std::remove_cvref_t<decltype(mem)>>) {
            cross_attn.check_memory_input(x, *mem.cache, where);  // (where: item 0 for x (B, n, D), whose batch it checks)
            return cached_attend(mem, where, ctx);
          } else {
            return memory_attend(mem);
          }
        }
      }();
      return attnx::detail::undoing_appends(cache, [&] { return step_impl(x, self, cross, ctx); });
    }
  }

  // x's element type must be the block's (Quiet: an earlier rule failed, no second error).
  template <class X, bool Quiet>
  static constexpr bool check_type() {
    constexpr bool ok = std::is_same_v<value_t<X>, T>;
    static_assert(Quiet || ok ||
                      error::holds<error::block_input_element_type_differs<error::input_element_type<value_t<X>>,
                                                                           error::block_element_type<T>>>,
                  "attnx: nn::transformer_block: x must have the block's element type T (convert it: cast<T>(x))");
    return ok;
  }
  // The cross-attention rules: a memory exactly when the block has cross-attention, right after x (forward) or
  // the cache (step).
  template <class... Args>
  static constexpr bool check_cross() {
    constexpr bool given = detail::any_is_cross<Args...>, first = detail::first_is_cross<Args...>;
    static_assert(!CrossAttention || given || error::holds<error::block_cross_attention_needs_memory<error::cross_attention<CrossAttention>>>,
                  "attnx: nn::transformer_block: a block with cross-attention needs the memory: "
                  "forward(x, nn::cross(memory, memory masks...), masks...) or step(x, cache, nn::cross(memory)[, b])");
    static_assert(CrossAttention || !given || error::holds<error::block_without_cross_attention_given_memory<error::cross_attention<CrossAttention>>>,
                  "attnx: nn::transformer_block: nn::cross(memory) given to a block without cross-attention (its "
                  "CrossAttention parameter is false)");
    static_assert(!CrossAttention || !given || first ||
                      error::holds<error::block_cross_memory_must_follow_x<error::cross_attention<CrossAttention>>>,
                  "attnx: nn::transformer_block: nn::cross(memory, ...) must come right after x (forward) or the "
                  "cache (step): forward(x, nn::cross(memory, memory masks...), masks...), step(x, cache, "
                  "nn::cross(memory)[, b], masks...)");
    return CrossAttention ? first : !given;
  }
  // Rows per item read their memories from a memory cache (a memory given as such is one tensor (B, L_m, D) for the
  // batch, not an item's rows). (Quiet where check_cross failed: raw needs the memory right after the cache.)
  template <bool ByRows, class... Args>
  static constexpr bool check_rows_memory() {
    constexpr bool raw = CrossAttention && detail::first_is_cross<Args...> &&
                         !detail::is_cross_cached<std::remove_cvref_t<std::tuple_element_t<0, std::tuple<Args..., none>>>>;
    static_assert(!ByRows || !raw || error::holds<error::block_rows_per_item_need_memory_cache<error::cross_attention<CrossAttention>>>,
                  "attnx: nn::transformer_block: a step with rows per item reads each item's memory from a memory cache: "
                  "project_memory into a kv_cache, then step(x, cache, nn::cross(memory_cache), rows, ...)");
    return !ByRows || !raw;
  }
  // The cross-attention sub-layer as a callable of its input: over a memory and its masks (projected at each call),
  // or over a memory cache (a batched input reads the whole batch, an input (n, D) item b).
  template <class M, class... MM>
  constexpr auto memory_attend(const cross_memory<M, MM...>& c) const {
    return [this, &c](const auto& a) {
      return boost::hana::unpack(c.masks, [&](const auto&... mk) { return cross_attn(a, c.memory, mk...); });
    };
  }
  // (Where: item b of the cache, or the rows per item.)
  template <class C, class Where>
  auto cached_attend(const cross_cached<C>& c, Where where, const context& ctx) const {
    return [this, cache = c.cache, where, &ctx](const auto& a) {
      if constexpr (shape_of_t<std::remove_cvref_t<decltype(a)>>::rank == 3) return cross_attn.attend_memory(a, *cache, ctx);
      else return cross_attn.attend_memory(a, *cache, where, ctx);
    };
  }
  // The sub-layers on the residual stream h, in place: self-attention (self_attend(input)), cross-attention
  // (cross_attend(input), unless none), the feed-forward; each with its norm before (pre) or after (post).
  template <class H, class SelfAttend, class CrossAttend>
  constexpr void sublayers(H& h, const SelfAttend& self_attend, const CrossAttend& cross_attend) const {
    if constexpr (Norm == norm_position::pre) {
      h += self_attend(ln_1(h));
    } else {
      h = ln_1(h + self_attend(h));
    }
    if constexpr (!std::is_same_v<CrossAttend, none>) {
      if constexpr (Norm == norm_position::pre) {
        h += cross_attend(ln_x(h));
      } else {
        h = ln_x(h + cross_attend(h));
      }
    }
    if constexpr (Norm == norm_position::pre) {
      h += mlp(ln_2(h));
    } else {
      h = ln_2(h + mlp(h));
    }
  }
  template <class H, class M, class... MM, class... Masks>
  constexpr void forward_sublayers(H& h, const cross_memory<M, MM...>& c, const Masks&... masks) const {
    sublayers(h, [&](const auto& a) { return attn(a, masks...); }, memory_attend(c));
  }
  // Over a memory cache: x (B, L, D) needs the cache's batch; an unbatched x (L, D) a cache of one item.
  template <class H, class C, class... Masks>
  void forward_sublayers(H& h, const cross_cached<C>& c, const Masks&... masks) const {
    if constexpr (shape_of_t<H>::rank == 2) {
      if (c.cache->batch() != 1)
        attnx::detail::throw_extent_error("nn::transformer_block: an unbatched x (L, D) reads a memory cache of one item",
                                          "cache_batch", c.cache->batch(), "expected_batch", 1);
    }
    cross_attn.check_memory_input(h, *c.cache);
    sublayers(h, [&](const auto& a) { return attn(a, masks...); }, cached_attend(c, std::size_t{0}, current_context()));
  }
  // A step's sub-layers on x (the cross-attention rules checked by step_with).
  template <class X, class Attend, class CrossAttend>
  auto step_impl(const X& x, const Attend& attend, const CrossAttend& cross_attend, const context& ctx) const {
    using S = shape_of_t<X>;
    constexpr bool features_ok = detail::check_features<S, D, failed_v<X>>();
    constexpr bool ok = features_ok && check_type<X, !features_ok || failed_v<X>>();
    if constexpr (!ok || failed_v<X>) {
      return basic_tensor<T, S>{};
    } else {
      const context_scope use(ctx);
      basic_tensor<T, S> h = x;
      sublayers(h, attend, cross_attend);
      return h;
    }
  }
};

}  // namespace attnx::nn
