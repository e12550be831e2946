// attnx kernels: attention_rows' definition, the evaluation of an attention problem with its scores stored (the path
// a context with the fused kernel off takes).
#pragma once

#include <cstddef>
#include <cstring>
#include <limits>

#include "attnx/kernels/gemm.hpp"
#include "attnx/kernels/impl/score_plan.hpp"
#include "attnx/kernels/rows.hpp"

ATTNX_OPTIMIZE_BEGIN
namespace attnx::kernels {
namespace detail {

// The score program on row i of (b, h), its lk stored scores s[j] = q_i . k_j: every step over the whole row in the
// expression's order (each element sees the steps in that order, as in the fused kernel).
template <class T>
void score_program_row(const attention_problem<T>& p, std::size_t b, std::size_t h, std::size_t i, T* s) {
  for (std::size_t st = 0; st < p.n_steps; ++st) {
    const score_step<T>& step = p.steps[st];
    switch (step.kind) {
      case step_kind::multiply:
        for (std::size_t j = 0; j < p.lk; ++j) s[j] *= step.value;
        break;
      case step_kind::divide:
        for (std::size_t j = 0; j < p.lk; ++j) s[j] /= step.value;
        break;
      case step_kind::boolean_mask:
        for (std::size_t j = 0; j < p.lk; ++j)
          if (!step.mask.at(b, h, i, j)) s[j] = step.value;
        break;
      case step_kind::additive_mask:
        for (std::size_t j = 0; j < p.lk; ++j) s[j] += step.bias.at(b, h, i, j);
        break;
      case step_kind::tanh:
        for (std::size_t j = 0; j < p.lk; ++j) s[j] = math::rt::tanh(s[j]);
        break;
      case step_kind::linear_bias:
        for (std::size_t j = 0; j < p.lk; ++j) s[j] += linear_bias_at(step, p, b, h, i, j);
        break;
      case step_kind::function:
      case step_kind::mask_function:
        step.fn.apply(step.fn.f, s, 0, 1, 1, p.lk, b, h, i, 0, step.value);
        break;
      default:  // a limit: the keys from it on (and below a key interval's start) take the step's value
        for (std::size_t j = step_limit(step, p, b, i); j < p.lk; ++j) s[j] = step.value;
        for (std::size_t j = 0, e = alg::min(p.lk, step_start(step, p, b, i)); j < e; ++j) s[j] = step.value;
        break;
    }
  }
}

// The softmax of lk scores in place, with the row evaluator's rules for special values (a NaN anywhere: the whole
// row NaN; no visible key: no weight anywhere; +inf scores share the weight); returns the log-sum-exp.
template <class T>
T softmax_row(T* s, std::size_t lk) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  T m = -inf;
  for (std::size_t j = 0; j < lk; ++j) m = (s[j] > m || s[j] != s[j]) && m == m ? s[j] : m;  // NaN sticks
  if (m != m) {
    for (std::size_t j = 0; j < lk; ++j) s[j] = std::numeric_limits<T>::quiet_NaN();
    return m;
  }
  if (m == -inf) {
    for (std::size_t j = 0; j < lk; ++j) s[j] = T(0);
    return -inf;
  }
  if (m == inf) {
    T count = 0;
    for (std::size_t j = 0; j < lk; ++j) count += s[j] == inf ? T(1) : T(0);
    for (std::size_t j = 0; j < lk; ++j) s[j] = s[j] == inf ? T(1) / count : T(0);
    return inf;
  }
  T sum = 0;
  for (std::size_t j = 0; j < lk; ++j) sum += (s[j] = math::rt::exp(s[j] - m));
  for (std::size_t j = 0; j < lk; ++j) s[j] /= sum;
  return m + math::rt::log(sum);
}

// Row i of (b, h) in plain loops (the blocked GEMM off): the scores by dot products, the weighted sum of V's rows in
// key order; s: lk elements of scratch.
template <class T>
void attention_row(const attention_problem<T>& p, std::size_t b, std::size_t h, std::size_t i, T* s) {
  const std::size_t g = h / (p.heads / p.kv_heads);
  const T* q = p.q.matrix(b, h) + static_cast<std::ptrdiff_t>(i) * p.q.row;
  const T* kb = p.k.matrix(b, g);
  const T* vb = p.v.matrix(b, g);
  for (std::size_t j = 0; j < p.lk; ++j) {
    const T* k = kb + static_cast<std::ptrdiff_t>(j) * p.k.row;
    T x = T(0);
    for (std::size_t c = 0; c < p.dk; ++c) x += q[c] * k[c];
    s[j] = x;
  }
  score_program_row(p, b, h, i, s);
  const T lse = softmax_row(s, p.lk);
  T* o = p.o.matrix(b, h) + static_cast<std::ptrdiff_t>(i) * p.o.row;
  for (std::size_t c = 0; c < p.dv; ++c) o[c] = T(0);
  for (std::size_t j = 0; j < p.lk; ++j) {
    const T* v = vb + static_cast<std::ptrdiff_t>(j) * p.v.row;
    for (std::size_t c = 0; c < p.dv; ++c) o[c] += s[j] * v[c];
  }
  if (p.lse.data) p.lse.matrix(b, h)[static_cast<std::ptrdiff_t>(i) * p.lse.row] = lse;
}

template <class T>
void attention_rows_plain(const attention_problem<T>& p, unsigned threads) {
  const std::size_t rows = p.batch * p.heads * p.lq;
  const double flops = 2.0 * double(rows) * double(p.lk) * double(p.dk + p.dv);
  const auto slots = static_cast<unsigned>(alg::min<std::size_t>(
      {alg::max(1u, threads), rows, static_cast<std::size_t>(alg::max(1.0, flops / flash_min_flops_per_thread))}));
  const std::size_t per_slot = alg::max<std::size_t>(p.lk, 1) * sizeof(T);
  const scratch_block scratch(per_slot * slots);
  exec::parallel_for(rows, slots, [&](std::size_t r, unsigned slot) {
    const std::size_t i = r % p.lq, bh = r / p.lq;
    attention_row(p, bh / p.heads, bh % p.heads, i, scratch.at<T>(slot * per_slot));
  });
}

// Through the blocked GEMM: K^T and V of each (item, KV head) packed once, then per (item, head, block of query
// rows) the block's scores S = Q K^T stored whole (rows x L_k), the score program and the softmax row by row, and
// O = P V. Each row's values depend only on its own block's arithmetic, never on the thread count.
template <class T>
void attention_rows_blocked(const attention_problem<T>& p, const gemm_ops<T>& ops, unsigned threads) {
  const std::size_t mr = ops.mr, nr = ops.nr;
  const std::size_t npk = (p.lk + nr - 1) / nr * nr, npv = (p.dv + nr - 1) / nr * nr;
  const bool shared = p.k.batch == 0 && p.v.batch == 0;  // one K and V for every item: packed once
  const std::size_t kv_items = (shared ? 1 : p.batch) * p.kv_heads;
  const std::size_t kt_size = (npk * p.dk + 15) / 16 * 16, v_size = (npv * p.lk + 15) / 16 * 16;
  gemm_buffer<T> packed;
  packed.allocate(kv_items * (kt_size + v_size));
  const double flops = 2.0 * double(p.batch * p.heads * p.lq) * double(p.lk) * double(p.dk + p.dv);
  const auto most = static_cast<unsigned>(alg::max(1.0, alg::min(double(threads), flops / gemm_min_flops_per_thread)));
  exec::parallel_for(kv_items, alg::min<unsigned>(most, static_cast<unsigned>(kv_items)), [&](std::size_t t, unsigned) {
    const std::size_t b = t / p.kv_heads, g = t % p.kv_heads;
    T* kt = packed.data() + t * (kt_size + v_size);
    const T* k = p.k.matrix(b, g);
    // K^T (dk x lk) in panels of NR keys: kt[q NR dk + c NR + jj] = K[q NR + jj][c], zero past the last key.
    for (std::size_t q0 = 0; q0 < npk; q0 += nr)
      for (std::size_t jj = 0; jj < nr; ++jj) {
        const std::size_t j = q0 + jj;
        T* out = kt + q0 * p.dk + jj;
        if (j < p.lk) {
          const T* kr = k + static_cast<std::ptrdiff_t>(j) * p.k.row;
          for (std::size_t c = 0; c < p.dk; ++c) out[c * nr] = kr[c];
        } else {
          for (std::size_t c = 0; c < p.dk; ++c) out[c * nr] = T(0);
        }
      }
    ops.pack(p.v.matrix(b, g), p.lk, p.dv, static_cast<std::size_t>(p.v.row), 0, p.lk, kt + kt_size);
  });

  const std::size_t mb = alg::min((ops.mb + mr - 1) / mr * mr, (p.lq + mr - 1) / mr * mr);
  const std::size_t per_head = (p.lq + mb - 1) / mb, items = p.batch * p.heads * per_head;
  scratch_layout layout;
  const std::size_t at_s = layout.add<T>(mb * npk), at_o = layout.add<T>(mb * npv), at_q = layout.add<T>(mb * p.dk);
  const std::size_t per_slot = layout.bytes;
  const unsigned slots = static_cast<unsigned>(alg::min<std::size_t>(most, items));
  const scratch_block scratch(per_slot * slots);
  exec::parallel_for(items, slots, [&](std::size_t item, unsigned slot) {
    const std::size_t bh = item / per_head, i0 = item % per_head * mb;
    const std::size_t b = bh / p.heads, h = bh % p.heads, g = h / (p.heads / p.kv_heads);
    const std::size_t m = alg::min(mb, p.lq - i0), mp = (m + mr - 1) / mr * mr;
    const T* kt = packed.data() + ((shared ? 0 : b) * p.kv_heads + g) * (kt_size + v_size);
    T* s = scratch.at<T>(slot * per_slot + at_s);
    T* o = scratch.at<T>(slot * per_slot + at_o);
    const T* q = p.q.matrix(b, h) + static_cast<std::ptrdiff_t>(i0) * p.q.row;
    std::size_t ldq = static_cast<std::size_t>(p.q.row);
    if (m != mp) {  // the kernel reads whole MR-row slices: a copy with zero rows after the last
      T* qp = scratch.at<T>(slot * per_slot + at_q);
      for (std::size_t r = 0; r < m; ++r) std::memcpy(qp + r * p.dk, q + r * ldq, p.dk * sizeof(T));
      alg::fill(qp + m * p.dk, qp + mp * p.dk, T(0));
      q = qp;
      ldq = p.dk;
    }
    ops.block(q, ldq, kt, m, p.dk, p.lk, s, npk, ops.kc);
    T* lse = p.lse.data ? p.lse.matrix(b, h) : nullptr;
    for (std::size_t r = 0; r < m; ++r) {
      score_program_row(p, b, h, i0 + r, s + r * npk);
      const T l = softmax_row(s + r * npk, p.lk);
      if (lse) lse[static_cast<std::ptrdiff_t>(i0 + r) * p.lse.row] = l;
    }
    for (std::size_t r = m; r < mp; ++r) alg::fill(s + r * npk, s + r * npk + p.lk, T(0));
    ops.block(s, npk, kt + kt_size, m, p.lk, p.dv, o, npv, ops.kc);
    ops.store(o, npv, m, p.dv, p.o.matrix(b, h) + static_cast<std::ptrdiff_t>(i0) * p.o.row,
              static_cast<std::size_t>(p.o.row), nullptr);
  });
}

}  // namespace detail

template <class T>
void attention_rows(const attention_problem<T>& p, simd::isa i, bool blocked_gemm, unsigned threads) {
  const std::size_t rows = p.batch * p.heads * p.lq;
  if (rows == 0) return;  // (nothing to compute, nor any lengths to check: an empty batch has none)
  detail::validate(p);
  if (p.kv != kv_storage::same)
    ATTNX_THROW(std::invalid_argument("attnx::kernels::attention_rows: keys and values stored in T only"));
  if (blocked_gemm && p.lk > 0 && p.dk > 0 && p.dv > 0)
    detail::attention_rows_blocked(p, detail::gemm_ops_for<T>(i), threads);
  else
    detail::attention_rows_plain(p, threads);
}

}  // namespace attnx::kernels
ATTNX_OPTIMIZE_END
