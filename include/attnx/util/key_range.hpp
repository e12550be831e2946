// attnx: the key intervals of the named masks. For each query a mask of this family leaves one interval of keys
// [lo, hi) visible; the kernels skip what lies outside it. Query i of a problem of Lq queries and Lk keys sits at
// position t = i + Lk - Lq: the last Lq of the Lk positions (the same position in self-attention, the new tokens
// over a KV cache: FlashAttention-2's alignment).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "attnx/config.hpp"

namespace attnx {

// Which named mask a key_range describes.
enum class range_kind : unsigned char {
  window,     // [t - left, t + right]                      (sliding_window; FlashAttention-2's window_size)
  documents,  // the document of t: [offsets[d], offsets[d + 1]) with offsets[d] <= t < offsets[d + 1]
  prefix,     // [0, max(size, t + 1)): the first `size` keys seen by every query, causal after them
  chunks,     // [t / size * size, t / size * size + size): chunks of `size` positions
  varlen      // ragged sequences packed along both axes: sequence s holds queries [q_offsets[s], q_offsets[s + 1])
              // and keys [offsets[s], offsets[s + 1]); a query sees its own sequence's keys (with `order`)
};
// The order inside a varlen sequence of n_q queries and n_k keys, the query's index in it being u: any (all n_k
// keys), causal top-left (the first u + 1) or causal bottom-right (the first u + 1 + n_k - n_q: FlashAttention-2's
// varlen causal, the sequence's queries its last positions; the same as top-left when n_q = n_k).
enum class sequence_order : unsigned char { any, causal_top_left, causal_bottom_right };
// A named mask's key interval as the kernels take it (attention_problem::key_interval); built by sliding_window,
// documents, prefix_lm and chunked (expr/mask.hpp).
struct key_range {
  range_kind kind = range_kind::window;
  std::size_t left = 0, right = 0;       // window
  bool empty = false;                    // window: no key at all (sliding_window(0))
  std::size_t size = 0;                  // prefix, chunks
  const std::size_t* offsets = nullptr;    // documents, varlen keys: count + 1 values from 0 to Lk, never decreasing
  const std::size_t* q_offsets = nullptr;  // varlen queries: count + 1 values from 0 to Lq, never decreasing
  std::size_t count = 0;
  sequence_order order = sequence_order::any;  // varlen
  // Per batch item, the keys it holds (a KV cache of ragged items: item b's queries are its last Lq positions,
  // t = i + lengths[b] - Lq); none: every item holds the Lk keys.
  const std::size_t* lengths = nullptr;
};

namespace detail {
constexpr std::size_t min_(std::size_t a, std::size_t b) { return b < a ? b : a; }
constexpr std::size_t max_(std::size_t a, std::size_t b) { return a < b ? b : a; }
constexpr std::size_t add_(std::size_t a, std::size_t b) { return a + b < a ? ~std::size_t{0} : a + b; }  // saturating
// The last s < count with offsets[s] <= x: the sequence holding x when offsets run from 0 past x, never decreasing
// (empty sequences, repeated offsets, are passed over).
constexpr std::size_t sequence_of(const std::size_t* offsets, std::size_t count, std::size_t x) {
  std::size_t lo = 0, hi = count;
  while (hi - lo > 1) {
    const std::size_t mid = (lo + hi) / 2;
    (offsets[mid] <= x ? lo : hi) = mid;
  }
  return lo;
}
}  // namespace detail

// The keys [lo, hi) a named interval mask leaves visible to query i of batch item b in a problem of lq queries and
// lk keys (key_range; r.lengths[b] keys for the item when it has lengths), clamped to them; lo == hi when none is.
struct key_span {
  std::size_t lo, hi;
};
constexpr key_span range_span(const key_range& r, std::size_t lq, std::size_t lk, std::size_t b, std::size_t i) {
  if (r.kind == range_kind::varlen) {  // (by the query's index: the two axes hold different sequences)
    const std::size_t s = detail::sequence_of(r.q_offsets, r.count, i), k0 = r.offsets[s], k1 = r.offsets[s + 1];
    const std::size_t u = i - r.q_offsets[s], nq = r.q_offsets[s + 1] - r.q_offsets[s], nk = k1 - k0;
    std::size_t hi = k1;  // a row that sees no key gets [k0, k0), keeping the intervals in order
    if (r.order == sequence_order::causal_top_left) hi = detail::min_(k1, k0 + u + 1);
    if (r.order == sequence_order::causal_bottom_right) hi = u + 1 + nk > nq ? detail::min_(k1, k0 + u + 1 + nk - nq) : k0;
    return {k0, hi};
  }
  if (r.lengths) lk = detail::min_(lk, r.lengths[b]);
  if (i + lk < lq) return {0, 0};  // before the first key's position: Lq > Lk puts the first queries there
  const std::size_t t = i + lk - lq;
  const auto clamp = [lk](std::size_t lo, std::size_t hi) {
    hi = detail::min_(hi, lk);
    return key_span{detail::min_(lo, hi), hi};
  };
  switch (r.kind) {
    case range_kind::window:
      if (r.empty) return {0, 0};
      return clamp(t >= r.left ? t - r.left : 0, detail::add_(t + 1, r.right));
    case range_kind::prefix: return clamp(0, detail::max_(r.size, t + 1));
    case range_kind::chunks: return clamp(t / r.size * r.size, detail::add_(t / r.size * r.size, r.size));
    case range_kind::documents: {
      const std::size_t d = detail::sequence_of(r.offsets, r.count, t);
      return clamp(r.offsets[d], r.offsets[d + 1]);
    }
    case range_kind::varlen: break;
  }
  return {0, lk};
}

namespace detail {
// Offsets of `count` sequences along an axis of n positions: count + 1 values, from 0 to n, never decreasing.
constexpr void check_offsets(const std::size_t* offsets, std::size_t count, std::size_t n, const char* what,
                             const char* axis, const char* unit) {
  const auto name = [what] { return std::string("attnx: mask: ") + what; };  // (a string only when throwing: none per call,
                                                                           // and clang 14 builds none in a constant evaluation)
  if (count == 0 || offsets == nullptr)
    ATTNX_THROW(std::invalid_argument(name() + " needs at least two offsets (0 and " + axis + ")"));
  if (offsets[0] != 0)
    ATTNX_THROW(std::invalid_argument(name() + ": offsets[0] = " + std::to_string(offsets[0]) + ", must be 0"));
  for (std::size_t d = 0; d < count; ++d)
    if (offsets[d + 1] < offsets[d])
      ATTNX_THROW(std::invalid_argument(name() + ": offsets must not decrease, but offsets[" + std::to_string(d) +
                                        "] = " + std::to_string(offsets[d]) + " > offsets[" + std::to_string(d + 1) +
                                        "] = " + std::to_string(offsets[d + 1])));
  if (offsets[count] != n)
    ATTNX_THROW(std::invalid_argument(name() + ": the last offset is " + std::to_string(offsets[count]) +
                                      ", must be the number of " + unit + " " + std::to_string(n)));
}
}  // namespace detail

// A key interval's own rules, for Lq queries and Lk keys: a chunk size above 0; document offsets from 0 to Lk,
// varlen query offsets from 0 to Lq and key offsets from 0 to Lk, never decreasing (a sequence may be empty).
// std::invalid_argument naming the rule and the values.
constexpr void check_key_range(const key_range& r, std::size_t lq, std::size_t lk) {
  if (r.kind == range_kind::chunks && r.size == 0)
    ATTNX_THROW(std::invalid_argument("attnx: mask: chunked(C) needs C > 0"));
  if (r.kind == range_kind::documents) detail::check_offsets(r.offsets, r.count, lk, "documents(offsets)", "L_k", "keys");
  if (r.kind == range_kind::varlen) {
    detail::check_offsets(r.q_offsets, r.count, lq, "varlen(q_offsets, k_offsets): q_offsets", "L_q", "queries");
    detail::check_offsets(r.offsets, r.count, lk, "varlen(q_offsets, k_offsets): k_offsets", "L_k", "keys");
  }
}

}  // namespace attnx
