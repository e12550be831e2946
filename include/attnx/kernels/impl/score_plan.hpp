// attnx kernels: the score program as the kernels run it, planned once per call (fast path, folded factor,
// which blocked keys may be skipped).
#pragma once

#include "attnx/kernels/impl/common.hpp"

ATTNX_OPTIMIZE_BEGIN
namespace attnx::kernels::detail {

// The keys item b holds for a linear bias: its lengths[b] over a ragged cache, else Lk.
template <class T>
std::size_t bias_keys(const score_step<T>& s, const attention_problem<T>& p, std::size_t b) {
  return s.lengths ? s.lengths[b] : p.lk;
}
// ALiBi's bias of key j for query i of head h, item b: T(m_h) * T(j - t), t = i + keys - Lq (an integer, exact in T).
template <class T>
T linear_bias_at(const score_step<T>& s, const attention_problem<T>& p, std::size_t b, std::size_t h, std::size_t i,
                 std::size_t j) {
  const double m = s.slopes[s.n_slopes == 1 ? 0 : h];
  return static_cast<T>(m) * (static_cast<T>(j) - static_cast<T>(i + bias_keys(s, p, b)) + static_cast<T>(p.lq));
}

// Keys j < step_start(...) are blocked by limit step s for query i of batch item b (0 but for a key interval).
template <class T>
std::size_t step_start(const score_step<T>& s, const attention_problem<T>& p, std::size_t b, std::size_t i) {
  return s.kind == step_kind::key_interval ? attnx::range_span(s.range, p.lq, p.lk, b, i).lo : 0;
}

// Keys j >= step_limit(...) are blocked by limit step s for query i of batch item b (in [0, Lk]).
template <class T>
std::size_t step_limit(const score_step<T>& s, const attention_problem<T>& p, std::size_t b, std::size_t i) {
  switch (s.kind) {
    case step_kind::key_interval: return attnx::range_span(s.range, p.lq, p.lk, b, i).hi;
    case step_kind::causal_top_left: return alg::min(p.lk, i + 1);
    case step_kind::causal_bottom_right: {
      const auto end = static_cast<std::ptrdiff_t>(i + 1 + p.lk) - static_cast<std::ptrdiff_t>(p.lq);
      return end <= 0 ? 0 : alg::min(p.lk, static_cast<std::size_t>(end));
    }
    case step_kind::key_lengths: return alg::min(p.lk, s.lengths[b]);
    case step_kind::causal_lengths: {
      const std::size_t len = alg::min(p.lk, s.lengths[b]);
      const auto end = static_cast<std::ptrdiff_t>(i + 1 + len) - static_cast<std::ptrdiff_t>(p.lq);
      return end <= 0 ? 0 : alg::min(len, static_cast<std::size_t>(end));
    }
    case step_kind::key_padding: return alg::min(p.lk, s.length);
    default: return p.lk;
  }
}

// What the kernel makes of the score program, once per call.
//  - Fast path: when the program is a multiplication by a positive normal number s followed only by
//    masks that fill with -inf (the common case), the kernel keeps the raw dots q . k, takes the row max of
//    s * dot (= s * max dot), and computes the weights as 2^(dot * s log2 e - m log2 e) with one FMA: the
//    scaled scores s * dot themselves are never rounded, which changes nothing but rounding.
//  - Otherwise a first multiplication is folded into the store of the scores and the other steps run
//    on the tile.
//  - x / d becomes x * (1/d) when 1/d is a normal number, or d is 0, inf or NaN: the results are the same
//    but for rounding (1 ulp); a division stays a division when 1/d would overflow or be subnormal.
//  - Skipping: the keys a limit step blocks (causal, key lengths, key padding) need not be read at all
//    when the value they end with, after the steps that follow, is -inf (weight exactly 0: "hard"), or a
//    finite number F whose weight exp(F - m_i) has underflowed to exactly 0 for every row of the block
//    by the time the kernel gets there ("soft"; until then they are computed like any other key). A step
//    whose blocked keys could end as +inf or NaN, or meet an additive mask, is not skipped, with one
//    exception: an additive mask that only multiplications by positive numbers follow turns -inf into
//    -inf unless the bias is +inf or NaN there; then the skipped part of the bias is scanned for those
//    ("poison"), and a row that meets one is NaN, as -inf + inf is.
template <class T>
struct score_plan {
  std::array<score_step<T>, max_score_steps> steps{};
  std::size_t n = 0;
  T folded = T(1);
  std::size_t first = 0;  // the first step applied as a pass over the scores
  bool fast = false;      // raw dots in the tile, `folded` applied in the exponent
  std::array<std::size_t, max_score_steps> limits{};  // indices of the limit steps
  std::array<bool, max_score_steps> skippable{};      // per limit step
  std::size_t n_limits = 0;
  bool any_skippable = false;
  T skip_final = -std::numeric_limits<T>::infinity();  // -inf: hard skipping; finite: soft
  std::ptrdiff_t poison = -1;                          // the additive step scanned in the skipped part
  bool programmed = false;  // a step after the folded factor other than limits (masks, biases, factors), or a start
  // Keys below a skippable key interval's start are skipped too where the skip is hard and no bias is scanned
  // (soft skipping needs the keys' maximum first; poison would need the skipped part scanned).
  bool skip_starts = false;
  bool ranged = false;  // some limit step has a start (a key interval): the keys below it take the program
  // Boolean mask and mask function steps whose blocked scores end as -inf (every later fill -inf, no bias after): a
  // tile they block entirely weighs exactly 0 and is skipped; one bit per step index.
  unsigned hard_masks = 0;
};

template <class T>
score_plan<T> make_plan(const attention_problem<T>& p) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  score_plan<T> plan;
  plan.n = p.n_steps;
  for (std::size_t s = 0; s < plan.n; ++s) {
    score_step<T>& st = plan.steps[s] = p.steps[s];
    if (st.kind == step_kind::divide) {
      const T r = T(1) / st.value, a = math::rt::abs(r);
      if (!math::rt::isfinite(st.value) || st.value == T(0) ||
          (a >= std::numeric_limits<T>::min() && a <= std::numeric_limits<T>::max())) {
        st.kind = step_kind::multiply;
        st.value = r;
      }
    }
    if (is_limit(st.kind)) plan.limits[plan.n_limits++] = s;
  }
  if (plan.n > 0 && plan.steps[0].kind == step_kind::multiply) {
    plan.folded = plan.steps[0].value;
    plan.first = 1;
  }
  for (std::size_t s = plan.first; s < plan.n; ++s) plan.programmed = plan.programmed || !is_limit(plan.steps[s].kind);
  plan.fast = plan.folded > T(0) && math::rt::isnormal(plan.folded) &&
              alg::all_of(plan.steps.begin() + static_cast<std::ptrdiff_t>(plan.first),
                          plan.steps.begin() + static_cast<std::ptrdiff_t>(plan.n),
                          [](const score_step<T>& st) { return is_replace(st.kind) && st.value == -inf; });
  std::array<bool, max_score_steps> poisoned{};
  for (std::size_t li = 0; li < plan.n_limits; ++li) {
    const std::size_t t = plan.limits[li];
    std::array<T, max_score_steps + 1> vals{};
    std::size_t nv = 0, additive_at = plan.n;
    vals[nv++] = plan.steps[t].value;
    bool ok = true;
    for (std::size_t u = t + 1; u < plan.n && ok; ++u) {
      const score_step<T>& su = plan.steps[u];
      if (additive_at < plan.n) {  // after the additive step: positive, finite factors only
        ok = is_scale(su.kind) && su.value > T(0) && su.value < inf;
      } else if (su.kind == step_kind::multiply) {
        for (std::size_t v = 0; v < nv; ++v) vals[v] *= su.value;
      } else if (su.kind == step_kind::divide) {
        for (std::size_t v = 0; v < nv; ++v) vals[v] /= su.value;
      } else if (is_replace(su.kind)) {
        vals[nv++] = su.value;
      } else if (su.kind == step_kind::tanh) {
        for (std::size_t v = 0; v < nv; ++v) vals[v] = math::rt::tanh(vals[v]);
      } else if (su.kind == step_kind::function) {  // the caller's function may make anything of a fill
        ok = false;
      } else if (su.kind == step_kind::linear_bias) {  // a finite number added: only -inf stays what it was
        ok = alg::all_of(vals.begin(), vals.begin() + static_cast<std::ptrdiff_t>(nv), [](T x) { return x == -inf; });
      } else {
        additive_at = u;
      }
    }
    if (!ok) continue;
    if (additive_at < plan.n) {
      if (!alg::all_of(vals.begin(), vals.begin() + static_cast<std::ptrdiff_t>(nv), [](T x) { return x == -inf; })) continue;
      plan.poison = static_cast<std::ptrdiff_t>(additive_at);
      poisoned[li] = true;
    } else {
      if (!alg::all_of(vals.begin(), vals.begin() + static_cast<std::ptrdiff_t>(nv), [](T x) { return x == x && x != inf; }))
        continue;
      for (std::size_t v = 0; v < nv; ++v) plan.skip_final = alg::max(plan.skip_final, vals[v]);
    }
    plan.skippable[li] = true;
  }
  if (plan.poison >= 0 && plan.skip_final != -inf) {  // soft skipping would have to scan the bias too: don't skip those
    for (std::size_t li = 0; li < plan.n_limits; ++li)
      if (poisoned[li]) plan.skippable[li] = false;
    plan.poison = -1;
  }
  for (std::size_t li = 0; li < plan.n_limits; ++li) {
    plan.any_skippable = plan.any_skippable || plan.skippable[li];
    plan.ranged = plan.ranged || plan.steps[plan.limits[li]].kind == step_kind::key_interval;
  }
  for (std::size_t t = 0; t < plan.n; ++t) {
    const step_kind kt = plan.steps[t].kind;
    if ((kt != step_kind::boolean_mask && kt != step_kind::mask_function) || plan.steps[t].value != -inf) continue;
    bool hard = true;
    for (std::size_t u = t + 1; u < plan.n && hard; ++u) {
      const score_step<T>& su = plan.steps[u];
      hard = is_scale(su.kind)                   ? su.value > T(0) && su.value < inf
             : su.kind == step_kind::linear_bias ? true
                                                 : is_replace(su.kind) && su.value == -inf;
    }
    if (hard) plan.hard_masks |= 1u << t;
  }
  plan.skip_starts = plan.ranged && plan.any_skippable && plan.skip_final == -inf && plan.poison < 0;
  plan.programmed = plan.programmed || plan.ranged;  // (the decode loops: no key is clear of the program)
  return plan;
}

// Keys j >= skip_limit(...) may be left out for query i of batch item b (Lk when nothing is skipped).
template <class T>
std::size_t skip_limit(const attention_problem<T>& p, const score_plan<T>& plan, std::size_t b, std::size_t i) {
  std::size_t lim = p.lk;
  for (std::size_t li = 0; li < plan.n_limits; ++li)
    if (plan.skippable[li]) lim = alg::min(lim, step_limit(plan.steps[plan.limits[li]], p, b, i));
  return lim;
}

// Keys j < skip_start(...) may be left out for query i of batch item b (0 when nothing is skipped below).
template <class T>
std::size_t skip_start(const attention_problem<T>& p, const score_plan<T>& plan, std::size_t b, std::size_t i) {
  std::size_t start = 0;
  if (plan.skip_starts)
    for (std::size_t li = 0; li < plan.n_limits; ++li)
      if (plan.skippable[li]) start = alg::max(start, step_start(plan.steps[plan.limits[li]], p, b, i));
  return start;
}

// The problem's rules the front end cannot check at compile time (std::invalid_argument, std::out_of_range).
template <class T>
void validate(const attention_problem<T>& p) {
  if (p.kv_heads == 0 || p.heads % p.kv_heads != 0)
    ATTNX_THROW(std::invalid_argument("attnx::kernels::flash_attention: heads (" + std::to_string(p.heads) +
                                ") must be a multiple of kv_heads (" + std::to_string(p.kv_heads) + ")"));
  if (p.kv != kv_storage::same && !std::is_same_v<T, float>)
    ATTNX_THROW(std::invalid_argument("attnx::kernels::flash_attention: bf16 / f16 keys and values need float queries"));
  if (p.n_steps > max_score_steps) ATTNX_THROW(std::invalid_argument("attnx::kernels::flash_attention: too many score steps"));
  for (std::size_t s = 0; s < p.n_steps; ++s) {
    const score_step<T>& st = p.steps[s];
    if (st.kind == step_kind::key_lengths || st.kind == step_kind::causal_lengths) {
      if (!st.lengths) ATTNX_THROW(std::invalid_argument("attnx::kernels::flash_attention: key_lengths without lengths"));
      for (std::size_t b = 0; b < p.batch; ++b)
        if (st.lengths[b] > p.lk)
          ATTNX_THROW(std::out_of_range(std::string("attnx: mask: ") +
                                  (st.kind == step_kind::key_lengths ? "key_lengths[" : "causal_lengths[") +
                                  std::to_string(b) + "] = " + std::to_string(st.lengths[b]) + " exceeds the " +
                                  std::to_string(p.lk) + " keys"));
    } else if (st.kind == step_kind::key_padding && st.length > p.lk) {
      ATTNX_THROW(std::out_of_range("attnx: mask: the key padding length " + std::to_string(st.length) + " exceeds the " +
                              std::to_string(p.lk) + " keys"));
    } else if (st.kind == step_kind::key_interval) {
      attnx::check_key_range(st.range, p.lq, p.lk);
    } else if (st.kind == step_kind::linear_bias && (!st.slopes || (st.n_slopes != 1 && st.n_slopes != p.heads))) {
      ATTNX_THROW(std::invalid_argument("attnx: alibi: " + std::to_string(st.n_slopes) + " slopes for " +
                                        std::to_string(p.heads) + " heads (one per head, or one for all)"));
    } else if ((st.kind == step_kind::boolean_mask && !st.mask.data) ||
               (st.kind == step_kind::additive_mask && !st.bias.data)) {
      ATTNX_THROW(std::invalid_argument("attnx::kernels::flash_attention: a mask step without its data"));
    }
  }
}

}  // namespace attnx::kernels::detail
ATTNX_OPTIMIZE_END
