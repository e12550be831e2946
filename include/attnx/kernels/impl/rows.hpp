// attnx kernels: attention_rows' definition, the row-by-row evaluation of an attention problem (the path a context
// with the fused kernel off takes).
#pragma once

#include <cstddef>
#include <limits>

#include "attnx/kernels/impl/score_plan.hpp"
#include "attnx/kernels/rows.hpp"

ATTNX_OPTIMIZE_BEGIN
namespace attnx::kernels {
namespace detail {

// Row i of (b, h): the scores of every key through the program, the softmax with the row evaluator's rules, then
// the weighted sum of V's rows in key order; s: lk elements of scratch.
template <class T>
void attention_row(const attention_problem<T>& p, std::size_t b, std::size_t h, std::size_t i, T* s) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  const std::size_t g = h / (p.heads / p.kv_heads);
  const T* q = p.q.matrix(b, h) + static_cast<std::ptrdiff_t>(i) * p.q.row;
  const T* kb = p.k.matrix(b, g);
  const T* vb = p.v.matrix(b, g);
  for (std::size_t j = 0; j < p.lk; ++j) {
    const T* k = kb + static_cast<std::ptrdiff_t>(j) * p.k.row;
    T x = T(0);
    for (std::size_t c = 0; c < p.dk; ++c) x += q[c] * k[c];
    for (std::size_t st = 0; st < p.n_steps; ++st) {
      const score_step<T>& step = p.steps[st];
      switch (step.kind) {
        case step_kind::multiply: x *= step.value; break;
        case step_kind::divide: x /= step.value; break;
        case step_kind::boolean_mask:
          if (!step.mask.at(b, h, i, j)) x = step.value;
          break;
        case step_kind::additive_mask: x += step.bias.at(b, h, i, j); break;
        default:  // a limit
          if (j >= step_limit(step, p, b, i)) x = step.value;
          break;
      }
    }
    s[j] = x;
  }
  T m = -inf;
  for (std::size_t j = 0; j < p.lk; ++j) m = (s[j] > m || s[j] != s[j]) && m == m ? s[j] : m;  // NaN sticks
  T lse;
  if (m != m) {  // NaN anywhere: the whole row is NaN
    for (std::size_t j = 0; j < p.lk; ++j) s[j] = std::numeric_limits<T>::quiet_NaN();
    lse = m;
  } else if (m == -inf) {  // no visible key: no weight anywhere
    for (std::size_t j = 0; j < p.lk; ++j) s[j] = T(0);
    lse = -inf;
  } else if (m == inf) {  // +inf scores share the weight
    T count = 0;
    for (std::size_t j = 0; j < p.lk; ++j) count += s[j] == inf ? T(1) : T(0);
    for (std::size_t j = 0; j < p.lk; ++j) s[j] = s[j] == inf ? T(1) / count : T(0);
    lse = inf;
  } else {
    T sum = 0;
    for (std::size_t j = 0; j < p.lk; ++j) sum += (s[j] = math::rt::exp(s[j] - m));
    for (std::size_t j = 0; j < p.lk; ++j) s[j] /= sum;
    lse = m + math::rt::log(sum);
  }
  T* o = p.o.matrix(b, h) + static_cast<std::ptrdiff_t>(i) * p.o.row;
  for (std::size_t c = 0; c < p.dv; ++c) o[c] = T(0);
  for (std::size_t j = 0; j < p.lk; ++j) {
    const T* v = vb + static_cast<std::ptrdiff_t>(j) * p.v.row;
    for (std::size_t c = 0; c < p.dv; ++c) o[c] += s[j] * v[c];
  }
  if (p.lse.data) p.lse.matrix(b, h)[static_cast<std::ptrdiff_t>(i) * p.lse.row] = lse;
}

}  // namespace detail

template <class T>
void attention_rows(const attention_problem<T>& p, unsigned threads) {
  const std::size_t rows = p.batch * p.heads * p.lq;
  if (rows == 0) return;  // (nothing to compute, nor any lengths to check: an empty batch has none)
  detail::validate(p);
  if (p.kv != kv_storage::same)
    ATTNX_THROW(std::invalid_argument("attnx::kernels::attention_rows: keys and values stored in T only"));
  const double flops = 2.0 * double(rows) * double(p.lk) * double(p.dk + p.dv);
  const auto slots = static_cast<unsigned>(
      alg::min<std::size_t>({alg::max(1u, threads), rows, static_cast<std::size_t>(alg::max(1.0, flops / detail::flash_min_flops_per_thread))}));
  const detail::scratch_block scratch(alg::max<std::size_t>(p.lk, 1) * sizeof(T) * slots);
  exec::parallel_for(rows, slots, [&](std::size_t r, unsigned slot) {
    const std::size_t i = r % p.lq, bh = r / p.lq;
    detail::attention_row(p, bh / p.heads, bh % p.heads, i, scratch.at<T>(slot * alg::max<std::size_t>(p.lk, 1) * sizeof(T)));
  });
}

}  // namespace attnx::kernels
ATTNX_OPTIMIZE_END
