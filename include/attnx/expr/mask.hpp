// attnx: masks. mask(S, m) replaces the blocked scores of S by a fill value (-inf by default, so
// that softmax gives them weight exactly 0).
//
//   mask(S, causal)               key j visible to query i iff j <= i            (top-left, PyTorch)
//   mask(S, causal_bottom_right)  iff j <= i + (L_k - L_q)                       (FlashAttention-2)
//   mask(S, key_padding<3>)       keys j >= 3 blocked (compile-time valid length)
//   mask(S, key_lengths(lens))    keys j >= lens[b] blocked for batch item b (run-time lengths)
//   mask(S, allowed(M))           M an expression of bool, true = the key is attended to, broadcast to S's shape
//   mask(S, blocked(M))           M an expression of bool, true = the key is masked out (PyTorch's bool
//                                 attn_mask and key_padding_mask), broadcast to S's shape
//   mask(S, additive(M))          S + M (M of 0 and -inf, or any bias), broadcast to S's shape
//   mask(S, key_padding_mask(m))  m PyTorch's (B, L_k) bool key_padding_mask, true = padding (expr/padding.hpp)
// and the named masks of one key interval per query, whose blocked tiles the kernels skip (query i at position
// t = i + L_k - L_q, the last L_q of the L_k positions; attnx/util/key_range.hpp):
//   mask(S, sliding_window(W))            the W keys t - W + 1 .. t (causal: Mistral, Gemma; W = 0: none)
//   mask(S, sliding_window(left, right))  the keys t - left .. t + right (FlashAttention-2's window_size)
//   mask(S, documents(offsets))           packed sequences: document d holds positions [offsets[d], offsets[d + 1]);
//                                         a query sees its own document's keys (compose with causal)
//   mask(S, prefix_lm(P))                 the first P keys seen by every query, causal after them (T5's prefix LM)
//   mask(S, chunked(C))                   chunks of C positions see only their own chunk (Llama 4; compose with causal)
//   mask(S, varlen(q_offsets, k_offsets[, causal]))  ragged sequences packed along both axes (FlashAttention-2's
//                                         varlen): a query sees its own sequence's keys, causally if asked
// and beside them: mask(S, alibi() | alibi(slopes)) (ALiBi's linear bias per head), softcap(S, c) = c tanh(S / c)
// or softcap(c) among attention()'s masks.
// Masks compose: mask(mask(S, causal), key_lengths(lens)).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/expr/elementwise.hpp"
#include "attnx/math/constexpr_math.hpp"
#include "attnx/core/expression.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/shape/shape.hpp"
#include "attnx/util/key_range.hpp"

namespace attnx {

// The causal masks: top-left aligned (PyTorch's is_causal: key j visible to query i iff j <= i) or bottom-right (FlashAttention-2's: iff j <= i + L_k - L_q).
enum class causal_alignment { top_left, bottom_right };

// causal and causal_bottom_right: the two causal masks, as values for mask() and attention().
template <causal_alignment Align>
struct causal_mask {
  static constexpr causal_alignment alignment = Align;
};
inline constexpr causal_mask<causal_alignment::top_left> causal{};
inline constexpr causal_mask<causal_alignment::bottom_right> causal_bottom_right{};

// key_padding<N>: the keys j >= N blocked, N known at compile time.
template <std::size_t Length>
struct key_padding_length {
  static constexpr std::size_t length = Length;
};
template <std::size_t Length>
inline constexpr key_padding_length<Length> key_padding{};

// Per-batch-item valid key counts, read from user memory (which must outlive the expression).
struct key_lengths_mask {
  const std::size_t* lengths;
  std::size_t count;
};
constexpr key_lengths_mask key_lengths(std::span<const std::size_t> lens) noexcept { return {lens.data(), lens.size()}; }

// The named key-interval masks (above), the interval's description with it. The offsets of documents() live in the
// caller's memory, which must outlive the expression (checked again when it is evaluated, as key_lengths).
struct key_range_mask {
  key_range range;
};
constexpr key_range_mask sliding_window(std::size_t w) noexcept {
  key_range r{range_kind::window};
  r.left = w > 0 ? w - 1 : 0;
  r.empty = w == 0;
  return {r};
}
constexpr key_range_mask sliding_window(std::size_t left, std::size_t right) noexcept {
  key_range r{range_kind::window};
  r.left = left;
  r.right = right;
  return {r};
}
constexpr key_range_mask documents(std::span<const std::size_t> offsets) noexcept {
  key_range r{range_kind::documents};
  r.offsets = offsets.data();
  r.count = offsets.empty() ? 0 : offsets.size() - 1;
  return {r};
}
// varlen(q_offsets, k_offsets [, causal | causal_bottom_right]): the varlen entry (FlashAttention-2's cu_seqlens_q
// and cu_seqlens_k), ragged sequences packed without padding along the query axis and the key axis alike: sequence
// s holds queries [q_offsets[s], q_offsets[s + 1]) and keys [k_offsets[s], k_offsets[s + 1]), and a query sees its
// own sequence's keys: all of them, or the causal ones, top-left or bottom-right aligned in the sequence
// (sequence_order). Both spans have one value more than there are sequences and live in the caller's memory.
constexpr key_range_mask varlen(std::span<const std::size_t> q_offsets, std::span<const std::size_t> k_offsets) {
  if (q_offsets.size() != k_offsets.size())
    ATTNX_THROW(std::invalid_argument("attnx: mask: varlen(q_offsets, k_offsets): " + std::to_string(q_offsets.size()) +
                                      " query offsets but " + std::to_string(k_offsets.size()) +
                                      " key offsets (one more than there are sequences, each)"));
  key_range r{range_kind::varlen};
  r.q_offsets = q_offsets.data();
  r.offsets = k_offsets.data();
  r.count = q_offsets.empty() ? 0 : q_offsets.size() - 1;
  return {r};
}
template <causal_alignment Align>
constexpr key_range_mask varlen(std::span<const std::size_t> q_offsets, std::span<const std::size_t> k_offsets,
                                causal_mask<Align>) {
  key_range_mask m = varlen(q_offsets, k_offsets);
  m.range.order = Align == causal_alignment::top_left ? sequence_order::causal_top_left
                                                      : sequence_order::causal_bottom_right;
  return m;
}
constexpr key_range_mask prefix_lm(std::size_t p) noexcept {
  key_range r{range_kind::prefix};
  r.size = p;
  return {r};
}
constexpr key_range_mask chunked(std::size_t c) noexcept {
  key_range r{range_kind::chunks};
  r.size = c;
  return {r};
}

// ALiBi (Press et al., BLOOM, MPT): score s_ij of head h plus m_h (j - t), t = i + L_k - L_q the query's position, so
// a key d positions back loses m_h d. The slopes are held by value (up to 256): alibi() takes the standard ones for
// the scores' head count when it is evaluated (2^(-8 (h + 1) / H) for H a power of two, BLOOM's interleaving
// otherwise), alibi(slopes) one per head, or one for every head. The fused kernels add it tile by tile.
struct alibi_bias {
  std::array<double, 256> slopes{};
  std::size_t count = 0;  // 0: the standard slopes for the scores' heads
};
constexpr alibi_bias alibi() noexcept { return {}; }
constexpr alibi_bias alibi(std::span<const double> slopes) {
  if (slopes.empty() || slopes.size() > 256)
    ATTNX_THROW(std::invalid_argument("attnx: alibi: " + std::to_string(slopes.size()) +
                                      " slopes (one per head, or one for all; at most 256)"));
  alibi_bias a;
  for (std::size_t h = 0; h < slopes.size(); ++h) a.slopes[h] = slopes[h];
  a.count = slopes.size();
  return a;
}
// The standard slopes for H heads (H <= 256): the geometric sequence from 2^(-8 / n) for the largest power of two
// n <= H, then every other one of the sequence for 2n (BLOOM's build_alibi_tensor).
constexpr alibi_bias alibi_slopes(std::size_t heads) {
  if (heads == 0 || heads > 256)
    ATTNX_THROW(std::invalid_argument("attnx: alibi: standard slopes for " + std::to_string(heads) +
                                      " heads (1 to 256)"));
  std::size_t n = 1;
  while (n * 2 <= heads) n *= 2;
  const auto pow2 = [](double e) {  // 2^e for e in [-8, 0), exact where e is an integer
    double r = 1;
    for (; e < 0; e += 1) r *= 0.5;
    return e > 0 ? r * math::exp(e * 0.69314718055994530942) : r;
  };
  alibi_bias a;
  for (std::size_t h = 0; h < n; ++h) a.slopes[h] = pow2(-8.0 * double(h + 1) / double(n));
  for (std::size_t h = n; h < heads; ++h) a.slopes[h] = pow2(-8.0 * double(2 * (h - n) + 1) / double(2 * n));
  a.count = heads;
  return a;
}


// Logit soft-capping (Gemma 2, Grok): c tanh(S / c), the scores squashed into (-c, c). softcap(S, c) is that expression
// (the fused kernel takes it as three steps of its program, vectorised); softcap(c) passes it to attention() among
// the masks, in order: attention(Q, K, V, softcap(50.f), causal). c must be a positive finite number.
struct softcap_value {
  double cap;
};
constexpr softcap_value softcap(double c) noexcept { return {c}; }
template <expression A>
constexpr auto softcap(A&& s, value_t<A> c) {
  if (!(c > value_t<A>(0) && c <= std::numeric_limits<value_t<A>>::max()))
    ATTNX_THROW(std::invalid_argument("attnx: softcap: the cap must be a positive finite number, not " + std::to_string(double(c))));
  return tanh(std::forward<A>(s) / c) * c;
}

// additive(M): M added to the scores (a bias, or 0 and -inf), broadcast to their shape.
template <class M>
struct additive_mask {
  M mask;
};
template <expression M>
constexpr auto additive(M&& m) {
  return additive_mask<stored_t<M>>{store(std::forward<M>(m))};
}
template <class M>
  requires any_foreign<M>
constexpr auto additive(M&&) {
  return additive_mask<failed_expr<float, shape<>>>{foreign_arguments<M>()};
}

// A bool mask's summary by 8 x 8 blocks of its matrices (expr/block_mask.hpp), or none.
struct mask_blocks {
  const std::uint8_t* state = nullptr;  // per block: 0 every key blocked, 1 some, 2 every key allowed
  std::size_t rows = 0, cols = 0;       // the mask's matrix extents
};
// A boolean mask expression, as stored in a masked_expr (with blocks, its summary kept across calls).
template <class M>
struct bool_mask {
  M mask;
  mask_blocks blocks{};
};

// mask(S, kind, fill): the node; kind one of the masks above, fill the value of a blocked score.
template <class A, class Kind>
class masked_expr : public expression_tag {
 public:
  using value_type = value_t<A>;
  using shape_type = shape_of_t<A>;
  constexpr masked_expr(A a, Kind k, value_type fill) : a_(std::move(a)), k_(std::move(k)), fill_(fill) {}
  constexpr dims_t<shape_type::rank> dims() const { return dims_of(a_); }
  constexpr const A& operand() const noexcept { return a_; }
  constexpr const Kind& kind() const noexcept { return k_; }
  constexpr value_type fill() const noexcept { return fill_; }
  constexpr auto operands() const {
    if constexpr (requires { k_.mask; }) {
      return boost::hana::make_tuple(&a_, &k_.mask);
    } else {
      return boost::hana::make_tuple(&a_);
    }
  }

 private:
  A a_;
  Kind k_;
  value_type fill_;
};

namespace rules {
template <class S, bool Quiet = false>
constexpr bool check_matrix_scores() {
  static_assert(Quiet || S::rank >= 2 || error::holds<error::mask_needs_rank_2_scores<error::rank<S::rank>>>,
                "attnx: mask: the scores need at least two axes (queries x keys)");
  return S::rank >= 2;
}

// A mask's shape must broadcast to the scores' shape without changing it: per axis (right-aligned),
// the mask's extent is the score's or 1, and names unify.
template <class S, class M, bool Quiet = false>
constexpr bool check_mask_shape() {
  constexpr std::size_t R = S::rank > M::rank ? S::rank : M::rank;
  constexpr std::size_t bad = [] {
    std::size_t b = R;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((b == R && [] {
         using ax = detail::aligned_axis_t<S, R, I>;
         using ay = detail::aligned_axis_t<M, R, I>;
         return (!may_equal_extents(ay::extent, ax::extent) && ay::extent != 1) || I + S::rank < R;
       }() ? (b = I, 0) : 0),
       ...);
    }(std::make_index_sequence<R>{});
    return b;
  }();
  using X = detail::aligned_axis_t<S, R, (bad < R ? bad : 0)>;
  using Y = detail::aligned_axis_t<M, R, (bad < R ? bad : 0)>;
  static_assert(Quiet || bad == R ||
                    error::holds<error::mask_extents_differ<error::axis_index<bad>, error::mask_extent<Y::extent>,
                                                            error::score_extent<X::extent>>>,
                "attnx: mask: the mask's extents must equal the scores' extents (or be 1 to broadcast)");
  if constexpr (bad == R) {
    constexpr std::size_t n = first_broadcast_mismatch<S, M>(true);
    using NX = detail::aligned_axis_t<S, R, (n < R ? n : 0)>;
    using NY = detail::aligned_axis_t<M, R, (n < R ? n : 0)>;
    static_assert(Quiet || n == R ||
                      error::holds<error::mask_axes_differ<error::axis_index<n>, error::lhs_axis<typename NX::name>,
                                                           error::rhs_axis<typename NY::name>>>,
                  "attnx: mask: the mask's axis names differ from the scores'");
    return n == R;
  } else {
    return false;
  }
}
// The run-time half, where an extent is dyn: per axis, the mask's extent is the scores' (or a static 1).
template <class S, class M>
constexpr void check_mask_dims(const dims_t<S::rank>& s, const dims_t<M::rank>& m) {
  for (std::size_t k = 0; k < M::rank; ++k) {
    const std::size_t i = k + S::rank - M::rank;
    if (M::extents[k] == 1 || (M::extents[k] != dyn && S::extents[i] != dyn)) continue;
    if (m[k] != s[i])
      detail::throw_extent_error("mask: the mask's extents must equal the scores' extents (or be 1 to broadcast); axis " +
                                     std::to_string(i) + " differs (scores " + shape_string<S>(s) + ", mask " +
                                     shape_string<M>(m) + ")",
                                 "mask_extent", m[k], "score_extent", s[i]);
  }
}
}  // namespace rules

namespace detail {
// masked_expr<stored A, Kind>, or a failed_expr of A's shape when a rule failed or an operand had.
template <bool Ok, class A, class Kind>
constexpr auto make_masked(A&& a, Kind&& k, value_t<A> fill) {
  if constexpr (!Ok || failed_v<A>) {
    return failed_expr<value_t<A>, shape_of_t<A>>{};
  } else {
    return masked_expr<stored_t<A>, std::remove_cvref_t<Kind>>(store(std::forward<A>(a)), std::forward<Kind>(k), fill);
  }
}
}  // namespace detail

template <expression A, causal_alignment Al>
constexpr auto mask(A&& a, causal_mask<Al> m, value_t<A> fill = -std::numeric_limits<value_t<A>>::infinity()) {
  constexpr bool ok = rules::check_matrix_scores<shape_of_t<A>, failed_v<A>>();
  return detail::make_masked<ok>(std::forward<A>(a), m, fill);
}

template <expression A, std::size_t Len>
constexpr auto mask(A&& a, key_padding_length<Len> m, value_t<A> fill = -std::numeric_limits<value_t<A>>::infinity()) {
  using S = shape_of_t<A>;
  constexpr bool quiet = failed_v<A>;
  constexpr bool rank_ok = rules::check_matrix_scores<S, quiet>();
  static_assert(quiet || !rank_ok || S::cols == dyn || Len <= S::cols ||
                    error::holds<error::key_length_exceeds_keys<error::key_length<Len>, error::keys<S::cols>>>,
                "attnx: mask: the key padding length exceeds the number of keys");
  if constexpr (S::cols == dyn && rank_ok && !quiet) {
    const std::size_t keys = dims_cols(dims_of(a));
    if (Len > keys) detail::throw_extent_error("mask: the key padding length exceeds the number of keys", "key_length", Len, "keys", keys);
  }
  return detail::make_masked<rank_ok && (S::cols == dyn || Len <= S::cols)>(std::forward<A>(a), m, fill);
}

// The run-time rule of key_lengths for scores of shape S: one length per batch item (axis 0 of scores
// with three or more axes; one length for a plain score matrix), each at most the key count. Checked when
// the mask is built and again when it is evaluated (the lengths live in the caller's memory and may have
// changed in between), by the row evaluator and the fused path alike.
template <class S>
constexpr void check_key_lengths(const key_lengths_mask& m, const dims_t<S::rank>& d) {
  const std::size_t batches = S::rank >= 3 ? d[0] : 1;
  if (m.count != batches)
    ATTNX_THROW(std::invalid_argument("attnx: mask: key_lengths has " + std::to_string(m.count) + " entries but the scores " +
                                shape_string<S>(d) + " have " + std::to_string(batches) + " batch items"));
  if (m.count > 0 && m.lengths == nullptr) ATTNX_THROW(std::invalid_argument("attnx: mask: key_lengths over a null pointer"));
  const std::size_t keys = dims_cols(d);
  for (std::size_t b = 0; b < m.count; ++b)
    if (m.lengths[b] > keys)
      ATTNX_THROW(std::out_of_range("attnx: mask: key_lengths[" + std::to_string(b) + "] = " + std::to_string(m.lengths[b]) +
                              " exceeds the " + std::to_string(keys) + " keys"));
}

// Run-time lengths: one per batch item. A wrong count or a length above the key count throws.
template <expression A>
constexpr auto mask(A&& a, key_lengths_mask m, value_t<A> fill = -std::numeric_limits<value_t<A>>::infinity()) {
  using S = shape_of_t<A>;
  constexpr bool ok = rules::check_matrix_scores<S, failed_v<A>>();
  if constexpr (ok && !failed_v<A>) check_key_lengths<S>(m, dims_of(a));
  return detail::make_masked<ok>(std::forward<A>(a), m, fill);
}

// ALiBi over scores: the slopes checked against the head count (axis -3 of rank-4 scores; one head otherwise).
template <expression A>
constexpr auto mask(A&& a, alibi_bias m) {
  using S = shape_of_t<A>;
  constexpr bool ok = rules::check_matrix_scores<S, failed_v<A>>();
  if constexpr (ok && !failed_v<A>) {
    const std::size_t heads = S::rank >= 4 ? dims_of(a)[S::rank - 3] : 1;
    if (m.count == 0) m = alibi_slopes(heads);
    if (m.count != 1 && m.count != heads)
      ATTNX_THROW(std::invalid_argument("attnx: alibi: " + std::to_string(m.count) + " slopes for " +
                                        std::to_string(heads) + " heads (one per head, or one for all)"));
  }
  return detail::make_masked<ok>(std::forward<A>(a), m, value_t<A>(0));
}

// A key interval over scores of L_q queries and L_k keys: its own rules (check_key_range), and a window no wider than the keys
// (a wider one is a mistake about the sequence, not a mask: over a KV cache that grows, attend() takes it as is).
template <class S>
constexpr void check_key_range_mask(const key_range_mask& m, const dims_t<S::rank>& d) {
  const std::size_t keys = dims_cols(d);
  const key_range& r = m.range;
  if (r.kind == range_kind::window && !r.empty && (r.left >= keys || r.right >= keys))
    ATTNX_THROW(std::invalid_argument("attnx: mask: sliding_window(" +
                                      (r.right == 0 ? std::to_string(r.left + 1) : std::to_string(r.left) + ", " + std::to_string(r.right)) +
                                      ") is wider than the " + std::to_string(keys) + " keys"));
  check_key_range(r, dims_matrix_rows(d), keys);
}

template <expression A>
constexpr auto mask(A&& a, key_range_mask m, value_t<A> fill = -std::numeric_limits<value_t<A>>::infinity()) {
  using S = shape_of_t<A>;
  constexpr bool ok = rules::check_matrix_scores<S, failed_v<A>>();
  if constexpr (ok && !failed_v<A>) check_key_range_mask<S>(m, dims_of(a));
  return detail::make_masked<ok>(std::forward<A>(a), m, fill);
}

// A boolean mask's polarity, said explicitly: a bool expression is a mask only through allowed(m) (true = the
// key is attended to) or blocked(m) (true = masked out: PyTorch's bool attn_mask and key_padding_mask), so a
// mask of one meaning cannot be read as the other. blocked(m) is stored as allowed(!m).
namespace rules {
template <class M, bool Quiet = false>
constexpr bool check_polarity_operand() {
  static_assert(Quiet || std::is_same_v<value_t<M>, bool> ||
                    error::holds<error::mask_must_be_boolean<error::rank<shape_of_t<M>::rank>>>,
                "attnx: allowed(m) / blocked(m): m must have bool elements");
  return std::is_same_v<value_t<M>, bool>;
}
}  // namespace rules
template <expression M>
constexpr auto allowed(M&& m) {
  constexpr bool ok = rules::check_polarity_operand<M, failed_v<M>>();
  if constexpr (!ok || failed_v<M>) return bool_mask<failed_expr<bool, shape_of_t<M>>>{};
  else return bool_mask<stored_t<M>>{store(std::forward<M>(m))};
}
template <expression M>
constexpr auto blocked(M&& m) {
  constexpr bool ok = rules::check_polarity_operand<M, failed_v<M>>();
  if constexpr (!ok || failed_v<M>) {
    return bool_mask<failed_expr<bool, shape_of_t<M>>>{};
  } else {
    using N = unary_expr<ops::logical_not, stored_t<M>>;
    return bool_mask<N>{N(store(std::forward<M>(m)))};
  }
}
// A mask whose polarity is already said, wrapped again (allowed(blocked(m)) meaning "not blocked"): one error.
namespace detail {
template <class B>
inline constexpr bool is_bool_mask = false;
template <class M>
inline constexpr bool is_bool_mask<bool_mask<M>> = true;
template <class M>
constexpr auto polarity_said_twice() {
  static_assert(failed_v<M>, "attnx: allowed(m) / blocked(m): m already says its polarity (it is allowed(...) or "
                             "blocked(...)); wrap the bool expression once");
  return bool_mask<failed_expr<bool, shape_of_t<M>>>{};
}
}  // namespace detail
template <class M>
constexpr auto allowed(const bool_mask<M>&) {
  return detail::polarity_said_twice<M>();
}
template <class M>
constexpr auto blocked(const bool_mask<M>&) {
  return detail::polarity_said_twice<M>();
}
template <class S>
class block_mask;  // expr/block_mask.hpp
namespace detail {
template <class B>
inline constexpr bool is_block_mask = false;
template <class S>
inline constexpr bool is_block_mask<block_mask<S>> = true;
}  // namespace detail
template <class M>
  requires(any_foreign<M> && !detail::is_bool_mask<std::remove_cvref_t<M>> && !detail::is_block_mask<std::remove_cvref_t<M>>)
constexpr auto allowed(M&&) {
  return bool_mask<decltype(foreign_arguments<M>())>{foreign_arguments<M>()};
}
template <class M>
  requires(any_foreign<M> && !detail::is_bool_mask<std::remove_cvref_t<M>>)
constexpr auto blocked(M&&) {
  return bool_mask<decltype(foreign_arguments<M>())>{foreign_arguments<M>()};
}

template <expression A, class M>
constexpr auto mask(A&& a, bool_mask<M> m, value_t<A> fill = -std::numeric_limits<value_t<A>>::infinity()) {
  using S = shape_of_t<A>;
  constexpr bool quiet = any_failed_v<A, M>;
  constexpr bool rank_ok = rules::check_matrix_scores<S, quiet>();
  constexpr bool shape_ok = rules::check_mask_shape<S, shape_of_t<M>, quiet || !rank_ok>();
  if constexpr (quiet || !rank_ok || !shape_ok) {
    return failed_expr<value_t<A>, S>{};
  } else {
    if constexpr (!S::is_static || !shape_of_t<M>::is_static) rules::check_mask_dims<S, shape_of_t<M>>(dims_of(a), dims_of(m.mask));
    return masked_expr<stored_t<A>, bool_mask<M>>(store(std::forward<A>(a)), std::move(m), fill);
  }
}

// An expression as the mask itself: of bool, its polarity is not said (one error naming allowed / blocked);
// of any other type, it is no mask (one error naming additive(M) for a bias).
template <expression A, expression M>
constexpr auto mask(A&&, M&&, value_t<A> = {}) {
  using S = shape_of_t<A>;
  constexpr bool quiet = any_failed_v<A, M>;
  constexpr bool rank_ok = rules::check_matrix_scores<S, quiet>();
  constexpr bool is_bool = std::is_same_v<value_t<M>, bool>;
  static_assert(quiet || !rank_ok || !is_bool ||
                    error::holds<error::bool_mask_needs_polarity<error::rank<shape_of_t<M>::rank>>>,
                "attnx: mask: a bool mask must say its polarity: allowed(m) (true = attend to the key) or blocked(m) "
                "(true = masked out, as PyTorch's bool attn_mask and key_padding_mask)");
  static_assert(quiet || !rank_ok || is_bool ||
                    error::holds<error::mask_must_be_boolean<error::rank<shape_of_t<M>::rank>>>,
                "attnx: mask: a mask expression must have bool elements (wrapped in allowed(m) or blocked(m)); use "
                "additive(M) for a bias");
  return failed_expr<value_t<A>, S>{};
}

namespace detail {
// The kinds that keep the keys j < a limit of the row (causal, key padding, key lengths).
template <class M>
inline constexpr bool is_limit_mask = false;
template <causal_alignment Al>
inline constexpr bool is_limit_mask<causal_mask<Al>> = true;
template <std::size_t L>
inline constexpr bool is_limit_mask<key_padding_length<L>> = true;
template <>
inline constexpr bool is_limit_mask<key_lengths_mask> = true;
template <>
inline constexpr bool is_limit_mask<key_range_mask> = true;

template <class M>
inline constexpr bool is_mask_kind = is_limit_mask<M>;
template <class M>
inline constexpr bool is_mask_kind<additive_mask<M>> = true;
template <class M>
inline constexpr bool is_mask_kind<bool_mask<M>> = true;
template <>
inline constexpr bool is_mask_kind<alibi_bias> = true;
}  // namespace detail

// Scores or a mask of a foreign type (a std::vector<bool> as a mask, say): one error saying how to wrap it.
template <class A, class M, class... Fill>
  requires(sizeof...(Fill) <= 1 && (any_foreign<A> || (any_foreign<M> && !detail::is_mask_kind<std::remove_cvref_t<M>>)))
constexpr auto mask(A&&, M&&, Fill&&...) {
  return foreign_arguments<A, M>();
}

template <expression A, class M>
constexpr auto mask(A&& a, additive_mask<M> m) {
  using S = shape_of_t<A>;
  constexpr bool quiet = any_failed_v<A, M>;
  constexpr bool rank_ok = rules::check_matrix_scores<S, quiet>();
  constexpr bool shape_ok = rules::check_mask_shape<S, shape_of_t<M>, quiet || !rank_ok>();
  constexpr bool types_ok = rules::check_element_types<value_t<A>, value_t<M>, quiet || !rank_ok || !shape_ok>();
  if constexpr (quiet || !rank_ok || !shape_ok || !types_ok) {
    return failed_expr<value_t<A>, S>{};
  } else {
    if constexpr (!S::is_static || !shape_of_t<M>::is_static) rules::check_mask_dims<S, shape_of_t<M>>(dims_of(a), dims_of(m.mask));
    return binary_expr<ops::plus, stored_t<A>, M>(store(std::forward<A>(a)), std::move(m.mask));
  }
}

}  // namespace attnx
