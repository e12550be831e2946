// attnx: what the fused attention kernel computes, described as data.
//
// For every batch item b < batch and head h < heads, with K/V head g = h / (heads / kv_heads):
//   s_ij = score program applied to q_i . k_j          (q_i row i of Q(b, h), k_j row j of K(b, g))
//   o_i  = sum_j softmax_j(s_i.) v_j                    (v_j row j of V(b, g))
// The score program is the expression's own chain, innermost first: multiplications and divisions by
// numbers (scale, temperature), masks that replace blocked scores by their fill value (causal,
// key lengths, key padding, named key intervals, boolean), additive masks (biases), tanh (soft-capping),
// ALiBi's linear bias, and functions of the score and its position compiled where the expression is written (a
// tile_function: expr/score_position.hpp's positions, map(f, S), mask_fn).
// Applying the steps in the order the expression has them is what makes the kernel agree with the
// row-by-row evaluator on every special value (docs/design.md, "Semantics of special values"). softmax
// has the evaluator's rules: a row of -inf gives 0, NaN makes the row NaN, +inf entries share the weight.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "attnx/config.hpp"
#include "attnx/kernels/strided.hpp"
#include "attnx/util/key_range.hpp"

namespace attnx::kernels {

// The alignment of a causal mask.
enum class causal_kind {
  top_left,     // key j visible to query i iff j <= i                (PyTorch is_causal)
  bottom_right  // key j visible to query i iff j <= i + (Lk - Lq)    (FlashAttention-2)
};

// What one step of the score program does to a score s_ij (in the order of the expression).
enum class step_kind : unsigned char {
  multiply,             // s *= value
  divide,               // s /= value
  causal_top_left,      // j > i: s = value (the fill)
  causal_bottom_right,  // j > i + Lk - Lq: s = value
  key_lengths,          // j >= lengths[b]: s = value
  causal_lengths,       // j >= lengths[b] or j > i + lengths[b] - Lq: s = value (a KV cache: each item's
                        // queries are its last Lq tokens, bottom-right causal within its own length)
  key_padding,          // j >= length: s = value
  boolean_mask,         // !mask(b, h, i, j): s = value
  additive_mask,        // s += bias(b, h, i, j)
  key_interval,         // j outside [lo(i), hi(i)) of a named mask (attnx/util/key_range.hpp): s = value
  tanh,                 // s = tanh(s) (logit soft-capping: c tanh(s / c), with the factors around it)
  linear_bias,          // s += m_h (j - t), t = i + Lk - Lq, m_h = slopes[h] (ALiBi; one slope for every head
                        // when n_slopes is 1): T(m_h) * T(j - t), then added
  function,             // s = f(s, b, h, i, j) (fn.apply)
  mask_function         // !f(b, h, i, j): s = value (fn.apply; fn.cover says which tiles f blocks or allows whole)
};

// A function of the score and its position, compiled in the caller's translation unit into a loop over a tile of
// scores, which the kernels call once per tile: the callable is inlined there, the kernels stay compiled once.
// The tile's score (r, c), for query i0 + r and key j0 + c, is s[r * rs + c * cs], r < rows, c < cols.
template <class T>
struct tile_function {
  // function: s = f(s, b, h, i, j); mask_function: s = fill where f(b, h, i, j) is false.
  void (*apply)(const void* f, T* s, std::ptrdiff_t rs, std::ptrdiff_t cs, std::size_t rows, std::size_t cols,
                std::size_t b, std::size_t h, std::size_t i0, std::size_t j0, T fill) = nullptr;
  // mask_function: 0 if f blocks every score of the tile, 2 if it allows every one, else 1.
  int (*cover)(const void* f, std::size_t rows, std::size_t cols, std::size_t b, std::size_t h, std::size_t i0,
               std::size_t j0) = nullptr;
  const void* f = nullptr;  // the callable, alive while the kernel runs
};

// The named masks' key intervals (sliding_window, documents, prefix_lm, chunked): attnx/util/key_range.hpp.
using attnx::key_range;
using attnx::range_kind;

// One step of the score program: its kind and its operand.
template <class T>
struct score_step {
  step_kind kind = step_kind::multiply;
  T value = T(1);                         // factor, divisor or fill
  std::size_t length = 0;                 // key_padding
  const std::size_t* lengths = nullptr;   // key_lengths, causal_lengths: one per batch item, each <= Lk; linear_bias:
                                          // the keys each item holds (t = i + lengths[b] - Lq), or none (Lk)
  broadcast<const bool> mask{};           // boolean_mask: true = allowed
  broadcast<const std::uint8_t> blocks{}; // boolean_mask, optional: the mask's 8 x 8 blocks at (b, h, i / 8, j / 8):
                                          // 0 every key blocked, 1 some, 2 none (a summary kept across calls)
  broadcast<const T> bias{};              // additive_mask
  key_range range{};                      // key_interval
  const double* slopes = nullptr;         // linear_bias: n_slopes of them (1 or heads)
  std::size_t n_slopes = 0;
  tile_function<T> fn{};                  // function, mask_function
};

// At most this many steps per problem (an expression with more is evaluated without the kernel).
inline constexpr std::size_t max_score_steps = 8;

// How K and V are stored: in T, or (T = float only) as 16-bit attnx::bf16 / attnx::f16 values read into
// float registers (k16 and v16 then name them; k and v are unused).
enum class kv_storage : unsigned char { same, bf16, f16 };

// One attention computation for the kernels: operands as strided matrix stacks, shape, score program.
template <class T>  // float or double
struct attention_problem {
  strided<const T> q;  // (batch, heads, lq, dk)
  strided<const T> k;  // (batch, kv_heads, lk, dk)
  strided<const T> v;  // (batch, kv_heads, lk, dv)
  strided<T> o;        // (batch, heads, lq, dv)
  // Optional: the log-sum-exp of each row's scores, ln sum_j exp(s_ij), at lse.matrix(b, h)[i * lse.row]
  // (-inf for a row with no visible key, +inf for a row with a +inf score, NaN for a NaN row). With o, the
  // row's attention state (kernels/attention_state.hpp).
  strided<T> lse{};
  kv_storage kv = kv_storage::same;
  strided<const std::uint16_t> k16{}, v16{};  // kv == bf16 or f16: (batch, kv_heads, lk, dk / dv)
  std::size_t batch = 1, heads = 1, kv_heads = 1, lq = 0, lk = 0, dk = 0, dv = 0;
  std::array<score_step<T>, max_score_steps> steps{};
  std::size_t n_steps = 0;

  // The program, built step by step (each call appends; at most max_score_steps).
  attention_problem& multiply(T factor) { return push({step_kind::multiply, factor}); }
  attention_problem& divide(T divisor) { return push({step_kind::divide, divisor}); }
  attention_problem& causal(causal_kind c, T fill = -std::numeric_limits<T>::infinity()) {
    return push({c == causal_kind::top_left ? step_kind::causal_top_left : step_kind::causal_bottom_right, fill});
  }
  attention_problem& key_lengths(const std::size_t* lengths, T fill = -std::numeric_limits<T>::infinity()) {
    score_step<T> s{step_kind::key_lengths, fill};
    s.lengths = lengths;
    return push(s);
  }
  attention_problem& causal_lengths(const std::size_t* lengths, T fill = -std::numeric_limits<T>::infinity()) {
    score_step<T> s{step_kind::causal_lengths, fill};
    s.lengths = lengths;
    return push(s);
  }
  attention_problem& key_padding(std::size_t length, T fill = -std::numeric_limits<T>::infinity()) {
    score_step<T> s{step_kind::key_padding, fill};
    s.length = length;
    return push(s);
  }
  attention_problem& boolean_mask(broadcast<const bool> m, T fill = -std::numeric_limits<T>::infinity()) {
    score_step<T> s{step_kind::boolean_mask, fill};
    s.mask = m;
    return push(s);
  }
  attention_problem& additive_mask(broadcast<const T> bias) {
    score_step<T> s{step_kind::additive_mask, T(0)};
    s.bias = bias;
    return push(s);
  }
  attention_problem& key_interval(const key_range& r, T fill = -std::numeric_limits<T>::infinity()) {
    score_step<T> s{step_kind::key_interval, fill};
    s.range = r;
    return push(s);
  }
  attention_problem& tanh() { return push({step_kind::tanh, T(0)}); }
  attention_problem& linear_bias(const double* slopes, std::size_t n) {
    score_step<T> s{step_kind::linear_bias, T(0)};
    s.slopes = slopes;
    s.n_slopes = n;
    return push(s);
  }
  attention_problem& function(const tile_function<T>& f) {
    score_step<T> s{step_kind::function, T(0)};
    s.fn = f;
    return push(s);
  }
  attention_problem& mask_function(const tile_function<T>& f, T fill = -std::numeric_limits<T>::infinity()) {
    score_step<T> s{step_kind::mask_function, fill};
    s.fn = f;
    return push(s);
  }
  attention_problem& push(const score_step<T>& s) {
    if (n_steps == max_score_steps)
      ATTNX_THROW(std::length_error("attnx::kernels::attention_problem: more than " + std::to_string(max_score_steps) +
                              " score steps"));
    steps[n_steps++] = s;
    return *this;
  }
};

}  // namespace attnx::kernels
