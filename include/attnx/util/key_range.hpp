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
  chunks      // [t / size * size, t / size * size + size): chunks of `size` positions
};
// A named mask's key interval as the kernels take it (attention_problem::key_interval); built by sliding_window,
// documents, prefix_lm and chunked (expr/mask.hpp).
struct key_range {
  range_kind kind = range_kind::window;
  std::size_t left = 0, right = 0;       // window
  bool empty = false;                    // window: no key at all (sliding_window(0))
  std::size_t size = 0;                  // prefix, chunks
  const std::size_t* offsets = nullptr;  // documents: count + 1 values from 0 to Lk, never decreasing
  std::size_t count = 0;
  // Per batch item, the keys it holds (a KV cache of ragged items: item b's queries are its last Lq positions,
  // t = i + lengths[b] - Lq); none: every item holds the Lk keys.
  const std::size_t* lengths = nullptr;
};

namespace detail {
constexpr std::size_t min_(std::size_t a, std::size_t b) { return b < a ? b : a; }
constexpr std::size_t max_(std::size_t a, std::size_t b) { return a < b ? b : a; }
constexpr std::size_t add_(std::size_t a, std::size_t b) { return a + b < a ? ~std::size_t{0} : a + b; }  // saturating
}  // namespace detail

// The keys [lo, hi) a named interval mask leaves visible to query i of batch item b in a problem of lq queries and
// lk keys (key_range; r.lengths[b] keys for the item when it has lengths), clamped to them; lo == hi when none is.
struct key_span {
  std::size_t lo, hi;
};
constexpr key_span range_span(const key_range& r, std::size_t lq, std::size_t lk, std::size_t b, std::size_t i) {
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
    case range_kind::documents: {  // the last offset <= t (offsets[0] = 0 <= t): its document
      std::size_t lo = 0, hi = r.count;
      while (hi - lo > 1) {
        const std::size_t mid = (lo + hi) / 2;
        (r.offsets[mid] <= t ? lo : hi) = mid;
      }
      return clamp(r.offsets[lo], r.offsets[lo + 1]);
    }
  }
  return {0, lk};
}

// A key interval's own rules, for Lk keys: a chunk size above 0; document offsets from 0 to Lk, never decreasing
// (a document may be empty). std::invalid_argument naming the rule and the values.
constexpr void check_key_range(const key_range& r, std::size_t lk) {
  if (r.kind == range_kind::chunks && r.size == 0)
    ATTNX_THROW(std::invalid_argument("attnx: mask: chunked(C) needs C > 0"));
  if (r.kind != range_kind::documents) return;
  if (r.count == 0 || r.offsets == nullptr)
    ATTNX_THROW(std::invalid_argument("attnx: mask: documents(offsets) needs at least two offsets (0 and L_k)"));
  if (r.offsets[0] != 0)
    ATTNX_THROW(std::invalid_argument("attnx: mask: documents(offsets): offsets[0] = " + std::to_string(r.offsets[0]) +
                                      ", must be 0"));
  for (std::size_t d = 0; d < r.count; ++d)
    if (r.offsets[d + 1] < r.offsets[d])
      ATTNX_THROW(std::invalid_argument("attnx: mask: documents(offsets): offsets must not decrease, but offsets[" +
                                        std::to_string(d) + "] = " + std::to_string(r.offsets[d]) + " > offsets[" +
                                        std::to_string(d + 1) + "] = " + std::to_string(r.offsets[d + 1])));
  if (r.offsets[r.count] != lk)
    ATTNX_THROW(std::invalid_argument("attnx: mask: documents(offsets): the last offset is " +
                                      std::to_string(r.offsets[r.count]) + ", must be the number of keys " +
                                      std::to_string(lk)));
}

}  // namespace attnx
