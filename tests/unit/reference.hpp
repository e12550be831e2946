// An independent reference for attention with a score program, written plainly in double precision
// from the semantics of docs/design.md ("Semantics of special values"), with no attnx code:
//
//   s_ij = q_i . k_j                                 (the dot product in double)
//   then each step of the program, in order, with the result rounded to T after each step (so that
//   float overflow, e.g. -FLT_MAX * 2 = -inf, happens where it happens in float):
//     multiply x / divide x, causal (top-left / bottom-right), key lengths, key padding, boolean mask:
//     the blocked score becomes the fill; additive mask: s += bias; tanh: s = tanh(s)
//   softmax over j: a row with a NaN score is NaN; a row whose max is -inf is 0; a row whose max is +inf
//   gives the +inf scores equal shares and the others 0; otherwise exp(s - m) / sum.
//   o_i = sum over j with w_ij != 0 of w_ij v_j.
//
// Where the result is unspecified (docs/design.md): a key with weight exactly 0 whose V row holds inf or
// NaN may or may not turn the row into NaN (0 * inf); such rows are reported and not compared. "Exactly 0"
// is in T: a weight the reference computes in double may underflow in T, and near T's smallest numbers
// the two paths' exp may round either way, so a non-finite V row whose weight is below 2^20 times T's
// smallest normal number makes the row unspecified too.
//
// check() compares an output against the reference: NaN where the reference is NaN and nowhere else,
// infinities and exact zeros where the reference has them, and elsewhere a difference within the
// first-order error bound of the kernel's floating-point type: the scores' rounding (eps * (|s| + sum
// |q_c k_c| * factors)) moves each weight by at most twice the largest score error, and the output by that
// times the largest |v|, plus a few ulp for exp and the sums.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace reference {

enum class step : unsigned char { multiply, divide, causal_top_left, causal_bottom_right, key_lengths, key_padding, boolean, additive, tanh };

struct score_step {
  score_step(step k = step::multiply, double v = 1) : kind(k), value(v) {}
  step kind = step::multiply;
  double value = 1;                      // factor, divisor or fill (a value of T)
  std::size_t length = 0;                // key_padding
  std::vector<std::size_t> lengths;      // key_lengths, one per batch item
  std::vector<unsigned char> allowed;    // boolean: (B, H, Lq, Lk), 1 = allowed
  std::vector<double> bias;              // additive: (B, H, Lq, Lk), values of T
};

// Problem (b, h) for b < batch, h < heads; K and V have kv_heads heads (query head h reads h / (heads /
// kv_heads)). Layouts: q (B, H, Lq, dk), k (B, Hkv, Lk, dk), v (B, Hkv, Lk, dv), all values of T.
struct problem {
  std::size_t batch = 1, heads = 1, kv_heads = 1, lq = 0, lk = 0, dk = 0, dv = 0;
  std::vector<double> q, k, v;
  std::vector<score_step> steps;
};

struct result {
  std::vector<double> o;                // (B, H, Lq, dv)
  std::vector<double> tolerance;        // per output row (B, H, Lq): the allowed difference
  std::vector<unsigned char> unspecified;  // per output row: 0 * (inf or NaN) in V met a zero weight
};

template <class T>
double round_to(double x) {
  return static_cast<double>(static_cast<T>(x));
}

inline bool blocked(const problem& p, const score_step& s, std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
  switch (s.kind) {
    case step::causal_top_left: return j > i;
    case step::causal_bottom_right: return double(j) > double(i) + double(p.lk) - double(p.lq);
    case step::key_lengths: return j >= s.lengths[b];
    case step::key_padding: return j >= s.length;
    case step::boolean: return !s.allowed[((b * p.heads + h) * p.lq + i) * p.lk + j];
    default: return false;
  }
}

template <class T>
result attention(const problem& p) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr double eps = std::numeric_limits<T>::epsilon();
  result r;
  r.o.assign(p.batch * p.heads * p.lq * p.dv, 0.0);
  r.tolerance.assign(p.batch * p.heads * p.lq, 0.0);
  r.unspecified.assign(p.batch * p.heads * p.lq, 0);
  std::vector<double> s(p.lk), err(p.lk), w(p.lk);
  for (std::size_t b = 0; b < p.batch; ++b)
    for (std::size_t h = 0; h < p.heads; ++h) {
      const std::size_t g = h / (p.heads / p.kv_heads);
      for (std::size_t i = 0; i < p.lq; ++i) {
        const std::size_t row = (b * p.heads + h) * p.lq + i;
        const double* qi = p.q.data() + row * p.dk;
        for (std::size_t j = 0; j < p.lk; ++j) {
          const double* kj = p.k.data() + ((b * p.kv_heads + g) * p.lk + j) * p.dk;
          double dot = 0, mag = 0;
          for (std::size_t c = 0; c < p.dk; ++c) {
            dot += qi[c] * kj[c];
            mag += std::abs(qi[c] * kj[c]);
          }
          double x = round_to<T>(dot);
          double e = mag * eps * double(p.dk + 2);  // the kernel's dot-product rounding
          for (const score_step& st : p.steps) {
            switch (st.kind) {
              case step::multiply:
                x = round_to<T>(x * st.value);
                e = e * std::abs(st.value) + std::abs(x) * eps;
                break;
              case step::divide:
                x = round_to<T>(x / st.value);
                e = e / std::abs(st.value) + std::abs(x) * 2 * eps;  // the kernel may multiply by 1/d
                break;
              case step::additive:
                x = round_to<T>(x + st.bias[row * p.lk + j]);
                e = e + std::abs(x) * eps;
                break;
              case step::tanh: {  // |tanh'| <= 1; the kernel's tanh is within 4 ulp
                x = std::tanh(x);
                e = e + std::abs(x) * 4 * eps;
                x = round_to<T>(x);
                break;
              }
              default:
                if (blocked(p, st, b, h, i, j)) {
                  x = st.value;
                  e = 0;
                }
            }
          }
          s[j] = x;
          err[j] = std::isfinite(e) ? e : 0;
        }
        // softmax
        bool nan = false;
        double m = -inf;
        for (std::size_t j = 0; j < p.lk; ++j) {
          if (s[j] != s[j]) nan = true;
          else m = std::max(m, s[j]);
        }
        double* o = r.o.data() + row * p.dv;
        if (nan) {
          std::fill_n(o, p.dv, std::numeric_limits<double>::quiet_NaN());
          continue;
        }
        double sum = 0;
        for (std::size_t j = 0; j < p.lk; ++j) {
          if (m == -inf) w[j] = 0;
          else if (m == inf) w[j] = s[j] == inf ? 1 : 0;
          else w[j] = std::exp(s[j] - m);
          sum += w[j];
        }
        double worst_err = 0, vmax = 0;
        for (std::size_t j = 0; j < p.lk; ++j) {
          const double* vj = p.v.data() + ((b * p.kv_heads + g) * p.lk + j) * p.dv;
          bool finite_v = true;
          for (std::size_t c = 0; c < p.dv; ++c) finite_v = finite_v && std::isfinite(vj[c]);
          if (!finite_v && w[j] / sum < double(std::numeric_limits<T>::min()) * 1048576.0) r.unspecified[row] = 1;
          if (w[j] == 0) continue;
          w[j] /= sum;
          if (std::isfinite(s[j])) worst_err = std::max(worst_err, err[j]);
          for (std::size_t c = 0; c < p.dv; ++c) {
            o[c] += w[j] * vj[c];
            if (std::isfinite(vj[c])) vmax = std::max(vmax, std::abs(vj[c]));
          }
        }
        // A score error moves the weights by at most about twice itself (relative), a weight error moves the
        // output by the largest |v|; exp and the sums add a few ulp.
        r.tolerance[row] = (2 * std::min(worst_err, 1.0) + 64 * eps) * vmax + std::numeric_limits<T>::min();
        if (worst_err >= 1) r.tolerance[row] = 2 * vmax + std::numeric_limits<T>::min();  // ill-conditioned row
      }
    }
  return r;
}

// Compares got (the output in the reference's layout) with the reference; returns "" when it agrees, else
// the first disagreement in words.
template <class Got>
std::string check(const problem& p, const result& ref, const Got& got) {
  for (std::size_t row = 0; row < p.batch * p.heads * p.lq; ++row) {
    if (ref.unspecified[row]) continue;
    for (std::size_t c = 0; c < p.dv; ++c) {
      const double want = ref.o[row * p.dv + c], have = double(got(row, c));
      const std::string where = "row " + std::to_string(row) + " column " + std::to_string(c) + ": got " +
                                std::to_string(have) + ", want " + std::to_string(want);
      if (want != want) {
        if (have == have) return where + " (NaN expected)";
        continue;
      }
      if (have != have) return where + " (unexpected NaN)";
      if (std::isinf(want) || std::isinf(have)) {
        if (want != have) return where + " (infinity)";
        continue;
      }
      if (!(std::abs(have - want) <= ref.tolerance[row])) return where + " (tolerance " + std::to_string(ref.tolerance[row]) + ")";
    }
  }
  return "";
}

}  // namespace reference
