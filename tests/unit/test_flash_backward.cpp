#define BOOST_TEST_MODULE flash_backward
#include <boost/test/unit_test.hpp>

#include "attnx/kernels/flash_attention.hpp"
#include "attnx/kernels/flash_attention_backward.hpp"
#include "random.hpp"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

// The fused attention backward (kernels::flash_attention_backward) against plain double loops: the scores, a stable
// softmax over the allowed keys, dP = dO V^T, dS = P o (dP - rowsum(P o dP)), dQ = s dS K, dK = s dS^T Q, dV = P^T dO,
// summed over the query heads of a K/V head and over the batch items that share K and V. O and the lse come from the
// forward kernel, as a caller's would. Every instruction set this CPU runs; 1 and 2 threads bit-identical.

namespace ak = attnx::kernels;
using attnx::simd::isa;

namespace {

std::size_t alg_min(std::size_t a, std::size_t b) { return a < b ? a : b; }
constexpr double inf = std::numeric_limits<double>::infinity();

enum class mask { none, causal, causal_br, lengths, padding, boolean, window, window2, documents, prefix, chunks, varlen };

struct spec {
  std::size_t batch = 1, heads = 1, kv_heads = 1, lq = 1, lk = 1, dk = 1, dv = 1;
  mask m = mask::none;
  bool shared_kv = false;  // K and V of batch stride 0
  double scale = 0.5;
  // The rest of the score program (outside the kernel's fast path when any is set): the mask's fill, an additive bias
  // of (lq, lk) for every (b, h) after it, then a second factor.
  double fill = -inf;
  bool bias = false;
  double post = 1;
};

struct data {
  std::vector<double> q, k, v, d_o;  // (b, h, i, c) row-major; K, V: (b, kvh, j, c) (one b when shared)
  std::vector<std::size_t> lengths;  // per b
  std::unique_ptr<bool[]> allowed;   // (b, h, i, j)
  std::vector<double> bias;          // (i, j)
  std::vector<std::size_t> offsets;  // documents: 0, lk / 3, lk / 3 (an empty one), 2 lk / 3 + 1, lk
  std::vector<std::size_t> q_offsets;  // varlen (with `offsets` for the keys): 0, lq / 4, lq / 2, lq / 2, lq
};

bool visible(const spec& s, const data& x, std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
  switch (s.m) {
    case mask::causal: return j <= i;
    case mask::causal_br: return j + s.lq <= i + s.lk;
    case mask::lengths: return j < x.lengths[b];
    case mask::padding: return j < x.lengths[0];
    case mask::boolean: return x.allowed[((b * s.heads + h) * s.lq + i) * s.lk + j];
    default: break;
  }
  if (s.m == mask::none) return true;
  if (s.m == mask::varlen) {  // causal bottom-right in each sequence, by the query's index
    std::size_t q = 0;
    while (!(x.q_offsets[q] <= i && i < x.q_offsets[q + 1])) ++q;
    const std::size_t u = i - x.q_offsets[q], nq = x.q_offsets[q + 1] - x.q_offsets[q];
    const std::size_t k0 = x.offsets[q], nk = x.offsets[q + 1] - k0;
    return j >= k0 && j < k0 + nk && j - k0 + nq <= u + nk;
  }
  // the key intervals: query i at position t = i + lk - lq (none before the first key)
  if (i + s.lk < s.lq) return false;
  const std::size_t t = i + s.lk - s.lq;
  switch (s.m) {
    case mask::window: return j <= t && j + 10 > t;
    case mask::window2: return j + 5 >= t && j <= t + 7;
    case mask::documents: {
      std::size_t dt = 0, dj = 0;
      while (!(x.offsets[dt] <= t && t < x.offsets[dt + 1])) ++dt;
      while (!(x.offsets[dj] <= j && j < x.offsets[dj + 1])) ++dj;
      return dt == dj;
    }
    case mask::prefix: return j < s.lk / 4 || j <= t;
    default: return j / 24 == t / 24;
  }
}

data make(const spec& s, std::uint64_t seed) {
  test_random::rng r(seed);
  data x;
  const std::size_t kb = s.shared_kv ? 1 : s.batch;
  const auto fill = [&](std::vector<double>& v, std::size_t n) {
    v.resize(n);
    for (double& e : v) e = r.normal();
  };
  fill(x.q, s.batch * s.heads * s.lq * s.dk);
  fill(x.k, kb * s.kv_heads * s.lk * s.dk);
  fill(x.v, kb * s.kv_heads * s.lk * s.dv);
  fill(x.d_o, s.batch * s.heads * s.lq * s.dv);
  for (std::size_t b = 0; b < s.batch; ++b) x.lengths.push_back(b == 0 ? s.lk / 2 + 1 : r.below(s.lk + 1));
  const std::size_t n = s.batch * s.heads * s.lq * s.lk;
  x.allowed.reset(new bool[n]);
  for (std::size_t e = 0; e < n; ++e) x.allowed[e] = r.chance(0.7);
  if (s.lq > 1)  // a fully masked row
    for (std::size_t j = 0; j < s.lk; ++j) x.allowed[j] = false;
  x.offsets = {0, s.lk / 3, s.lk / 3, alg_min(s.lk, 2 * s.lk / 3 + 1), s.lk};
  x.q_offsets = {0, s.lq / 4, s.lq / 2, s.lq / 2, s.lq};
  x.bias.resize(s.lq * s.lk);
  for (double& e : x.bias) e = s.bias ? r.uniform(-2, 2) : 0.0;
  return x;
}

struct grads {
  std::vector<double> dq, dk, dv;
};

grads reference(const spec& s, const data& x) {
  grads g;
  const std::size_t group = s.heads / s.kv_heads;
  g.dq.assign(x.q.size(), 0);
  g.dk.assign(x.k.size(), 0);
  g.dv.assign(x.v.size(), 0);
  std::vector<double> p(s.lk), dp(s.lk);
  for (std::size_t b = 0; b < s.batch; ++b)
    for (std::size_t h = 0; h < s.heads; ++h) {
      const std::size_t kvo = ((s.shared_kv ? 0 : b) * s.kv_heads + h / group) * s.lk;
      for (std::size_t i = 0; i < s.lq; ++i) {
        const double* q = &x.q[((b * s.heads + h) * s.lq + i) * s.dk];
        const double* d_o = &x.d_o[((b * s.heads + h) * s.lq + i) * s.dv];
        double m = -inf;
        for (std::size_t j = 0; j < s.lk; ++j) {
          double dot = 0;
          for (std::size_t c = 0; c < s.dk; ++c) dot += q[c] * x.k[(kvo + j) * s.dk + c];
          p[j] = ((visible(s, x, b, h, i, j) ? s.scale * dot : s.fill) + x.bias[i * s.lk + j]) * s.post;
          m = std::max(m, p[j]);
        }
        if (m == -inf) continue;  // no visible key: zero gradients
        double l = 0;
        for (std::size_t j = 0; j < s.lk; ++j) l += p[j] = std::exp(p[j] - m);
        double dsum = 0;
        for (std::size_t j = 0; j < s.lk; ++j) {
          p[j] /= l;
          dp[j] = 0;
          for (std::size_t c = 0; c < s.dv; ++c) dp[j] += d_o[c] * x.v[(kvo + j) * s.dv + c];
          dsum += p[j] * dp[j];
        }
        for (std::size_t j = 0; j < s.lk; ++j) {
          const double ds = visible(s, x, b, h, i, j) ? s.post * s.scale * p[j] * (dp[j] - dsum) : 0.0;
          for (std::size_t c = 0; c < s.dk; ++c) {
            g.dq[((b * s.heads + h) * s.lq + i) * s.dk + c] += ds * x.k[(kvo + j) * s.dk + c];
            g.dk[(kvo + j) * s.dk + c] += ds * q[c];
          }
          for (std::size_t c = 0; c < s.dv; ++c) g.dv[(kvo + j) * s.dv + c] += p[j] * d_o[c];
        }
      }
    }
  return g;
}

attnx::key_range range(attnx::range_kind kind, std::size_t left, std::size_t right, std::size_t size, const data& x) {
  attnx::key_range r{kind};
  r.left = left, r.right = right, r.size = size;
  r.offsets = x.offsets.data(), r.count = x.offsets.size() - 1;
  return r;
}

template <class T>
std::vector<T> to(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <class T>
struct run_result {
  bool fused;
  std::vector<T> dq, dk, dv;
};

// The forward (for O and lse), then the backward, on instruction set i with `threads` threads.
template <class T>
run_result<T> run(const spec& s, const data& x, isa i, unsigned threads, bool nan_row = false) {
  const auto sd = [](std::size_t n) { return static_cast<std::ptrdiff_t>(n); };
  std::vector<T> q = to<T>(x.q), k = to<T>(x.k), v = to<T>(x.v), d_o = to<T>(x.d_o);
  if (nan_row) q[0] = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> o(s.batch * s.heads * s.lq * s.dv), lse(s.batch * s.heads * s.lq);
  std::unique_ptr<bool[]> allowed(new bool[s.batch * s.heads * s.lq * s.lk]);
  std::memcpy(allowed.get(), x.allowed.get(), s.batch * s.heads * s.lq * s.lk);
  ak::attention_problem<T> p;
  const std::ptrdiff_t kvb = s.shared_kv ? 0 : sd(s.kv_heads * s.lk);
  p.q = {q.data(), sd(s.heads * s.lq * s.dk), sd(s.lq * s.dk), sd(s.dk)};
  p.k = {k.data(), kvb * sd(s.dk), sd(s.lk * s.dk), sd(s.dk)};
  p.v = {v.data(), kvb * sd(s.dv), sd(s.lk * s.dv), sd(s.dv)};
  p.o = {o.data(), sd(s.heads * s.lq * s.dv), sd(s.lq * s.dv), sd(s.dv)};
  p.lse = {lse.data(), sd(s.heads * s.lq), sd(s.lq), 1};
  p.batch = s.batch, p.heads = s.heads, p.kv_heads = s.kv_heads, p.lq = s.lq, p.lk = s.lk, p.dk = s.dk, p.dv = s.dv;
  p.multiply(static_cast<T>(s.scale));
  const T fill = static_cast<T>(s.fill);
  switch (s.m) {
    case mask::causal: p.causal(ak::causal_kind::top_left, fill); break;
    case mask::causal_br: p.causal(ak::causal_kind::bottom_right, fill); break;
    case mask::lengths: p.key_lengths(x.lengths.data(), fill); break;
    case mask::padding: p.key_padding(x.lengths[0], fill); break;
    case mask::boolean:
      p.boolean_mask({allowed.get(), sd(s.heads * s.lq * s.lk), sd(s.lq * s.lk), sd(s.lk), 1}, fill);
      break;
    case mask::window: p.key_interval(range(attnx::range_kind::window, 9, 0, 0, x), fill); break;
    case mask::window2: p.key_interval(range(attnx::range_kind::window, 5, 7, 0, x), fill); break;
    case mask::documents: p.key_interval(range(attnx::range_kind::documents, 0, 0, 0, x), fill); break;
    case mask::prefix: p.key_interval(range(attnx::range_kind::prefix, 0, 0, s.lk / 4, x), fill); break;
    case mask::chunks: p.key_interval(range(attnx::range_kind::chunks, 0, 0, 24, x), fill); break;
    case mask::varlen: {
      attnx::key_range r = range(attnx::range_kind::varlen, 0, 0, 0, x);
      r.q_offsets = x.q_offsets.data(), r.order = attnx::sequence_order::causal_bottom_right;
      p.key_interval(r, fill);
      break;
    }
    default: break;
  }
  const std::vector<T> bias = to<T>(x.bias);
  if (s.bias) p.additive_mask({bias.data(), 0, 0, sd(s.lk), 1});
  if (s.post != 1) p.multiply(static_cast<T>(s.post));
  ak::flash_attention(p, i, threads);
  run_result<T> r;
  r.dq.assign(q.size(), T(-7));
  r.dk.assign(k.size(), T(-7));
  r.dv.assign(v.size(), T(-7));
  ak::attention_gradients<T> g;
  g.o = {o.data(), p.o.batch, p.o.head, p.o.row};
  g.d_o = {d_o.data(), p.o.batch, p.o.head, p.o.row};
  g.lse = {lse.data(), p.lse.batch, p.lse.head, p.lse.row};
  g.dq = {r.dq.data(), p.q.batch, p.q.head, p.q.row};
  g.dk = {r.dk.data(), p.k.batch, p.k.head, p.k.row};
  g.dv = {r.dv.data(), p.v.batch, p.v.head, p.v.row};
  r.fused = ak::flash_attention_backward(p, g, i, threads);
  return r;
}

template <class T>
void expect_near(const std::vector<T>& got, const std::vector<double>& want, const std::string& what) {
  const double tol = sizeof(T) == 4 ? 2e-5 : 1e-12;
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t e = 0; e < want.size(); ++e) {
    const double err = std::abs(double(got[e]) - want[e]) / (1 + std::abs(want[e]));
    if (!(err <= worst)) worst = err, at = e;
  }
  BOOST_TEST(worst <= tol, what << ": worst error " << worst << " at " << at << " (got " << double(got[at])
                                << ", want " << want[at] << ")");
}

template <class T>
void check(const spec& s, std::uint64_t seed) {
  const data x = make(s, seed);
  const grads want = reference(s, x);
  for (isa i : attnx::simd::supported()) {
    const std::string what = std::string(attnx::simd::name(i)) + (sizeof(T) == 4 ? " float" : " double") + " b" +
                             std::to_string(s.batch) + " h" + std::to_string(s.heads) + "/" +
                             std::to_string(s.kv_heads) + " lq" + std::to_string(s.lq) + " lk" +
                             std::to_string(s.lk) + " d" + std::to_string(s.dk) + "/" + std::to_string(s.dv) +
                             " mask" + std::to_string(int(s.m)) + (s.shared_kv ? " shared" : "") + " fill " +
                             std::to_string(s.fill) + (s.bias ? " bias" : "") + " post " + std::to_string(s.post);
    const run_result<T> one = run<T>(s, x, i, 1), two = run<T>(s, x, i, 2);
    BOOST_TEST_REQUIRE(one.fused, what);
    expect_near(one.dq, want.dq, what + " dQ");
    expect_near(one.dk, want.dk, what + " dK");
    expect_near(one.dv, want.dv, what + " dV");
    const bool same = one.dq == two.dq && one.dk == two.dk && one.dv == two.dv;
    BOOST_TEST(same, what << ": 1 and 2 threads differ");
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(sizes_off_the_tiles) {
  for (std::size_t n : {1, 3, 17, 65, 130}) {
    check<float>({1, 1, 1, n, n, n, n}, 11 + n);
    check<double>({1, 1, 1, n, n, n, n}, 12 + n);
  }
  check<float>({1, 1, 1, 130, 65, 64, 17}, 5);
  check<double>({1, 1, 1, 17, 300, 3, 65}, 6);
}

BOOST_AUTO_TEST_CASE(every_mask) {
  for (mask m : {mask::causal, mask::causal_br, mask::lengths, mask::padding, mask::boolean}) {
    check<float>({2, 2, 2, 70, 100, 16, 16, m}, 20 + int(m));
    check<double>({2, 1, 1, 100, 70, 16, 16, m}, 30 + int(m));
    check<float>({1, 1, 1, 130, 130, 64, 64, m}, 40 + int(m));
  }
}

// Programs off the fast path: finite fills (a blocked score keeps a weight but passes no gradient; causal and key
// lengths are then soft-skipped by the forward), a bias after the mask, a second factor (negative: the largest dot
// gets the smallest weight).
BOOST_AUTO_TEST_CASE(every_program) {
  for (mask m : {mask::none, mask::causal, mask::lengths, mask::boolean}) {
    spec s{2, 2, 1, 70, 100, 16, 16, m};
    s.fill = -3;
    check<float>(s, 80 + int(m));
    s.fill = -inf, s.bias = true;
    check<double>(s, 90 + int(m));
    s.fill = 0.5, s.post = -0.75;
    check<float>(s, 100 + int(m));
    s.post = 2, s.fill = -200;  // weights of e^-400 or so: zero in float
    check<double>(s, 110 + int(m));
  }
}

// The named key-interval masks: the key blocks below every row's start are skipped as those past its limit.
BOOST_AUTO_TEST_CASE(key_interval_masks) {
  for (mask m : {mask::window, mask::window2, mask::documents, mask::prefix, mask::chunks, mask::varlen}) {
    check<float>({1, 2, 1, 300, 300, 16, 16, m}, 120 + int(m));
    check<double>({2, 1, 1, 130, 130, 8, 8, m}, 130 + int(m));
    check<float>({1, 1, 1, 70, 160, 16, 16, m}, 140 + int(m));  // fewer queries than keys
    check<double>({1, 1, 1, 90, 60, 8, 8, m}, 150 + int(m));    // more: the first 30 rows see no key
    spec soft{1, 1, 1, 100, 100, 16, 16, m};
    soft.fill = -3;  // a finite fill: nothing skipped below a start
    check<float>(soft, 160 + int(m));
  }
}

BOOST_AUTO_TEST_CASE(gqa_and_shared_keys) {
  check<float>({2, 4, 2, 33, 50, 16, 8, mask::causal}, 50);
  check<double>({2, 4, 1, 33, 50, 8, 16, mask::none}, 51);
  check<float>({3, 2, 2, 20, 40, 16, 16, mask::lengths, true}, 52);
  check<double>({3, 2, 1, 20, 40, 16, 16, mask::none, true}, 53);
}

BOOST_AUTO_TEST_CASE(fully_masked_rows_have_zero_gradients) {
  // Batch item 1's key length 0: every row of it masked; its dQ is 0, and so is every dK and dV it would reach.
  spec s{2, 1, 1, 20, 30, 8, 8, mask::lengths};
  data x = make(s, 60);
  x.lengths[1] = 0;
  const grads want = reference(s, x);
  for (isa i : attnx::simd::supported()) {
    const run_result<float> r = run<float>(s, x, i, 2);
    BOOST_TEST_REQUIRE(r.fused);
    for (std::size_t e = s.heads * s.lq * s.dk; e < r.dq.size(); ++e) BOOST_TEST(r.dq[e] == 0.0f);
    for (std::size_t e = s.lk * s.dk; e < r.dk.size(); ++e) BOOST_TEST(r.dk[e] == 0.0f);
    expect_near(r.dq, want.dq, "dQ");
    expect_near(r.dv, want.dv, "dV");
  }
}

BOOST_AUTO_TEST_CASE(declines_what_it_does_not_fuse) {
  // A NaN row (its lse is NaN): the caller differentiates unfused; nothing is written.
  spec s{1, 1, 1, 10, 10, 4, 4};
  const data x = make(s, 70);
  for (isa i : attnx::simd::supported()) {
    const run_result<float> r = run<float>(s, x, i, 1, true);
    BOOST_TEST(!r.fused);
    BOOST_TEST(r.dq[0] == -7.0f);
  }
}
