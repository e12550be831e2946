// attnx: attention states and their merge, the mechanism behind split-K decoding and sequence-parallel
// attention (the public form is attnx::attention_state, attnx/state.hpp).
//
// Attention over a set of keys, for one query row, is determined by
//   m   a reference (the largest score, or any number: only differences matter)
//   l   sum_j exp(s_j - m)
//   o   sum_j exp(s_j - m) v_j          (unnormalised; the output is o / l)
// Two disjoint key sets merge exactly: with M = max(m_a, m_b), l = l_a e^(m_a - M) + l_b e^(m_b - M) and
// o likewise. A normalised output with its log-sum-exp is the state (m = lse, l = 1, o = output).
// Special values follow softmax's rules: a set with no visible key (l = 0, m = -inf) adds nothing; a +inf
// score (m = +inf, l = the number of +inf scores, o = the sum of their values) takes all the weight; NaN
// anywhere makes the row NaN.
#pragma once

#include <cstddef>
#include <limits>

#include "attnx/math/builtin_math.hpp"

namespace attnx::kernels {

// exp(x - m), the weight of x against the reference m, with softmax's rules for the special values: x = -inf
// (blocked, or a part with no visible key) weighs 0 whatever m; against m = +inf only x = +inf weighs (1:
// +inf scores share the weight), NaN stays NaN. Also the factor exp(m_old - m_new) by which a state is rescaled
// when its reference rises from m_old to m_new.
template <class T>
T weight_of(T x, T m) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  if (x == -inf) return T(0);
  if (m == inf) return x == inf ? T(1) : (x != x ? x : T(0));
  return math::rt::exp(x - m);
}

// The merged state of one row: the running reference m and sum of weights l (the output is written in place).
template <class T>
struct merged_row {
  T m, l;  // reference and sum of weights; o is written by merge_partials
};

// Merges the n partial states at first, first + stride, ...: each is m, l, then dv values of o.
// Writes the merged o (unnormalised) to out and returns m, l.
template <class T>
merged_row<T> merge_partials(std::size_t n, const T* first, std::ptrdiff_t stride, std::size_t dv, T* out) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  T big = -inf;
  bool nan = false;
  for (std::size_t c = 0; c < n; ++c) {
    const T m = first[static_cast<std::ptrdiff_t>(c) * stride];
    nan = nan || m != m;
    big = m > big ? m : big;
  }
  for (std::size_t x = 0; x < dv; ++x) out[x] = T(0);
  if (nan) {
    for (std::size_t x = 0; x < dv; ++x) out[x] = std::numeric_limits<T>::quiet_NaN();
    return {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::quiet_NaN()};
  }
  T l = 0;
  for (std::size_t c = 0; c < n; ++c) {
    const T* part = first + static_cast<std::ptrdiff_t>(c) * stride;
    const T f = weight_of(part[0], big);
    l += f * part[1];
    for (std::size_t x = 0; x < dv; ++x) out[x] += f * part[2 + x];
  }
  return {big, l};
}

// The normalised output (0 where l == 0) and ln sum_j exp(s_j) of a merged row.
template <class T>
T finish_row(merged_row<T> r, T* o, std::size_t dv) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  for (std::size_t x = 0; x < dv; ++x) o[x] = r.l == T(0) ? T(0) : o[x] / r.l;
  if (r.m != r.m || r.l != r.l) return r.l + r.m;  // NaN
  if (r.l == T(0)) return -inf;
  if (r.m == inf) return inf;
  return (r.m == -inf ? T(0) : r.m) + math::rt::log(r.l);
}

}  // namespace attnx::kernels
