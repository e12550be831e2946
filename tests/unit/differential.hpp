// Random attention problems for the differential tests: a generator driven by any source of random
// numbers (a seeded generator in tests/unit/test_differential.cpp, the fuzzer's bytes in
// tests/fuzz/fuzz_kernel.cpp), the same problem for the fused kernel (kernels::attention_problem) and for
// the double reference (reference.hpp), and the comparison.
//
// Sizes are drawn from 0, 1, 3, 17, 33, 65, 130 (not multiples of any tile), head groupings, layouts
// with interleaved heads or shared K/V, and values with NaN, +-inf, subnormals, +-1e4 and zeros sprinkled
// in; score programs of up to 6 steps in any order: scales (positive, negative, zero, huge, tiny),
// temperatures, causal masks of both alignments, key lengths, key padding, boolean masks and biases of
// every broadcast shape, with fills -inf, -1e9, -FLT_MAX or any finite value.
#pragma once

#include <attnx/kernels/flash_attention.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "reference.hpp"

namespace differential {

// Any source of 32-bit random numbers.
struct source {
  virtual ~source() = default;
  virtual std::uint32_t next() = 0;
  std::size_t below(std::size_t n) { return n ? next() % n : 0; }
  bool chance(unsigned percent) { return below(100) < percent; }
  double uniform() { return double(next()) / 4294967296.0; }
  double normal() {  // Box-Muller, two values per draw
    if (spare_ok) {
      spare_ok = false;
      return spare;
    }
    const double u = (double(next()) + 1) / 4294967297.0, v = uniform();
    const double rad = std::sqrt(-2 * std::log(u)), ang = 6.283185307179586 * v;
    spare = rad * std::sin(ang);
    spare_ok = true;
    return rad * std::cos(ang);
  }

 private:
  double spare = 0;
  bool spare_ok = false;
};

template <class T>
struct instance {
  reference::problem ref;                       // logical layout, values of T
  std::vector<T> q, k, v, o;                    // the kernel's buffers (layout below)
  std::vector<T> bias_mem[attnx::kernels::max_score_steps];
  std::unique_ptr<bool[]> mask_mem[attnx::kernels::max_score_steps];
  std::vector<std::size_t> lengths_mem[attnx::kernels::max_score_steps];
  attnx::kernels::attention_problem<T> p;
  bool interleaved = false, shared_kv = false;
  std::string description;

  // Offset of logical (b, h, i, c) in a buffer of nh heads, nr rows, d columns.
  std::size_t at(std::size_t b, std::size_t h, std::size_t i, std::size_t c, std::size_t nh, std::size_t nr,
                 std::size_t d, bool shared) const {
    const std::size_t bb = shared ? 0 : b;
    return interleaved ? ((bb * nr + i) * nh + h) * d + c : ((bb * nh + h) * nr + i) * d + c;
  }
  double out(std::size_t row, std::size_t c) const {  // row = (b * heads + h) * lq + i
    const std::size_t i = row % ref.lq, h = (row / ref.lq) % ref.heads, b = row / (ref.lq * ref.heads);
    return double(o[at(b, h, i, c, ref.heads, ref.lq, ref.dv, false)]);
  }
};

template <class T>
T special_or(source& r, double x, unsigned rate) {
  if (!r.chance(rate)) return T(x);
  switch (r.below(8)) {
    case 0: return std::numeric_limits<T>::quiet_NaN();
    case 1: return std::numeric_limits<T>::infinity();
    case 2: return -std::numeric_limits<T>::infinity();
    case 3: return std::numeric_limits<T>::denorm_min() * T(1 + r.below(100));
    case 4: return T(1e4);
    case 5: return T(-1e4);
    case 6: return T(0);
    default: return T(-0.0);
  }
}

template <class T>
T fill_value(source& r) {
  switch (r.below(5)) {
    case 0:
    case 1: return -std::numeric_limits<T>::infinity();
    case 2: return T(-1e9);
    case 3: return std::numeric_limits<T>::lowest();
    default: return T(r.normal() * 20);
  }
}

inline std::size_t size_from(source& r) {
  static constexpr std::size_t sizes[] = {0, 1, 1, 1, 3, 3, 3, 3, 5, 17, 17, 17, 33, 33, 65, 130};
  return sizes[r.below(std::size(sizes))];
}

// A problem; `specials`: per-mille-ish rate of special values in Q, K, V and biases (0 for none).
template <class T>
void make(instance<T>& in, source& r) {
  namespace ak = attnx::kernels;
  reference::problem& p = in.ref;
  static constexpr std::size_t heads_kv[][2] = {{1, 1}, {1, 1}, {2, 1}, {2, 2}, {3, 1}, {4, 2}};
  const auto& hk = heads_kv[r.below(std::size(heads_kv))];
  p.batch = 1 + r.below(2);
  p.heads = hk[0];
  p.kv_heads = hk[1];
  p.lq = size_from(r);
  p.lk = r.chance(30) ? p.lq : size_from(r);
  if (p.lq * p.lk > 2000) p.batch = 1;  // the large ones once per batch item (keeps 10^5 problems under a minute)
  static constexpr std::size_t dims[] = {1, 1, 3, 3, 5, 8, 8, 16, 17, 33, 64};
  p.dk = dims[r.below(std::size(dims))];
  p.dv = dims[r.below(std::size(dims))];
  in.interleaved = r.chance(30);
  in.shared_kv = p.batch > 1 && r.chance(20);
  const unsigned rate = r.chance(50) ? 0 : unsigned(1 + r.below(3));
  const double magnitude = r.chance(80) ? 1.0 : (r.chance(50) ? 30.0 : 1e4);

  // values: logical arrays in the reference, the same numbers in the kernel's layout
  const std::size_t kvb = in.shared_kv ? 1 : p.batch;
  p.q.resize(p.batch * p.heads * p.lq * p.dk);
  p.k.resize(p.batch * p.kv_heads * p.lk * p.dk);
  p.v.resize(p.batch * p.kv_heads * p.lk * p.dv);
  in.q.assign(p.batch * p.heads * p.lq * p.dk, T(0));
  in.k.assign(kvb * p.kv_heads * p.lk * p.dk, T(0));
  in.v.assign(kvb * p.kv_heads * p.lk * p.dv, T(0));
  in.o.assign(p.batch * p.heads * p.lq * p.dv, T(-7777));
  for (std::size_t b = 0; b < p.batch; ++b) {
    for (std::size_t h = 0; h < p.heads; ++h)
      for (std::size_t i = 0; i < p.lq; ++i)
        for (std::size_t c = 0; c < p.dk; ++c) {
          const T x = special_or<T>(r, r.normal() * magnitude, rate);
          in.q[in.at(b, h, i, c, p.heads, p.lq, p.dk, false)] = x;
          p.q[((b * p.heads + h) * p.lq + i) * p.dk + c] = double(x);
        }
    for (std::size_t h = 0; h < p.kv_heads; ++h)
      for (std::size_t j = 0; j < p.lk; ++j) {
        for (std::size_t c = 0; c < p.dk; ++c) {
          const bool first = !in.shared_kv || b == 0;
          T x = first ? special_or<T>(r, r.normal() * magnitude, rate) : in.k[in.at(b, h, j, c, p.kv_heads, p.lk, p.dk, true)];
          if (first) in.k[in.at(b, h, j, c, p.kv_heads, p.lk, p.dk, in.shared_kv)] = x;
          p.k[((b * p.kv_heads + h) * p.lk + j) * p.dk + c] = double(x);
        }
        for (std::size_t c = 0; c < p.dv; ++c) {
          const bool first = !in.shared_kv || b == 0;
          T x = first ? special_or<T>(r, r.normal(), rate) : in.v[in.at(b, h, j, c, p.kv_heads, p.lk, p.dv, true)];
          if (first) in.v[in.at(b, h, j, c, p.kv_heads, p.lk, p.dv, in.shared_kv)] = x;
          p.v[((b * p.kv_heads + h) * p.lk + j) * p.dv + c] = double(x);
        }
      }
  }
  const auto strides = [&](std::size_t nh, std::size_t nr, std::size_t d, bool shared) {
    ak::strided<const T> s;
    const auto D = std::ptrdiff_t(d), H = std::ptrdiff_t(nh), N = std::ptrdiff_t(nr);
    s.batch = shared ? 0 : H * N * D;
    s.head = in.interleaved ? D : N * D;
    s.row = in.interleaved ? H * D : D;
    return s;
  };
  ak::attention_problem<T>& kp = in.p;
  kp = {};
  kp.q = strides(p.heads, p.lq, p.dk, false);
  kp.q.data = in.q.data();
  kp.k = strides(p.kv_heads, p.lk, p.dk, in.shared_kv);
  kp.k.data = in.k.data();
  kp.v = strides(p.kv_heads, p.lk, p.dv, in.shared_kv);
  kp.v.data = in.v.data();
  const auto os = strides(p.heads, p.lq, p.dv, false);
  kp.o = {in.o.data(), os.batch, os.head, os.row};
  kp.batch = p.batch, kp.heads = p.heads, kp.kv_heads = p.kv_heads;
  kp.lq = p.lq, kp.lk = p.lk, kp.dk = p.dk, kp.dv = p.dv;

  // the score program
  p.steps.clear();
  in.description = "B=" + std::to_string(p.batch) + " H=" + std::to_string(p.heads) + "/" + std::to_string(p.kv_heads) +
                   " Lq=" + std::to_string(p.lq) + " Lk=" + std::to_string(p.lk) + " dk=" + std::to_string(p.dk) +
                   " dv=" + std::to_string(p.dv) + (in.interleaved ? " interleaved" : "") + (in.shared_kv ? " shared-kv" : "") +
                   " specials=" + std::to_string(rate) + " magnitude=" + std::to_string(magnitude) + " steps:";
  const std::size_t n_steps = (r.chance(85) ? 1 : 0) + r.below(5);
  const std::size_t full = p.batch * p.heads * p.lq * p.lk;
  for (std::size_t s = 0; s < n_steps && s < ak::max_score_steps; ++s) {
    reference::score_step st;
    ak::score_step<T> ks;
    const std::size_t kind = (s == 0 && r.chance(85)) ? 0 : r.below(8);
    if (kind <= 1) {  // a scale or a temperature
      double f = 1 / std::sqrt(double(p.dk));
      switch (r.below(10)) {
        case 0: f = -0.5; break;
        case 1: f = r.chance(50) ? 0.0 : std::numeric_limits<double>::infinity(); break;
        case 2: f = 1e-3; break;
        case 3: f = 7.0; break;
        default: break;
      }
      const T ft = T(f);
      st = {kind == 0 ? reference::step::multiply : reference::step::divide, double(ft)};
      ks = {kind == 0 ? ak::step_kind::multiply : ak::step_kind::divide, ft};
    } else if (kind == 2 || kind == 3) {
      const T fill = fill_value<T>(r);
      st = {kind == 2 ? reference::step::causal_top_left : reference::step::causal_bottom_right, double(fill)};
      ks = {kind == 2 ? ak::step_kind::causal_top_left : ak::step_kind::causal_bottom_right, fill};
    } else if (kind == 4) {
      const T fill = fill_value<T>(r);
      st = {reference::step::key_lengths, double(fill)};
      in.lengths_mem[s].assign(p.batch, 0);
      for (auto& l : in.lengths_mem[s]) l = r.below(p.lk + 1);
      st.lengths = in.lengths_mem[s];
      ks = {ak::step_kind::key_lengths, fill};
      ks.lengths = in.lengths_mem[s].data();
    } else if (kind == 5) {
      const T fill = fill_value<T>(r);
      st = {reference::step::key_padding, double(fill)};
      st.length = r.below(p.lk + 1);
      ks = {ak::step_kind::key_padding, fill};
      ks.length = st.length;
    } else {
      // a boolean mask or a bias, broadcast from one of (B,H,Lq,Lk), (B,1,Lq,Lk), (B,1,1,Lk), (1,1,Lq,Lk), (1,H,1,1)
      static constexpr bool shapes[][4] = {{1, 1, 1, 1}, {1, 0, 1, 1}, {1, 0, 0, 1}, {0, 0, 1, 1}, {0, 1, 0, 0}};
      const bool* on = shapes[r.below(std::size(shapes))];
      const std::size_t ext[4] = {on[0] ? p.batch : 1, on[1] ? p.heads : 1, on[2] ? p.lq : 1, on[3] ? p.lk : 1};
      std::ptrdiff_t stride[4];
      std::ptrdiff_t acc = 1;
      for (int a = 3; a >= 0; --a) {
        stride[a] = ext[a] == 1 ? 0 : acc;
        acc *= std::ptrdiff_t(ext[a]);
      }
      const std::size_t n = std::size_t(acc);
      const auto offset = [&](std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
        return std::size_t(std::ptrdiff_t(b) * stride[0] + std::ptrdiff_t(h) * stride[1] + std::ptrdiff_t(i) * stride[2] +
                           std::ptrdiff_t(j) * stride[3]);
      };
      if (kind == 6) {
        const T fill = fill_value<T>(r);
        in.mask_mem[s].reset(new bool[n + 1]);
        const unsigned keep = unsigned(r.below(101));
        for (std::size_t e = 0; e < n; ++e) in.mask_mem[s][e] = r.chance(keep);
        st = {reference::step::boolean, double(fill)};
        st.allowed.resize(full);
        ks = {ak::step_kind::boolean_mask, fill};
        ks.mask = {in.mask_mem[s].get(), stride[0], stride[1], stride[2], stride[3]};
      } else {
        in.bias_mem[s].assign(n + 1, T(0));
        const unsigned brate = r.chance(50) ? 0 : unsigned(1 + r.below(10));
        for (std::size_t e = 0; e < n; ++e) {
          double x = r.normal() * (r.chance(80) ? 1.0 : 100.0);
          if (r.chance(brate)) x = r.chance(50) ? -std::numeric_limits<double>::infinity() : double(std::numeric_limits<T>::lowest());
          in.bias_mem[s][e] = special_or<T>(r, x, rate);
        }
        st = {reference::step::additive, 0.0};
        st.bias.resize(full);
        ks = {ak::step_kind::additive_mask, T(0)};
        ks.bias = {in.bias_mem[s].data(), stride[0], stride[1], stride[2], stride[3]};
      }
      for (std::size_t b = 0; b < p.batch; ++b)
        for (std::size_t h = 0; h < p.heads; ++h)
          for (std::size_t i = 0; i < p.lq; ++i)
            for (std::size_t j = 0; j < p.lk; ++j) {
              const std::size_t dst = ((b * p.heads + h) * p.lq + i) * p.lk + j, src = offset(b, h, i, j);
              if (kind == 6) st.allowed[dst] = in.mask_mem[s][src];
              else st.bias[dst] = double(in.bias_mem[s][src]);
            }
    }
    static constexpr const char* names[] = {"mul", "div", "causal", "causal_br", "lengths", "padding", "bool", "bias"};
    in.description += std::string(" ") + names[kind] + "(" + std::to_string(st.value) + ")";
    p.steps.push_back(std::move(st));
    kp.push(ks);
  }
}

// Runs the kernel on one instruction set and compares with the reference: "" when they agree.
template <class T>
std::string run_and_compare(instance<T>& in, const reference::result& ref, attnx::simd::isa isa, unsigned threads) {
  std::fill(in.o.begin(), in.o.end(), T(-7777));
  attnx::kernels::flash_attention(in.p, isa, threads);
  return reference::check(in.ref, ref, [&](std::size_t row, std::size_t c) { return in.out(row, c); });
}

}  // namespace differential
