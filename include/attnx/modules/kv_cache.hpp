// attnx: a cache of keys and values for incremental decoding.
//
//   attnx::kv_cache<float, 2, 64> cache(batch, capacity);            // kv_heads 2, d_k = d_v = 64, float
//   attnx::kv_cache<float, 2, 64, 64, attnx::bf16> half(batch, capacity);   // stored as bf16 (or attnx::f16)
//   auto y = mha.step(x_t, cache);        // x_t (B, n, d_model): projects, appends K/V, attends (modules/
//                                         // multi_head_attention.hpp); n = 1 decodes, n > 1 is chunked prefill
//   auto y0 = mha.step(x_t0, cache, 0);   // x_t0 (n, d_model): batch item 0 only (items may differ in length)
//   cache.length(b); cache.reset(); cache.reset(b); cache.truncate(b, n);
//   cache.drop_front(b, n); cache.offset(b);  // a sliding window: the oldest tokens out, positions kept (RoPE)
//   cache.reserve(capacity); cache.copy_item(src, dst); cache.reorder(beams);   // grow; fork; beam search
//   cache.append(k, v);                   // k (B, n, kv_heads * d_k), v (B, n, kv_heads * d_v): by hand
//   cache.append(k, v, n); cache.append(b, k, v, n);   // raw memory: n tokens of every item, or of item b
//   attnx::attend(q, cache[, scale][, ctx])  // q (B, heads, n, d_k) -> (B, heads, n, d_v), causal in the cache
//   attnx::partial_attention(q, cache[, attnx::cache_keys::all][, scale])  // the same as a state (state.hpp)
//   attnx::attend(q, cache, attnx::allowed(m), attnx::additive(bias)[, scale][, ctx])  // masks over (B, heads, n, keys);
//                                         // also the named masks, alibi, softcap and sinks(t) (merged after the kernel)
//   attnx::partial_attention(q, cache[, keys], masks...[, scale][, ctx]) the same
//   auto yr = mha.step(rows, cache, counts);   // rows (N, d_model): counts[b] new rows of item b in turn
//   auto ym = mha.step(x_t, cache, attnx::blocked(pad), attnx::additive(bias));  // masks over (B, heads, n, keys)
//
// Layout: (batch, kv_heads, capacity, d) for K and for V, so that the keys of one (item, KV head) are
// contiguous rows, as the kernels read them. Each batch item has its own length (<= capacity). The
// capacity is set at construction and grows only through reserve: appending past it throws
// std::length_error naming the item, its length, the tokens appended and the capacity, and changes nothing.
//
// Storage: T, or (T = float) attnx::bf16 / attnx::f16 (tensor/half.hpp), rounded to nearest when appended
// and read into float registers by the kernels (accumulation in float): half the bytes per decoded token.
#pragma once

#include <array>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "attnx/util/algorithm.hpp"
#include "attnx/eval/assign.hpp"
#include "attnx/eval/evaluator.hpp"
#include "attnx/expr/mask.hpp"
#include "attnx/expr/sinks.hpp"
#include "attnx/exec/context.hpp"
#include "attnx/math/constexpr_math.hpp"
#include "attnx/kernels/flash_attention.hpp"
#include "attnx/state.hpp"
#include "attnx/math/half.hpp"
#include "attnx/tensor/storage.hpp"
#include "attnx/tensor/tensor.hpp"
#include "attnx/tensor/view.hpp"

namespace attnx {

// The keys and values of past positions for decoding: per batch item, up to a capacity of positions of KvHeads
// heads, stored as Store (T, or bf16 / f16 for float).
template <class T, std::size_t KvHeads, std::size_t Dk, std::size_t Dv = Dk, class Store = T>
class kv_cache {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "attnx: kv_cache: T must be float or double");
  static_assert(std::is_same_v<Store, T> || (std::is_same_v<T, float> && (std::is_same_v<Store, bf16> || std::is_same_v<Store, f16>)),
                "attnx: kv_cache: the storage type must be T, or attnx::bf16 / attnx::f16 with T = float");
  static_assert(KvHeads > 0 && Dk > 0 && Dv > 0, "attnx: kv_cache: kv_heads, d_k and d_v must be positive");

 public:
  using value_type = T;
  using storage_type = Store;
  static constexpr std::size_t kv_heads = KvHeads, d_k = Dk, d_v = Dv;

  // Every item empty; std::length_error when batch x kv_heads x capacity x d elements overflow std::size_t.
  kv_cache(std::size_t batch, std::size_t capacity)
      : batch_(batch), cap_(fitting(batch, capacity)), len_(batch), off_(batch), k_(batch * cap_ * KvHeads * Dk),
        v_(batch * cap_ * KvHeads * Dv) {}  // all zero
  kv_cache() noexcept : batch_(0), cap_(0) {}  // no item (batch 0, capacity 0)
  kv_cache(const kv_cache&) = default;
  // Copy and swap: a copy that fails to allocate leaves this cache as it was.
  kv_cache& operator=(const kv_cache& o) {
    if (this != &o) *this = kv_cache(o);
    return *this;
  }
  // A cache moved from is empty (batch 0, capacity 0); the target's former rows are freed.
  kv_cache(kv_cache&& o) noexcept
      : batch_(std::exchange(o.batch_, 0)), cap_(std::exchange(o.cap_, 0)), len_(std::move(o.len_)), off_(std::move(o.off_)),
        k_(std::move(o.k_)), v_(std::move(o.v_)) {}
  kv_cache& operator=(kv_cache&& o) noexcept {
    kv_cache old(std::move(o));  // o empty
    swap(old);                   // this cache's former rows leave with old
    return *this;
  }
  void swap(kv_cache& o) noexcept {
    std::swap(batch_, o.batch_);
    std::swap(cap_, o.cap_);
    std::swap(len_, o.len_);
    std::swap(off_, o.off_);
    std::swap(k_, o.k_);
    std::swap(v_, o.v_);
  }

  std::size_t batch() const noexcept { return batch_; }
  std::size_t capacity() const noexcept { return cap_; }
  std::size_t length(std::size_t b) const { return len_[item(b)]; }
  std::span<const std::size_t> lengths() const noexcept { return {len_.data(), len_.size()}; }

  // The position in its sequence of item b's first held token: the tokens drop_front took out since the item was
  // last reset (0 unless a window slid). Its tokens are at positions offset(b) .. offset(b) + length(b) - 1; a step
  // rotates its new rows (RoPE) from offset(b) + length(b).
  std::size_t offset(std::size_t b) const { return off_[item(b)]; }

  void reset() noexcept {
    alg::fill_n(len_.data(), len_.size(), std::size_t{0});
    alg::fill_n(off_.data(), off_.size(), std::size_t{0});
  }
  void reset(std::size_t b) {
    const std::size_t i = item(b);  // (checked before either write)
    len_[i] = 0;
    off_[i] = 0;
  }
  // Takes item b's n oldest tokens out (n <= its length): the rest move to the front (one copy of them) and keep
  // their positions (offset(b) grows by n), so that later steps rotate at the sequence's true positions. A
  // sliding window of w keys, one token a step: before each step drop_front(b, length(b) + 1 - w) when that is
  // positive, in a cache of capacity w (it never overflows). Steps of n tokens, or fewer copies (s tokens dropped
  // at a time): a capacity of w + n - 1 (or w + s) and a blocked(m) mask over the held positions for the rows'
  // exact windows. The masks of later steps index the tokens held (cache positions 0 .. length - 1).
  void drop_front(std::size_t b, std::size_t n) {
    if (n > len_[item(b)])
      ATTNX_THROW(std::out_of_range("attnx: kv_cache: drop_front: " + std::to_string(n) + " tokens of batch item " +
                              std::to_string(b) + ", which holds " + std::to_string(len_[b])));
    if (n == 0) return;
    const std::size_t keep = len_[b] - n;
    for (std::size_t g = 0; g < KvHeads; ++g) {
      Store* k = k_.data() + index<Dk>(b, g, 0);
      Store* v = v_.data() + index<Dv>(b, g, 0);
      alg::copy_n(k + n * Dk, keep * Dk, k);  // (memmove: the ranges may overlap)
      alg::copy_n(v + n * Dv, keep * Dv, v);
    }
    len_[b] = keep;
    off_[b] += n;
  }
  // Keeps the first n tokens of item b (n <= its length): drops rejected speculative tokens, say.
  void truncate(std::size_t b, std::size_t n) {
    if (n > len_[item(b)])
      ATTNX_THROW(std::out_of_range("attnx: kv_cache: truncate item " + std::to_string(b) + " to " + std::to_string(n) +
                              " tokens, but it holds " + std::to_string(len_[b])));
    len_[b] = n;
  }

  // Grows the capacity to at least `capacity` tokens per item (never shrinks), keeping every item's tokens:
  // a new buffer and one copy of each item's rows.
  void reserve(std::size_t capacity) {
    if (capacity <= cap_) return;
    kv_cache grown(batch_, capacity, uninitialized);
    for (std::size_t b = 0; b < batch_; ++b) grown.copy_rows(*this, b, b);
    *this = std::move(grown);
  }
  // Item dst takes item src's tokens (its length and rows; beam search forking a prefix, a prompt shared by
  // several sequences). dst == src does nothing.
  void copy_item(std::size_t src, std::size_t dst) {
    item(src);
    item(dst);
    if (src != dst) copy_rows(*this, src, dst);
  }
  // Item dst takes item src of another cache of this type (a prompt prefilled in a cache of its own moved into
  // a slot of the decoding batch, a saved sequence restored). Its tokens must fit this cache's capacity
  // (std::length_error, nothing changed).
  void copy_item(const kv_cache& from, std::size_t src, std::size_t dst) {
    if (&from == this) return copy_item(src, dst);
    from.item(src);
    item(dst);
    if (from.len_[src] > cap_)
      ATTNX_THROW(std::length_error("attnx: kv_cache: copy_item: batch item " + std::to_string(src) + " holds " +
                              std::to_string(from.len_[src]) + " tokens, more than the capacity " + std::to_string(cap_)));
    copy_rows(from, src, dst);
  }
  // Item b takes what item from[b] holds, for every b at once (beam search: the surviving beams' caches;
  // an item may be taken several times or not at all). from has one entry per item. When every item taken by
  // another keeps its own (from[from[b]] == from[b]: beams forked from survivors), only the items that change
  // are copied, in place; otherwise the whole cache is copied once into a new buffer.
  void reorder(std::span<const std::size_t> from) {
    if (reorders_in_place(from)) {  // (the sources checked there)
      for (std::size_t b = 0; b < batch_; ++b)
        if (from[b] != b) copy_rows(*this, from[b], b);
      return;
    }
    *this = reordered_copy(from);
  }
  // A copy in which item b holds what item from[b] holds here (reorder's result, this cache unchanged: a caller
  // reordering several caches builds every copy before it replaces any).
  kv_cache reordered(std::span<const std::size_t> from) const {
    check_sources(from);
    return reordered_copy(from);
  }
  // Whether reorder(from) moves the items in place (every item taken by another keeps its own: from[from[b]] ==
  // from[b]), allocating nothing.
  bool reorders_in_place(std::span<const std::size_t> from) const {
    check_sources(from);
    bool in_place = true;
    for (std::size_t b = 0; b < batch_; ++b) in_place = in_place && (from[b] == b || from[from[b]] == from[b]);
    return in_place;
  }

  // Appends n tokens to every item: k (B, n, kv_heads * d_k) and v (B, n, kv_heads * d_v), row-major.
  void append(const T* k, const T* v, std::size_t n) {
    for (std::size_t b = 0; b < batch_; ++b) check_room(b, n);
    for (std::size_t b = 0; b < batch_; ++b) write(b, k + b * n * KvHeads * Dk, v + b * n * KvHeads * Dv, n);
  }
  // Appends n tokens to item b: k (n, kv_heads * d_k), v (n, kv_heads * d_v).
  void append(std::size_t b, const T* k, const T* v, std::size_t n) {
    check_room(b, n);
    write(b, k, v, n);
  }
  // The same from attnx expressions: (B, n, kv_heads * d_k) and (B, n, kv_heads * d_v), or (n, ...) for a
  // cache of batch 1.
  template <expression K, expression V>
  void append(const K& k, const V& v) {
    const auto kt = flat_rows<KvHeads * Dk>(k, "keys");
    const auto vt = flat_rows<KvHeads * Dv>(v, "values");
    const std::size_t per = alg::max<std::size_t>(batch_, 1), nk = kt.numel() / (KvHeads * Dk) / per,
                      nv = vt.numel() / (KvHeads * Dv) / per;
    if (nk != nv)
      detail::throw_extent_error("kv_cache: append: the keys and the values must have as many tokens", "key_tokens", nk,
                                 "value_tokens", nv);
    append(kt.data(), vt.data(), nk);
  }

  // Throws unless n more tokens fit in item b (std::out_of_range for an item past the batch, std::length_error
  // past the capacity): what append checks before writing anything.
  void check_room(std::size_t b, std::size_t n) const {
    if (n > cap_ - len_[item(b)])
      ATTNX_THROW(std::length_error("attnx: kv_cache: appending " + std::to_string(n) + " tokens to batch item " + std::to_string(b) +
                              " of length " + std::to_string(len_[b]) + " exceeds the capacity " + std::to_string(cap_)));
  }

  // Element c of the key (value) of token j (< length(b)), KV head g, item b, as T; std::out_of_range naming
  // the index and its bound for any index outside.
  T key(std::size_t b, std::size_t g, std::size_t j, std::size_t c) const {
    return static_cast<T>(k_[index<Dk>(b, head(g), token(b, j)) + element(c, Dk)]);
  }
  T value(std::size_t b, std::size_t g, std::size_t j, std::size_t c) const {
    return static_cast<T>(v_[index<Dv>(b, head(g), token(b, j)) + element(c, Dv)]);
  }
  // The current keys (values) of item b, KV head g: (length(b), d_k) rows, in place (storage T only).
  auto keys(std::size_t b, std::size_t g) const
    requires std::is_same_v<Store, T>
  {
    const std::size_t n = length(b);
    return view<const T, dyn, Dk>(k_.data() + index<Dk>(b, head(g), 0), n);
  }
  auto values(std::size_t b, std::size_t g) const
    requires std::is_same_v<Store, T>
  {
    const std::size_t n = length(b);
    return view<const T, dyn, Dv>(v_.data() + index<Dv>(b, head(g), 0), n);
  }

  // The stored keys (values) of item b, KV head g, as they are stored (T, bf16 or f16): length(b) * d_k
  // elements, row by row. With append they save and restore a cache exactly (bf16 / f16 -> T -> the same bits;
  // NaN payloads aside: a NaN is stored as a quiet NaN).
  std::span<const Store> key_rows(std::size_t b, std::size_t g) const {
    const std::size_t n = length(b);
    return {k_.data() + index<Dk>(b, head(g), 0), n * Dk};
  }
  std::span<const Store> value_rows(std::size_t b, std::size_t g) const {
    const std::size_t n = length(b);
    return {v_.data() + index<Dv>(b, head(g), 0), n * Dv};
  }

  // The kernels' view of items b0 onwards: K and V as (batch, kv_heads, capacity, d) stacks.
  void describe(kernels::attention_problem<T>& p, std::size_t b0) const {
    const auto k = stack<Dk>(k_.data(), b0), v = stack<Dv>(v_.data(), b0);
    if constexpr (std::is_same_v<Store, T>) {
      p.k = k;
      p.v = v;
    } else {
      kernels::use_kv16<Store>();
      p.kv = std::is_same_v<Store, bf16> ? kernels::kv_storage::bf16 : kernels::kv_storage::f16;
      p.k16 = {reinterpret_cast<const std::uint16_t*>(k.data), k.batch, k.head, k.row};
      p.v16 = {reinterpret_cast<const std::uint16_t*>(v.data), v.batch, v.head, v.row};
    }
  }

 private:
  template <std::size_t D>
  std::size_t index(std::size_t b, std::size_t g, std::size_t j) const {
    return ((b * KvHeads + g) * cap_ + j) * D;
  }
  template <std::size_t D>
  kernels::strided<const Store> stack(const Store* base, std::size_t b0) const {
    const auto d = static_cast<std::ptrdiff_t>(D), cap = static_cast<std::ptrdiff_t>(cap_);
    return {base + index<D>(b0, 0, 0), static_cast<std::ptrdiff_t>(KvHeads) * cap * d, cap * d, d};
  }
  // Rows past each item's length uninitialised (reserve, reorder: every item's rows are copied in).
  kv_cache(std::size_t batch, std::size_t capacity, uninitialized_t)
      : batch_(batch), cap_(fitting(batch, capacity)), len_(batch), off_(batch), k_(uninitialized, batch * cap_ * KvHeads * Dk),
        v_(uninitialized, batch * cap_ * KvHeads * Dv) {}
  // capacity, or std::length_error when batch x capacity x kv_heads x max(d_k, d_v) elements overflow std::size_t
  // (checked before cap_'s members allocate anything).
  static std::size_t fitting(std::size_t batch, std::size_t capacity) {
    constexpr std::size_t per_token = KvHeads * (Dk > Dv ? Dk : Dv);
    if (batch != 0 && capacity > std::numeric_limits<std::size_t>::max() / sizeof(Store) / per_token / batch)
      ATTNX_THROW(std::length_error("attnx: kv_cache: " + std::to_string(batch) + " items of " + std::to_string(capacity) +
                              " tokens do not fit in memory"));
    return capacity;
  }
  // reordered without its rules (checked by the caller).
  kv_cache reordered_copy(std::span<const std::size_t> from) const {
    kv_cache out(batch_, cap_, uninitialized);
    for (std::size_t b = 0; b < batch_; ++b) out.copy_rows(*this, from[b], b);
    return out;
  }
  // reorder's rules: one source per item, each an item of this cache.
  void check_sources(std::span<const std::size_t> from) const {
    if (from.size() != batch_)
      detail::throw_extent_error("kv_cache: reorder: one source item per batch item", "sources", from.size(), "batch", batch_);
    for (const std::size_t b : from) item(b);
  }
  // Item src of c (this cache or another whose item fits this capacity) into item dst: its rows and length.
  void copy_rows(const kv_cache& c, std::size_t src, std::size_t dst) {
    const std::size_t n = c.len_[src];
    for (std::size_t g = 0; g < KvHeads; ++g) {
      alg::copy_n(c.k_.data() + c.template index<Dk>(src, g, 0), n * Dk, k_.data() + index<Dk>(dst, g, 0));
      alg::copy_n(c.v_.data() + c.template index<Dv>(src, g, 0), n * Dv, v_.data() + index<Dv>(dst, g, 0));
    }
    len_[dst] = n;
    off_[dst] = c.off_[src];
  }
  void write(std::size_t b, const T* k, const T* v, std::size_t n) {
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t g = 0; g < KvHeads; ++g) {
        // (T to Store element by element: rounded to nearest for bf16 / f16)
        alg::copy_n(k + (t * KvHeads + g) * Dk, Dk, k_.data() + index<Dk>(b, g, len_[b] + t));
        alg::copy_n(v + (t * KvHeads + g) * Dv, Dv, v_.data() + index<Dv>(b, g, len_[b] + t));
      }
    len_[b] += n;
  }
  // An expression of rows of F values, (B, n, F) or (n, F), evaluated (the batch must be this cache's).
  template <std::size_t F, class E>
  auto flat_rows(const E& e, const char* what) const {
    using S = shape_of_t<E>;
    constexpr bool rank_ok = S::rank == 2 || S::rank == 3;
    static_assert(rank_ok, "attnx: kv_cache: append takes (B, n, kv_heads * d) or (n, kv_heads * d)");
    constexpr bool features_ok = !rank_ok || may_equal_extents(S::cols, F);
    static_assert(features_ok, "attnx: kv_cache: append: the feature extent must be kv_heads * d");
    constexpr bool type_ok = std::is_same_v<value_t<E>, T>;
    static_assert(type_ok || !rank_ok || !features_ok,
                  "attnx: kv_cache: append: the keys and values must have the cache's type T");
    if constexpr (rank_ok && features_ok && type_ok) {
      const auto d = dims_of(e);
      if (d[S::rank - 1] != F)
        detail::throw_extent_error(std::string("kv_cache: append: the ") + what + "' feature extent must be kv_heads * d",
                                   "features", d[S::rank - 1], "kv_heads_times_d", F);
      const std::size_t b = S::rank == 3 ? d[0] : 1;
      if (b != batch_)
        detail::throw_extent_error("kv_cache: append: the batch extent must be the cache's", "batch", b, "cache_batch", batch_);
      return basic_tensor<T, S>(e);
    } else {
      return tensor<T, dyn, F>{};
    }
  }

  // b, or std::out_of_range when the cache has no item b.
  std::size_t item(std::size_t b) const {
    if (b >= batch_)
      ATTNX_THROW(std::out_of_range("attnx: kv_cache: batch item " + std::to_string(b) + " of a cache of " + std::to_string(batch_)));
    return b;
  }
  // The same for a KV head, a token of item b (below its length) and an element of a row of d.
  static std::size_t head(std::size_t g) {
    if (g >= KvHeads)
      ATTNX_THROW(std::out_of_range("attnx: kv_cache: KV head " + std::to_string(g) + " of a cache with " + std::to_string(KvHeads) + " KV heads"));
    return g;
  }
  std::size_t token(std::size_t b, std::size_t j) const {
    if (j >= len_[item(b)])
      ATTNX_THROW(std::out_of_range("attnx: kv_cache: token " + std::to_string(j) + " of batch item " + std::to_string(b) +
                              ", which holds " + std::to_string(len_[b])));
    return j;
  }
  static std::size_t element(std::size_t c, std::size_t d) {
    if (c >= d)
      ATTNX_THROW(std::out_of_range("attnx: kv_cache: element " + std::to_string(c) + " of a row of " + std::to_string(d)));
    return c;
  }

  std::size_t batch_, cap_;
  storage<std::size_t, dyn> len_;  // per item
  storage<std::size_t, dyn> off_;  // per item: the position of its first held token (drop_front)
  storage<Store, dyn> k_, v_;      // (batch, kv_heads, capacity, d), 64-byte aligned
};

// Whether C is a kv_cache.
template <class C>
inline constexpr bool is_kv_cache_v = false;
template <class T, std::size_t G, std::size_t Dk, std::size_t Dv, class S>
inline constexpr bool is_kv_cache_v<kv_cache<T, G, Dk, Dv, S>> = true;

namespace detail {
// f(), and if it throws, every item of the cache cut back to its length before (a step whose work after its append
// fails: multi_head_attention::step, transformer_block::step).
template <class Cache, class F>
auto undoing_appends(Cache& cache, const F& f) {
  const std::span<const std::size_t> now = cache.lengths();
  const std::vector<std::size_t> before(now.begin(), now.end());
#if ATTNX_EXCEPTIONS
  try {
    return f();
  } catch (...) {
    for (std::size_t b = 0; b < before.size(); ++b)
      if (cache.length(b) > before[b]) cache.truncate(b, before[b]);
    throw;
  }
#else
  return f();  // (a failure ends the program: nothing to undo)
#endif
}
// Attention of n new query rows per item over the cache, causal within each item's own length (the
// queries are each item's last n tokens): q and out as strided stacks (b, h, i), items [b0, b0 + batch).
// causal_order = false: every query row sees every key its item holds (a cross-attention memory).
// lse: the rows' log-sum-exp as a (b, h, i) stack, or none. one_item: item b0 alone is read by all the batch
// items of q (a prefix stored once; K and V of batch stride 0, which the kernel reads once for all the items).
// masks: boolean or additive score steps (multi_head_attention::step's masks, over the call's (b, h, i, j)),
// applied after the scale and before the causal order (at most kernels::max_score_steps - 2).
// sinks: none, one logit for every head, or one per head (expr/sinks.hpp), merged into each row's state after the
// kernel (out scaled, lse merged).
template <class T, class Cache>
void attend_cache(const Cache& cache, std::size_t b0, std::size_t batch, std::size_t heads, std::size_t n,
                  kernels::strided<const T> q, kernels::strided<T> out, T scale, const context& ctx, bool causal_order = true,
                  kernels::strided<T> lse = {}, bool one_item = false, std::span<const kernels::score_step<T>> masks = {},
                  std::span<const T> sinks = {}) {
  if (batch == 0 || n == 0) return;
  storage<T, dyn> own_lse(uninitialized, sinks.empty() || lse.data ? 0 : batch * heads * n);
  if (!sinks.empty() && !lse.data)
    lse = {own_lse.data(), static_cast<std::ptrdiff_t>(heads * n), static_cast<std::ptrdiff_t>(n), 1};
  storage<std::size_t, dyn> lens(uninitialized, batch);
  std::size_t lk = 0;
  for (std::size_t b = 0; b < batch; ++b) {
    lens[b] = cache.length(one_item ? b0 : b0 + b);
    if (causal_order && lens[b] < n)
      detail::throw_extent_error("attend: every query row must be one of the cache's tokens (append first; batch item " +
                                     std::to_string(b0 + b) + ")",
                                 "cache_length", lens[b], "query_rows", n);
    lk = alg::max(lk, lens[b]);
  }
  kernels::attention_problem<T> p;
  p.q = q;
  p.o = out;
  p.lse = lse;
  cache.describe(p, b0);
  if (one_item) p.k.batch = p.v.batch = p.k16.batch = p.v16.batch = 0;
  p.batch = batch;
  p.heads = heads;
  p.kv_heads = Cache::kv_heads;
  p.lq = n;
  p.lk = lk;
  p.dk = Cache::d_k;
  p.dv = Cache::d_v;
  p.multiply(scale);
  for (kernels::score_step<T> m : masks) {
    if (m.kind == kernels::step_kind::key_interval) {  // positions are each item's cache positions
      if (m.range.kind == range_kind::documents || m.range.kind == range_kind::varlen)
        ATTNX_THROW(std::invalid_argument(std::string("attnx: attend: ") +
                                          (m.range.kind == range_kind::varlen ? "varlen(q_offsets, k_offsets)" : "documents(offsets)") +
                                          " over a cache is not supported (the cache's items are the sequences; use "
                                          "one item per document)"));
      m.range.lengths = lens.data();
    }
    if (m.kind == kernels::step_kind::linear_bias) m.lengths = lens.data();  // (t: each item's own positions)
    p.push(m);
  }
  if (causal_order) p.causal_lengths(lens.data());
  else p.key_lengths(lens.data());  // every key an item holds (a memory: no causal order)
  kernels::flash_attention(p, ctx);
  if (sinks.empty()) return;
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < n; ++i) {
        T& l = lse.matrix(b, h)[static_cast<std::ptrdiff_t>(i) * lse.row];
        const sunk_row<T> r = sink_merge(l, sinks[sinks.size() == 1 ? 0 : h]);
        T* o = out.matrix(b, h) + static_cast<std::ptrdiff_t>(i) * out.row;
        for (std::size_t c = 0; c < p.dv; ++c) o[c] *= r.factor;
        l = r.lse;
      }
}

// ---- masks over a cache's scores: multi_head_attention::step's and attend / partial_attention's -----------------
// allowed(m) / blocked(m) (a bool_mask) or additive(m), over the scores (item, head, row, key) of the call, the key
// axis indexing cache positions.
template <class A>
inline constexpr bool is_cache_mask = false;
template <class M>
inline constexpr bool is_cache_mask<bool_mask<M>> = true;
template <class M>
inline constexpr bool is_cache_mask<additive_mask<M>> = true;
template <>
inline constexpr bool is_cache_mask<key_range_mask> = true;  // sliding_window, prefix_lm, chunked over cache positions
template <>
inline constexpr bool is_cache_mask<alibi_bias> = true;  // in cache positions too
template <>
inline constexpr bool is_cache_mask<softcap_value> = true;  // (three steps: divide, tanh, multiply)
template <class Sk>
inline constexpr bool is_cache_mask<sink_logits<Sk>> = true;  // (no step: merged after the kernel)
template <class A>
inline constexpr bool is_context_arg = std::is_same_v<std::remove_cvref_t<A>, context>;
// A mask digested: its dense data (allow: true = attend, for allowed(m); blocked(m) arrives as allowed(!m); or
// bias), its extents, and (set by cache_mask_strides) its strides over the scores' (item, head, row, key), 0 where
// it broadcasts.
template <class T>
struct cache_mask {
  const bool* allow = nullptr;
  const T* bias = nullptr;
  const key_range* range = nullptr;  // a named mask (no data: its interval in cache positions)
  bool is_alibi = false;             // alibi (its slopes, resolved for the call's heads by resolve_cache_masks)
  alibi_bias alibi{};
  double softcap = 0;                // softcap(c): c > 0
  bool is_sinks = false;             // sinks(t) / sinks(x): their logits, as T
  std::vector<T> sinks;
  bool has_data() const noexcept { return allow || bias; }
  std::size_t rank = 0;
  std::array<std::size_t, 4> dims{};
  std::array<bool, 4> unit{};  // the extent 1 in the mask's type (broadcast)
  std::array<std::ptrdiff_t, 4> stride{};
};
// f(std::span<cache_mask<T>>) with the masks ks... digested, their data dense meanwhile (in place when a mask is a
// tensor or view, else evaluated once).
template <class K>
struct cache_mask_source {  // a mask's data, dense while the call runs
  explicit cache_mask_source(const K& k) : d(k.mask) {}
  const auto* data() const { return d.data(); }
  dense_operand<std::remove_cvref_t<decltype(std::declval<const K&>().mask)>> d;
};
template <class K>
  requires(std::is_same_v<K, key_range_mask> || std::is_same_v<K, alibi_bias> || std::is_same_v<K, softcap_value> ||
           is_sink_logits<K>)
struct cache_mask_source<K> {  // no data
  explicit cache_mask_source(const K&) {}
  const void* data() const { return nullptr; }
};
template <class T, class F, class... K>
decltype(auto) with_cache_masks(const F& f, const K&... ks) {
  const std::tuple<cache_mask_source<K>...> held(ks...);
  std::array<cache_mask<T>, sizeof...(K)> ms{};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    [[maybe_unused]] const auto digest = [](const auto& k, const auto* data, cache_mask<T>& m) {
      using Kind = std::remove_cvref_t<decltype(k)>;
      if constexpr (std::is_same_v<Kind, key_range_mask>) {
        m.range = &k.range;
      } else if constexpr (std::is_same_v<Kind, alibi_bias>) {
        m.is_alibi = true;
        m.alibi = k;
      } else if constexpr (is_sink_logits<Kind>) {
        m.is_sinks = true;
        if constexpr (requires { k.s.value; }) {
          m.sinks.assign(1, static_cast<T>(k.s.value));
        } else {
          const auto* t = k.s.data();
          m.sinks.assign(t, t + dims_of(k.s)[0]);  // (converted to T: the logits are few)
        }
      } else if constexpr (std::is_same_v<Kind, softcap_value>) {
        if (!(k.cap > 0 && k.cap <= std::numeric_limits<double>::max()))
          ATTNX_THROW(std::invalid_argument("attnx: softcap: the cap must be a positive finite number, not " +
                                            std::to_string(k.cap)));
        m.softcap = k.cap;
      } else {
        using M = std::remove_cvref_t<decltype(k.mask)>;
        if constexpr (std::is_same_v<std::remove_cvref_t<decltype(*data)>, bool>) m.allow = data;
        else m.bias = data;
        m.rank = shape_of_t<M>::rank;
        const auto d = dims_of(k.mask);
        for (std::size_t i = 0; i < m.rank; ++i) {
          m.dims[i] = d[i];
          m.unit[i] = shape_of_t<M>::extents[i] == 1;
        }
      }
    };
    (digest(ks, std::get<I>(held).data(), ms[I]), ...);
  }(std::index_sequence_for<K...>{});
  return f(std::span<cache_mask<T>>(ms));
}
// A mask's run-time rules against the scores (items, heads, rows, keys) = want, of which it spans the last
// `frame` axes (4, or 3 without the items), its strides set: each extent want's or 1 in its type, but the key
// axis, which must hold want[3] keys at least (the most any item holds). rule, fact, want_fact: per axis, the
// rule's text (after the caller's name and ": ") and the two sizes' names of the error.
struct cache_mask_texts {
  const char* rule[4];
  const char* fact[4];
  const char* want_fact[4];
};
template <class T>
void cache_mask_strides(cache_mask<T>& m, std::size_t frame, const std::array<std::size_t, 4>& want, std::string_view caller,
                        const cache_mask_texts& text) {
  const std::size_t at = 4 - frame;  // the scores' axes are the last `frame` of the four
  m.stride = {};
  std::ptrdiff_t stride = 1;
  for (std::size_t i = m.rank; i-- > 0;) {
    const std::size_t a = at + i + frame - m.rank;  // the axis of (item, head, row, key)
    const std::size_t e = m.dims[i];
    if (!m.unit[i] && (a == 3 ? e < want[3] : e != want[a]))
      throw_extent_error(std::string(caller) + ": " + text.rule[a], text.fact[a], e, text.want_fact[a], want[a]);
    m.stride[a] = m.unit[i] ? 0 : stride;
    stride *= static_cast<std::ptrdiff_t>(e);
  }
}
// The standard ALiBi slopes for the call's heads, and the slope count's rule (one per head, or one).
template <class T>
void resolve_cache_masks(std::span<cache_mask<T>> masks, std::size_t heads) {
  std::size_t n_sinks = 0;
  for (cache_mask<T>& m : masks) {
    if (m.is_sinks && ++n_sinks > 1) ATTNX_THROW(std::invalid_argument("attnx: sinks: given more than once"));
    if (m.is_sinks && m.sinks.size() != 1 && m.sinks.size() != heads)
      ATTNX_THROW(std::invalid_argument("attnx: sinks: " + std::to_string(m.sinks.size()) + " sink logits for " +
                                        std::to_string(heads) + " heads (one per head, or one for all)"));
    if (!m.is_alibi) continue;
    if (m.alibi.count == 0) m.alibi = alibi_slopes(heads);
    if (m.alibi.count != 1 && m.alibi.count != heads)
      ATTNX_THROW(std::invalid_argument("attnx: alibi: " + std::to_string(m.alibi.count) + " slopes for " +
                                        std::to_string(heads) + " heads (one per head, or one for all)"));
  }
}
// The kernel's score step for mask m from offset off, items item apart.
template <class T>
kernels::score_step<T> cache_mask_step(const cache_mask<T>& m, std::ptrdiff_t off, std::ptrdiff_t item) {
  kernels::score_step<T> st;
  if (m.range) {
    st = {kernels::step_kind::key_interval, -std::numeric_limits<T>::infinity()};
    st.range = *m.range;
  } else if (m.allow) {
    st = {kernels::step_kind::boolean_mask, -std::numeric_limits<T>::infinity()};
    st.mask = {m.allow + off, item, m.stride[1], m.stride[2], m.stride[3]};
  } else {
    st = {kernels::step_kind::additive_mask, T(0)};
    st.bias = {m.bias + off, item, m.stride[1], m.stride[2], m.stride[3]};
  }
  return st;
}
// The kernel's score steps for the masks ms, from offset off(m), items item(m) apart, into steps; returns their count
// (softcap takes three), at most max_score_steps - 2 (the scale and the cache's order take the other two).
template <class T, class Off, class Item>
std::size_t cache_mask_steps(std::span<const cache_mask<T>> ms, const Off& off, const Item& item,
                             std::array<kernels::score_step<T>, kernels::max_score_steps>& steps) {
  std::size_t n = 0;
  const auto put = [&](const kernels::score_step<T>& st) {
    if (n == kernels::max_score_steps - 2)
      ATTNX_THROW(std::invalid_argument("attnx: attend: the masks take more than " +
                                        std::to_string(kernels::max_score_steps - 2) + " score steps (softcap takes 3)"));
    steps[n++] = st;
  };
  for (const cache_mask<T>& m : ms) {
    if (m.is_sinks) continue;  // (cache_sinks)
    if (m.softcap > 0) {
      put({kernels::step_kind::divide, static_cast<T>(m.softcap)});
      put({kernels::step_kind::tanh, T(0)});
      put({kernels::step_kind::multiply, static_cast<T>(m.softcap)});
    } else if (m.is_alibi) {
      kernels::score_step<T> st{kernels::step_kind::linear_bias, T(0)};
      st.slopes = m.alibi.slopes.data();
      st.n_slopes = m.alibi.count;
      put(st);
    } else {
      put(cache_mask_step(m, off(m), item(m)));
    }
  }
  return n;
}
// The sinks among the masks (none: empty).
template <class T>
std::span<const T> cache_sinks(std::span<const cache_mask<T>> ms) {
  for (const cache_mask<T>& m : ms)
    if (m.is_sinks) return m.sinks;
  return {};
}
enum class mask_caller { step, attend, partial };
// The rules on the masks among A0, A... (the other arguments pass), one error for the first that fails: an additive
// mask of type T; each mask's static extents against the scores' (Scores, keys dyn: the forward pass's mask rule).
template <mask_caller C, class T, class Scores, class A0, class... A>
constexpr bool cache_masks_ok() {
  constexpr bool ok = [] {
    if constexpr (!is_cache_mask<A0> || std::is_same_v<A0, key_range_mask> || std::is_same_v<A0, alibi_bias> ||
                  std::is_same_v<A0, softcap_value> || is_sink_logits<A0>) {
      return true;
    } else {
      using M = std::remove_cvref_t<decltype(std::declval<const A0&>().mask)>;
      if constexpr (failed_v<M>) {
        return false;  // (reported where the mask was made)
      } else {
        constexpr bool type_ok = std::is_same_v<A0, bool_mask<M>> || std::is_same_v<value_t<M>, T>;
        static_assert(C != mask_caller::step || type_ok ||
                          error::holds<error::step_additive_mask_element_type_differs<error::element_type<value_t<M>>,
                                                                                      error::target_element_type<T>>>,
                      "attnx: multi_head_attention::step: additive(m) must have the module's element type T");
        static_assert(C != mask_caller::attend || type_ok ||
                          error::holds<error::attend_cache_additive_mask_element_type_differs<
                              error::element_type<value_t<M>>, error::target_element_type<T>>>,
                      "attnx: attend(q, cache): additive(m) must have the cache's type T");
        static_assert(C != mask_caller::partial || type_ok ||
                          error::holds<error::attend_cache_additive_mask_element_type_differs<
                              error::element_type<value_t<M>>, error::target_element_type<T>>>,
                      "attnx: partial_attention(q, cache): additive(m) must have the cache's type T");
        if constexpr (!type_ok) return false;
        else return rules::check_mask_shape<Scores, shape_of_t<M>>();
      }
    }
  }();
  if constexpr (!ok || sizeof...(A) == 0) {
    return ok;
  } else {
    return cache_masks_ok<C, T, Scores, A...>();
  }
}
}  // namespace detail

// Which of an item's keys its query rows see in partial_attention(q, cache, ...): causal_rows, the rows are the item's
// last n tokens (as attend); all, the rows come after every token the item holds (a shared prefix, or an earlier
// shard of the keys).
enum class cache_keys : unsigned char { causal_rows, all };

namespace detail {
// attend / partial_attention over a cache: q (B, heads, n, d_k) checked; the output (B, heads, n, d_v) and, with
// with_lse, each row's log-sum-exp (B, heads, n).
// Partial: partial_attention (each row's log-sum-exp too), else attend; the messages name the one called.
template <bool Partial, class T, std::size_t G, std::size_t Dk, std::size_t Dv, class S, expression Q>
auto attend_checked(const Q& q, const kv_cache<T, G, Dk, Dv, S>& cache, T scale, const context& ctx,
                    cache_keys keys = cache_keys::causal_rows, std::span<cache_mask<T>> masks = {}) {
  using SQ = shape_of_t<Q>;
  using result = tensor<T, dyn, dyn, dyn, Dv>;
  using state = attention_state<T, shape_of_t<result>>;
  constexpr bool with_lse = Partial;
  constexpr bool rank_ok = SQ::rank == 4;
  static_assert(Partial || rank_ok, "attnx: attend(q, cache): q must be (B, heads, n, d_k)");
  static_assert(!Partial || rank_ok, "attnx: partial_attention(q, cache): q must be (B, heads, n, d_k)");
  constexpr bool dk_ok = !rank_ok || may_equal_extents(SQ::cols, Dk);
  static_assert(Partial || dk_ok, "attnx: attend(q, cache): q's last axis must be the cache's d_k");
  static_assert(!Partial || dk_ok, "attnx: partial_attention(q, cache): q's last axis must be the cache's d_k");
  constexpr bool heads_ok = !rank_ok || SQ::extents[1] == dyn || SQ::extents[1] % G == 0;
  static_assert(Partial || heads_ok, "attnx: attend(q, cache): q's heads must be a multiple of the cache's kv_heads");
  static_assert(!Partial || heads_ok,
                "attnx: partial_attention(q, cache): q's heads must be a multiple of the cache's kv_heads");
  constexpr bool type_ok = std::is_same_v<value_t<Q>, T>;
  constexpr bool earlier_ok = rank_ok && dk_ok && heads_ok;
  static_assert(Partial || type_ok || !earlier_ok, "attnx: attend(q, cache): q must have the cache's type T");
  static_assert(!Partial || type_ok || !earlier_ok, "attnx: partial_attention(q, cache): q must have the cache's type T");
  if constexpr (earlier_ok && type_ok) {
    const basic_tensor<T, SQ> qt = q;
    const auto d = qt.dims();
    const std::string_view fn = Partial ? "partial_attention(q, cache)" : "attend(q, cache)";
    const auto rule = [&](const char* text) { return std::string(fn) + text; };
    if (d[3] != Dk) detail::throw_extent_error(rule(": q's last axis must be the cache's d_k"), "q_features", d[3], "d_k", Dk);
    const bool one_item = keys == cache_keys::all && cache.batch() == 1;  // read by every item of q
    if (d[0] != cache.batch() && !one_item)
      detail::throw_extent_error(rule(": q's batch must be the cache's"), "q_batch", d[0], "cache_batch", cache.batch());
    if (d[1] % G != 0)
      detail::throw_extent_error(rule(": q's heads must be a multiple of the cache's kv_heads"), "heads", d[1], "kv_heads", G);
    state s{result(d[0], d[1], d[2]), basic_tensor<T, typename state::lse_shape>(with_lse ? d[0] : 0, d[1], d[2])};
    const auto H = static_cast<std::ptrdiff_t>(d[1]), N = static_cast<std::ptrdiff_t>(d[2]);
    const kernels::strided<const T> qs{qt.data(), H * N * static_cast<std::ptrdiff_t>(Dk), N * static_cast<std::ptrdiff_t>(Dk),
                                       static_cast<std::ptrdiff_t>(Dk)};
    const kernels::strided<T> os{s.out.data(), H * N * static_cast<std::ptrdiff_t>(Dv), N * static_cast<std::ptrdiff_t>(Dv),
                                 static_cast<std::ptrdiff_t>(Dv)};
    const kernels::strided<T> ls = with_lse ? kernels::strided<T>{s.lse.data(), H * N, N, 1} : kernels::strided<T>{};
    std::array<kernels::score_step<T>, kernels::max_score_steps> steps{};
    if (!masks.empty()) {
      static constexpr cache_mask_texts texts{
          {"a mask's batch axis must be q's batch (or 1 in its type)", "a mask's heads axis must be q's heads (or 1 in its type)",
           "a mask's row axis must be q's rows (or 1 in its type)",
           "a mask's key axis must cover every key an item holds (or be 1 in its type)"},
          {"mask_batch", "mask_heads", "mask_rows", "mask_keys"},
          {"q_batch", "heads", "query_rows", "keys"}};
      std::size_t held = 0;  // the most keys an item of q sees
      for (std::size_t b = 0; b < d[0]; ++b) held = alg::max(held, cache.length(one_item ? 0 : b));
      for (std::size_t i = 0; i < masks.size(); ++i)
        if (masks[i].has_data()) cache_mask_strides(masks[i], 4, {d[0], d[1], d[2], held}, fn, texts);
    }
    resolve_cache_masks(masks, d[1]);
    const std::size_t n_steps = cache_mask_steps<T>(
        masks, [](const cache_mask<T>&) { return std::ptrdiff_t{0}; },
        [](const cache_mask<T>& m) { return m.stride[0]; }, steps);
    detail::attend_cache<T>(cache, 0, d[0], d[1], d[2], qs, os, scale, ctx, keys == cache_keys::causal_rows, ls, one_item,
                            std::span<const kernels::score_step<T>>(steps.data(), n_steps),
                            cache_sinks<T>(std::span<const cache_mask<T>>(masks.data(), masks.size())));
    return s;
  } else {
    return state{};
  }
}

// The arguments after the cache (after the cache_keys of partial_attention) that take the overloads with masks:
// anything but a scale (anything convertible to T: a number, a bf16), a context or cache_keys (then
// attend_cache_rules names what is not a mask).
template <class A, class T>
concept cache_mask_arg = !std::is_convertible_v<const A&, T> && !std::is_base_of_v<context, std::remove_cvref_t<A>> &&
                         !std::is_same_v<std::remove_cvref_t<A>, cache_keys>;
// The overloads with masks take the arguments after the cache (after cache_keys) when the first is no scale,
// context or cache_keys, or when a mask comes later (a scale or a context before the masks: the order rule says so,
// rather than "no matching function").
template <class T, class A0, class... A>
concept cache_masked_args = (cache_mask_arg<A0, T> || (is_cache_mask<A> || ...)) &&
                            !std::is_same_v<std::remove_cvref_t<A0>, cache_keys>;
// attend / partial_attention with masks: the rules on the arguments after the cache, one error for the first that
// fails: masks (allowed / blocked / additive), then at most a scale, then at most a context; at most six masks;
// the masks' types and extents (cache_masks_ok) against the scores (B, heads, n, keys) of q.
template <bool Partial, class T, class SQ, class... A>
constexpr bool attend_cache_rules() {
  constexpr std::size_t n = sizeof...(A);
  constexpr std::size_t masks = [] {
    std::size_t m = 0;
    bool more = true;
    ((more = more && is_cache_mask<A>, m += more ? 1 : 0), ...);
    return m;
  }();
  constexpr bool scale_after = [] {  // a scale (anything convertible to T, as without masks) after the masks
    if constexpr (masks < n) return std::is_convertible_v<const std::tuple_element_t<masks, std::tuple<A...>>&, T>;
    else return false;
  }();
  constexpr std::size_t bad_arg = [] {  // the first argument out of place
    std::size_t i = 0, bad = n;
    ((bad == n && !(i < masks || (i == masks && (std::is_convertible_v<const A&, T> || is_context_arg<A>)) ||
                    (i == masks + 1 && scale_after && is_context_arg<A>))
          ? (bad = i, 0)
          : 0,
      ++i),
     ...);
    return bad;
  }();
  using bad_t = std::tuple_element_t<bad_arg < n ? bad_arg : 0, std::tuple<A...>>;
  using order_fact = error::attend_cache_arguments_out_of_order<error::argument_position<bad_arg + 1>, error::argument_type<bad_t>>;
  static_assert(Partial || bad_arg == n || error::holds<order_fact>,
                "attnx: attend(q, cache): after the cache come the masks (allowed(m), blocked(m) or additive(m)), then "
                "at most a scale, then at most a context (masks: also sliding_window, chunked, prefix_lm, alibi, softcap, sinks)");
  static_assert(!Partial || bad_arg == n || error::holds<order_fact>,
                "attnx: partial_attention(q, cache): after the cache (and cache_keys) come the masks (allowed(m), "
                "blocked(m) or additive(m)), then at most a scale, then at most a context (masks: also sliding_window, "
                "chunked, prefix_lm, alibi, softcap, sinks)");
  constexpr std::size_t max_masks = kernels::max_score_steps - 2;  // (the scale, and the cache's causal order)
  using count_fact = error::attend_cache_too_many_masks<error::mask_count<masks>>;
  static_assert(Partial || bad_arg < n || masks <= max_masks || error::holds<count_fact>,
                "attnx: attend(q, cache): at most six masks");
  static_assert(!Partial || bad_arg < n || masks <= max_masks || error::holds<count_fact>,
                "attnx: partial_attention(q, cache): at most six masks");
  if constexpr (bad_arg < n || masks > max_masks) {
    return false;
  } else {
    using scores = shape<axis<anon, SQ::extents[0]>, axis<anon, SQ::extents[1]>, axis<anon, SQ::extents[2]>, axis<anon, dyn>>;
    return cache_masks_ok<Partial ? mask_caller::partial : mask_caller::attend, T, scores, A...>();
  }
}
// attend / partial_attention with masks: a (masks, then perhaps a scale, then perhaps a context) checked, then
// attend_checked with them.
template <bool Partial, class T, std::size_t G, std::size_t Dk, std::size_t Dv, class S, expression Q, class... A>
auto attend_masked(const Q& q, const kv_cache<T, G, Dk, Dv, S>& cache, cache_keys keys, const A&... a) {
  using result = tensor<T, dyn, dyn, dyn, Dv>;
  using state = attention_state<T, shape_of_t<result>>;
  if constexpr (shape_of_t<Q>::rank != 4) {
    return attend_checked<Partial>(q, cache, T(1), current_context());  // (q's rank rule: its one error)
  } else if constexpr (!attend_cache_rules<Partial, T, shape_of_t<Q>, A...>()) {
    return state{};
  } else {
    constexpr std::size_t masks = (std::size_t{is_cache_mask<A>} + ... + 0);
    const auto args = std::forward_as_tuple(a...);
    T scale = T(1) / math::sqrt(T(Dk));
    const context* ctx = &current_context();
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      [[maybe_unused]] const auto take = [&](const auto& x) {
        if constexpr (is_context_arg<decltype(x)>) ctx = &x;
        else scale = static_cast<T>(x);
      };
      (take(std::get<masks + I>(args)), ...);
    }(std::make_index_sequence<sizeof...(A) - masks>{});
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return with_cache_masks<T>(
          [&](std::span<cache_mask<T>> ms) { return attend_checked<Partial>(q, cache, scale, *ctx, keys, ms); },
          std::get<I>(args)...);
    }(std::make_index_sequence<masks>{});
  }
}
}  // namespace detail

// q (B, heads, n, d_k) against the cache (B = its batch; heads a multiple of its kv_heads): the n query rows
// are each item's last n tokens (append their keys and values first), causal within each item's length.
// Scale 1/sqrt(d_k), or the one given. Returns (B, heads, n, d_v).
template <class T, std::size_t G, std::size_t Dk, std::size_t Dv, class S, expression Q>
auto attend(const Q& q, const kv_cache<T, G, Dk, Dv, S>& cache, std::type_identity_t<T> scale,
            const context& ctx = current_context()) {
  return detail::attend_checked<false>(q, cache, scale, ctx).out;
}
template <class T, std::size_t G, std::size_t Dk, std::size_t Dv, class S, expression Q>
auto attend(const Q& q, const kv_cache<T, G, Dk, Dv, S>& cache, const context& ctx = current_context()) {
  return detail::attend_checked<false>(q, cache, T(1) / math::sqrt(T(Dk)), ctx).out;
}
// The same as an attention state (state.hpp): out (B, heads, n, d_v) and lse (B, heads, n), to merge with the
// states of keys held elsewhere: a shared prefix in one cache (cache_keys::all) and each sequence's own tokens in
// another (cache_keys::causal_rows), say. With cache_keys::all an item with no token gives out 0 and lse -inf for its
// rows (it adds nothing to a merge), and a cache of one item is read by every item of q (a prefix stored once);
// with causal, as attend, q's batch is the cache's and its rows must be among each item's tokens.
template <class T, std::size_t G, std::size_t Dk, std::size_t Dv, class S, expression Q>
auto partial_attention(const Q& q, const kv_cache<T, G, Dk, Dv, S>& cache, cache_keys keys, std::type_identity_t<T> scale,
                       const context& ctx = current_context()) {
  return detail::attend_checked<true>(q, cache, scale, ctx, keys);
}
template <class T, std::size_t G, std::size_t Dk, std::size_t Dv, class S, expression Q>
auto partial_attention(const Q& q, const kv_cache<T, G, Dk, Dv, S>& cache, std::type_identity_t<T> scale,
                       const context& ctx = current_context()) {
  return detail::attend_checked<true>(q, cache, scale, ctx);
}
template <class T, std::size_t G, std::size_t Dk, std::size_t Dv, class S, expression Q>
auto partial_attention(const Q& q, const kv_cache<T, G, Dk, Dv, S>& cache, cache_keys keys,
                       const context& ctx = current_context()) {
  return detail::attend_checked<true>(q, cache, T(1) / math::sqrt(T(Dk)), ctx, keys);
}
template <class T, std::size_t G, std::size_t Dk, std::size_t Dv, class S, expression Q>
auto partial_attention(const Q& q, const kv_cache<T, G, Dk, Dv, S>& cache, const context& ctx = current_context()) {
  return detail::attend_checked<true>(q, cache, T(1) / math::sqrt(T(Dk)), ctx);
}

// With masks: attend(q, cache, masks...[, scale][, ctx]), partial_attention(q, cache[, keys], masks...[, scale][,
// ctx]). Each mask is allowed(m), blocked(m) or additive(m) (as in the forward pass) over the scores (B, heads, n,
// keys), broadcast where its type says 1 (a mask of lower rank takes the last axes). The key axis indexes cache
// positions and must cover every key an item of q sees (a capacity-wide mask fits every call). The masks apply after
// the scale, in order, then the cache's causal order (cache_keys::causal_rows) or each item's length (all); a row
// with no visible key gives 0 (lse -inf). Static extents, element types and the arguments' order are checked at
// compile time (one error each), the rest before anything runs (std::invalid_argument naming the axis and both sizes).
template <class T, std::size_t G, std::size_t Dk, std::size_t Dv, class S, expression Q, class A0, class... A>
  requires detail::cache_masked_args<T, A0, A...>
auto attend(const Q& q, const kv_cache<T, G, Dk, Dv, S>& cache, const A0& a0, const A&... a) {
  return detail::attend_masked<false>(q, cache, cache_keys::causal_rows, a0, a...).out;
}
template <class T, std::size_t G, std::size_t Dk, std::size_t Dv, class S, expression Q, class A0, class... A>
  requires detail::cache_masked_args<T, A0, A...>
auto partial_attention(const Q& q, const kv_cache<T, G, Dk, Dv, S>& cache, const A0& a0, const A&... a) {
  return detail::attend_masked<true>(q, cache, cache_keys::causal_rows, a0, a...);
}
template <class T, std::size_t G, std::size_t Dk, std::size_t Dv, class S, expression Q, class A0, class... A>
  requires detail::cache_masked_args<T, A0, A...>
auto partial_attention(const Q& q, const kv_cache<T, G, Dk, Dv, S>& cache, cache_keys keys, const A0& a0, const A&... a) {
  return detail::attend_masked<true>(q, cache, keys, a0, a...);
}

}  // namespace attnx
