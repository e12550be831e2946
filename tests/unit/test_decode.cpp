#define BOOST_TEST_MODULE decode
#include <boost/test/unit_test.hpp>

#include "attnx/kernels/attention_state.hpp"
#include "attnx/kernels/flash_attention.hpp"
#include "attnx/kernels/impl/decode.hpp"  // the decode driver's rules (decode_max_rows, kv_shared_by_batch)
#include "attnx/kernels/tuning.hpp"
#include "attnx/math/half.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <tuple>
#include <utility>
#include <vector>

#include "random.hpp"

// The decode path of the fused kernel (L_q <= kernels::detail::decode_max_rows: vectors along the head
// dimension, the keys in fixed chunks of detail::decode_chunk whose partial states are merged) and the
// log-sum-exp output of both paths, against a plain double reference that applies the problem's score
// program step by step; K and V stored as bf16 / f16 and the conversions of attnx::bf16 / attnx::f16; the
// state merge (kernels/attention_state.hpp). Every instruction set this CPU has, with 1 and 2 threads,
// which must give the same bits.

namespace ak = attnx::kernels;
using ak::causal_kind;
using attnx::simd::isa;

namespace {

// The instruction sets a case runs on: every one this CPU has; under ThreadSanitizer only the best, and without
// the other CPUs' tunings (with_tunings). TSan looks for races between the threads of one run; the single-thread
// sweeps over paths and tunings (the gcc and ASan builds run them) would take it past ctest's timeout.
#if defined(__SANITIZE_THREAD__)
constexpr bool every_path = false;
#else
constexpr bool every_path = true;
#endif
std::vector<isa> paths_under_test() {
  std::vector<isa> v;
  for (isa i : attnx::simd::supported()) v.push_back(i);
  if (!every_path) v.erase(v.begin(), v.end() - 1);
  return v;
}

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double qnan = std::numeric_limits<double>::quiet_NaN();

// |got - want| <= tol * max(1, |want|), for inputs of mean 0 and variance 1 and scores of order 1. Observed: 8e-7 and 3e-15.
template <class T>
constexpr double tol = sizeof(T) == 4 ? 2e-5 : 1e-12;

struct shape {
  std::size_t batch, heads, kv_heads, lq, lk, dk, dv;
  int layout = 0;  // 0: [b][h][row][col]; 1: token-major [b][row][h][col]; 2: as 0 with padded rows and heads
};
std::ostream& operator<<(std::ostream& os, const shape& s) {
  return os << "B=" << s.batch << " H=" << s.heads << " KVH=" << s.kv_heads << " Lq=" << s.lq << " Lk=" << s.lk
            << " dk=" << s.dk << " dv=" << s.dv << " layout=" << s.layout;
}

// Strides of a (batch, nh, nr, d) operand in a layout; at() is the offset of element (b, h, r, c), or of element n
// of the logical [b][h][r][c].
struct layout_of {
  std::size_t nh, nr, d;
  std::ptrdiff_t batch, head, row;
  layout_of(int lay, std::size_t nh_, std::size_t nr_, std::size_t d_) : nh(nh_), nr(nr_), d(d_) {
    const auto H = std::ptrdiff_t(nh), R = std::ptrdiff_t(nr), D = std::ptrdiff_t(d);
    row = lay == 1 ? H * D : lay == 2 ? D + 3 : D;
    head = lay == 1 ? D : lay == 2 ? R * (D + 3) + 5 : R * D;
    batch = lay == 2 ? H * head + 7 : H * R * D;
  }
  TEST_UNINSTRUMENTED std::size_t at(std::size_t b, std::size_t h, std::size_t r, std::size_t c) const {
    return std::size_t(std::ptrdiff_t(b) * batch + std::ptrdiff_t(h) * head + std::ptrdiff_t(r) * row + std::ptrdiff_t(c));
  }
  std::size_t at(std::size_t n) const { return at(n / d / nr / nh, n / d / nr % nh, n / d % nr, n % d); }
};

// The values of 16-bit storage, decoded here without attnx (sign, exponent, mantissa).
TEST_UNINSTRUMENTED double f16_value(std::uint32_t h) {
  const double sign = h & 0x8000u ? -1.0 : 1.0;
  const int e = int(h >> 10 & 0x1fu), m = int(h & 0x3ffu);
  if (e == 31) return m ? qnan : sign * inf;
  return sign * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25));
}
TEST_UNINSTRUMENTED double bf16_value(std::uint32_t h) {
  const double sign = h & 0x8000u ? -1.0 : 1.0;
  const int e = int(h >> 7 & 0xffu), m = int(h & 0x7fu);
  if (e == 255) return m ? qnan : sign * inf;
  return sign * (e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134));
}
TEST_UNINSTRUMENTED std::uint16_t encode(ak::kv_storage kind, double x) {
  return kind == ak::kv_storage::bf16 ? attnx::bf16(float(x)).bits : attnx::f16(float(x)).bits;
}
TEST_UNINSTRUMENTED double stored(ak::kv_storage kind, double x) {  // x as 16-bit K / V hold it
  return kind == ak::kv_storage::bf16 ? bf16_value(encode(kind, x)) : f16_value(encode(kind, x));
}

// One problem: logical Q, K, V in double ([b][h][i][c], K and V over the KV heads; values exact in T), the
// kernel's buffers in the shape's layout, lse (b, h, i) at (b H + h)(Lq + 1) + i (a gap after each head), and
// storage for the masks of a score program.
template <class T>
struct instance {
  static constexpr T sentinel = T(-12345);
  shape s;
  layout_of Lq, Lk, Lv, Lo;
  std::vector<double> q, k, v;
  std::vector<T> qb, kb, vb, ob, lb;
  std::vector<std::uint16_t> k16, v16;
  ak::kv_storage kv = ak::kv_storage::same;
  std::unique_ptr<bool[]> mask;
  std::vector<T> bias;
  std::vector<std::size_t> lengths;

  instance(const shape& sh, std::uint32_t seed)
      : s(sh), Lq(s.layout, s.heads, s.lq, s.dk), Lk(s.layout, s.kv_heads, s.lk, s.dk),
        Lv(s.layout, s.kv_heads, s.lk, s.dv), Lo(s.layout, s.heads, s.lq, s.dv) {
    test_random::rng g(seed);
    for (auto [x, L] : {std::pair(&q, &Lq), std::pair(&k, &Lk), std::pair(&v, &Lv)}) {
      x->resize(s.batch * L->nh * L->nr * L->d);
      draw(x->data(), x->size(), g);
    }
    for (auto [x, L] : {std::pair(&qb, &Lq), std::pair(&kb, &Lk), std::pair(&vb, &Lv), std::pair(&ob, &Lo)})
      x->resize(s.batch * std::size_t(L->batch));
    lb.resize(s.batch * s.heads * (s.lq + 1)), k16.resize(kb.size()), v16.resize(vb.size());
  }
  instance(const instance&) = delete;
  std::size_t qi(std::size_t b, std::size_t h, std::size_t i, std::size_t c) const { return ((b * s.heads + h) * s.lq + i) * s.dk + c; }
  std::size_t ki(std::size_t b, std::size_t g, std::size_t j, std::size_t c) const { return ((b * s.kv_heads + g) * s.lk + j) * s.dk + c; }
  std::size_t vi(std::size_t b, std::size_t g, std::size_t j, std::size_t c) const { return ((b * s.kv_heads + g) * s.lk + j) * s.dv + c; }
  std::size_t l_at(std::size_t n) const { return n / s.lq * (s.lq + 1) + n % s.lq; }  // lse n, logical [b][h][i]
  double out(std::size_t n) const { return double(ob[Lo.at(n)]); }  // output n, logical [b][h][i][c]
  double out(std::size_t b, std::size_t h, std::size_t i, std::size_t c) const { return double(ob[Lo.at(b, h, i, c)]); }
  double lse(std::size_t n) const { return double(lb[l_at(n)]); }

  // Values of mean 0 and variance 1, exact in T.
  static TEST_UNINSTRUMENTED void draw(double* x, std::size_t n, test_random::rng& g) {
    for (std::size_t i = 0; i < n; ++i) x[i] = double(T(g.bell()));
  }
  // The buffers from the logical values (K and V also as 16-bit values when kv says so).
  void store() {
    for (auto [dst, L, src] : {std::tuple(&qb, &Lq, &q), std::tuple(&kb, &Lk, &k), std::tuple(&vb, &Lv, &v)})
      lay_out(dst->data(), *L, src->data());
    if (kv == ak::kv_storage::same) return;
    encode_all(k16.data(), kb.data(), kb.size(), kv);
    encode_all(v16.data(), vb.data(), vb.size(), kv);
  }
  // dst in layout L from the logical [b][h][r][c] values x (in logical order: no divisions per element).
  TEST_UNINSTRUMENTED void lay_out(T* dst, const layout_of& L, const double* x) const {
    for (std::size_t b = 0; b < s.batch; ++b)
      for (std::size_t h = 0; h < L.nh; ++h)
        for (std::size_t r = 0; r < L.nr; ++r)
          for (std::size_t c = 0, at = L.at(b, h, r, 0); c < L.d; ++c) dst[at + c] = T(*x++);
  }
  static TEST_UNINSTRUMENTED void encode_all(std::uint16_t* dst, const T* x, std::size_t n, ak::kv_storage kind) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = encode(kind, double(x[i]));
  }
  // The problem over the buffers, stored (no score steps yet).
  ak::attention_problem<T> problem() {
    store();
    ak::attention_problem<T> p;
    p.q = {qb.data(), Lq.batch, Lq.head, Lq.row};
    p.k = {kb.data(), Lk.batch, Lk.head, Lk.row};
    p.v = {vb.data(), Lv.batch, Lv.head, Lv.row};
    p.o = {ob.data(), Lo.batch, Lo.head, Lo.row};
    p.lse = {lb.data(), std::ptrdiff_t(s.heads * (s.lq + 1)), std::ptrdiff_t(s.lq + 1), 1};
    if (kv != ak::kv_storage::same) {  // K and V only as 16-bit values: the T buffers are not given
      p.kv = kv;
      p.k16 = {k16.data(), Lk.batch, Lk.head, Lk.row};
      p.v16 = {v16.data(), Lv.batch, Lv.head, Lv.row};
      p.k = {}, p.v = {};
    }
    p.batch = s.batch, p.heads = s.heads, p.kv_heads = s.kv_heads;
    p.lq = s.lq, p.lk = s.lk, p.dk = s.dk, p.dv = s.dv;
    return p;
  }
  void run(const ak::attention_problem<T>& p, isa i, unsigned threads) {
    std::fill(ob.begin(), ob.end(), sentinel);
    std::fill(lb.begin(), lb.end(), sentinel);
    ak::flash_attention(p, i, threads);
  }
};

template <class X>
TEST_UNINSTRUMENTED X elem(const ak::broadcast<const X>& m, std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
  return m.data[std::ptrdiff_t(b) * m.batch + std::ptrdiff_t(h) * m.head + std::ptrdiff_t(i) * m.row + std::ptrdiff_t(j) * m.col];
}

struct result {
  std::vector<double> o, lse;  // [b][h][i][c], [b][h][i]
};

// A named mask's interval, written out: query i at position t = i + lk - lq.
bool in_range(const attnx::key_range& r, std::size_t lq, std::size_t lk, std::size_t i, std::size_t j) {
  if (i + lk < lq) return false;
  const std::size_t t = i + lk - lq;
  switch (r.kind) {
    case attnx::range_kind::window: return !r.empty && j + r.left >= t && j <= t + r.right;
    case attnx::range_kind::prefix: return j < r.size || j <= t;
    case attnx::range_kind::chunks: return j / r.size == t / r.size;
    case attnx::range_kind::documents: {
      std::size_t dt = 0, dj = 0;
      while (!(r.offsets[dt] <= t && t < r.offsets[dt + 1])) ++dt;
      while (!(r.offsets[dj] <= j && j < r.offsets[dj + 1])) ++dj;
      return dt == dj;
    }
    case attnx::range_kind::varlen: break;  // (by the query's index, not its position: test_variants.cpp)
  }
  return false;
}

// The reference: s_ij = the score program applied to q_i . k_j, in double, in the program's order;
// o_i = sum_j softmax_j(s_i.) v_j with softmax's rules (NaN anywhere: the row is NaN; +inf scores share
// the weight equally; no score above -inf: 0); lse_i = ln sum_j exp(s_ij).
template <class T>
TEST_UNINSTRUMENTED void reference_loops(const ak::attention_problem<T>& p, const double* q, const double* k, const double* v,
                                   double* s, double* ro, double* rlse) {
  const std::size_t B = p.batch, H = p.heads, G = p.kv_heads, lq = p.lq, lk = p.lk, dk = p.dk, dv = p.dv;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < lq; ++i) {
        const std::size_t g = h / (H / G);
        for (std::size_t j = 0; j < lk; ++j) {
          double x = 0;
          for (std::size_t c = 0; c < dk; ++c) x += q[((b * H + h) * lq + i) * dk + c] * k[((b * G + g) * lk + j) * dk + c];
          for (std::size_t n = 0; n < p.n_steps; ++n) {
            const ak::score_step<T>& st = p.steps[n];
            const double val = double(st.value);
            switch (st.kind) {
              case ak::step_kind::multiply: x *= val; break;
              case ak::step_kind::divide: x /= val; break;
              case ak::step_kind::causal_top_left: x = j > i ? val : x; break;
              case ak::step_kind::causal_bottom_right: x = j + lq > i + lk ? val : x; break;
              case ak::step_kind::key_lengths: x = j >= st.lengths[b] ? val : x; break;
              case ak::step_kind::causal_lengths: x = j >= st.lengths[b] || j + lq > i + st.lengths[b] ? val : x; break;
              case ak::step_kind::key_padding: x = j >= st.length ? val : x; break;
              case ak::step_kind::boolean_mask: x = elem(st.mask, b, h, i, j) ? x : val; break;
              case ak::step_kind::additive_mask: x += double(elem(st.bias, b, h, i, j)); break;
              case ak::step_kind::key_interval: x = in_range(st.range, lq, lk, i, j) ? x : val; break;
              case ak::step_kind::tanh: x = std::tanh(x); break;
              case ak::step_kind::linear_bias:
                x -= st.slopes[st.n_slopes == 1 ? 0 : h] * (double(i + lk) - double(lq) - double(j));
                break;
            }
          }
          s[j] = x;
        }
        double mx = -inf;
        bool nan = false;
        for (std::size_t j = 0; j < lk; ++j) nan = nan || std::isnan(s[j]), mx = std::isnan(s[j]) || s[j] <= mx ? mx : s[j];
        double* o = ro + ((b * H + h) * lq + i) * dv;
        double& lse = rlse[(b * H + h) * lq + i];
        if (nan || mx == -inf) {
          for (std::size_t c = 0; c < dv; ++c) o[c] = nan ? qnan : 0.0;
          lse = nan ? qnan : -inf;
          continue;
        }
        double sum = 0;
        for (std::size_t j = 0; j < lk; ++j) {
          const double w = mx == inf ? (s[j] == inf ? 1.0 : 0.0) : std::exp(s[j] - mx);
          sum += w;
          for (std::size_t c = 0; c < dv; ++c) o[c] += w * v[((b * G + g) * lk + j) * dv + c];
        }
        for (std::size_t c = 0; c < dv; ++c) o[c] /= sum;
        lse = mx == inf ? inf : mx + std::log(sum);
      }
}
template <class T>
result reference(const ak::attention_problem<T>& p, const std::vector<double>& qv, const std::vector<double>& kv,
                 const std::vector<double>& vv) {
  const std::size_t rows = p.batch * p.heads * p.lq;
  result r{std::vector<double>(rows * p.dv, 0.0), std::vector<double>(rows)};
  std::vector<double> sv(p.lk);
  reference_loops(p, qv.data(), kv.data(), vv.data(), sv.data(), r.o.data(), r.lse.data());
  return r;
}

std::size_t nan_rows(const result& r) {
  return std::size_t(std::count_if(r.lse.begin(), r.lse.end(), [](double x) { return std::isnan(x); }));
}

// The kernel's o and lse against the reference: within tl, NaN exactly where the reference has NaN,
// infinities exact, rows without a visible key exactly 0, every other element of the buffers untouched.
// Returns the worst error |got - want| / max(1, |want|).
template <class T>
double check(const instance<T>& in, const result& r, double tl) {
  double worst = 0;
  std::size_t bad = 0;
  const auto cmp = [&](double got, double want, bool exact, const char* what, std::size_t n) {
    const double e = std::abs(got - want) / std::max(1.0, std::abs(want));
    const bool ok = std::isnan(want) ? std::isnan(got) : exact || std::isinf(want) ? got == want : e <= tl;
    if (ok && !std::isnan(e)) worst = std::max(worst, e);
    if (!ok && bad++ < 5) BOOST_ERROR(what << " [" << n << "] (logical index): got " << got << ", want " << want);
  };
  std::vector<char> mine(in.ob.size(), 0), mine_l(in.lb.size(), 0);
  for (std::size_t n = 0; n < r.lse.size(); ++n) cmp(in.lse(n), r.lse[n], false, "lse", n), mine_l[in.l_at(n)] = 1;
  for (std::size_t n = 0; n < r.o.size(); ++n) cmp(in.out(n), r.o[n], r.lse[n / in.s.dv] == -inf, "o", n), mine[in.Lo.at(n)] = 1;
  for (std::size_t n = 0; n < in.ob.size(); ++n)
    if (!mine[n] && in.ob[n] != in.sentinel && bad++ < 5) BOOST_ERROR("o: element " << n << " is outside the output");
  for (std::size_t n = 0; n < in.lb.size(); ++n)
    if (!mine_l[n] && in.lb[n] != in.sentinel && bad++ < 5) BOOST_ERROR("lse: element " << n << " is outside the output");
  BOOST_TEST(bad == 0u);
  return worst;
}

// The decode kernel's tunings (kernels::detail::decode_tuning: the loops and prefetches it picks by CPU family,
// meant to give the same bits): AMD Zen 4 (0x19), Zen 5 (0x1a), any other CPU (0). Under with_tunings, run_all
// runs each of them too and compares its bits with those of this CPU's tuning, so that every tuning is checked on
// any host. A scope's setting; the kernel's own choice is restored whatever happens.
bool tunings_under_test = false;
struct with_tunings {
  bool old = tunings_under_test;
  with_tunings() { tunings_under_test = true; }
  ~with_tunings() { tunings_under_test = old; }
  with_tunings(const with_tunings&) = delete;
};
struct tuned_as {
  int old = ak::detail::decode_tuning().load();
  explicit tuned_as(int family) { ak::detail::decode_tuning().store(family); }
  ~tuned_as() { ak::detail::decode_tuning().store(old); }
  tuned_as(const tuned_as&) = delete;
};
// Elements of a and b whose bits differ (two NaNs count as the same; so far the tunings agree on the sign of
// zeros too, though four_rows' padding slots could make +0 of a -0 that few_rows keeps).
template <class T>
std::size_t bits_differ(const std::vector<T>& a, const std::vector<T>& b) {
  std::size_t n = 0;
  for (std::size_t x = 0; x < a.size(); ++x)
    n += std::memcmp(&a[x], &b[x], sizeof(T)) != 0 && !(std::isnan(a[x]) && std::isnan(b[x]));
  return n;
}

// p on every instruction set with 1 and 2 threads: checked against r, the same bits from both thread counts (and
// from every decode tuning under with_tunings); after_each(isa) runs after each instruction set's run with 1 thread.
template <class T>
double run_all(instance<T>& in, const ak::attention_problem<T>& p, const result& r, double tl,
               const std::function<void(isa)>& after_each) {
  double worst = 0;
  for (isa i : paths_under_test()) {
    BOOST_TEST_CONTEXT(attnx::simd::name(i)) {
      in.run(p, i, 1);
      worst = std::max(worst, check(in, r, tl));
      if (after_each) after_each(i);
      const std::vector<T> o1 = in.ob, l1 = in.lb;
      for (int family : ak::detail::decode_families) {
        if (!tunings_under_test || !every_path || i != isa::avx512) break;  // (the tunings are those of the AVX-512 loops)
        BOOST_TEST_CONTEXT("tuned for CPU family " << family) {
          {
            const tuned_as as(family);
            in.run(p, i, 1);
          }
          BOOST_TEST(bits_differ(o1, in.ob) == 0u, "this CPU's tuning and another: different o");
          BOOST_TEST(bits_differ(l1, in.lb) == 0u, "this CPU's tuning and another: different lse");
        }
      }
      in.run(p, i, 2);
      BOOST_TEST(std::memcmp(o1.data(), in.ob.data(), o1.size() * sizeof(T)) == 0, "threads 1 and 2: different o");
      BOOST_TEST(std::memcmp(l1.data(), in.lb.data(), l1.size() * sizeof(T)) == 0, "threads 1 and 2: different lse");
    }
  }
  return worst;
}

template <class T>
using program = std::function<void(instance<T>&, ak::attention_problem<T>&)>;  // values and score steps
template <class T>
using extra_check = std::function<void(const instance<T>&, const result&)>;

// The storage of K and V in run_program's problems (float queries only): set for a scope by with_storage.
ak::kv_storage kv_under_test = ak::kv_storage::same;
struct with_storage {
  ak::kv_storage old = kv_under_test;
  explicit with_storage(ak::kv_storage kv) { kv_under_test = kv; }
  ~with_storage() { kv_under_test = old; }
  with_storage(const with_storage&) = delete;
};

// x[i] as 16-bit storage of that kind holds it.
TEST_UNINSTRUMENTED void as_stored(double* x, std::size_t n, ak::kv_storage kind) {
  for (std::size_t i = 0; i < n; ++i) x[i] = stored(kind, x[i]);
}

// A fresh instance, prog on it, its values stored again, the reference (with `nans` NaN rows) and run_all, with
// extra after each instruction set's run. Under with_storage(bf16 / f16) K and V are given as 16-bit values only,
// and the reference (and prog's extra checks) take the values as stored.
template <class T>
double run_program(const shape& s, std::uint32_t seed, const program<T>& prog, std::size_t nans = 0,
                   const extra_check<T>& extra = {}) {
  instance<T> in(s, seed);
  in.kv = kv_under_test;
  ak::attention_problem<T> p = in.problem();
  prog(in, p);
  if (in.kv != ak::kv_storage::same)
    for (auto* x : {&in.k, &in.v}) as_stored(x->data(), x->size(), in.kv);
  in.store();
  const result r = reference(p, in.q, in.k, in.v);
  BOOST_TEST(nan_rows(r) == nans);
  return run_all(in, p, r, tol<T>, [&](isa) { if (extra) extra(in, r); });
}

// For run_program: every output exactly the reference's (where the reference's arithmetic is exact).
template <class T>
void exactly(const instance<T>& in, const result& r) {
  std::size_t bad = 0;
  for (std::size_t n = 0; n < r.o.size(); ++n) bad += in.out(n) != r.o[n];
  BOOST_TEST(bad == 0u);
}

// (B, 1, Lq, Lk) boolean mask, about 70% true, row Lq / 2 of batch item 0 all false.
template <class T>
ak::broadcast<const bool> random_mask(instance<T>& in, std::uint32_t seed) {
  const shape& s = in.s;
  in.mask.reset(new bool[s.batch * s.lq * s.lk]);
  test_random::rng g(seed);
  for (std::size_t n = 0; n < s.batch * s.lq * s.lk; ++n) in.mask[n] = g.chance(0.7) && n / s.lk != s.lq / 2;
  return {in.mask.get(), std::ptrdiff_t(s.lq * s.lk), 0, std::ptrdiff_t(s.lk), 1};
}
// (1, H, Lq, Lk) bias, N(0,1) with about 10% -inf.
template <class T>
ak::broadcast<const T> random_bias(instance<T>& in, std::uint32_t seed) {
  const shape& s = in.s;
  test_random::rng g(seed);
  in.bias.resize(s.heads * s.lq * s.lk);
  for (auto& x : in.bias) x = g.below(10) == 0 ? -std::numeric_limits<T>::infinity() : T(g.normal());
  return {in.bias.data(), 0, std::ptrdiff_t(s.lq * s.lk), std::ptrdiff_t(s.lk), 1};
}

}  // namespace

// 1. Random problems: L_q up to 16; L_k around the key block (64) and chunk (512) edges; head dimensions with and
// without a vector tail, dk != dv; GQA / MQA; three layouts; batch 1 and 2.
template <class T>
void sweep() {
  const std::size_t lqs[] = {1, 2, 4, 7, 16}, lks[] = {1, 5, 63, 64, 65, 511, 512, 513, 1500}, groups[] = {8, 2, 1};
  const std::size_t dims[][2] = {{8, 8}, {40, 40}, {64, 64}, {128, 128}, {64, 40}, {8, 128}, {128, 8}, {40, 64}};
  const program<T> scaled = [](instance<T>& in, ak::attention_problem<T>& p) { p.multiply(T(1) / std::sqrt(T(in.s.dk))); };
  double worst = 0;
  std::uint32_t n = 0;
  for (std::size_t lq : lqs)
    for (std::size_t lk : lks) {
      const shape s{1 + n % 2, 8, groups[n % 3], lq, lk, dims[n % 8][0], dims[n % 8][1], int(n / 3 % 3)};
      BOOST_TEST_CONTEXT(s) { worst = std::max(worst, run_program<T>(s, 100 + n++, scaled)); }
    }
  BOOST_TEST_MESSAGE((sizeof(T) == 4 ? "float" : "double") << " decode sweep: worst error " << worst);
}
BOOST_AUTO_TEST_CASE(sweep_float) { sweep<float>(); }
BOOST_AUTO_TEST_CASE(sweep_double) { sweep<double>(); }

// 1b. The kernel forms the dispatch picks by shape that no other case reaches (found with gcov over this program):
// one and two rows with d_k != d_v (one_row / few_rows at 64 x 128 and 128 x 64); one row with d_k a whole number
// of vectors other than 4 or 8 (one_row's any-d_k form: AVX-512 float d_k 32, 48, 96, double 40, 48, 96, with d_v
// 4 or 8 vectors); with bf16 / f16 K and V also one
// row at d 128 (f16 had none), at d 64 and with d_k 96, two rows at d 64, key by key (d 40: stream), and row blocks
// with a last block of two rows (L_q 5, 6: blocks); double one row at d_v 32 and row blocks of odd vector counts.
// Each scaled, and with a random boolean mask (the score program after the folded factor), on every instruction
// set; L_k 603: a chunk and a part, the last block of keys not a multiple of the four a block's dots take at once.
struct form {
  std::size_t lq, dk, dv;
};
template <class T>
void forms(std::initializer_list<form> fs, std::uint32_t seed) {
  using I = instance<T>;
  using P = ak::attention_problem<T>;
  for (const form& f : fs) {
    const shape s{2, 8, 8, f.lq, 603, f.dk, f.dv, int(seed % 3)};
    BOOST_TEST_CONTEXT(s) {
      run_program<T>(s, seed++, [](I& in, P& p) { p.multiply(T(1) / std::sqrt(T(in.s.dk))); });
      const std::uint32_t values = seed++, ms = seed;  // (two arguments apart: their order is the compiler's)
      run_program<T>(s, values, [ms](I& in, P& p) { p.multiply(T(0.125)).boolean_mask(random_mask(in, ms)); });
    }
  }
}
BOOST_AUTO_TEST_CASE(every_kernel_form) {
  forms<float>({{1, 64, 128}, {1, 128, 64}, {2, 64, 128}, {2, 128, 64}, {1, 32, 64}, {1, 48, 128}, {1, 96, 64}}, 1000);
  for (ak::kv_storage kv : {ak::kv_storage::bf16, ak::kv_storage::f16}) {
    const with_storage st(kv);
    BOOST_TEST_CONTEXT((kv == ak::kv_storage::bf16 ? "bf16" : "f16")) {
      forms<float>({{1, 128, 128}, {1, 64, 64}, {1, 64, 128}, {1, 128, 64}, {1, 96, 64}, {1, 96, 128}, {1, 40, 40}, {2, 64, 64},
                    {2, 64, 128}, {2, 128, 64}, {5, 16, 16}, {6, 64, 64}, {6, 40, 40}},
                   1100);
    }
  }
  forms<double>({{1, 32, 32}, {1, 64, 32}, {1, 40, 32}, {1, 48, 64}, {1, 96, 64}, {5, 36, 36}, {6, 20, 20}}, 1200);
}

// 2. Score programs, step by step in their order; 6. the prefill path's lse (L_q = 40, 100).
template <class T>
void programs() {
  using I = instance<T>;
  using P = ak::attention_problem<T>;
  const auto top = causal_kind::top_left, bottom = causal_kind::bottom_right;
  static constexpr T big = std::numeric_limits<T>::max();
  const struct {
    const char* name;
    shape s;
    program<T> prog;
  } cases[] = {
      {"divide", {1, 8, 2, 4, 65, 40, 24, 1}, [](I&, P& p) { p.divide(T(6.5)); }},
      {"multiply, divide", {2, 8, 8, 3, 600, 16, 16, 0}, [](I&, P& p) { p.multiply(T(0.5)).divide(T(3)); }},
      {"x 0: the mean of V", {1, 8, 1, 2, 700, 8, 8, 2}, [](I&, P& p) { p.multiply(T(0)); }},
      {"/ 0: +-inf scores", {1, 8, 2, 5, 1100, 8, 16, 0}, [](I&, P& p) { p.divide(T(0)); }},
      {"top_left, Lq > Lk", {2, 8, 8, 7, 5, 16, 8, 0}, [=](I&, P& p) { p.multiply(T(0.25)).causal(top); }},
      {"top_left", {1, 8, 1, 16, 1100, 64, 64, 1}, [=](I&, P& p) { p.multiply(T(0.125)).causal(top); }},
      {"bottom_right, Lq > Lk", {1, 8, 2, 7, 5, 16, 24, 1}, [=](I&, P& p) { p.multiply(T(0.25)).causal(bottom); }},
      {"bottom_right", {2, 8, 2, 16, 1100, 40, 40, 2}, [=](I&, P& p) { p.multiply(T(0.15)).causal(bottom); }},
      {"top_left, then x -1: the blocked keys +inf", {1, 8, 2, 5, 70, 16, 16, 0},
       [=](I&, P& p) { p.multiply(T(0.25)).causal(top).multiply(T(-1)); }},
      {"key_lengths {0, 530}", {2, 8, 2, 3, 700, 32, 40, 1},
       [](I& in, P& p) { in.lengths = {0, 530}, p.multiply(T(0.2)).key_lengths(in.lengths.data()); }},
      {"causal_lengths {3, 1100}", {2, 8, 2, 5, 1100, 16, 24, 2},
       [](I& in, P& p) { in.lengths = {3, 1100}, p.multiply(T(0.25)).causal_lengths(in.lengths.data()); }},
      {"no keys (Lk = 0)", {1, 8, 2, 3, 0, 8, 8, 1}, [](I&, P& p) { p.multiply(T(0.5)); }},
      {"key_padding 600", {1, 8, 1, 2, 1100, 64, 32, 0}, [](I&, P& p) { p.multiply(T(0.125)).key_padding(600); }},
      {"boolean (B, 1, Lq, Lk)", {2, 8, 2, 4, 600, 32, 32, 1}, [](I& in, P& p) { p.boolean_mask(random_mask(in, 7)); }},
      {"boolean (1, H, 1, Lk)", {1, 8, 4, 3, 530, 16, 40, 2},
       [](I& in, P& p) {
         in.mask.reset(new bool[8 * 530]);  // head 3: only keys 520.. (chunk 1)
         for (std::size_t n = 0; n < 8 * 530; ++n) in.mask[n] = n * 7919 % 5 != 0 && (n / 530 != 3 || n % 530 >= 520);
         p.multiply(T(0.3)).boolean_mask({in.mask.get(), 0, 530, 0, 1});
       }},
      {"additive (1, H, Lq, Lk)", {2, 8, 2, 7, 513, 40, 40, 0},
       [](I& in, P& p) { p.multiply(T(0.15)).additive_mask(random_bias(in, 8)); }},
      {"bottom_right fill -1e9, Lq > Lk: blocked rows average V", {1, 8, 1, 7, 5, 16, 16, 1},
       [=](I&, P& p) { p.multiply(T(0.25)).causal(bottom, T(-1e9)); }},
      {"key_lengths {0, 5} fill -1e9", {2, 8, 2, 2, 600, 16, 8, 0},
       [](I& in, P& p) { in.lengths = {0, 5}, p.multiply(T(0.25)).key_lengths(in.lengths.data(), T(-1e9)); }},
      {"key_padding 0 fill -1e9, then x 2", {1, 8, 2, 3, 1100, 8, 16, 2},
       [](I&, P& p) { p.multiply(T(0.25)).key_padding(0, T(-1e9)).multiply(T(2)); }},
      {"every kind of step", {2, 8, 2, 6, 1100, 40, 24, 1},
       [=](I& in, P& p) {
         in.lengths = {1100, 700};
         p.multiply(T(0.15)).additive_mask(random_bias(in, 9)).causal(bottom).key_lengths(in.lengths.data());
         p.boolean_mask(random_mask(in, 10));
       }},
      {"prefill, no keys (Lk = 0)", {1, 2, 1, 40, 0, 8, 8, 0}, [](I&, P& p) { p.multiply(T(0.5)); }},
      {"prefill top_left", {1, 4, 2, 40, 300, 64, 64, 1}, [=](I&, P& p) { p.multiply(T(0.125)).causal(top); }},
      {"prefill bottom_right, Lq > Lk", {2, 4, 1, 100, 60, 32, 40, 0}, [=](I&, P& p) { p.multiply(T(0.2)).causal(bottom); }},
      {"prefill bottom_right", {1, 2, 2, 100, 700, 40, 24, 2}, [=](I&, P& p) { p.multiply(T(0.15)).causal(bottom); }},
      {"prefill top_left fill -1e9, Lq > Lk", {1, 2, 1, 40, 20, 16, 16, 0},
       [=](I&, P& p) { p.multiply(T(0.25)).causal(top, T(-1e9)); }},
      {"prefill additive, bottom_right", {1, 4, 4, 40, 100, 16, 16, 1},
       [=](I& in, P& p) { p.multiply(T(0.25)).additive_mask(random_bias(in, 11)).causal(bottom); }},
      // A division the plan keeps (1 / d subnormal, not turned into a multiplication), after a mask.
      {"x max / 200, boolean, / (max / 2) (one row)", {1, 8, 8, 1, 700, 64, 64, 0},
       [](I& in, P& p) { p.multiply(big / 200).boolean_mask(random_mask(in, 22)).divide(big / 2); }},
      {"x max / 200, boolean, / (max / 2) (row blocks)", {1, 8, 2, 5, 700, 40, 40, 1},
       [](I& in, P& p) { p.multiply(big / 200).boolean_mask(random_mask(in, 23)).divide(big / 2); }},
      // A limit filling with -1e9 followed by a kept division: the blocked keys end near 0, not skipped (the
      // skip analysis divides the fill too), in both kernels.
      {"x max / 200, bottom_right fill -1e9, / (max / 2)", {1, 8, 2, 3, 700, 32, 32, 0},
       [=](I&, P& p) { p.multiply(big / 200).causal(bottom, T(-1e9)).divide(big / 2); }},
      {"prefill x max / 200, bottom_right fill -1e9, / (max / 2)", {1, 2, 1, 40, 300, 16, 16, 1},
       [=](I&, P& p) { p.multiply(big / 200).causal(bottom, T(-1e9)).divide(big / 2); }},
      // A -inf limit before an additive mask and a limit after it (the first's keys not skipped: a step other than
      // a positive factor follows the bias), the second filling with a finite value (its keys skipped softly).
      {"bottom_right, additive, key_padding 900 fill -1e9", {1, 8, 2, 3, 1100, 40, 40, 2},
       [=](I& in, P& p) { p.multiply(T(0.15)).causal(bottom).additive_mask(random_bias(in, 12)).key_padding(900, T(-1e9)); }},
      {"prefill bottom_right, additive, key_padding 250 fill -1e9", {1, 4, 2, 40, 300, 16, 16, 0},
       [=](I& in, P& p) { p.multiply(T(0.25)).causal(bottom).additive_mask(random_bias(in, 13)).key_padding(250, T(-1e9)); }},
  };
  std::uint32_t seed = 200;
  double worst = 0;
  for (const auto& c : cases)
    BOOST_TEST_CONTEXT(c.name << ", " << c.s) { worst = std::max(worst, run_program<T>(c.s, seed++, c.prog)); }
  BOOST_TEST_MESSAGE((sizeof(T) == 4 ? "float" : "double") << " score programs: worst error " << worst);
}
BOOST_AUTO_TEST_CASE(score_programs_float) { programs<float>(); }
BOOST_AUTO_TEST_CASE(score_programs_double) { programs<double>(); }

// 3. Special values, on the decode path (L_q = 4) and the prefill path (L_q = 20) alike.
template <class T>
void special_values(std::size_t lq) {
  using I = instance<T>;
  using P = ak::attention_problem<T>;
  constexpr T pinf = std::numeric_limits<T>::infinity();
  const shape s{2, 8, 2, lq, 1100, 40, 24, 1};
  const std::ptrdiff_t lk = 1100;
  // NaN in one query: that row only. NaN in key 700 of KV head 1: the rows of heads 4-7 of item 0, unless blocked.
  run_program<T>(s, 301, [&](I& in, P& p) { in.q[in.qi(1, 5, lq - 1, 7)] = qnan, p.multiply(T(0.125)); }, 1,
                 [&](const I& in, const result&) { BOOST_TEST(std::isnan(in.lse((8 + 5) * lq + lq - 1))); });
  run_program<T>(s, 302, [](I& in, P& p) { in.k[in.ki(0, 1, 700, 3)] = qnan, p.multiply(T(0.125)); }, 4 * lq);
  run_program<T>(s, 302, [](I& in, P& p) { in.k[in.ki(0, 1, 700, 3)] = qnan, p.multiply(T(0.125)).key_padding(700); });
  // +inf scores (an additive mask) share the weight: two in one chunk (row 1), in chunks 0 and 2 (row 2), the last
  // key (row 3); row 0: +inf and NaN, NaN.
  const auto infinities = [&](I& in, P& p) {
    in.bias.assign(lq * s.lk, T(0));
    in.bias[5] = pinf, in.bias[7] = T(qnan);
    in.bias[lk + 10] = in.bias[lk + 20] = in.bias[2 * lk + 100] = in.bias[2 * lk + 1050] = in.bias[3 * lk + 1099] = pinf;
    p.multiply(T(0.2)).additive_mask({in.bias.data(), 0, 0, lk, 1});
  };
  run_program<T>(s, 303, infinities, 16, [&](const I& in, const result&) {
    for (std::size_t h = 0; h < 8; ++h) {
      const auto v = [&](std::size_t j, std::size_t c) { return in.v[in.vi(0, h / 4, j, c)]; };
      BOOST_TEST((in.lse(h * lq + 1) == inf && in.lse(h * lq + 2) == inf && in.lse(h * lq + 3) == inf));
      for (std::size_t c = 0; c < s.dv; ++c) {
        BOOST_TEST(std::abs(in.out(0, h, 1, c) - (v(10, c) + v(20, c)) / 2) <= tol<T>);
        BOOST_TEST(std::abs(in.out(0, h, 2, c) - (v(100, c) + v(1050, c)) / 2) <= tol<T>);
        BOOST_TEST(in.out(0, h, 3, c) == v(1099, c));
      }
    }
  });
  // -inf (causal) + a +inf bias is NaN: row 0 (key 3 blocked, its bias +inf); row 2 sees its +inf key 1.
  run_program<T>(s, 304, [&](I& in, P& p) {
    in.bias.assign(lq * s.lk, T(0));
    in.bias[3] = in.bias[2 * lk + 1] = pinf;
    p.multiply(T(0.2)).causal(causal_kind::top_left).additive_mask({in.bias.data(), 0, 0, lk, 1});
  }, 16);
  // Huge logits (scale 1e30 in float, 1e300 in double): the largest score takes all the weight, exactly.
  run_program<T>(s, 305, [](I&, P& p) { p.multiply(T(sizeof(T) == 4 ? 1e30 : 1e300)); }, 0, exactly<T>);
  // Scores near the largest finite number: q = e_0, scores k_j0 * 0.9 max, k_j0 uniform in [-1, 1].
  run_program<T>(s, 306, [&](I& in, P& p) {
    test_random::rng g(7);
    for (std::size_t n = 0; n < in.q.size(); ++n) in.q[n] = n % s.dk == 0 ? 1 : 0;
    for (std::size_t n = 0; n < in.k.size(); n += s.dk) in.k[n] = double(T(g.uniform(-1, 1)));
    p.multiply(T(0.9) * std::numeric_limits<T>::max());
  }, 0, exactly<T>);
}
// One query row per KV head (L_q = 1, kv_heads = heads): under AVX-512 the one_row path (W keys at a time)
// for d 64 and 128, the key-by-key one for d_k 40 / d_v 24, under AVX2 and on the portable path; two to four
// rows (L_q = lq) take few_rows (AVX-512, float, d 64 / 128) or the blocks.
template <class T>
void special_values_one_row(std::size_t dk, std::size_t dv, std::size_t lq = 1) {
  using I = instance<T>;
  using P = ak::attention_problem<T>;
  constexpr T pinf = std::numeric_limits<T>::infinity();
  const shape s{2, 8, 8, lq, 1100, dk, dv, 1};
  const std::ptrdiff_t lk = 1100;
  run_program<T>(s, 311, [&](I& in, P& p) { in.q[in.qi(1, 5, 0, 7)] = qnan, p.multiply(T(0.125)); }, 1);
  run_program<T>(s, 312, [](I& in, P& p) { in.k[in.ki(0, 3, 700, 3)] = qnan, p.multiply(T(0.125)); }, lq);
  run_program<T>(s, 312, [](I& in, P& p) { in.k[in.ki(0, 3, 700, 3)] = qnan, p.multiply(T(0.125)).key_padding(700); });
  // +inf scores in chunks 0 and 2 share the weight (every head, both items); NaN after +inf: NaN.
  run_program<T>(s, 313, [&](I& in, P& p) {
    in.bias.assign(2 * s.lk, T(0));
    in.bias[100] = in.bias[1050] = pinf;
    in.bias[lk + 3] = pinf, in.bias[lk + 900] = T(qnan);
    p.multiply(T(0.2)).additive_mask({in.bias.data(), lk, 0, 0, 1});
  }, 8 * lq, [&](const I& in, const result&) {
    for (std::size_t h = 0; h < 8; ++h)
      for (std::size_t c = 0; c < s.dv; ++c)
        BOOST_TEST(std::abs(in.out(0, h, 0, c) - (in.v[in.vi(0, h, 100, c)] + in.v[in.vi(0, h, 1050, c)]) / 2) <= tol<T>);
  });
  // A fully masked item (key_lengths 0) gives 0 and lse -inf; causal bottom-right over the rest.
  run_program<T>(s, 314, [](I& in, P& p) {
    in.lengths = {0, 1000};
    p.multiply(T(0.25)).key_lengths(in.lengths.data()).causal(causal_kind::bottom_right);
  });
  // Blocked first keys (a boolean mask: not skipped, the scores are -inf before any visible key) and one
  // (item, head) with every key blocked: 0 and lse -inf.
  run_program<T>(s, 317, [](I& in, P& p) {
    in.mask.reset(new bool[2 * 8 * 1100]);
    for (std::size_t n = 0; n < 2 * 8 * 1100; ++n) in.mask[n] = n % 1100 >= 10 && n % 3 != 0 && n / 1100 != 8 + 2;
    p.multiply(T(0.125)).boolean_mask({in.mask.get(), 8 * 1100, 1100, 0, 1});
  });
  run_program<T>(s, 315, [](I&, P& p) { p.multiply(T(sizeof(T) == 4 ? 1e30 : 1e300)); }, 0, exactly<T>);
  run_program<T>(s, 316, [](I&, P& p) { p.multiply(T(0.125)).causal(causal_kind::bottom_right, T(-1e9)); });
  // -inf scores from the data (q_0 = 1, k_j0 = -inf) before any visible key: keys 0-39 and 512-551 (the start of
  // the second chunk, whose state starts again from m = -inf), and every key of item 1's head 2 (0, lse -inf).
  run_program<T>(s, 319, [&](I& in, P& p) {
    for (std::size_t n = 0; n < in.q.size(); n += s.dk) in.q[n] = 1;
    for (std::size_t g = 0; g < 8; ++g)
      for (std::size_t j = 0; j < 40; ++j) in.k[in.ki(0, g, j, 0)] = in.k[in.ki(0, g, 512 + j, 0)] = -pinf;
    for (std::size_t j = 0; j < s.lk; ++j) in.k[in.ki(1, 2, j, 0)] = -pinf;
    p.multiply(T(0.125));
  });
  // A NaN score alone among -inf scores in the first group (q_0 = 1, k_j0 = -inf, key 3: NaN), before any finite
  // score: the rows of that head are NaN, output and lse, though every later group is finite.
  run_program<T>(s, 320, [&](I& in, P& p) {
    for (std::size_t n = 0; n < in.q.size(); n += s.dk) in.q[n] = 1;
    for (std::size_t j = 0; j < 16; ++j) in.k[in.ki(0, 0, j, 0)] = j == 3 ? qnan : -pinf;
    p.multiply(T(0.125));
  }, lq);
  // A limit with a finite fill is not skipped: keys from 700 (item 0, inside a key group) and from 3 (item 1)
  // score -1e9 and weigh 0 beside the visible ones.
  run_program<T>(s, 318, [](I& in, P& p) {
    in.lengths = {700, 3};
    p.multiply(T(0.125)).key_lengths(in.lengths.data(), T(-1e9));
  });
}
BOOST_AUTO_TEST_CASE(special_values_one_row_per_kv_head) {
  special_values_one_row<float>(64, 64);
  special_values_one_row<float>(128, 128);
  special_values_one_row<float>(40, 24);
  special_values_one_row<double>(64, 64);
  special_values_one_row<double>(40, 24);
}
BOOST_AUTO_TEST_CASE(special_values_two_rows_per_kv_head) {
  special_values_one_row<float>(64, 64, 2);
  special_values_one_row<float>(40, 24, 2);
  special_values_one_row<double>(128, 128, 2);
}

// Two to four rows per KV head (L_q 2-4, or a GQA group x L_q), and five to eight fp32 rows at d 128 (as eight):
// under AVX-512 in float with d 64 / 128 the few_rows path (every row's dots in one pass over the keys; with d_v
// 128 the outputs of row 3 of four kept in L1), the blocks elsewhere. The scores grow along the keys (q = e_0, k_j0 = 0.05 j): each row's maximum rises at every
// key, so its output is rescaled at every group of keys, and its last visible keys carry most of its weight, so
// that a key too many or too few for any row shows. Causal bottom-right gives each row its own last key.
template <class T>
void few_rows_values(std::size_t kv_heads, std::size_t lq, std::size_t dk, std::size_t dv, std::size_t heads = 8) {
  using I = instance<T>;
  using P = ak::attention_problem<T>;
  const shape s{2, heads, kv_heads, lq, 1100, dk, dv, 1};
  const auto growing = [s](I& in) {
    for (std::size_t n = 0; n < in.q.size(); ++n) in.q[n] = n % s.dk == 0 ? T(1) : T(0);
    for (std::size_t n = 0; n < in.k.size(); n += s.dk) in.k[n] = T(0.05) * T(n / s.dk % s.lk);
  };
  run_program<T>(s, 321, [&](I& in, P& p) { growing(in), p.multiply(T(1)); });
  run_program<T>(s, 322, [&](I& in, P& p) { growing(in), p.causal(causal_kind::bottom_right); });
  run_program<T>(s, 323, [&](I& in, P& p) {
    growing(in);
    in.lengths = {1100, 700};
    p.multiply(T(0.5)).causal(causal_kind::bottom_right).key_lengths(in.lengths.data());
  });
  // few_rows keeps a row's reference maximum until a score exceeds it by more than 8 / log2(e) (weights up to 2^8,
  // then a rescale): at 0.05 per key (above) the scores pass it every 7 groups; at 0.01 per key (x 0.2) every
  // 35 groups, so that the reference lags through whole chunks of 512 keys; at 0.5 per key (x 10) every group
  // (over the first 120 and 90 keys: scores up to 60, where float's rounding of s - m stays inside tol).
  run_program<T>(s, 327, [&](I& in, P& p) { growing(in), p.multiply(T(0.2)); });
  run_program<T>(s, 328, [&](I& in, P& p) {
    growing(in);
    in.lengths = {120, 90};
    p.multiply(T(10)).causal(causal_kind::bottom_right).key_lengths(in.lengths.data());
  });
  // One score 100 above the others (key 600): past any margin float's exponential can take (e^100 overflows),
  // a rescale; the row's output is V row 600's.
  run_program<T>(s, 329, [&](I& in, P& p) {
    for (std::size_t n = 0; n < in.q.size(); ++n) in.q[n] = n % s.dk == 0 ? T(1) : T(0);
    for (std::size_t n = 0; n < in.k.size(); n += s.dk) in.k[n] = n / s.dk % s.lk == 600 ? T(100) : T(0);
    p.multiply(T(1));
  });
  // Decreasing scores (x -1): the first keys weigh most, the maximum never moves after the first group (no
  // rescale). Top-left causal: row i sees keys 0 .. i only, all in the first group.
  run_program<T>(s, 324, [&](I& in, P& p) { growing(in), p.multiply(T(-1)); });
  run_program<T>(s, 326, [&](I& in, P& p) { growing(in), p.causal(causal_kind::top_left); });
  // Random scores with a boolean mask (L_q x L_k per item, one row all false).
  run_program<T>(s, 325, [&](I& in, P& p) { p.multiply(T(0.125)).boolean_mask(random_mask(in, 12)); });
  // L_k 1090 (68 groups and 2 keys), bottom-right causal: with 3 or 4 rows the first rows end at keys 1087 and
  // 1088, before the last group's first key, so that group has no key for them (and weighs nothing for them).
  const shape s2{2, heads, kv_heads, lq, 1090, dk, dv, 1};
  run_program<T>(s2, 330, [](I&, P& p) { p.multiply(T(0.125)).causal(causal_kind::bottom_right); });
}
BOOST_AUTO_TEST_CASE(few_rows_per_kv_head) {
  const with_tunings every;  // (three and four fp32 rows: few_rows on AMD, four_rows elsewhere)
  for (std::size_t lq : {2u, 3u, 4u}) {
    BOOST_TEST_CONTEXT("Lq=" << lq << " d 128") { few_rows_values<float>(8, lq, 128, 128); }
    BOOST_TEST_CONTEXT("Lq=" << lq << " d 64") { few_rows_values<float>(8, lq, 64, 64); }
  }
  BOOST_TEST_CONTEXT("GQA 2 x Lq 2, d 128") { few_rows_values<float>(4, 2, 128, 128); }
  BOOST_TEST_CONTEXT("GQA 4 x Lq 1, d 128 / 64") { few_rows_values<float>(2, 1, 128, 64); }
  BOOST_TEST_CONTEXT("GQA 3 x Lq 1, d 128") { few_rows_values<float>(2, 1, 128, 128, 6); }
  // Five to eight rows at d 128: row_passes (rows 0-3, then the others, over each block of 256 keys: 1100 keys, five
  // blocks, the last short); blocks at d 64.
  for (std::size_t lq : {5u, 7u, 8u}) BOOST_TEST_CONTEXT("Lq=" << lq << " d 128") { few_rows_values<float>(8, lq, 128, 128); }
  BOOST_TEST_CONTEXT("GQA 8 x Lq 1, d 128") { few_rows_values<float>(1, 1, 128, 128); }
  BOOST_TEST_CONTEXT("GQA 4 x Lq 2, d 128") { few_rows_values<float>(2, 2, 128, 128); }
  BOOST_TEST_CONTEXT("GQA 3 x Lq 2, d 128") { few_rows_values<float>(2, 2, 128, 128, 6); }
  BOOST_TEST_CONTEXT("Lq=8 d 64 (blocks)") { few_rows_values<float>(8, 8, 64, 64); }
  BOOST_TEST_CONTEXT("double, Lq 4") { few_rows_values<double>(8, 4, 64, 64); }
}
BOOST_AUTO_TEST_CASE(few_rows_special_values) {
  const with_tunings every;
  special_values_one_row<float>(128, 128, 4);
  special_values_one_row<float>(128, 128, 3);
  special_values_one_row<float>(64, 128, 4);
  special_values_one_row<float>(128, 128, 8);
  special_values_one_row<float>(128, 128, 5);
}
// The same with K and V stored as bf16 / f16: two rows take few_rows, three and four four_rows (AVX-512, keys four at a
// time; three rows at d 128 as three, elsewhere as four with a padding row; few_rows on AMD Zen 5: every tuning's loop
// is run and their bits compared, with_tunings), against the reference of the stored values.
template <ak::kv_storage KV>
void few_rows_stored() {
  const with_storage st(KV);
  const with_tunings every;
  const char* name = KV == ak::kv_storage::bf16 ? "bf16" : "f16";
  for (std::size_t lq : {2u, 3u, 4u}) BOOST_TEST_CONTEXT(name << " Lq=" << lq << " d 128") { few_rows_values<float>(8, lq, 128, 128); }
  BOOST_TEST_CONTEXT(name << " Lq=4 d 64") { few_rows_values<float>(8, 4, 64, 64); }
  BOOST_TEST_CONTEXT(name << " GQA 4 x Lq 1, d 128 / 64") { few_rows_values<float>(2, 1, 128, 64); }
  BOOST_TEST_CONTEXT(name << " GQA 3 x Lq 1, d 128") { few_rows_values<float>(2, 1, 128, 128, 6); }
  for (std::size_t lq : {6u, 8u}) BOOST_TEST_CONTEXT(name << " Lq=" << lq << " d 128") { few_rows_values<float>(8, lq, 128, 128); }
  BOOST_TEST_CONTEXT(name << " GQA 8 x Lq 1, d 128") { few_rows_values<float>(1, 1, 128, 128); }
}
BOOST_AUTO_TEST_CASE(few_rows_bf16) { few_rows_stored<ak::kv_storage::bf16>(); }
BOOST_AUTO_TEST_CASE(few_rows_f16) { few_rows_stored<ak::kv_storage::f16>(); }
BOOST_AUTO_TEST_CASE(few_rows_16bit_special_values) {
  for (ak::kv_storage kv : {ak::kv_storage::bf16, ak::kv_storage::f16}) {
    const with_storage st(kv);
    const with_tunings every;
    BOOST_TEST_CONTEXT((kv == ak::kv_storage::bf16 ? "bf16" : "f16") << " Lq=4") { special_values_one_row<float>(128, 128, 4); }
    BOOST_TEST_CONTEXT((kv == ak::kv_storage::bf16 ? "bf16" : "f16") << " Lq=3, d_k 64") { special_values_one_row<float>(64, 128, 3); }
    BOOST_TEST_CONTEXT((kv == ak::kv_storage::bf16 ? "bf16" : "f16") << " Lq=3, d 128") { special_values_one_row<float>(128, 128, 3); }
    BOOST_TEST_CONTEXT((kv == ak::kv_storage::bf16 ? "bf16" : "f16") << " Lq=7, d 128") { special_values_one_row<float>(128, 128, 7); }
  }
}

// An infinite value in V at a key of a short last step of four_rows (fewer than four keys left): the step's padding
// slots weigh 0 and must not multiply a value (0 x inf is NaN; they used to read the step's first key again). Every
// row sees every key with the same weight: column 0 is +inf (V's last key), the others 0.5. 16-bit K and V, and
// float under every decode tuning (three and four fp32 rows take four_rows except on AMD).
BOOST_AUTO_TEST_CASE(infinite_value_in_a_short_last_step) {
  const int every_tuning[] = {-1, ak::detail::decode_families[0], ak::detail::decode_families[1], ak::detail::decode_families[2]};
  const auto name = [](ak::kv_storage kv) { return kv == ak::kv_storage::bf16 ? "bf16" : kv == ak::kv_storage::f16 ? "f16" : "float"; };
  for (ak::kv_storage kv : {ak::kv_storage::bf16, ak::kv_storage::f16, ak::kv_storage::same})
    for (std::size_t lq : {3u, 4u})
      for (std::size_t d : {64u, 128u})
        for (std::size_t lk : {5u, 21u, 23u}) {
          std::vector<float> q(lq * d, 0.25f), o(lq * d), k32(lk * d, 0.5f), v32(lk * d, 0.5f);
          std::vector<std::uint16_t> k(lk * d, encode(kv, 0.5)), v(lk * d, encode(kv, 0.5));
          v[(lk - 1) * d] = encode(kv, std::numeric_limits<double>::infinity());
          v32[(lk - 1) * d] = std::numeric_limits<float>::infinity();
          ak::attention_problem<float> p;
          p.q = {q.data(), 0, 0, std::ptrdiff_t(d)};
          p.o = {o.data(), 0, 0, std::ptrdiff_t(d)};
          p.kv = kv;
          if (kv == ak::kv_storage::same) {
            p.k = {k32.data(), 0, 0, std::ptrdiff_t(d)};
            p.v = {v32.data(), 0, 0, std::ptrdiff_t(d)};
          } else {
            p.k16 = {k.data(), 0, 0, std::ptrdiff_t(d)};
            p.v16 = {v.data(), 0, 0, std::ptrdiff_t(d)};
          }
          p.lq = lq, p.lk = lk, p.dk = d, p.dv = d;
          for (isa i : paths_under_test())
            for (unsigned t : {1u, 2u})
              for (int family : every_tuning) {  // (-1: this CPU's)
                BOOST_TEST_CONTEXT(name(kv) << " Lq " << lq << " d " << d << " Lk " << lk << " " << attnx::simd::name(i)
                                            << " tuned for " << family << " threads " << t) {
                  std::fill(o.begin(), o.end(), -1.0f);
                  {
                    const tuned_as as(family);
                    ak::flash_attention(p, i, t);
                  }
                  std::size_t bad = 0;
                  for (std::size_t r = 0; r < lq; ++r)
                    for (std::size_t c = 0; c < d; ++c) {
                      const float x = o[r * d + c];
                      if (c == 0 ? x != std::numeric_limits<float>::infinity() : std::abs(x - 0.5f) > 1e-6f) ++bad;
                    }
                  BOOST_TEST(bad == 0u);
                }
              }
        }
}

BOOST_AUTO_TEST_CASE(special_values_float) {
  for (std::size_t lq : {4u, 20u}) BOOST_TEST_CONTEXT("Lq=" << lq) { special_values<float>(lq); }
}
BOOST_AUTO_TEST_CASE(special_values_double) {
  for (std::size_t lq : {4u, 20u}) BOOST_TEST_CONTEXT("Lq=" << lq) { special_values<double>(lq); }
}

// No keys at all (L_k = 0) with K and V given as no memory (null data, non-zero head and batch strides, as a view of
// an empty token-major buffer is): every row 0 with lse -inf, and no pointer formed from the null data (found by
// fuzz.kernel under UBSan: the decode kernel offset null by the head stride), for T and 16-bit K / V.
BOOST_AUTO_TEST_CASE(no_keys_and_no_memory) {
  for (std::size_t lq : {1u, 4u})
    for (ak::kv_storage kind : {ak::kv_storage::same, ak::kv_storage::bf16, ak::kv_storage::f16})
      BOOST_TEST_CONTEXT("Lq=" << lq << " storage " << int(kind)) {
        const shape s{2, 8, 2, lq, 0, 64, 64, 2};
        instance<float> in(s, 450);
        in.kv = kind;
        ak::attention_problem<float> p = in.problem();
        p.k.data = p.v.data = nullptr, p.k16.data = p.v16.data = nullptr;
        BOOST_TEST(in.Lk.head != 0);
        const result r = reference(p, in.q, in.k, in.v);
        BOOST_TEST(r.lse[0] == -inf);
        run_all(in, p, r, tol<float>, [&](isa) { exactly(in, r); });
      }
}

// 4. Same bits on 1 and 2 threads (run_all checks it everywhere): a problem big enough for two threads to work.
BOOST_AUTO_TEST_CASE(threads_give_the_same_bits) {
  const shape s{2, 8, 2, 8, 1500, 128, 128, 1};
  const auto prog = [](auto&, auto& p) { p.multiply(decltype(p.steps[0].value)(0.09)).causal(causal_kind::bottom_right); };
  run_program<float>(s, 401, prog);
  run_program<double>(s, 402, prog);
}

// For chunk_runs_give_the_same_bits: p (K and V stored as kind) on every instruction set with 1 thread against
// the reference, and the same bits with 2 and 3 threads.
template <class T>
void check_runs(const shape& s, ak::kv_storage kind, std::uint32_t seed, const program<T>& prog) {
  BOOST_TEST_CONTEXT(s << (kind == ak::kv_storage::same ? "" : " bf16")) {
    instance<T> in(s, seed);
    in.kv = kind;
    ak::attention_problem<T> p = in.problem();
    prog(in, p);
    in.store();
    std::vector<double> ks = in.k, vs = in.v;
    if (kind != ak::kv_storage::same)
      for (auto* x : {&ks, &vs})
        for (double& e : *x) e = stored(kind, e);
    const result r = reference(p, in.q, ks, vs);
    for (isa i : paths_under_test()) {
      BOOST_TEST_CONTEXT(attnx::simd::name(i)) {
        in.run(p, i, 1);
        check(in, r, tol<T>);
        const std::vector<T> o1 = in.ob, l1 = in.lb;
        for (unsigned t : {2u, 3u}) {
          in.run(p, i, t);
          BOOST_TEST(std::memcmp(o1.data(), in.ob.data(), o1.size() * sizeof(T)) == 0, "threads 1 and " << t << ": different o");
          BOOST_TEST(std::memcmp(l1.data(), in.lb.data(), l1.size() * sizeof(T)) == 0, "threads 1 and " << t << ": different lse");
        }
      }
    }
  }
}

// 4b. A work item is a run of consecutive chunks of one (batch item, KV head), gone through in one pass that
// leaves a state at every chunk boundary. One thread takes whole heads; two and three threads take runs of 6
// and 4 chunks (24-25 chunks of 512 keys per head, one head; enough work for three threads): the runs differ,
// the bits must not, and all agree with the reference. L_k: whole chunks (a boundary at the last key), a
// short group just past a boundary, a short last chunk; one row (one_row), 2-4 rows (few_rows), 6 rows
// (row_passes at d 128: blocks of 256 keys inside the chunks), 12 rows (blocks); GQA; key lengths that end one batch item 13 chunks before the other; bf16 keys and values; double.
BOOST_AUTO_TEST_CASE(chunk_runs_give_the_same_bits) {
  using I = instance<float>;
  using P = ak::attention_problem<float>;
  std::uint32_t seed = 430;
  const auto runs = [&](const shape& s, ak::kv_storage kind, const program<float>& prog) {
    check_runs<float>(s, kind, seed++, prog);
  };
  const auto plain = [](I&, P& p) { p.multiply(0.1f).causal(causal_kind::bottom_right); };
  for (std::size_t lk : {12288u, 12293u, 12600u})
    for (std::size_t lq : {1u, 2u, 4u, 6u, 12u}) runs({1, 1, 1, lq, lk, 128, 128, 0}, ak::kv_storage::same, plain);
  runs({1, 1, 1, 8, 12293, 128, 128, 0}, ak::kv_storage::bf16, plain);
  runs({1, 4, 1, 1, 12293, 64, 64, 0}, ak::kv_storage::same, plain);  // GQA: four heads share one pass
  runs({1, 1, 1, 1, 12293, 128, 128, 0}, ak::kv_storage::bf16, plain);
  runs({1, 2, 1, 2, 12293, 128, 64, 0}, ak::kv_storage::bf16, plain);
  for (std::size_t lq : {1u, 3u}) {  // item 0 ends 6600 keys before item 1: its heads have fewer chunks
    runs({2, 2, 2, lq, 12600, 128, 128, 0}, ak::kv_storage::same, [](I& in, P& p) {
      in.lengths = {6000, 12600};
      p.multiply(0.1f).key_lengths(in.lengths.data()).causal(causal_kind::bottom_right);
    });
  }
  for (std::size_t lq : {1u, 4u})  // double: one_row, blocks
    check_runs<double>({1, 1, 1, lq, 12293, 128, 128, 0}, ak::kv_storage::same, seed++,
                       [](auto&, auto& p) { p.multiply(0.1).causal(causal_kind::bottom_right); });
}

// 5. K and V stored as bf16 / f16 (float queries): against the reference of the stored values at float tolerance,
// and against the reference of the unrounded float values within a bound per storage type (N(0,1) inputs, scale
// 1/sqrt(dk); measured: bf16 9.0e-4 (o) and 3.9e-4 (lse), f16 1.4e-4 and 4.1e-5; bounds about 2.5 times these).
BOOST_AUTO_TEST_CASE(bf16_and_f16_keys_and_values) {
  for (ak::kv_storage kind : {ak::kv_storage::bf16, ak::kv_storage::f16}) {
    const bool is_bf16 = kind == ak::kv_storage::bf16;
    double err_o[2] = {0, 0}, err_lse[2] = {0, 0};  // decode, prefill
    std::uint32_t seed = 500;
    for (std::size_t lq : {1u, 4u, 16u, 40u}) {
      const shape s{2, 8, 2, lq, 1100, lq == 4 ? 40u : 64u, lq == 16 ? 72u : 40u, int(lq % 3)};
      BOOST_TEST_CONTEXT((is_bf16 ? "bf16 " : "f16 ") << s) {
        instance<float> in(s, seed++);
        in.kv = kind;
        auto p = in.problem();
        p.multiply(1 / std::sqrt(float(s.dk)));
        if (lq == 40) p.causal(causal_kind::bottom_right);
        std::vector<double> ks = in.k, vs = in.v;
        for (auto* x : {&ks, &vs})
          for (double& e : *x) e = stored(kind, e);
        const result exact = reference(p, in.q, in.k, in.v);
        const std::size_t path = lq <= ak::detail::decode_max_rows ? 0 : 1;
        run_all(in, p, reference(p, in.q, ks, vs), tol<float>, [&](isa) {
          for (std::size_t n = 0; n < exact.o.size(); ++n) err_o[path] = std::max(err_o[path], std::abs(in.out(n) - exact.o[n]));
          for (std::size_t n = 0; n < exact.lse.size(); ++n)
            err_lse[path] = std::max(err_lse[path], std::abs(in.lse(n) - exact.lse[n]));
        });
      }
    }
    BOOST_TEST_MESSAGE((is_bf16 ? "bf16" : "f16") << " K/V against the unrounded values: max |o error| decode " << err_o[0]
                       << ", prefill " << err_o[1] << "; max |lse error| decode " << err_lse[0] << ", prefill " << err_lse[1]);
    for (std::size_t path : {0u, 1u}) {
      BOOST_TEST(err_o[path] <= (is_bf16 ? 2e-3 : 4e-4));
      BOOST_TEST(err_lse[path] <= (is_bf16 ? 1e-3 : 1e-4));
    }
  }
  instance<double> d({1, 1, 1, 1, 4, 8, 8, 0}, 1);  // 16-bit K/V need float queries
  d.kv = ak::kv_storage::bf16;
  BOOST_CHECK_THROW(ak::flash_attention(d.problem(), isa::scalar, 1), std::invalid_argument);
}

// Prefill (more than 16 rows) over bf16 / f16 K and V: each thread widens the rows its work items read, one
// (batch item, KV head) at a time, into a buffer of its own. Against the reference of the stored values, and the
// same bits as the prefill kernel over float K and V that hold the stored values, on 1 and 2 threads (2 threads
// take the items longest first, so a thread's consecutive items change KV head and number of keys).
BOOST_AUTO_TEST_CASE(prefill_over_16bit_storage) {
  using I = instance<float>;
  using P = ak::attention_problem<float>;
  const auto top = causal_kind::top_left, bottom = causal_kind::bottom_right;
  const struct {
    const char* name;
    shape s;
    program<float> prog;
  } cases[] = {
      {"GQA, top_left, key_lengths {700, 130, 0}", {3, 8, 2, 100, 700, 64, 40, 1},
       [=](I& in, P& p) { in.lengths = {700, 130, 0}, p.multiply(0.125f).causal(top).key_lengths(in.lengths.data()); }},
      {"bottom_right", {2, 4, 4, 40, 300, 40, 24, 2}, [=](I&, P& p) { p.multiply(0.15f).causal(bottom); }},
      {"causal_lengths {20, 500}, MQA", {2, 4, 1, 20, 500, 32, 32, 0},
       [](I& in, P& p) { in.lengths = {20, 500}, p.multiply(0.2f).causal_lengths(in.lengths.data()); }},
      {"boolean (no key skipped), Lq 33", {2, 4, 2, 33, 200, 16, 16, 1},
       [](I& in, P& p) { p.multiply(0.25f).boolean_mask(random_mask(in, 31)); }},
  };
  std::uint32_t seed = 600;
  for (ak::kv_storage kind : {ak::kv_storage::bf16, ak::kv_storage::f16})
    for (const auto& c : cases)
      BOOST_TEST_CONTEXT((kind == ak::kv_storage::bf16 ? "bf16 " : "f16 ") << c.name << ", " << c.s) {
        I h(c.s, seed), f(c.s, seed);  // the same values: K and V as 16-bit values, and as float holding them
        ++seed;
        h.kv = kind;
        P ph = h.problem();
        c.prog(h, ph);
        for (auto* x : {&f.k, &f.v})
          for (double& e : *x) e = stored(kind, e);
        P pf = f.problem();
        c.prog(f, pf);
        run_all(h, ph, reference(pf, f.q, f.k, f.v), tol<float>, {});
        for (isa i : paths_under_test())
          for (unsigned t : {1u, 2u}) {
            h.run(ph, i, t), f.run(pf, i, t);
            BOOST_TEST(std::memcmp(h.ob.data(), f.ob.data(), h.ob.size() * sizeof(float)) == 0,
                       attnx::simd::name(i) << ", " << t << " threads: o differs from float K/V's");
            BOOST_TEST(std::memcmp(h.lb.data(), f.lb.data(), h.lb.size() * sizeof(float)) == 0,
                       attnx::simd::name(i) << ", " << t << " threads: lse differs from float K/V's");
          }
      }
}

// K and V shared by every batch item (batch stride 0: a prefix stored once) under a program that depends on neither the
// item nor the row, L_q at most 16: the items' rows run as rows of one problem (detail::kv_shared_by_batch,
// batch_folded), K and V read once. Against the reference (every item's K and V item 0's), every instruction set, 1 and 2 threads; and the
// programs that must not be folded (causal, key lengths that differ by item, a mask per item) still right.
BOOST_AUTO_TEST_CASE(kv_shared_by_the_batch) {
  using I = instance<float>;
  using P = ak::attention_problem<float>;
  const struct {
    const char* name;
    shape s;
    ak::kv_storage kv;
    bool folded;
    program<float> prog;
  } cases[] = {
      {"one row, equal key lengths", {4, 8, 8, 1, 1100, 128, 128, 0}, ak::kv_storage::same, true,
       [](I& in, P& p) { in.lengths = {900, 900, 900, 900}, p.multiply(0.088f).key_lengths(in.lengths.data()); }},
      {"bf16, one row", {3, 4, 4, 1, 700, 64, 64, 1}, ak::kv_storage::bf16, true, [](I&, P& p) { p.multiply(0.125f); }},
      {"GQA 2 rows, key padding", {3, 8, 2, 2, 700, 64, 40, 2}, ak::kv_storage::same, true,
       [](I&, P& p) { p.multiply(0.125f).key_padding(650); }},
      {"f16, 2 x 12 rows (the prefill kernel), (1, H, 1, Lk) mask and bias", {2, 4, 2, 12, 300, 32, 32, 1},
       ak::kv_storage::f16, true,
       [](I& in, P& p) {
         in.mask.reset(new bool[4 * 300]);  // (1, H, 1, Lk)
         for (std::size_t n = 0; n < 4 * 300; ++n) in.mask[n] = n * 7919 % 7 != 0;
         in.bias.resize(4 * 300);
         for (std::size_t n = 0; n < in.bias.size(); ++n) in.bias[n] = float(int(n * 31 % 11) - 5) / 8;
         p.multiply(0.2f).boolean_mask({in.mask.get(), 0, 300, 0, 1}).additive_mask({in.bias.data(), 0, 300, 0, 1});
       }},
      {"not folded: bottom_right", {2, 4, 4, 3, 200, 16, 16, 0}, ak::kv_storage::same, false,
       [](I&, P& p) { p.multiply(0.25f).causal(causal_kind::bottom_right); }},
      {"not folded: key lengths {300, 120}", {2, 4, 2, 2, 300, 16, 16, 1}, ak::kv_storage::same, false,
       [](I& in, P& p) { in.lengths = {300, 120}, p.multiply(0.25f).key_lengths(in.lengths.data()); }},
      {"not folded: a mask per item", {2, 4, 2, 4, 300, 32, 32, 2}, ak::kv_storage::same, false,
       [](I& in, P& p) { p.multiply(0.25f).boolean_mask(random_mask(in, 41)); }},
      {"not folded: L_q 17 (prefill rows in every item)", {2, 4, 2, 17, 300, 32, 32, 0}, ak::kv_storage::bf16, false,
       [](I&, P& p) { p.multiply(0.25f); }},
  };
  std::uint32_t seed = 700;
  for (const auto& c : cases)
    BOOST_TEST_CONTEXT(c.name << ", " << c.s) {
      I in(c.s, seed++);
      in.kv = c.kv;
      const std::size_t nk = c.s.kv_heads * c.s.lk;  // every item's K and V rows: item 0's
      for (auto [x, d] : {std::pair(&in.k, c.s.dk), std::pair(&in.v, c.s.dv)})
        for (std::size_t b = 1; b < c.s.batch; ++b) std::copy_n(x->begin(), nk * d, x->begin() + std::ptrdiff_t(b * nk * d));
      if (c.kv != ak::kv_storage::same)
        for (auto* x : {&in.k, &in.v})
          for (double& e : *x) e = stored(c.kv, e);
      P p = in.problem();
      c.prog(in, p);
      p.k.batch = p.v.batch = p.k16.batch = p.v16.batch = 0;
      BOOST_TEST(ak::detail::kv_shared_by_batch(p) == c.folded);
      run_all(in, p, reference(p, in.q, in.k, in.v), tol<float>, {});
    }
}

BOOST_AUTO_TEST_CASE(half_conversions) {
  using attnx::bf16;
  using attnx::f16;
  static_assert(float(f16(1.5f)) == 1.5f);
  static_assert(bf16(1.0f).bits == 0x3f80 && f16(65520.0f).bits == 0x7c00 && float(bf16(-2.5f)) == -2.5f);
  const float fnan = std::numeric_limits<float>::quiet_NaN(), finf = std::numeric_limits<float>::infinity();
  const float snan = std::bit_cast<float>(0x7f800001u);  // its payload only in bits both conversions drop
  struct pair { float x; std::uint16_t bits; };
  const pair to_bf16[] = {{1.0f, 0x3f80}, {1 + 0x1p-8f, 0x3f80} /* tie: even, down */, {1 + 3 * 0x1p-8f, 0x3f82} /* up */,
                          {1 + 0x1p-8f + 0x1p-20f, 0x3f81}, {-0.0f, 0x8000}, {finf, 0x7f80}, {-finf, 0xff80},
                          {std::numeric_limits<float>::max(), 0x7f80} /* beyond the largest bf16 + half a step */};
  const pair to_f16[] = {{1.0f, 0x3c00}, {1 + 0x1p-11f, 0x3c00} /* tie: even */, {1 + 3 * 0x1p-11f, 0x3c02},
                         {65504.0f, 0x7bff}, {65519.0f, 0x7bff}, {65520.0f, 0x7c00}, {-65520.0f, 0xfc00}, {1e10f, 0x7c00},
                         {finf, 0x7c00}, {0x1p-14f, 0x0400}, {0x1p-14f - 0x1p-25f, 0x0400} /* tie: even */,
                         {0x1p-24f, 0x0001}, {0x1p-25f, 0x0000} /* tie: even */, {std::nextafter(0x1p-25f, 1.0f), 0x0001},
                         {3 * 0x1p-25f, 0x0002}, {-0.0f, 0x8000}, {-0x1p-26f, 0x8000}};
  for (const pair& t : to_bf16) BOOST_TEST_CONTEXT(t.x) { BOOST_TEST(bf16(t.x).bits == t.bits); }
  for (const pair& t : to_f16) BOOST_TEST_CONTEXT(t.x) { BOOST_TEST(f16(t.x).bits == t.bits); }
  for (float x : {fnan, -fnan, snan, -snan}) BOOST_TEST((std::isnan(float(bf16(x))) && std::isnan(float(f16(x)))));

  // Every bit pattern: the float value is exact (an independent decoding) and converts back to the same bits;
  // every midpoint between neighbours rounds to the even one, one float step either side to the nearer.
  std::size_t bad = 0;
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const double hf = f16_value(b), hb = bf16_value(b);
    const float xf = float(f16::from_bits(std::uint16_t(b))), xb = float(bf16::from_bits(std::uint16_t(b)));
    bad += std::isnan(hf) ? !std::isnan(xf) : (double(xf) != hf || f16(xf).bits != b);
    bad += std::isnan(hb) ? !std::isnan(xb) : (double(xb) != hb || bf16(xb).bits != b);
  }
  BOOST_TEST(bad == 0u);
  const auto midpoints = [](std::uint32_t last, double (*value)(std::uint32_t), std::uint16_t (*conv)(float), double top) {
    std::size_t wrong = 0;
    for (std::uint32_t b = 0; b <= last; ++b) {  // last + 1 is +inf: top stands for the next step
      const auto m = float((value(b) + (b == last ? top : value(b + 1))) / 2);
      const std::uint32_t even = b % 2 ? b + 1 : b;
      wrong += conv(m) != even || conv(-m) != (even | 0x8000u) || conv(std::nextafter(m, 0.0f)) != b ||
               conv(std::nextafter(m, 2 * m)) != b + 1;
    }
    return wrong;
  };
  BOOST_TEST(midpoints(0x7bff, f16_value, [](float x) { return f16::from_float(x); }, 65536.0) == 0u);
  BOOST_TEST(midpoints(0x7f7f, bf16_value, [](float x) { return bf16::from_float(x); }, std::ldexp(1.0, 128)) == 0u);
}

// 7. merge_partials / finish_row: the keys of one row (12 scores, dv = 3) in parts whose states are computed here.
namespace {
std::vector<double> row_s, row_v;
// The state of keys [j0, j1) into st: m = their max + shift (any reference will do), l, unnormalised o.
void part(std::size_t j0, std::size_t j1, double shift, double* st) {
  double m = -inf;
  for (std::size_t j = j0; j < j1; ++j) m = std::max(m, row_s[j]);
  std::fill_n(st, 5, 0.0);
  st[0] = m == -inf ? -inf : m + shift;
  for (std::size_t j = j0; j < j1 && m != -inf; ++j) {
    const double w = m == inf ? (row_s[j] == inf ? 1.0 : 0.0) : std::exp(row_s[j] - st[0]);
    st[1] += w;
    for (std::size_t c = 0; c < 3; ++c) st[2 + c] += w * row_v[j * 3 + c];
  }
}
// Merges n states at st (stride 6) and finishes the row: o and lse.
double merged(std::size_t n, const double* st, std::ptrdiff_t stride, double* o) {
  return ak::finish_row(ak::merge_partials(n, st, stride, 3, o), o, 3);
}
}  // namespace

BOOST_AUTO_TEST_CASE(merge_partials_and_finish_row) {
  test_random::rng g(9);
  row_s.resize(12), row_v.resize(36);
  for (auto& x : row_s) x = 3 * g.normal();
  for (auto& x : row_v) x = g.normal();
  double whole[6], got[3], st[30];
  part(0, 12, 0, whole);  // the whole row in one part: o = whole[2..4] / whole[1], lse = m + ln l
  const auto close = [&](double lse, double e) {
    BOOST_TEST(std::abs(lse - (whole[0] + std::log(whole[1]))) <= e);
    for (std::size_t c = 0; c < 3; ++c) BOOST_TEST(std::abs(got[c] - whole[2 + c] / whole[1]) <= e);
  };
  for (double shift : {0.0, 5.0, -40.0}) {  // parts [0, 4), [4, 9), [9, 12), then two with no visible key
    part(0, 4, shift, st), part(4, 9, -shift, st + 6), part(9, 12, 0.5, st + 12), part(0, 0, 0, st + 18), part(5, 5, 0, st + 24);
    close(merged(3, st, 6, got), 1e-13);
    close(merged(5, st, 6, got), 1e-13);
    close(merged(3, st + 12, -6, got), 1e-13);  // the other order
  }
  {  // float states
    part(0, 4, 0, st), part(4, 9, 0, st + 6), part(9, 12, 0, st + 12);
    float fs[18], fo[3];
    std::copy_n(st, 18, fs);
    const double lse = ak::finish_row(ak::merge_partials(3, fs, 6, 3, fo), fo, 3);
    std::copy_n(fo, 3, got);
    close(lse, 1e-5 * std::max(1.0, std::abs(lse)));
  }
  // A normalised state (m = lse, l = 1, o = the output) of keys [0, 9) with the part [9, 12).
  part(0, 9, 0, st), part(9, 12, 0, st + 6);
  for (std::size_t c = 0; c < 3; ++c) st[2 + c] /= st[1];
  st[0] += std::log(st[1]), st[1] = 1;
  close(merged(2, st, 6, got), 1e-13);
  // No visible key anywhere: 0 and -inf.
  part(0, 0, 0, st), part(3, 3, 0, st + 6);
  BOOST_TEST(merged(2, st, 6, got) == -inf);
  BOOST_TEST((got[0] == 0.0 && got[1] == 0.0 && got[2] == 0.0));
  // +inf scores (keys 1 and 2 in part 0, key 10 in part 2): the mean of their values, lse +inf.
  row_s[1] = row_s[2] = row_s[10] = inf;
  part(0, 4, 0, st), part(4, 9, 0, st + 6), part(9, 12, 0, st + 12), part(0, 0, 0, st + 18);
  BOOST_TEST(merged(4, st, 6, got) == inf);
  for (std::size_t c = 0; c < 3; ++c)
    BOOST_TEST(std::abs(got[c] - (row_v[3 + c] + row_v[6 + c] + row_v[30 + c]) / 3) <= 1e-15);
  // NaN as a part's m, or as its l (the decode kernel's NaN row): the row is NaN.
  for (std::size_t where : {0u, 1u}) {
    part(0, 4, 0, st), part(4, 9, 0, st + 6), part(9, 12, 0, st + 12);
    st[6 + where] = qnan;
    BOOST_TEST(std::isnan(merged(3, st, 6, got)));
    BOOST_TEST((std::isnan(got[0]) && std::isnan(got[1]) && std::isnan(got[2])));
  }
}
