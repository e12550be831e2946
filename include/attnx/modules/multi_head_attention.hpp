// attnx: multi-head attention as a module: compile-time sizes, weights owned or viewed, the forward
// pass written as the expression it is.
//
//   using mha_t = attnx::multi_head_attention<float, 512, 8>;                    // d_k = d_v = 64, bias
//   using gqa_t = attnx::multi_head_attention<float, 512, 8, attnx::mha_options{.kv_heads = 2}>;
//   mha_t mha(W_Q, W_K, W_V, W_O, b_Q, b_K, b_V, b_O);      // tensors, views or expressions (copied)
//   attnx::tensor<float, B, L, 512> y = mha(x, attnx::causal);                  // self-attention
//   attnx::tensor<float, B, Lq, 512> z = mha(x, memory, attnx::key_lengths(lens)); // cross-attention
//   attnx::tensor<float, B, 8, L, L> A = mha.weights(x, attnx::causal);         // only when asked
//   multi_head_attention<float, 512, 8, mha_options{.softcap = 50, .window = 4096, .sinks = true}>  // variants on
//                                         // every call, forward, step and attend_memory (mha_options)
//
// The forward pass is, for an input x of shape (B, L, d_model) (or (L, d_model): a batch of one),
//   merge_heads(attention(split_heads<H>(x W_Q + b_Q),
//                         repeat_heads<G>(split_heads<H_kv>(m W_K + b_K)),
//                         repeat_heads<G>(split_heads<H_kv>(m W_V + b_V)), masks...)) W_O + b_O
// (the merged heads are evaluated once into a buffer before W_O: see evaluated_once below)
// with m = x (self-attention) or the memory (cross-attention), G = H / H_kv. At run time the attention
// in the middle is dispatched to the fused kernel (eval/fused.hpp), which reads the projected Q, K and
// V with the heads' strides (no copies per head) and shares each K/V head among G query heads; the
// projections are evaluated once each. In a constant evaluation everything runs row by row, so the
// whole module works inside a static_assert.
//
// Shapes of the weights (A x B: the input's features are the rows, as in y = x W):
//   W_Q d_model x H*d_k     W_K d_model x H_kv*d_k     W_V d_model x H_kv*d_v     W_O H*d_v x d_model
//   b_Q H*d_k               b_K H_kv*d_k               b_V H_kv*d_v               b_O d_model
// (PyTorch's nn.Linear stores weight as out x in: transpose when loading, see io/safetensors.hpp.)
//
// Rotary position encoding (mha_options::rope = rope_style::interleaved or half, rope_base): each head's
// projected query and key rows rotated by their position (expr/position.hpp) before the scores: positions
// 0..L-1 in the forward pass, p..p+n-1 in step, p = the cache's offset(b) + length(b) (offset: tokens dropped by
// kv_cache::drop_front, a sliding window). Self-attention only: a call with a memory
// (cross-attention) does not rotate (positions of two different sequences have no relative meaning). rope_base
// is an integer (a class-type template argument with a double member is C++20, but clang 14 does not take it).
//
// Lifetimes: the module's call operator returns a lazy expression, following the ownership rule of
// docs/design.md: it refers to the module's weights (the module must outlive it), to lvalue inputs
// and to the memory of key_lengths(); rvalue inputs are moved into it. forward(...) evaluates at once.
// With weights_storage::viewed the module itself refers to memory the caller owns.
#pragma once

#include <array>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/util/algorithm.hpp"
#include "attnx/attention.hpp"
#include "attnx/eval/assign.hpp"
#include "attnx/eval/direct.hpp"
#include "attnx/eval/evaluator.hpp"
#include "attnx/expr/evaluated.hpp"
#include "attnx/core/expression.hpp"
#include "attnx/expr/heads.hpp"
#include "attnx/expr/position.hpp"
#include "attnx/modules/errors.hpp"
#include "attnx/modules/kv_cache.hpp"
#include "attnx/shape/shape.hpp"
#include "attnx/tensor/tensor.hpp"
#include "attnx/tensor/view.hpp"

namespace attnx {

// ---- the module ---------------------------------------------------------------------------------------
struct mha_options {
  std::size_t d_k = 0;       // width of each query/key head; 0: d_model / heads
  std::size_t d_v = 0;       // width of each value head; 0: d_model / heads
  std::size_t kv_heads = 0;  // key/value heads; 0: heads. Fewer: grouped-query attention; 1: multi-query
  bool bias = true;          // projections with biases (nn.Linear's default; seeds 000, 003) or without (seed 004)
  rope_style rope = rope_style::none;  // rotary position encoding of the query and key heads, and its layout
  std::size_t rope_base = 10000;       // RoPE's base (LLaMA 2: 10000; LLaMA 3: 500000)
  // The attention variants on every call (the caller's masks come on top of them):
  std::size_t softcap = 0;  // > 0: logit soft-capping c tanh(s / c) of every score, before the masks (Gemma 2: 50;
                            // an integer, as rope_base: clang 14 misreads a double member here. Any c: softcap(c))
  std::size_t window = 0;   // > 0: sliding_window(window), the `window` keys up to each query (Mistral); self only
  bool alibi = false;       // ALiBi with the standard slopes for the heads (BLOOM, MPT); self-attention only
  bool sinks = false;       // a learned sink logit per head in every row's softmax (gpt-oss): the parameter `sinks`
};

// owned: the module holds its weights (tensors; a literal type when they are small, so a constexpr
// variable). viewed: the module holds views of memory the caller owns (size-checked at construction).
enum class weights_storage { owned, viewed };

// The slot of a bias in a module without biases (one type per slot, so that [[no_unique_address]] gives
// the four of them no storage at all).
template <char Slot>
struct no_bias {
  friend constexpr bool operator==(no_bias, no_bias) noexcept { return true; }
};

namespace detail {
template <class M>
concept mha_memory_operand = expression<M> && !std::is_same_v<value_t<M>, bool>;

// Whether the first of the extra arguments is a memory (cross-attention) rather than a mask. A bool
// expression is a mask; any other expression is the memory.
template <class... A>
inline constexpr bool first_is_memory = false;
template <class A, class... Rest>
inline constexpr bool first_is_memory<A, Rest...> = mha_memory_operand<A>;

// step(x, cache[, b | rows], masks...[, ctx]): the masks, allowed(m) / blocked(m) (a bool_mask) or additive(m)
// (detail::cache_mask, kv_cache.hpp). The first argument after the cache (or after b or the rows) of a step with
// masks: not a batch item, rows per item or a context, which take the overloads without masks.
template <class A>
concept step_mask_arg = !std::is_integral_v<std::remove_cvref_t<A>> &&
                        !std::is_convertible_v<const A&, std::span<const std::size_t>> && !is_context_arg<A>;
// The extra arguments of a step with masks: the first as above, or a context followed by more (a context not
// last: step's rule on its arguments says so).
template <class A0, class... A>
inline constexpr bool step_masked_args = step_mask_arg<A0> || (is_context_arg<A0> && sizeof...(A) > 0);

// An argument used more than once: an lvalue is referred to each time; an rvalue is copied for all uses
// but the last (which moves it).
template <class X, class Y>
constexpr decltype(auto) reuse(Y& y) {
  if constexpr (std::is_lvalue_reference_v<X>) {
    return (y);
  } else {
    return std::remove_cvref_t<X>(y);
  }
}
}  // namespace detail

// Multi-head attention with its weights (W_Q, W_K, W_V, W_O, optional biases): self- and cross-attention, GQA,
// RoPE, masks, KV-cache decoding (the header's comment); Storage: weights owned, or views of the caller's.
template <class T, std::size_t DModel, std::size_t Heads, mha_options Opt = mha_options{},
          weights_storage Storage = weights_storage::owned>
class multi_head_attention {
  static_assert(std::is_floating_point_v<T>, "attnx: multi_head_attention: the element type must be floating point");
  static_assert(DModel > 0, "attnx: multi_head_attention: d_model must be positive");
  static_assert(Heads > 0 || error::holds<error::mha_needs_heads<error::heads<Heads>>>,
                "attnx: multi_head_attention: the number of heads must be positive");
  static constexpr std::size_t h_ = Heads > 0 ? Heads : 1;
  static constexpr bool d_model_ok = (Opt.d_k != 0 && Opt.d_v != 0) || DModel % h_ == 0;
  static_assert(d_model_ok ||
                    error::holds<error::mha_d_model_not_divisible_by_heads<error::d_model<DModel>, error::heads<Heads>>>,
                "attnx: multi_head_attention: d_model must be divisible by the number of heads when d_k or d_v is "
                "left to its default, d_model / heads");
  static constexpr std::size_t hkv_ = Opt.kv_heads == 0 ? h_ : Opt.kv_heads;
  static constexpr bool kv_ok = h_ % hkv_ == 0;
  static_assert(kv_ok || error::holds<error::mha_heads_not_divisible_by_kv_heads<error::heads<Heads>, error::kv_heads<hkv_>>>,
                "attnx: multi_head_attention: the number of heads must be a multiple of kv_heads (each key/value head "
                "serves heads / kv_heads query heads)");

 public:
  using value_type = T;
  static constexpr mha_options options = Opt;
  static constexpr weights_storage storage = Storage;
  static constexpr std::size_t d_model = DModel;
  static constexpr std::size_t heads = h_;
  // (Well-formed values even when a rule above failed, so that only that rule is reported.)
  static constexpr std::size_t d_k = Opt.d_k != 0 ? Opt.d_k : alg::max<std::size_t>(1, DModel / h_);
  static constexpr std::size_t d_v = Opt.d_v != 0 ? Opt.d_v : alg::max<std::size_t>(1, DModel / h_);
  static constexpr std::size_t kv_heads = kv_ok ? hkv_ : h_;
  static constexpr std::size_t group = heads / kv_heads;  // query heads per key/value head
  static constexpr bool has_bias = Opt.bias;
  // RoPE rotates pairs of features: d_k must be even (checked here, so that step is covered as well as forward).
  static constexpr bool rope_ok = Opt.rope == rope_style::none || d_k % 2 == 0;
  static_assert(!(Heads > 0 && d_model_ok && kv_ok) || rope_ok ||
                    error::holds<error::rotary_features_must_be_even<error::features<d_k>>>,
                "attnx: multi_head_attention: RoPE rotates pairs of features: d_k must be even");
  static constexpr bool well_formed = Heads > 0 && d_model_ok && kv_ok && rope_ok;

  using w_q_shape = shape<axis<names::d_model, d_model>, axis<anon, heads * d_k>>;
  using w_k_shape = shape<axis<names::d_model, d_model>, axis<anon, kv_heads * d_k>>;
  using w_v_shape = shape<axis<names::d_model, d_model>, axis<anon, kv_heads * d_v>>;
  using w_o_shape = shape<axis<anon, heads * d_v>, axis<names::d_model, d_model>>;
  using b_q_shape = shape<axis<anon, heads * d_k>>;
  using b_k_shape = shape<axis<anon, kv_heads * d_k>>;
  using b_v_shape = shape<axis<anon, kv_heads * d_v>>;
  using b_o_shape = shape<axis<names::d_model, d_model>>;

  template <class S>
  using param_t = std::conditional_t<Storage == weights_storage::owned, basic_tensor<T, S>, basic_view<const T, S>>;
  template <class S, char Slot>
  using bias_t = std::conditional_t<has_bias, param_t<S>, no_bias<Slot>>;
  using w_q_type = param_t<w_q_shape>;
  using w_k_type = param_t<w_k_shape>;
  using w_v_type = param_t<w_v_shape>;
  using w_o_type = param_t<w_o_shape>;
  using b_q_type = bias_t<b_q_shape, 'q'>;
  using b_k_type = bias_t<b_k_shape, 'k'>;
  using b_v_type = bias_t<b_v_shape, 'v'>;
  using b_o_type = bias_t<b_o_shape, 'o'>;

  static constexpr std::size_t parameter_count =
      w_q_shape::size + w_k_shape::size + w_v_shape::size + w_o_shape::size +
      (has_bias ? b_q_shape::size + b_k_shape::size + b_v_shape::size + b_o_shape::size : 0);

  // The weights, in memory the caller owns: one flat row-major span per parameter (the biases stay
  // empty in a module without biases). Each size is checked; a wrong one throws std::length_error
  // naming the parameter, its shape and both counts.
  struct flat_weights {
    std::span<const T> w_q, w_k, w_v, w_o, b_q = {}, b_k = {}, b_v = {}, b_o = {};
  };

  w_q_type w_q;
  w_k_type w_k;
  w_v_type w_v;
  w_o_type w_o;
  [[no_unique_address]] b_q_type b_q;
  [[no_unique_address]] b_k_type b_k;
  [[no_unique_address]] b_v_type b_v;
  [[no_unique_address]] b_o_type b_o;
  // With mha_options::sinks: one logit per head (owned in either storage; zero until set or loaded), else no storage.
  using sinks_shape = shape<axis<anon, heads>>;
  using sinks_type = std::conditional_t<Opt.sinks, basic_tensor<T, sinks_shape>, no_bias<'s'>>;
  [[no_unique_address]] sinks_type sinks{};

  // Zero weights (owned storage only): fill them in afterwards (w_q(i, j) = ..., or a loader).
  constexpr multi_head_attention()
    requires(Storage == weights_storage::owned)
      : w_q(), w_k(), w_v(), w_o(), b_q(), b_k(), b_v(), b_o() {}

  // From attnx tensors, views or expressions of the weights' shapes (checked at compile time by the
  // assignment rule). Owned storage copies (or moves) them; viewed storage refers to tensors and views
  // already in memory (lvalues: they must outlive the module).
  template <class WQ, class WK, class WV, class WO>
    requires(!has_bias)
  constexpr multi_head_attention(WQ&& wq, WK&& wk, WV&& wv, WO&& wo)
      : w_q(param<w_q_shape>(std::forward<WQ>(wq))),
        w_k(param<w_k_shape>(std::forward<WK>(wk))),
        w_v(param<w_v_shape>(std::forward<WV>(wv))),
        w_o(param<w_o_shape>(std::forward<WO>(wo))) {}

  template <class WQ, class WK, class WV, class WO, class BQ, class BK, class BV, class BO>
    requires(has_bias)
  constexpr multi_head_attention(WQ&& wq, WK&& wk, WV&& wv, WO&& wo, BQ&& bq, BK&& bk, BV&& bv, BO&& bo)
      : w_q(param<w_q_shape>(std::forward<WQ>(wq))),
        w_k(param<w_k_shape>(std::forward<WK>(wk))),
        w_v(param<w_v_shape>(std::forward<WV>(wv))),
        w_o(param<w_o_shape>(std::forward<WO>(wo))),
        b_q(param<b_q_shape>(std::forward<BQ>(bq))),
        b_k(param<b_k_shape>(std::forward<BK>(bk))),
        b_v(param<b_v_shape>(std::forward<BV>(bv))),
        b_o(param<b_o_shape>(std::forward<BO>(bo))) {}

  // From flat memory (std::vector, std::array, C arrays, memory-mapped files, ...): owned storage
  // copies, viewed storage refers to it.
  static constexpr multi_head_attention from_memory(const flat_weights& f) { return multi_head_attention(f, 0); }

  // ---- the forward pass: a lazy expression -------------------------------------------------------
  // Self-attention: x is (L, d_model) or (B, L, d_model); the result has x's shape.
  template <expression X, class... Masks>
    requires(!detail::first_is_memory<Masks...>)
  constexpr auto operator()(X&& x, Masks&&... masks) const {
    using SX = shape_of_t<X>;
    check_input<failed_v<X>>(x);
    if constexpr (failed_v<X> || !inputs_ok<SX, SX>()) {
      return placeholder<output_placeholder<SX>>();
    } else if constexpr (SX::rank == 3) {
      return attend<true>(detail::reuse<X>(x), detail::reuse<X>(x), std::forward<X>(x), std::forward<Masks>(masks)...);
    } else {
      // The copies of an rvalue x are made before x is moved into the third operand (in one call's
      // arguments the order would be unspecified: a copy of a moved-from tensor).
      auto xq = add_unit_batch(detail::reuse<X>(x));
      auto xk = add_unit_batch(detail::reuse<X>(x));
      return drop_unit_batch(attend<true>(std::move(xq), std::move(xk), add_unit_batch(std::forward<X>(x)), std::forward<Masks>(masks)...));
    }
  }

  // Cross-attention: queries from x (L_q, d_model) / (B, L_q, d_model), keys and values from the
  // memory (L_k, d_model) / (B, L_k, d_model); the result has x's shape. (The memory is any expression
  // whose elements are not bool: a bool expression in that place is a mask.)
  template <expression X, detail::mha_memory_operand M, class... Masks>
  constexpr auto operator()(X&& x, M&& memory, Masks&&... masks) const {
    using SX = shape_of_t<X>;
    using SM = shape_of_t<M>;
    check_input<any_failed_v<X, M>>(x);
    check_memory<any_failed_v<X, M>>(x, memory);
    if constexpr (any_failed_v<X, M> || !inputs_ok<SX, SM>()) {
      return placeholder<output_placeholder<SX>>();
    } else if constexpr (SX::rank == 3) {
      return attend<false>(std::forward<X>(x), detail::reuse<M>(memory), std::forward<M>(memory), std::forward<Masks>(masks)...);
    } else {
      auto xk = add_unit_batch(detail::reuse<M>(memory));  // before the memory is moved (as above)
      return drop_unit_batch(attend<false>(add_unit_batch(std::forward<X>(x)), std::move(xk), add_unit_batch(std::forward<M>(memory)),
                                    std::forward<Masks>(masks)...));
    }
  }

  // The same, evaluated: an owning tensor of x's shape; with a context first, computed with that context
  // (threads, instruction set), e.g. so that two models in one program run with different settings.
  template <class X, class... Args>
    requires(!std::is_same_v<std::remove_cvref_t<X>, context>)
  constexpr auto forward(X&& x, Args&&... args) const {
    return evaluate((*this)(std::forward<X>(x), std::forward<Args>(args)...));
  }
  template <class... Args>
  auto forward(const context& ctx, Args&&... args) const {
    return evaluate((*this)(std::forward<Args>(args)...), ctx);
  }

  // ---- attention weights, for inspection ----------------------------------------------------------
  // softmax(mask(Q_h K_h^T / sqrt(d_k))) for every head: (B, H, L_q, L_k), or (H, L_q, L_k) for an
  // unbatched input. A lazy expression like the forward pass; the forward pass itself never stores
  // these (the fused kernel keeps one tile of scores at a time).
  template <expression X, class... Masks>
    requires(!detail::first_is_memory<Masks...>)
  constexpr auto weights(X&& x, Masks&&... masks) const {
    using SX = shape_of_t<X>;
    check_input<failed_v<X>>(x);
    if constexpr (failed_v<X> || !inputs_ok<SX, SX>()) {
      return placeholder<shape<axis<anon, heads>, axis<anon, 1>, axis<anon, 1>>>();
    } else if constexpr (SX::rank == 3) {
      return scores_of<true>(detail::reuse<X>(x), std::forward<X>(x), std::forward<Masks>(masks)...);
    } else {
      auto xq = add_unit_batch(detail::reuse<X>(x));  // before x is moved (as in operator())
      return drop_unit_batch(scores_of<true>(std::move(xq), add_unit_batch(std::forward<X>(x)), std::forward<Masks>(masks)...));
    }
  }
  template <expression X, detail::mha_memory_operand M, class... Masks>
  constexpr auto weights(X&& x, M&& memory, Masks&&... masks) const {
    using SX = shape_of_t<X>;
    using SM = shape_of_t<M>;
    check_input<any_failed_v<X, M>>(x);
    check_memory<any_failed_v<X, M>>(x, memory);
    if constexpr (any_failed_v<X, M> || !inputs_ok<SX, SM>()) {
      return placeholder<shape<axis<anon, heads>, axis<anon, 1>, axis<anon, 1>>>();
    } else if constexpr (SX::rank == 3) {
      return scores_of<false>(std::forward<X>(x), std::forward<M>(memory), std::forward<Masks>(masks)...);
    } else {
      return drop_unit_batch(
          scores_of<false>(add_unit_batch(std::forward<X>(x)), add_unit_batch(std::forward<M>(memory)), std::forward<Masks>(masks)...));
    }
  }

  // ---- incremental decoding: a KV cache (modules/kv_cache.hpp) ------------------------------------
  // x (B, n, d_model), B = the cache's batch: projects the n new tokens of every item, appends their keys
  // and values to the cache, and attends over each item's whole cache, causally (the new tokens are each
  // item's last n: bottom-right aligned within that item's own length, so items may differ in length).
  // n = 1 decodes one token; n > 1 is a (chunked) prefill. Returns (B, n, d_model), evaluated. Stepping
  // token by token gives the rows of the full causal forward pass. Nothing is appended when a rule fails
  // (a full cache throws std::length_error).
  template <expression X, class Cache>
    requires is_kv_cache_v<Cache>
  auto step(const X& x, Cache& cache, const context& ctx = current_context()) const {
    constexpr bool step_rank_ok = shape_of_t<X>::rank == 3;
    static_assert(step_rank_ok, "attnx: multi_head_attention::step: x must be (B, n, d_model) (or (n, d_model) with a batch item)");
    if constexpr (step_rank_ok) {
      return step_impl(x, cache, std::size_t{0}, ctx);
    } else {
      return basic_tensor<T, output_placeholder<shape_of_t<X>>>{};  // (a tensor, as step returns: no follow-on error)
    }
  }
  // x (n, d_model): the n new tokens of batch item b only. Returns (n, d_model).
  template <expression X, class Cache>
    requires is_kv_cache_v<Cache>
  auto step(const X& x, Cache& cache, std::size_t b, const context& ctx = current_context()) const {
    constexpr bool step_rank_ok = shape_of_t<X>::rank == 2;
    static_assert(step_rank_ok, "attnx: multi_head_attention::step: with a batch item, x must be (n, d_model)");
    if constexpr (step_rank_ok) {
      return step_impl(x, cache, b, ctx);
    } else {
      return basic_tensor<T, output_placeholder<shape_of_t<X>>>{};  // (a tensor, as step returns: no follow-on error)
    }
  }

  // x (N, d_model): rows[b] new tokens of item b, the items' rows one after another (N their sum; an item may
  // have none): items prefilling and items decoding in one call (continuous batching), one projection for all
  // the rows, each item attending causally over its own cache. Returns (N, d_model). Nothing is appended when
  // a rule fails.
  template <expression X, class Cache>
    requires is_kv_cache_v<Cache>
  auto step(const X& x, Cache& cache, std::span<const std::size_t> rows, const context& ctx = current_context()) const {
    using SX = shape_of_t<X>;
    constexpr bool step_rank_ok = SX::rank == 2;
    static_assert(step_rank_ok, "attnx: multi_head_attention::step: with rows per item, x must be (N, d_model)");
    if constexpr (step_rank_ok) {
      return step_impl(x, cache, rows, ctx);
    } else {
      return basic_tensor<T, output_placeholder<SX>>{};  // (a tensor, as step returns: no follow-on error)
    }
  }

  // With masks: step(x, cache, masks...[, ctx]), step(x, cache, b, masks...[, ctx]), step(x, cache, rows,
  // masks...[, ctx]). Each mask is allowed(m), blocked(m) or additive(m) (as in the forward pass) over the step's
  // scores: (B, heads, n, keys) for x (B, n, d_model); (heads, n, keys) for item b's x (n, d_model); (heads, N, keys)
  // with rows per item (the items' rows one after another). Right-aligned; an axis whose extent is 1 in the mask's
  // type broadcasts, any other must equal the scores' extent but the key axis, which indexes each item's cache
  // positions 0, 1, ... and must cover every key an item holds after the append (a mask as wide as the capacity
  // fits every step). The masks apply after the scale 1/sqrt(d_k), in order, then the cache's causal order: a
  // blocked key or a bias of -inf gets weight 0, and a row left with no key gives 0 (as the forward pass). ALiBi and
  // other relative biases, padding inside the cache, sliding windows, tree masks of speculative decoding. At most
  // six masks. Nothing is appended when a rule fails.
  template <expression X, class Cache, class A0, class... A>
    requires is_kv_cache_v<Cache> && detail::step_masked_args<A0, A...>
  auto step(const X& x, Cache& cache, const A0& a0, const A&... a) const {
    constexpr bool step_rank_ok = shape_of_t<X>::rank == 3;
    static_assert(step_rank_ok, "attnx: multi_head_attention::step: x must be (B, n, d_model) (or (n, d_model) with a batch item)");
    if constexpr (step_rank_ok) {
      return step_masked<true>(x, cache, std::size_t{0}, a0, a...);
    } else {
      return basic_tensor<T, output_placeholder<shape_of_t<X>>>{};
    }
  }
  template <expression X, class Cache, class A0, class... A>
    requires is_kv_cache_v<Cache> && detail::step_masked_args<A0, A...>
  auto step(const X& x, Cache& cache, std::size_t b, const A0& a0, const A&... a) const {
    constexpr bool step_rank_ok = shape_of_t<X>::rank == 2;
    static_assert(step_rank_ok, "attnx: multi_head_attention::step: with a batch item, x must be (n, d_model)");
    if constexpr (step_rank_ok) {
      return step_masked<false>(x, cache, b, a0, a...);
    } else {
      return basic_tensor<T, output_placeholder<shape_of_t<X>>>{};
    }
  }
  template <expression X, class Cache, class A0, class... A>
    requires is_kv_cache_v<Cache> && detail::step_masked_args<A0, A...>
  auto step(const X& x, Cache& cache, std::span<const std::size_t> rows, const A0& a0, const A&... a) const {
    constexpr bool step_rank_ok = shape_of_t<X>::rank == 2;
    static_assert(step_rank_ok, "attnx: multi_head_attention::step: with rows per item, x must be (N, d_model)");
    if constexpr (step_rank_ok) {
      return step_masked<false>(x, cache, rows, a0, a...);
    } else {
      return basic_tensor<T, output_placeholder<shape_of_t<X>>>{};
    }
  }

  // ---- cross-attention over a memory projected once (a decoder reading an encoder's output) ------------
  // project_memory(memory, cache): memory (B, L_m, d_model), B = the cache's batch: projects the memory's keys
  // and values (W_K, W_V and their biases; never rotated) and appends them to the cache, once per memory rather
  // than at every decoding step. project_memory(memory, cache, b): memory (L_m, d_model), item b only, so items
  // may hold memories of different lengths (no padding to mask). Reset the cache before a new memory.
  // attend_memory(x, cache): x (B, n, d_model): projects the queries and attends each row over every key its
  // item holds (no causal order); returns (B, n, d_model), evaluated: mha(x, memory) with each item's memory
  // (key_lengths where items differ). attend_memory(x, cache, b): x (n, d_model) against item b's memory.
  template <expression M, class Cache>
    requires is_kv_cache_v<Cache>
  void project_memory(const M& memory, Cache& cache, const context& ctx = current_context()) const {
    constexpr bool memory_rank_ok = shape_of_t<M>::rank == 3;
    static_assert(memory_rank_ok, "attnx: multi_head_attention::project_memory: the memory must be (B, L_m, d_model) (or (L_m, d_model) with a batch item)");
    if constexpr (memory_cache_ok<M, Cache, !memory_rank_ok>()) memory_run(memory, cache, 0, ctx);
  }
  template <expression M, class Cache>
    requires is_kv_cache_v<Cache>
  void project_memory(const M& memory, Cache& cache, std::size_t b, const context& ctx = current_context()) const {
    constexpr bool memory_rank_ok = shape_of_t<M>::rank == 2;
    static_assert(memory_rank_ok, "attnx: multi_head_attention::project_memory: with a batch item, the memory must be (L_m, d_model)");
    if constexpr (memory_cache_ok<M, Cache, !memory_rank_ok>()) memory_run(memory, cache, b, ctx);
  }
  template <expression X, class Cache>
    requires is_kv_cache_v<Cache>
  auto attend_memory(const X& x, const Cache& cache, const context& ctx = current_context()) const {
    constexpr bool input_rank_ok = shape_of_t<X>::rank == 3;
    static_assert(input_rank_ok, "attnx: multi_head_attention::attend_memory: x must be (B, n, d_model) (or (n, d_model) with a batch item)");
    if constexpr (memory_cache_ok<X, Cache, !input_rank_ok>()) return attend_memory_run(x, cache, 0, ctx);
    else return basic_tensor<T, output_placeholder<shape_of_t<X>>>{};
  }
  template <expression X, class Cache>
    requires is_kv_cache_v<Cache>
  auto attend_memory(const X& x, const Cache& cache, std::size_t b, const context& ctx = current_context()) const {
    constexpr bool input_rank_ok = shape_of_t<X>::rank == 2;
    static_assert(input_rank_ok, "attnx: multi_head_attention::attend_memory: with a batch item, x must be (n, d_model)");
    if constexpr (memory_cache_ok<X, Cache, !input_rank_ok>()) return attend_memory_run(x, cache, b, ctx);
    else return basic_tensor<T, output_placeholder<shape_of_t<X>>>{};
  }
  // attend_memory(x, cache, rows): x (N, d_model), rows[b] rows of item b, the items' rows one after another (as
  // step with rows per item: a decoder stepping items that prefill and items that decode in one call), each item's
  // rows over its own memory. Returns (N, d_model).
  template <expression X, class Cache>
    requires is_kv_cache_v<Cache>
  auto attend_memory(const X& x, const Cache& cache, std::span<const std::size_t> rows,
                     const context& ctx = current_context()) const {
    constexpr bool input_rank_ok = shape_of_t<X>::rank == 2;
    static_assert(input_rank_ok, "attnx: multi_head_attention::attend_memory: with rows per item, x must be (N, d_model)");
    if constexpr (memory_cache_ok<X, Cache, !input_rank_ok>()) {
      check_memory_input(x, cache, rows);
      const basic_tensor<T, shape_of_t<X>> dense_x = x;
      const std::size_t N = dims_of(x)[0];
      const tensor<T, dyn, heads * d_k> q = evaluate(project(rows_view(dense_x.data(), N), w_q, b_q), ctx);
      return attend_over_memory<shape_of_t<X>>(q, cache, 0, rows, dims_of(x), ctx);
    } else {
      return basic_tensor<T, output_placeholder<shape_of_t<X>>>{};
    }
  }
  // attend_memory's run-time rules for x against the cache (features; the cache's batch, or item b within it),
  // before anything runs: public so that a caller with work to do first (the block's step appends to its
  // self-attention cache) can check them before. Returns the item count and the rows per item.
  template <class X, class Cache>
  static std::pair<std::size_t, std::size_t> check_memory_input(const X& x, const Cache& cache, std::size_t b = 0) {
    return check_cache_input(x, cache, b, "multi_head_attention::attend_memory: x's batch extent must be the cache's");
  }
  // With rows per item (x (N, d_model)): one count per item of the cache, N their sum.
  template <class X, class Cache>
  static void check_memory_input(const X& x, const Cache& cache, std::span<const std::size_t> rows) {
    check_rows_input(x, cache, rows, "multi_head_attention::attend_memory");
  }

  // Query or key heads (.., L, d_k) as this module's attention reads them: rotated by position with its RoPE when
  // Rotate (self-attention), else as they are (training keeps them rotated: train/gpt2.hpp).
  template <bool Rotate, class E>
  static constexpr auto rotate(E&& e) {
    if constexpr (!Rotate || Opt.rope == rope_style::none) {
      return std::forward<E>(e);
    } else {
      return rotary(std::forward<E>(e), Opt.rope, 0, static_cast<double>(Opt.rope_base));
    }
  }

 private:
  // The run-time rules of x (B, n, d_model) or (n, d_model) against a cache (features; the cache's batch, or item b
  // within it), before anything runs; returns the item count and the rows per item.
  template <class X, class Cache>
  static std::pair<std::size_t, std::size_t> check_cache_input(const X& x, const Cache& cache, std::size_t b,
                                                               const char* batch_rule, bool memory = false) {
    constexpr bool all = shape_of_t<X>::rank == 3;  // the whole batch; else item b
    check_features(x, memory ? "memory" : "input", memory ? "memory_features" : "input_features");
    const auto d = dims_of(x);
    const std::size_t nb = all ? d[0] : 1, n = d[shape_of_t<X>::rank - 2];
    if (all && nb != cache.batch())
      detail::throw_extent_error(batch_rule, memory ? "memory_batch" : "input_batch", nb, "cache_batch", cache.batch());
    if (!all && b >= cache.batch())
      ATTNX_THROW(std::out_of_range("attnx: multi_head_attention: batch item " + std::to_string(b) + " of a cache of " +
                              std::to_string(cache.batch())));
    return {nb, n};
  }
  // Whether a KV cache holds this module's keys and values (T, kv_heads, d_k, d_v).
  template <class Cache>
  static constexpr bool cache_fits = std::is_same_v<typename Cache::value_type, T> && Cache::kv_heads == kv_heads &&
                                     Cache::d_k == d_k && Cache::d_v == d_v;
  // The rules of project_memory and attend_memory after their rank rule (Quiet when it failed): the cache's types
  // (one instance per cache type: one error however many calls), the input's features.
  template <class Cache>
  static constexpr bool memory_cache_types_ok() {
    static_assert(cache_fits<Cache>, "attnx: multi_head_attention::project_memory / attend_memory: the cache must have the module's T, kv_heads, d_k and d_v");
    return cache_fits<Cache>;
  }
  template <class X, class Cache, bool Quiet>
  static constexpr bool memory_cache_ok() {
    if constexpr (Quiet) {
      return false;
    } else {
      constexpr bool cache_ok = memory_cache_types_ok<Cache>();
      static_assert(!cache_ok || features_ok<shape_of_t<X>>,
                    "attnx: multi_head_attention::project_memory / attend_memory: the input's feature extent (its last axis) must equal d_model");
      return cache_ok && features_ok<shape_of_t<X>> && well_formed;
    }
  }
  template <class M, class Cache>
  void memory_run(const M& memory, Cache& cache, std::size_t b0, const context& ctx) const {
    const auto [nb, n] = check_cache_input(memory, cache, b0, "multi_head_attention::project_memory: the memory's batch extent must be the cache's", true);
    for (std::size_t b = 0; b < nb; ++b) cache.check_room(b0 + b, n);  // before anything is appended
    const basic_tensor<T, shape_of_t<M>> dense = memory;
    const rows_view rows(dense.data(), nb * n);
    append_kv(cache, b0, nb, n, evaluate(project(rows, w_k, b_k), ctx), evaluate(project(rows, w_v, b_v), ctx));
  }
  template <class X, class Cache>
  auto attend_memory_run(const X& x, const Cache& cache, std::size_t b0, const context& ctx) const {
    const auto [nb, n] = check_memory_input(x, cache, b0);
    const basic_tensor<T, shape_of_t<X>> dense_x = x;
    const tensor<T, dyn, heads * d_k> q = evaluate(project(rows_view(dense_x.data(), nb * n), w_q, b_q), ctx);
    attnx::storage<std::size_t, dyn> counts(nb);
    alg::fill_n(counts.data(), nb, n);
    return attend_over_memory<shape_of_t<X>>(q, cache, b0, {counts.data(), nb}, dims_of(x), ctx);
  }
  // The run-time rules of x (N, d_model) with rows per item against a cache (fn: the function, for the messages):
  // its features, one count per item of the cache, N their sum.
  template <class X, class Cache>
  static void check_rows_input(const X& x, const Cache& cache, std::span<const std::size_t> rows, const char* fn) {
    check_features(x, "input", "input_features");
    const std::size_t N = dims_of(x)[0];
    if (rows.size() != cache.batch())
      detail::throw_extent_error(std::string(fn) + ": one row count per batch item of the cache", "row_counts",
                                 rows.size(), "cache_batch", cache.batch());
    std::size_t total = 0;
    for (const std::size_t r : rows)  // (saturating: counts that wrap the sum are no sum of N)
      total = r > std::numeric_limits<std::size_t>::max() - total ? std::numeric_limits<std::size_t>::max() : total + r;
    if (total != N)
      detail::throw_extent_error(std::string(fn) + ": x must hold the items' rows, one item after another",
                                 "input_rows", N, "rows_per_item_sum", total);
  }
  // Attention of the rows of q (N, heads d_k) into merged (N, heads d_v): counts[b] rows of item b0 + b, one item
  // after another, over that item's cache, causal within its length (causal_order) or over every key it holds; a run of
  // items with one count in one kernel call. masks: as in step_rows (their strides set).
  template <class Q, class Cache>
  void attend_rows(const Q& q, tensor<T, dyn, heads * d_v>& merged, const Cache& cache, std::size_t b0,
                   std::span<const std::size_t> counts, const context& ctx, bool causal_order,
                   std::span<const detail::cache_mask<T>> masks = {}, bool masks_by_item = false) const {
    const auto sz = [](std::size_t e) { return static_cast<std::ptrdiff_t>(e); };
    std::array<kernels::score_step<T>, kernels::max_score_steps> steps{};
    for (std::size_t b = 0, at = 0; b < counts.size();) {
      const std::size_t n = counts[b];
      std::size_t e = b + 1;
      while (e < counts.size() && counts[e] == n) ++e;
      if (n > 0) {  // items b .. e - 1: contiguous rows
        const kernels::strided<const T> qs{q.data() + at * heads * d_k, sz(n * heads * d_k), sz(d_k), sz(heads * d_k)};
        const kernels::strided<T> os{merged.data() + at * heads * d_v, sz(n * heads * d_v), sz(d_v), sz(heads * d_v)};
        const std::size_t n_steps = detail::cache_mask_steps<T>(  // the masks over these items' (b, h, i, j)
            masks,
            [&](const detail::cache_mask<T>& m) { return masks_by_item ? sz(b) * m.stride[0] : sz(at) * m.stride[2]; },
            [&](const detail::cache_mask<T>& m) { return masks_by_item ? m.stride[0] : sz(n) * m.stride[2]; }, steps);
        detail::attend_cache<T>(cache, b0 + b, e - b, heads, n, qs, os, T(1) / math::sqrt(T(d_k)), ctx, causal_order, {}, false,
                                std::span<const kernels::score_step<T>>(steps.data(), n_steps), detail::cache_sinks<T>(masks));
      }
      at += (e - b) * n;
      b = e;
    }
  }
  // The heads' merged outputs (N, heads d_v) through W_O (and b_O) into out (N rows of d_model).
  void project_out(const tensor<T, dyn, heads * d_v>& merged, T* out, const context& ctx) const {
    assign(basic_view<T, shape<axis<anon, dyn>, axis<names::d_model, d_model>>>(out, merged.dims()[0]),
           project(merged, w_o, b_o), ctx);
  }
  // The rows of x (B, n, d_model) or (n, d_model) as a (B n, d_model) matrix.
  using rows_view = basic_view<const T, shape<axis<anon, dyn>, axis<names::d_model, d_model>>>;
  // Items [b0, b0 + nb) each append their n rows of k (nb n, kv_heads d_k) and v (nb n, kv_heads d_v).
  template <class Cache, class K, class V>
  static void append_kv(Cache& cache, std::size_t b0, std::size_t nb, std::size_t n, const K& k, const V& v) {
    for (std::size_t b = 0; b < nb; ++b)
      cache.append(b0 + b, k.data() + b * n * kv_heads * d_k, v.data() + b * n * kv_heads * d_v, n);
  }
  // The query rows q (N, heads d_k), counts[b] of item b0 + b one item after another, each over every key its item
  // holds (a memory: no causal order; the options' softcap and sinks), then W_O: x's shape SX with dims d.
  template <class SX, class Q, class Cache>
  auto attend_over_memory(const Q& q, const Cache& cache, std::size_t b0, std::span<const std::size_t> counts,
                          const dims_t<SX::rank>& d, const context& ctx) const {
    tensor<T, dyn, heads * d_v> merged(q.dims()[0]);
    with_option_cache_masks<false>([&](std::span<detail::cache_mask<T>> ms) {
      attend_rows(q, merged, cache, b0, counts, ctx, /*causal=*/false, ms);
    });
    basic_tensor<T, output_placeholder<SX>> out(d, uninitialized);
    project_out(merged, out.data(), ctx);
    return out;
  }
  // Where is item b0 (x (B, n, d_model) from b0 = 0, or (n, d_model) for item b0) or the rows per item.
  template <class X, class Cache, class Where>
  auto step_impl(const X& x, Cache& cache, Where where, const context& ctx) const {
    if constexpr (!step_rules<X, Cache>()) {
      return basic_tensor<T, output_placeholder<shape_of_t<X>>>{};
    } else {  // (the options' masks, none without options)
      return with_option_cache_masks<true>(
          [&](std::span<detail::cache_mask<T>> ms) { return step_run(x, cache, where, ctx, ms, false); });
    }
  }
  // f(masks) with the caller's masks ks... and the options' (with_options; Self: over the cache's own tokens, else
  // over a memory) digested for the cache.
  template <bool Self, class F, class... K>
  decltype(auto) with_option_cache_masks(const F& f, const K&... ks) const {
    return std::apply([&](const auto&... m) -> decltype(auto) { return detail::with_cache_masks<T>(f, m...); },
                      with_options<Self, true>(ks...));
  }
  // step's rules on x and the cache (after x's rank rule).
  template <class X, class Cache>
  static constexpr bool step_rules() {
    using SX = shape_of_t<X>;
    static_assert(cache_fits<Cache>, "attnx: multi_head_attention::step: the cache must have the module's T, kv_heads, d_k and d_v");
    static_assert(!cache_fits<Cache> || features_ok<SX>,
                  "attnx: multi_head_attention::step: x's feature extent (its last axis) must equal d_model");
    constexpr bool type_ok = std::is_same_v<value_t<X>, T>;
    static_assert(!cache_fits<Cache> || !features_ok<SX> || type_ok,
                  "attnx: multi_head_attention::step: x must have the module's element type T (convert it: cast<T>(x))");
    return cache_fits<Cache> && features_ok<SX> && type_ok && well_formed;
  }
  // The scores of a step with masks, as a shape: (B, heads, n, keys) with ByItem (x (B, n, d_model)), else
  // (heads, n, keys) (x (n, d_model): one item, or the rows of all the items); keys dyn (checked at run time).
  template <bool ByItem, class SX>
  using step_scores_shape = std::conditional_t<
      ByItem, shape<axis<anon, SX::extents[0]>, axis<anon, heads>, axis<anon, SX::extents[SX::rank - 2]>, axis<anon, dyn>>,
      shape<axis<anon, heads>, axis<anon, SX::extents[0]>, axis<anon, dyn>>>;
  // The rules on step's extra arguments, one error for the first that fails: masks (allowed / blocked / additive)
  // then at most a context, last; at most six masks; an additive mask of type T; each mask's static extents
  // against the scores' (the forward pass's mask rule).
  template <bool ByItem, class SX, class... A>
  static constexpr bool step_mask_rules() {
    constexpr std::size_t n = sizeof...(A);
    constexpr std::size_t bad_arg = [] {
      std::size_t i = 0, bad = n;
      ((bad == n && !(detail::is_cache_mask<A> || (i == n - 1 && detail::is_context_arg<A>)) ? (bad = i, 0) : 0, ++i), ...);
      return bad;
    }();
    using bad_t = std::tuple_element_t<bad_arg < n ? bad_arg : 0, std::tuple<A...>>;
    static_assert(bad_arg == n || error::holds<error::step_argument_is_not_a_mask<error::argument_position<bad_arg + 1>,
                                                                                 error::argument_type<bad_t>>>,
                  "attnx: multi_head_attention::step: a mask must be allowed(m), blocked(m) or additive(m), a named mask "
                  "(sliding_window, chunked, prefix_lm), alibi, softcap or sinks (the cache gives the causal order and each item's "
                  "length), and a context comes last");
    constexpr std::size_t masks = (std::size_t{detail::is_cache_mask<A>} + ... + 0);
    constexpr std::size_t max_masks = kernels::max_score_steps - 2;  // (the scale, and the cache's causal order)
    static_assert(bad_arg < n || masks <= max_masks || error::holds<error::step_too_many_masks<error::mask_count<masks>>>,
                  "attnx: multi_head_attention::step: at most six masks");
    if constexpr (bad_arg < n || masks > max_masks) {
      return false;
    } else {
      return detail::cache_masks_ok<detail::mask_caller::step, T, step_scores_shape<ByItem, SX>, A...>();
    }
  }
  // step with masks: Where is item b0 (x (B, n, d_model) from b0 = 0 with ByItem, or (n, d_model) for item b0) or
  // the rows per item; a: the masks, then perhaps a context.
  template <bool ByItem, class X, class Cache, class Where, class... A>
  auto step_masked(const X& x, Cache& cache, Where where, const A&... a) const {
    using SX = shape_of_t<X>;
    if constexpr (!step_rules<X, Cache>()) {
      return basic_tensor<T, output_placeholder<SX>>{};
    } else if constexpr (!step_mask_rules<ByItem, SX, A...>()) {
      return basic_tensor<T, output_placeholder<SX>>{};
    } else {
      constexpr bool has_ctx = detail::is_context_arg<std::tuple_element_t<sizeof...(A) - 1, std::tuple<A...>>>;
      const auto args = std::forward_as_tuple(a...);
      const context& ctx = [&]() -> const context& {
        if constexpr (has_ctx) return std::get<sizeof...(A) - 1>(args);
        else return current_context();
      }();
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return with_option_cache_masks<true>(
            [&](std::span<detail::cache_mask<T>> ms) { return step_run(x, cache, where, ctx, ms, ByItem); }, std::get<I>(args)...);
      }(std::make_index_sequence<sizeof...(A) - (has_ctx ? 1 : 0)>{});
    }
  }
  // x (B, n, d_model) from item 0, or (n, d_model) for item b0: n rows per item.
  template <class X, class Cache>
  auto step_run(const X& x, Cache& cache, std::size_t b0, const context& ctx, std::span<detail::cache_mask<T>> masks = {},
                bool masks_by_item = false) const {
    const auto [nb, n] = check_cache_input(x, cache, b0, "multi_head_attention::step: x's batch extent must be the cache's");
    attnx::storage<std::size_t, dyn> counts(nb);
    alg::fill_n(counts.data(), nb, n);
    const basic_tensor<T, shape_of_t<X>> dense_x = x;  // (in place when x is a tensor or view, else evaluated once)
    return step_rows<shape_of_t<X>>(dense_x.data(), dims_of(x), cache, b0, {counts.data(), nb}, ctx, masks, masks_by_item);
  }
  // x (N, d_model): rows[b] rows of item b.
  template <class X, class Cache>
  auto step_run(const X& x, Cache& cache, std::span<const std::size_t> rows, const context& ctx,
                std::span<detail::cache_mask<T>> masks = {}, bool = false) const {
    check_rows_input(x, cache, rows, "multi_head_attention::step");
    const basic_tensor<T, shape_of_t<X>> dense_x = x;
    return step_rows<shape_of_t<X>>(dense_x.data(), dims_of(x), cache, 0, rows, ctx, masks, false);
  }
  // The new rows of items b0, b0 + 1, ...: counts[b] rows of item b0 + b, one item after another at x (d_model
  // features each; dims: the result's, x's). Projects them (one GEMM per weight for all the rows), rotates them
  // (RoPE, at each item's own positions), appends K and V, attends causally over each item's cache (a run of items
  // with one count in one kernel call) and applies W_O. Every rule before the first append; if anything throws
  // after it (an allocation), the items are cut back to their lengths before (detail::undoing_appends). masks: step's masks (digested, their
  // strides set here), over (item, head, row, key) with masks_by_item (x (B, n, d_model)), else over (head, row,
  // key) with the rows of all the items one after another.
  template <class SX, class Cache>
  auto step_rows(const T* x, const dims_t<SX::rank>& dims, Cache& cache, std::size_t b0, std::span<const std::size_t> counts,
                 const context& ctx, std::span<detail::cache_mask<T>> masks = {}, bool masks_by_item = false) const {
    std::size_t N = 0, keys = 0;  // keys: the most any item holds after the append
    for (std::size_t b = 0; b < counts.size(); ++b) {
      cache.check_room(b0 + b, counts[b]);
      N += counts[b];
      keys = alg::max(keys, cache.length(b0 + b) + counts[b]);
    }
    static constexpr detail::cache_mask_texts texts{
        {"a mask's batch axis must be the cache's batch (or 1 in its type)",
         "a mask's heads axis must be the module's heads (or 1 in its type)",
         "a mask's row axis must be the new rows (all the items' rows with rows per item; or 1 in its type)",
         "a mask's key axis must cover every key an item holds after the append (or be 1 in its type)"},
        {"mask_batch", "mask_heads", "mask_rows", "mask_keys"},
        {"cache_batch", "heads", "query_rows", "keys"}};
    detail::resolve_cache_masks(masks, heads);
    for (detail::cache_mask<T>& m : masks)
      if (m.has_data())  // (the named masks, alibi and softcap have none: positions are each item's cache positions)
        detail::cache_mask_strides(m, masks_by_item ? 4 : 3,
                                   {counts.size(), heads, masks_by_item ? (counts.empty() ? 0 : counts[0]) : N, keys},
                                   "multi_head_attention::step", texts);
    const rows_view xr(x, N);
    tensor<T, dyn, heads * d_k> q = evaluate(project(xr, w_q, b_q), ctx);  // (rotated in place with RoPE)
    tensor<T, dyn, kv_heads * d_k> k = evaluate(project(xr, w_k, b_k), ctx);
    const tensor<T, dyn, kv_heads * d_v> v = evaluate(project(xr, w_v, b_v), ctx);
    tensor<T, dyn, heads * d_v> merged(N);
    basic_tensor<T, output_placeholder<SX>> out(dims, uninitialized);
    if constexpr (Opt.rope != rope_style::none)
      for (std::size_t b = 0, at = 0; b < counts.size(); at += counts[b], ++b)
        rotate_rows(q, k, at, cache.offset(b0 + b) + cache.length(b0 + b), counts[b]);
    detail::undoing_appends(cache, [&] {
      for (std::size_t b = 0, at = 0; b < counts.size(); at += counts[b], ++b)
        cache.append(b0 + b, k.data() + at * kv_heads * d_k, v.data() + at * kv_heads * d_v, counts[b]);
      attend_rows(q, merged, cache, b0, counts, ctx, /*causal=*/true, masks, masks_by_item);
      project_out(merged, out.data(), ctx);
    });
    return out;
  }
  // RoPE in step: rows [row0, row0 + n) of q and k, an item's new rows, at positions pos0, pos0 + 1, ... (pos0 the
  // item's offset plus its length before they are appended).
  template <class Q, class K>
  static void rotate_rows(Q& q, K& k, std::size_t row0, std::size_t pos0, std::size_t n) {
    std::array<double, d_k / 2> w{};
    detail::position_frequencies(d_k, static_cast<double>(Opt.rope_base), w.data());
    std::array<T, d_k / 2> c{}, s{};
    for (std::size_t t = 0; t < n; ++t) {
      detail::rope_angles(pos0 + t, d_k / 2, w.data(), c.data(), s.data());
      T* qr = q.data() + (row0 + t) * heads * d_k;
      T* kr = k.data() + (row0 + t) * kv_heads * d_k;
      for (std::size_t h = 0; h < heads; ++h) detail::rope_rotate(qr + h * d_k, d_k, c.data(), s.data(), Opt.rope);
      for (std::size_t h = 0; h < kv_heads; ++h) detail::rope_rotate(kr + h * d_k, d_k, c.data(), s.data(), Opt.rope);
    }
  }

  // ---- compile-time rules on the inputs ----------------------------------------------------------
  template <class S>
  static constexpr bool rank_ok = S::rank == 2 || S::rank == 3;
  // (A dyn extent passes here and is checked at run time: check_input, check_memory.)
  template <class S>
  static constexpr bool features_ok = may_equal_extents(S::cols, d_model);
  template <class SX, class SM>
  static constexpr bool batch_ok = SX::rank != 3 || SM::rank != 3 || may_equal_extents(SM::extents[0], SX::extents[0]);
  // The run-time half of the feature rule, where the feature extent is dyn.
  template <class X>
  static constexpr void check_features(const X& x, const char* what, const char* fact) {
    if constexpr (shape_of_t<X>::cols == dyn) {
      const std::size_t f = dims_cols(dims_of(x));
      if (f != d_model)
        detail::throw_extent_error(std::string("multi_head_attention: the ") + what +
                                       "'s feature extent (its last axis) must equal d_model",
                                   fact, f, "d_model", d_model);
    }
  }
  // The input rules: at compile time, then (when they hold) at run time where an extent is dyn.
  template <bool Quiet, class X>
  static constexpr void check_input(const X& x) {
    using SX = shape_of_t<X>;
    static_assert(Quiet || rank_ok<SX> || error::holds<error::mha_input_needs_rank_2_or_3<error::input_rank<SX::rank>>>,
                  "attnx: multi_head_attention: the input must be (L, d_model) or (B, L, d_model)");
    if constexpr (rank_ok<SX>) {
      static_assert(Quiet || features_ok<SX> ||
                        error::holds<error::mha_input_features_differ_from_d_model<error::input_features<SX::cols>,
                                                                                   error::d_model<d_model>>>,
                    "attnx: multi_head_attention: the input's feature extent (its last axis) must equal d_model");
    }
    if constexpr (!Quiet && inputs_ok<SX, SX>()) check_features(x, "input", "input_features");
  }
  template <bool Quiet, class X, class M>
  static constexpr void check_memory(const X& x, const M& m) {
    using SX = shape_of_t<X>;
    using SM = shape_of_t<M>;
    if constexpr (rank_ok<SX>) {
      static_assert(Quiet || SM::rank == SX::rank ||
                        error::holds<error::mha_memory_rank_differs_from_input<error::input_rank<SX::rank>,
                                                                               error::memory_rank<SM::rank>>>,
                    "attnx: multi_head_attention: the memory must have the input's rank ((L_k, d_model) for an "
                    "input (L_q, d_model), (B, L_k, d_model) for (B, L_q, d_model))");
      if constexpr (SM::rank == SX::rank) {
        static_assert(Quiet || features_ok<SM> ||
                          error::holds<error::mha_memory_features_differ_from_d_model<error::memory_features<SM::cols>,
                                                                                      error::d_model<d_model>>>,
                      "attnx: multi_head_attention: the memory's feature extent (its last axis) must equal d_model");
        static_assert(Quiet || batch_ok<SX, SM> ||
                          error::holds<error::mha_memory_batch_differs_from_input<error::input_batch<SX::extents[0]>,
                                                                                  error::memory_batch<SM::extents[0]>>>,
                      "attnx: multi_head_attention: the memory's batch extent must equal the input's");
      }
    }
    if constexpr (!Quiet && inputs_ok<SX, SM>()) {
      check_features(m, "memory", "memory_features");
      if constexpr (SX::rank == 3 && !(SX::extents[0] != dyn && SM::extents[0] != dyn)) {
        const std::size_t bx = dims_of(x)[0], bm = dims_of(m)[0];
        if (bx != bm)
          detail::throw_extent_error("multi_head_attention: the memory's batch extent must equal the input's", "input_batch",
                                     bx, "memory_batch", bm);
      }
    }
  }
  template <class SX, class SM>
  static constexpr bool inputs_ok() {
    return well_formed && rank_ok<SX> && SM::rank == SX::rank && features_ok<SX> && features_ok<SM> && batch_ok<SX, SM>;
  }
  // What a call with a rejected input (or on a module whose sizes were rejected) returns, its rule having
  // been reported: a failed expression of the output's shape, so that no second error follows.
  template <class SX>
  using output_placeholder =
      shape_cat_t<take_front_t<SX, (SX::rank >= 1 ? SX::rank - 1 : 0)>, shape<axis<names::d_model, d_model>>>;
  template <class S>
  static constexpr auto placeholder() {
    return failed_expr<T, S>{};
  }

  // ---- the expression ------------------------------------------------------------------------------
  template <class X, class W, class B>
  static constexpr auto project(X&& x, const W& w, const B& b) {
    if constexpr (has_bias) {
      return std::forward<X>(x) * w + b;
    } else {
      return std::forward<X>(x) * w;
    }
  }
  template <class E>
  static constexpr auto share_kv(E&& e) {
    if constexpr (group == 1) {
      return std::forward<E>(e);
    } else {
      return repeat_heads<group>(std::forward<E>(e));
    }
  }
  // Rotate: RoPE (self-attention only: the positions of two different sequences have no relative meaning).
  template <bool Rotate, class XQ, class XK, class XV, class... Masks>
  constexpr auto attend(XQ&& xq, XK&& xk, XV&& xv, Masks&&... masks) const {
    auto q = rotate<Rotate>(split_heads<heads>(project(std::forward<XQ>(xq), w_q, b_q)));
    auto k = share_kv(rotate<Rotate>(split_heads<kv_heads>(project(std::forward<XK>(xk), w_k, b_k))));
    auto v = share_kv(split_heads<kv_heads>(project(std::forward<XV>(xv), w_v, b_v)));
    return std::apply(
        [&](auto&&... m) {
          return project(evaluated_once(merge_heads(attention(std::move(q), std::move(k), std::move(v),
                                                              std::forward<decltype(m)>(m)...))),
                         w_o, b_o);
        },
        with_options<Rotate, true>(std::forward<Masks>(masks)...));
  }
  template <bool Rotate, class XQ, class XK, class... Masks>
  constexpr auto scores_of(XQ&& xq, XK&& xk, Masks&&... masks) const {
    auto q = rotate<Rotate>(split_heads<heads>(project(std::forward<XQ>(xq), w_q, b_q)));
    auto k = share_kv(rotate<Rotate>(split_heads<kv_heads>(project(std::forward<XK>(xk), w_k, b_k))));
    return std::apply(
        [&](auto&&... m) { return attention_weights(std::move(q), std::move(k), std::forward<decltype(m)>(m)...); },
        with_options<Rotate, false>(std::forward<Masks>(masks)...));
  }
  // The options' variants around the caller's masks, as a tuple of them: softcap first (a mask's -inf stays -inf),
  // then the masks, then (Self: self-attention, where positions are relative) the window and ALiBi, and (Sinks) the
  // sinks last, as attention() takes them. (weights() leaves the sinks out: its rows are the keys' softmax alone.)
  template <bool Self, bool Sinks, class... Masks>
  constexpr auto with_options(Masks&&... masks) const {
    const auto cap = [] {
      if constexpr (Opt.softcap > 0) return std::tuple<softcap_value>(softcap(static_cast<double>(Opt.softcap)));
      else return std::tuple<>();
    };
    const auto window = [] {
      if constexpr (Self && Opt.window > 0) return std::tuple<key_range_mask>(sliding_window(Opt.window));
      else return std::tuple<>();
    };
    const auto bias = [] {
      if constexpr (Self && Opt.alibi) return std::tuple<alibi_bias>(alibi_slopes(heads));
      else return std::tuple<>();
    };
    const auto sink = [&] {
      if constexpr (Sinks && Opt.sinks) return std::make_tuple(attnx::sinks(this->sinks));
      else return std::tuple<>();
    };
    return std::tuple_cat(cap(), std::forward_as_tuple(std::forward<Masks>(masks)...), window(), bias(), sink());
  }

  // ---- building the parameters ---------------------------------------------------------------------
  template <class S, class W>
  static constexpr param_t<S> param(W&& w) {
    static_assert(expression<W>,
                  "attnx: multi_head_attention: a weight must be an attnx tensor, view or expression (use from_memory "
                  "for raw memory)");
    if constexpr (Storage == weights_storage::owned) {
      if constexpr (std::is_same_v<std::remove_cvref_t<W>, basic_tensor<T, S>>) {
        return std::forward<W>(w);
      } else {
        return basic_tensor<T, S>(w);  // the assignment rule checks the shape
      }
    } else {
      check_assignment<S, shape_of_t<W>>();
      static_assert(dense_terminal<W> && std::is_same_v<value_t<W>, T>,
                    "attnx: multi_head_attention (viewed weights): a weight must be a tensor or view of the module's "
                    "element type, in memory");
      static_assert(!(is_tensor_v<W> && !std::is_lvalue_reference_v<W>),
                    "attnx: multi_head_attention (viewed weights): a temporary tensor would dangle; pass a tensor that "
                    "outlives the module, or use owned storage");
      return basic_view<const T, S>(w.data(), S::size);
    }
  }

  template <class S>
  static constexpr param_t<S> flat_param(std::span<const T> s, const char* name) {
    if (s.size() != S::size) ATTNX_THROW(std::length_error(size_message<S>(name, s.size())));
    if constexpr (Storage == weights_storage::owned) {
      return basic_tensor<T, S>::from_flat(s);
    } else {
      return basic_view<const T, S>(s.data(), s.size());
    }
  }
  template <class S, char Slot>
  static constexpr bias_t<S, Slot> flat_bias(std::span<const T> s, const char* name) {
    if constexpr (has_bias) {
      return flat_param<S>(s, name);
    } else {
      if (!s.empty())
        ATTNX_THROW(std::invalid_argument(std::string("attnx: multi_head_attention: ") + name +
                                    " was given, but the module has no biases (mha_options::bias = false)"));
      return no_bias<Slot>{};
    }
  }
  template <class S>
  static std::string size_message(const char* name, std::size_t got) {
    return std::string("attnx: multi_head_attention: ") + name + " of shape " + shape_string<S>() + " needs " +
           std::to_string(S::size) + " elements, got " + std::to_string(got);
  }

  constexpr multi_head_attention(const flat_weights& f, int)
      : w_q(flat_param<w_q_shape>(f.w_q, "W_Q")),
        w_k(flat_param<w_k_shape>(f.w_k, "W_K")),
        w_v(flat_param<w_v_shape>(f.w_v, "W_V")),
        w_o(flat_param<w_o_shape>(f.w_o, "W_O")),
        b_q(flat_bias<b_q_shape, 'q'>(f.b_q, "b_Q")),
        b_k(flat_bias<b_k_shape, 'k'>(f.b_k, "b_K")),
        b_v(flat_bias<b_v_shape, 'v'>(f.b_v, "b_V")),
        b_o(flat_bias<b_o_shape, 'o'>(f.b_o, "b_O")) {}
};

// The same module over weights the caller owns (views).
template <class T, std::size_t DModel, std::size_t Heads, mha_options Opt = mha_options{}>
using multi_head_attention_view = multi_head_attention<T, DModel, Heads, Opt, weights_storage::viewed>;

// The mean over the heads axis (the third from last) of attention weights (..., H, L_q, L_k), as
// nn.MultiheadAttention returns them by default (average_attn_weights=True): (..., L_q, L_k), evaluated.
template <expression W>
auto average_heads(const W& w) {
  using S = shape_of_t<W>;
  using T = value_t<W>;
  static_assert(S::rank >= 3, "attnx: average_heads: the weights must be (..., heads, L_q, L_k)");
  if constexpr (S::rank < 3) {
    return basic_tensor<T, S>{};  // (reported above)
  } else {
  using R = shape_cat_t<take_front_t<S, S::rank - 3>, drop_front_t<S, S::rank - 2>>;
  const basic_tensor<T, S> t = w;
  const auto d = t.dims();
  dims_t<R::rank> rd{};
  for (std::size_t k = 0; k < R::rank; ++k) rd[k] = d[k < S::rank - 3 ? k : k + 1];
  basic_tensor<T, R> out(rd, uninitialized);
  const std::size_t heads = d[S::rank - 3], inner = d[S::rank - 2] * d[S::rank - 1], outer = out.numel() / (inner ? inner : 1);
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t i = 0; i < inner; ++i) {
      T sum = 0;
      for (std::size_t h = 0; h < heads; ++h) sum += t.data()[(o * heads + h) * inner + i];
      out.data()[o * inner + i] = sum / static_cast<T>(heads);
    }
  return out;
  }
}

}  // namespace attnx
