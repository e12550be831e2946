#define BOOST_TEST_MODULE flash_attention
#include <boost/test/unit_test.hpp>

#include "attnx/kernels/flash_attention.hpp"
#include "attnx/kernels/impl/tiles.hpp"
#include "attnx/kernels/rows.hpp"  // the tiles of each instruction set, for exp2 (the kernels are the library's)
#include "messages.hpp"
#include "random.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

// The fused kernel, and the stored-scores path a context with the fused kernel off takes (kernels::attention_rows,
// through the blocked GEMM and in plain loops), against a plain double-precision reference: three loops and a stable
// softmax over the allowed keys, and each row's log-sum-exp. Every instruction-set path this CPU can run is tested,
// whatever the flags of this file (the test is built without -march=native).

namespace ak = attnx::kernels;
using ak::causal_kind;
using attnx::simd::isa;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

// Tolerances, |got - ref| <= atol + rtol * |ref|, for inputs of order 1 (N(0,1) entries, scale
// 1/sqrt(dk)). Observed maxima are about 6e-7 (float) and 3e-15 (double).
template <class T>
constexpr double abs_tol = sizeof(T) == 4 ? 1e-5 : 1e-13;
template <class T>
constexpr double rel_tol = sizeof(T) == 4 ? 1e-5 : 1e-13;

attnx::simd::isa_list runnable_isas() { return attnx::simd::supported(); }
const char* isa_name(isa i) { return attnx::simd::name(i).data(); }

// Memory layout of Q, K, V and O: [batch][head][row][col] or [batch][row][head][col] (the
// interleaved heads of a projection output, row stride = heads * d).
enum class layout { bhld, blhd };

// Which kernel runs the problem: the fused one, or attention_rows with the blocked GEMM on or off.
enum class path { fused, rows_gemm, rows_plain };
constexpr path all_paths[] = {path::fused, path::rows_gemm, path::rows_plain};
const char* path_name(path p) { return p == path::fused ? "fused" : p == path::rows_gemm ? "rows+gemm" : "rows"; }

enum class mask_kind {
  none,
  bool_full,     // (B, 1, Lq, Lk) broadcast over heads, ~30% false, one fully false row
  bool_padding,  // (B, 1, 1, Lk) broadcast over heads and rows
  additive,      // (1, H, Lq, Lk) broadcast over batch, N(0,1) with some -inf
  both           // bool_full and additive
};

struct spec {
  std::size_t batch = 1, heads = 1, kv_heads = 1, lq = 0, lk = 0, dk = 0, dv = 0;
  bool causal_on = false;
  causal_kind causal = causal_kind::top_left;
  mask_kind mask = mask_kind::none;
  std::vector<std::size_t> key_lengths;  // empty: none
  layout lay = layout::bhld;
  unsigned threads = 1;
  path via = path::fused;
};

spec make_spec(std::size_t batch, std::size_t heads, std::size_t kv_heads, std::size_t lq, std::size_t lk,
               std::size_t dk, std::size_t dv) {
  spec s;
  s.batch = batch;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.lq = lq;
  s.lk = lk;
  s.dk = dk;
  s.dv = dv;
  return s;
}

std::string describe(const spec& s) {
  return "B=" + std::to_string(s.batch) + " H=" + std::to_string(s.heads) + " KVH=" + std::to_string(s.kv_heads) +
         " Lq=" + std::to_string(s.lq) + " Lk=" + std::to_string(s.lk) + " dk=" + std::to_string(s.dk) +
         " dv=" + std::to_string(s.dv) + " causal=" + (s.causal_on ? std::to_string(static_cast<int>(s.causal)) : std::string("none")) +
         " mask=" + std::to_string(static_cast<int>(s.mask)) + " keylens=" + std::to_string(s.key_lengths.size()) +
         " layout=" + std::to_string(static_cast<int>(s.lay)) + " threads=" + std::to_string(s.threads) +
         " path=" + path_name(s.via);
}

// One problem: logical tensors in double (what the reference reads) and the kernel's buffers.
template <class T>
struct instance {
  spec s;
  std::vector<double> q, k, v;  // logical [b][h][i][c] (k, v over kv heads)
  std::vector<T> qb, kb, vb, ob, lb;  // lb: each row's log-sum-exp, [b][h][i]
  std::unique_ptr<bool[]> bm;
  std::vector<T> am;
  T scale = T(1);
  mutable std::vector<double> ref_lse;  // reference()'s log-sum-exp of each row, [b][h][i]

  std::size_t qi(std::size_t b, std::size_t h, std::size_t i, std::size_t c) const {
    return ((b * s.heads + h) * s.lq + i) * s.dk + c;
  }
  std::size_t ki(std::size_t b, std::size_t h, std::size_t j, std::size_t c) const {
    return ((b * s.kv_heads + h) * s.lk + j) * s.dk + c;
  }
  std::size_t vi(std::size_t b, std::size_t h, std::size_t j, std::size_t c) const {
    return ((b * s.kv_heads + h) * s.lk + j) * s.dv + c;
  }
  // Offset of logical (b, h, row, col) in a buffer of the chosen layout.
  std::size_t at(std::size_t b, std::size_t h, std::size_t r, std::size_t c, std::size_t nh, std::size_t nr,
                 std::size_t d) const {
    return s.lay == layout::bhld ? ((b * nh + h) * nr + r) * d + c : ((b * nr + r) * nh + h) * d + c;
  }
  void strides(std::size_t nh, std::size_t nr, std::size_t d, std::ptrdiff_t& bs, std::ptrdiff_t& hs,
               std::ptrdiff_t& rs) const {
    const auto sd = static_cast<std::ptrdiff_t>(d), sh = static_cast<std::ptrdiff_t>(nh), sr = static_cast<std::ptrdiff_t>(nr);
    bs = sh * sr * sd;
    hs = s.lay == layout::bhld ? sr * sd : sd;
    rs = s.lay == layout::bhld ? sd : sh * sd;
  }

  bool allowed(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const {
    if (s.causal_on && s.causal == causal_kind::top_left && j > i) return false;
    if (s.causal_on && s.causal == causal_kind::bottom_right &&
        static_cast<double>(j) > static_cast<double>(i) + static_cast<double>(s.lk) - static_cast<double>(s.lq))
      return false;
    if (!s.key_lengths.empty() && j >= s.key_lengths[b]) return false;
    if (s.mask == mask_kind::bool_full || s.mask == mask_kind::both) return bm[(b * s.lq + i) * s.lk + j];
    if (s.mask == mask_kind::bool_padding) return bm[b * s.lk + j];
    (void)h;
    return true;
  }
  double additive(std::size_t h, std::size_t i, std::size_t j) const {
    return s.mask == mask_kind::additive || s.mask == mask_kind::both ? double(am[(h * s.lq + i) * s.lk + j]) : 0.0;
  }
  double out(std::size_t b, std::size_t h, std::size_t i, std::size_t c) const {
    return ob[at(b, h, i, c, s.heads, s.lq, s.dv)];
  }

  explicit instance(spec sp, std::uint32_t seed, double value_scale = 1.0) : s(std::move(sp)) {
    test_random::rng g(seed);
    // Round through T so that the reference sees exactly the kernel's inputs.
    const auto draw = [&] { return double(T(value_scale * g.normal())); };
    q.resize(s.batch * s.heads * s.lq * s.dk);
    k.resize(s.batch * s.kv_heads * s.lk * s.dk);
    v.resize(s.batch * s.kv_heads * s.lk * s.dv);
    for (auto& x : q) x = draw();
    for (auto& x : k) x = draw();
    for (auto& x : v) x = draw();
    if (s.mask == mask_kind::bool_full || s.mask == mask_kind::both) {
      bm.reset(new bool[s.batch * s.lq * s.lk]);
      for (std::size_t n = 0; n < s.batch * s.lq * s.lk; ++n) bm[n] = g.chance(0.7);
      for (std::size_t j = 0; j < s.lk; ++j) bm[(0 * s.lq + s.lq / 2) * s.lk + j] = false;  // a fully blocked row
    } else if (s.mask == mask_kind::bool_padding) {
      bm.reset(new bool[s.batch * s.lk]);
      for (std::size_t b = 0; b < s.batch; ++b)
        for (std::size_t j = 0; j < s.lk; ++j) bm[b * s.lk + j] = j < s.lk - (b * 7) % s.lk;
    }
    if (s.mask == mask_kind::additive || s.mask == mask_kind::both) {
      am.resize(s.heads * s.lq * s.lk);
      for (auto& x : am) x = g.below(10) == 0 ? -std::numeric_limits<T>::infinity() : T(g.normal());
    }
    qb.resize(q.size());
    kb.resize(k.size());
    vb.resize(v.size());
    ob.assign(s.batch * s.heads * s.lq * s.dv, T(-12345));  // every element must be written
    lb.assign(s.batch * s.heads * s.lq, T(-12345));
    for (std::size_t b = 0; b < s.batch; ++b) {
      for (std::size_t h = 0; h < s.heads; ++h)
        for (std::size_t i = 0; i < s.lq; ++i)
          for (std::size_t c = 0; c < s.dk; ++c) qb[at(b, h, i, c, s.heads, s.lq, s.dk)] = T(q[qi(b, h, i, c)]);
      for (std::size_t h = 0; h < s.kv_heads; ++h)
        for (std::size_t j = 0; j < s.lk; ++j) {
          for (std::size_t c = 0; c < s.dk; ++c) kb[at(b, h, j, c, s.kv_heads, s.lk, s.dk)] = T(k[ki(b, h, j, c)]);
          for (std::size_t c = 0; c < s.dv; ++c) vb[at(b, h, j, c, s.kv_heads, s.lk, s.dv)] = T(v[vi(b, h, j, c)]);
        }
    }
    scale = T(1) / std::sqrt(T(s.dk));
  }

  // The kernel's problem: the operands with the layout's strides, then the score program in the order
  // the expression attention(Q, K, V, [additive], [causal], [key lengths], [boolean]) would give it.
  ak::attention_problem<T> problem() const {
    ak::attention_problem<T> p;
    p.q.data = qb.data();
    strides(s.heads, s.lq, s.dk, p.q.batch, p.q.head, p.q.row);
    p.k.data = kb.data();
    strides(s.kv_heads, s.lk, s.dk, p.k.batch, p.k.head, p.k.row);
    p.v.data = vb.data();
    strides(s.kv_heads, s.lk, s.dv, p.v.batch, p.v.head, p.v.row);
    p.o.data = const_cast<T*>(ob.data());
    strides(s.heads, s.lq, s.dv, p.o.batch, p.o.head, p.o.row);
    p.lse = {const_cast<T*>(lb.data()), static_cast<std::ptrdiff_t>(s.heads * s.lq), static_cast<std::ptrdiff_t>(s.lq), 1};
    p.batch = s.batch;
    p.heads = s.heads;
    p.kv_heads = s.kv_heads;
    p.lq = s.lq;
    p.lk = s.lk;
    p.dk = s.dk;
    p.dv = s.dv;
    p.multiply(scale);
    if (!am.empty())
      p.additive_mask({am.data(), 0, static_cast<std::ptrdiff_t>(s.lq * s.lk), static_cast<std::ptrdiff_t>(s.lk), 1});
    if (s.causal_on) p.causal(s.causal);
    if (!s.key_lengths.empty()) p.key_lengths(s.key_lengths.data());
    if (s.mask == mask_kind::bool_full || s.mask == mask_kind::both)
      p.boolean_mask({bm.get(), static_cast<std::ptrdiff_t>(s.lq * s.lk), 0, static_cast<std::ptrdiff_t>(s.lk), 1});
    else if (s.mask == mask_kind::bool_padding)
      p.boolean_mask({bm.get(), static_cast<std::ptrdiff_t>(s.lk), 0, 0, 1});
    return p;
  }
  void run(isa i) {
    if (s.via == path::fused) ak::flash_attention(problem(), i, s.threads);
    else ak::attention_rows(problem(), i, s.via == path::rows_gemm, s.threads);
  }

  // Plain reference: scores over allowed keys, the limit of softmax for +inf, 0 for a row with
  // no allowed key or only -inf scores, then the weighted sum over the allowed keys.
  std::vector<double> reference() const {
    std::vector<double> ref(s.batch * s.heads * s.lq * s.dv);
    ref_lse.assign(s.batch * s.heads * s.lq, 0.0);
    const double sc = double(scale);
    for (std::size_t b = 0; b < s.batch; ++b)
      for (std::size_t h = 0; h < s.heads; ++h) {
        const std::size_t kh = h / (s.heads / s.kv_heads);
        for (std::size_t i = 0; i < s.lq; ++i) {
          std::vector<double> w(s.lk, 0.0);
          std::vector<bool> on(s.lk, false);
          double mx = -inf;
          bool nan = false;
          for (std::size_t j = 0; j < s.lk; ++j) {
            if (!allowed(b, h, i, j)) continue;
            double dot = 0;
            for (std::size_t c = 0; c < s.dk; ++c) dot += q[qi(b, h, i, c)] * k[ki(b, kh, j, c)];
            w[j] = sc * dot + additive(h, i, j);
            on[j] = true;
            if (std::isnan(w[j])) nan = true;
            else mx = std::max(mx, w[j]);
          }
          double sum = 0;
          for (std::size_t j = 0; j < s.lk; ++j) {
            if (!on[j]) continue;
            if (mx == inf) w[j] = w[j] == inf ? 1.0 : 0.0;
            else if (mx == -inf) w[j] = 0.0;
            else w[j] = std::exp(w[j] - mx);
            sum += w[j];
          }
          ref_lse[(b * s.heads + h) * s.lq + i] =
              nan ? std::numeric_limits<double>::quiet_NaN() : mx == inf || mx == -inf ? mx : mx + std::log(sum);
          for (std::size_t c = 0; c < s.dv; ++c) {
            double acc = 0;
            for (std::size_t j = 0; j < s.lk; ++j)
              if (on[j]) acc += w[j] * v[vi(b, kh, j, c)];
            ref[((b * s.heads + h) * s.lq + i) * s.dv + c] =
                nan ? std::numeric_limits<double>::quiet_NaN() : sum == 0 ? 0.0 : acc / sum;
          }
        }
      }
    return ref;
  }

  // Max error of the kernel output against the reference; fails on any element out of tolerance.
  double check(const std::vector<double>& ref, double at_, double rt_) const {
    double worst = 0;
    std::size_t bad = 0;
    for (std::size_t b = 0; b < s.batch; ++b)
      for (std::size_t h = 0; h < s.heads; ++h)
        for (std::size_t i = 0; i < s.lq; ++i)
          for (std::size_t c = 0; c < s.dv; ++c) {
            const double r = ref[((b * s.heads + h) * s.lq + i) * s.dv + c], g = out(b, h, i, c);
            if (std::isnan(r)) {
              if (!std::isnan(g) && bad++ < 5) BOOST_ERROR("expected NaN at " << b << ',' << h << ',' << i << ',' << c << ", got " << g);
              continue;
            }
            const double e = std::abs(g - r);
            if (!(e <= at_ + rt_ * std::abs(r)) && bad++ < 5)
              BOOST_ERROR("at " << b << ',' << h << ',' << i << ',' << c << ": got " << g << ", want " << r);
            if (e > worst || std::isnan(e)) worst = e;
          }
    for (std::size_t n = 0; n < ref_lse.size(); ++n) {
      const double r = ref_lse[n], g = double(lb[n]);
      const bool ok = std::isnan(r) ? std::isnan(g) : std::isinf(r) ? g == r : std::abs(g - r) <= at_ + rt_ * std::abs(r);
      if (!ok && bad++ < 5) BOOST_ERROR("log-sum-exp of row " << n << ": got " << g << ", want " << r);
    }
    BOOST_TEST(bad == 0u);
    return worst;
  }
};

template <class T>
double run_and_check(const spec& s, isa i, std::uint32_t seed) {
  instance<T> in(s, seed);
  in.run(i);
  return in.check(in.reference(), abs_tol<T>, rel_tol<T>);
}

template <class T>
void sweep(path via) {
  const std::vector<spec> shapes = {
      make_spec(1, 1, 1, 37, 53, 19, 23),
      make_spec(2, 4, 2, 53, 37, 23, 19),
      make_spec(1, 2, 1, 70, 150, 64, 40),
      make_spec(1, 1, 1, 1, 200, 8, 16),
  };
  double worst = 0;
  std::uint32_t seed = 1;
  for (isa i : runnable_isas())
    for (const spec& base : shapes)
      for (int ck : {-1, 0, 1})
        for (mask_kind mk : {mask_kind::none, mask_kind::bool_full, mask_kind::bool_padding, mask_kind::additive,
                             mask_kind::both})
          for (layout lay : {layout::bhld, layout::blhd}) {
            spec s = base;
            s.causal_on = ck >= 0;
            s.causal = ck == 1 ? causal_kind::bottom_right : causal_kind::top_left;
            s.mask = mk;
            s.lay = lay;
            s.threads = 1 + (seed % 2);
            s.via = via;
            BOOST_TEST_CONTEXT(isa_name(i) << ' ' << describe(s)) {
              worst = std::max(worst, run_and_check<T>(s, i, seed++));
            }
          }
  BOOST_TEST_MESSAGE((sizeof(T) == 4 ? "float" : "double") << " sweep: max abs error " << worst);
}

}  // namespace

BOOST_AUTO_TEST_CASE(isa_paths_available) {
  for (isa i : runnable_isas()) BOOST_TEST_MESSAGE("testing path " << isa_name(i));
  BOOST_TEST(attnx::simd::cpu_supports(isa::scalar));
  BOOST_TEST(attnx::simd::cpu_supports(attnx::simd::best_supported()));
}

BOOST_AUTO_TEST_CASE(sweep_float) { sweep<float>(path::fused); }
BOOST_AUTO_TEST_CASE(sweep_double) { sweep<double>(path::fused); }
BOOST_AUTO_TEST_CASE(sweep_rows_float) {
  sweep<float>(path::rows_gemm);
  sweep<float>(path::rows_plain);
}
BOOST_AUTO_TEST_CASE(sweep_rows_double) {
  sweep<double>(path::rows_gemm);
  sweep<double>(path::rows_plain);
}

// The public entry point (the current context's path and threads) on an odd shape, with GQA and a batch.
BOOST_AUTO_TEST_CASE(public_entry_point) {
  spec s = make_spec(3, 4, 2, 37, 53, 19, 23);
  s.causal_on = true;
  s.causal = causal_kind::bottom_right;
  s.mask = mask_kind::additive;
  instance<float> in(s, 7);
  ak::flash_attention(in.problem());
  in.check(in.reference(), abs_tol<float>, rel_tol<float>);
}

BOOST_AUTO_TEST_CASE(key_lengths_including_zero) {
  for (isa i : runnable_isas())
  for (path via : all_paths) {
    spec s = make_spec(4, 2, 1, 29, 77, 16, 33);
    s.key_lengths = {0, 1, 40, 77};
    s.via = via;
    for (bool ck : {false, true}) {
      s.causal_on = ck;
      s.causal = causal_kind::bottom_right;
      BOOST_TEST_CONTEXT(isa_name(i) << ' ' << describe(s)) {
        run_and_check<float>(s, i, 11);
        run_and_check<double>(s, i, 12);
        instance<double> in(s, 13);
        in.run(i);
        for (std::size_t h = 0; h < 2; ++h)  // key length 0: every row of batch item 0 is exactly 0
          for (std::size_t r = 0; r < s.lq; ++r)
            for (std::size_t c = 0; c < s.dv; ++c) BOOST_TEST(in.out(0, h, r, c) == 0.0);
      }
    }
  }
}

// Lq > Lk with bottom-right alignment: the first Lq - Lk query rows see no key and must be 0.
BOOST_AUTO_TEST_CASE(fully_masked_rows_are_zero) {
  for (isa i : runnable_isas())
  for (path via : all_paths) {
    spec s = make_spec(1, 1, 1, 50, 20, 9, 5);
    s.causal_on = true;
    s.causal = causal_kind::bottom_right;
    s.via = via;
    instance<float> in(s, 21);
    in.run(i);
    for (std::size_t r = 0; r < 30; ++r)
      for (std::size_t c = 0; c < 5; ++c) BOOST_TEST(in.out(0, 0, r, c) == 0.0f);
    for (std::size_t c = 0; c < 5; ++c) BOOST_TEST(in.out(0, 0, 30, c) == in.v[in.vi(0, 0, 0, c)]);  // one key
    in.check(in.reference(), abs_tol<float>, rel_tol<float>);

    // All scores -inf through the additive mask, and an empty key set (Lk = 0).
    spec t = make_spec(1, 1, 1, 20, 17, 4, 3);
    t.mask = mask_kind::additive;
    t.via = via;
    instance<float> all_ninf(t, 22);
    for (auto& x : all_ninf.am) x = -std::numeric_limits<float>::infinity();
    all_ninf.run(i);
    for (float x : all_ninf.ob) BOOST_TEST(x == 0.0f);
    spec e = make_spec(1, 1, 1, 20, 0, 4, 3);
    e.via = via;
    instance<double> empty(e, 23);
    empty.run(i);
    for (double x : empty.ob) BOOST_TEST(x == 0.0);
  }
}

// NaN in a query row poisons exactly that output row; NaN in key row j poisons the rows that see
// key j (causal: rows i >= j) and leaves the rows that do not see it exact.
BOOST_AUTO_TEST_CASE(nan_propagates_to_the_affected_rows) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (isa i : runnable_isas())
  for (path via : all_paths) {
    spec s = make_spec(1, 1, 1, 40, 40, 12, 7);
    s.causal_on = true;
    s.via = via;
    {
      instance<float> in(s, 31);
      in.q[in.qi(0, 0, 5, 3)] = nan;
      in.qb[in.at(0, 0, 5, 3, 1, s.lq, s.dk)] = float(nan);
      in.run(i);
      in.check(in.reference(), abs_tol<float>, rel_tol<float>);
      for (std::size_t r = 0; r < s.lq; ++r) BOOST_TEST(std::isnan(in.out(0, 0, r, 0)) == (r == 5));
    }
    {
      instance<double> in(s, 32);
      in.k[in.ki(0, 0, 25, 0)] = nan;
      in.kb[in.at(0, 0, 25, 0, 1, s.lk, s.dk)] = nan;
      in.run(i);
      in.check(in.reference(), abs_tol<double>, rel_tol<double>);
      for (std::size_t r = 0; r < s.lq; ++r) BOOST_TEST(std::isnan(in.out(0, 0, r, 2)) == (r >= 25));
    }
  }
}

// +inf scores share the weight equally (the limit of softmax); -inf scores get weight 0.
BOOST_AUTO_TEST_CASE(infinite_scores) {
  for (isa i : runnable_isas())
  for (path via : all_paths) {
    spec s = make_spec(1, 1, 1, 30, 70, 5, 6);
    s.mask = mask_kind::additive;
    s.via = via;
    instance<double> in(s, 41);
    for (auto& x : in.am) x = 0.0;
    in.am[3 * s.lk + 10] = inf;  // row 3: keys 10 and 66 are +inf
    in.am[3 * s.lk + 66] = inf;
    in.am[4 * s.lk + 69] = inf;  // row 4: the last key only, after a block of finite scores
    for (std::size_t j = 0; j < s.lk; ++j)
      if (j != 7) in.am[5 * s.lk + j] = -inf;  // row 5: only key 7 survives
    in.run(i);
    in.check(in.reference(), abs_tol<double>, rel_tol<double>);
    for (std::size_t c = 0; c < s.dv; ++c) {
      BOOST_TEST(in.out(0, 0, 3, c) == (in.v[in.vi(0, 0, 10, c)] + in.v[in.vi(0, 0, 66, c)]) / 2,
                 boost::test_tools::tolerance(1e-15));
      BOOST_TEST(in.out(0, 0, 4, c) == in.v[in.vi(0, 0, 69, c)]);
      BOOST_TEST(in.out(0, 0, 5, c) == in.v[in.vi(0, 0, 7, c)]);
    }
  }
}

// Seed 001 (docs/maths.md section 2): scaled scores up to 504.87 in double; exp(504.87) alone
// overflows float. Output [[17.999999999999986, 19.999999999999986], [18, 20], [18, 20]].
BOOST_AUTO_TEST_CASE(huge_logits_seed_001) {
  const double Q[] = {1, 5, 9, 13, 17, 21}, K[] = {5, 1, 13, 9, 21, 17}, V[] = {2, 4, 10, 12, 18, 20};
  const double want[] = {17.999999999999986, 19.999999999999986, 18, 20, 18, 20};
  for (isa i : runnable_isas()) {
    double O[6] = {};
    ak::attention_problem<double> p;
    p.q = {Q, 0, 0, 2};
    p.k = {K, 0, 0, 2};
    p.v = {V, 0, 0, 2};
    p.o = {O, 0, 0, 2};
    p.lq = p.lk = 3;
    p.dk = p.dv = 2;
    p.multiply(1 / std::sqrt(2.0));
    ak::flash_attention(p, i, 1);
    BOOST_TEST_CONTEXT(isa_name(i)) {
      for (int n = 0; n < 6; ++n) BOOST_TEST(O[n] == want[n], boost::test_tools::tolerance(2e-16));
    }
    for (bool gemm : {true, false}) {
      std::fill(O, O + 6, 0.0);
      ak::attention_rows(p, i, gemm, 1);
      BOOST_TEST_CONTEXT(isa_name(i) << " rows, blocked GEMM " << gemm) {
        for (int n = 0; n < 6; ++n) BOOST_TEST(O[n] == want[n], boost::test_tools::tolerance(2e-16));
      }
    }
  }
}

// Large logits in float too: N(0,1) * 6 entries, unit scale, scores in the hundreds. The score
// rounding error grows with the score, hence the looser tolerance (observed: under 1e-6).
BOOST_AUTO_TEST_CASE(large_logits_float) {
  for (isa i : runnable_isas())
  for (path via : all_paths) {
    spec s = make_spec(1, 1, 1, 33, 45, 16, 8);
    s.via = via;
    instance<float> in(s, 51, 6.0);
    in.scale = 1.0f;
    in.run(i);
    const double worst = in.check(in.reference(), 1e-4, 1e-4);
    BOOST_TEST_MESSAGE(isa_name(i) << " large float logits: max abs error " << worst);
  }
}

// Work is split into (batch, head, query block) items computed independently: the thread count
// does not change a single bit, and the instruction sets agree within the tolerance. The second shape
// is short enough that several threads take the narrow blocks (one vector of rows, run_flash_sized).
BOOST_AUTO_TEST_CASE(threads_do_not_change_results) {
  for (spec s : {make_spec(2, 3, 3, 131, 97, 32, 24), make_spec(1, 1, 1, 128, 128, 128, 128)}) {
    s.causal_on = true;
    for (isa i : runnable_isas())
    for (path via : all_paths) {
      s.via = via;
      BOOST_TEST_CONTEXT(isa_name(i) << ' ' << describe(s)) {
        instance<float> one(s, 61), two(s, 61), many(s, 61);
        two.s.threads = 2;
        many.s.threads = 64;  // more than the machine has: clamped by the pool
        one.run(i);
        two.run(i);
        many.run(i);
        BOOST_TEST(one.ob == two.ob);
        BOOST_TEST(one.ob == many.ob);
      }
    }
  }
}

// The kernel's own exp2 on each path: within 2 ulp of exp2 in long double wherever the result is
// a normal number (measured: under 1 ulp), exact at the special values.
template <class T, class Kernel>
void check_exp2(const char* name) {
  constexpr std::size_t n = 1 << 14;
  static_assert(n % Kernel::W == 0);
  std::vector<T> in(n + 16), out(n + 16);  // + 16: room to align to 64 bytes
  T* x = in.data() + (64 - reinterpret_cast<std::uintptr_t>(in.data()) % 64) % 64 / sizeof(T);
  T* y = out.data() + (64 - reinterpret_cast<std::uintptr_t>(out.data()) % 64) % 64 / sizeof(T);
  using lim = std::numeric_limits<T>;
  test_random::rng g(5);
  for (std::size_t i = 0; i < n; ++i) x[i] = T(g.uniform(lim::min_exponent - 1, lim::max_exponent));
  const T special[] = {-lim::infinity(), lim::infinity(), lim::quiet_NaN(), T(0), T(-1), T(1), T(lim::max_exponent),
                       T(lim::min_exponent - lim::digits - 1)};
  for (std::size_t i = 0; i < std::size(special); ++i) x[i] = special[i];
  Kernel::exp2_n(x, y, n);
  BOOST_TEST_CONTEXT(name) {
    BOOST_TEST(y[0] == T(0));
    BOOST_TEST(y[1] == lim::infinity());
    BOOST_TEST(std::isnan(y[2]));
    BOOST_TEST(y[3] == T(1));
    BOOST_TEST(y[4] == T(0.5));
    BOOST_TEST(y[5] == T(2));
    BOOST_TEST(y[6] == lim::infinity());
    BOOST_TEST(y[7] == T(0));
    double worst = 0;
    for (std::size_t i = std::size(special); i < n; ++i) {
      const long double ref = std::exp2(static_cast<long double>(x[i]));
      if (ref < lim::min() || ref > lim::max()) continue;
      const T r = T(ref);
      const long double ulp = std::nextafter(r, lim::infinity()) - r;
      worst = std::max(worst, double(std::fabs(static_cast<long double>(y[i]) - ref) / ulp));
    }
    BOOST_TEST(worst <= 2.0);
    BOOST_TEST_MESSAGE(name << ": exp2 max error " << worst << " ulp");
  }
}

// f.template operator()<T, Kernel>(name) for float and double on every instruction set this CPU runs.
template <class F>
void on_every_kernel(const F& f) {
  for (isa i : runnable_isas()) {
    switch (i) {
      case isa::scalar:
        f.template operator()<float, ak::detail::scalar::kernel<float>>("scalar float");
        f.template operator()<double, ak::detail::scalar::kernel<double>>("scalar double");
        break;
#if ATTNX_SIMD_X86
      case isa::avx2:
        f.template operator()<float, ak::detail::avx2::kernel<float>>("avx2 float");
        f.template operator()<double, ak::detail::avx2::kernel<double>>("avx2 double");
        break;
      case isa::avx512:
        f.template operator()<float, ak::detail::avx512::kernel<float>>("avx512 float");
        f.template operator()<double, ak::detail::avx512::kernel<double>>("avx512 double");
        break;
#else
      default: break;
#endif
    }
  }
}

// The kernel's tanh (soft-capping) on each path: within 4 ulp of tanh in long double (measured below 3), relative,
// on [-20, 20] and on magnitudes down to 2^-40 (where the series holds), odd, exact at the special values.
template <class T, class Kernel>
void check_tanh(const char* name) {
  constexpr std::size_t n = 1 << 14;
  std::vector<T> in(n + 16), out(n + 16);
  T* x = in.data() + (64 - reinterpret_cast<std::uintptr_t>(in.data()) % 64) % 64 / sizeof(T);
  T* y = out.data() + (64 - reinterpret_cast<std::uintptr_t>(out.data()) % 64) % 64 / sizeof(T);
  using lim = std::numeric_limits<T>;
  test_random::rng g(6);
  for (std::size_t i = 0; i < n; ++i) {
    const double m = i % 2 ? g.uniform(0, 20) : std::exp2(g.uniform(-40, 1));
    x[i] = T(i % 4 < 2 ? m : -m);
  }
  const T special[] = {-lim::infinity(), lim::infinity(), lim::quiet_NaN(), T(0), -T(0), T(0.25), -T(0.25), T(50)};
  for (std::size_t i = 0; i < std::size(special); ++i) x[i] = special[i];
  Kernel::tanh_n(x, y, n);
  BOOST_TEST_CONTEXT(name) {
    BOOST_TEST(y[0] == T(-1));
    BOOST_TEST(y[1] == T(1));
    BOOST_TEST(std::isnan(y[2]));
    BOOST_TEST((y[3] == T(0) && !std::signbit(y[3])));
    BOOST_TEST((y[4] == T(0) && std::signbit(y[4])));
    BOOST_TEST(y[5] == -y[6]);
    BOOST_TEST(y[7] == T(1));
    double worst = 0;
    for (std::size_t i = std::size(special); i < n; ++i) {
      const long double ref = std::tanh(static_cast<long double>(x[i]));
      const T r = T(ref);
      const long double ulp = std::nextafter(std::fabs(r), lim::infinity()) - std::fabs(r);
      worst = std::max(worst, double(std::fabs(static_cast<long double>(y[i]) - ref) / ulp));
    }
    BOOST_TEST(worst <= 4.0);
    BOOST_TEST_MESSAGE(name << ": tanh max error " << worst << " ulp");
  }
}

BOOST_AUTO_TEST_CASE(tanh_accuracy_and_special_values) {
  on_every_kernel([]<class T, class Kernel>(const char* name) { check_tanh<T, Kernel>(name); });
}

BOOST_AUTO_TEST_CASE(exp2_accuracy_and_special_values) {
  on_every_kernel([]<class T, class Kernel>(const char* name) { check_exp2<T, Kernel>(name); });
}

// Long problems: several query blocks per work item (swept together over the key blocks), with
// blocks of different key ranges (causal), and the short last block on its own.
BOOST_AUTO_TEST_CASE(many_query_blocks_per_work_item) {
  for (isa i : runnable_isas())
    for (int ck : {-1, 0, 1})
      for (unsigned threads : {1u, 2u}) {
        spec s = make_spec(1, 1, 1, 773, 300, 8, 9);
        s.causal_on = ck >= 0;
        s.causal = ck == 1 ? causal_kind::bottom_right : causal_kind::top_left;
        s.threads = threads;
        for (path via : all_paths) {
          s.via = via;
          BOOST_TEST_CONTEXT(isa_name(i) << ' ' << describe(s)) {
            run_and_check<float>(s, i, 81);
            run_and_check<double>(s, i, 82);
          }
        }
      }
}

BOOST_AUTO_TEST_CASE(invalid_head_grouping_throws) {
  spec s = make_spec(1, 3, 2, 4, 4, 2, 2);
  instance<float> in(s, 71);
  BOOST_CHECK_THROW(ak::flash_attention(in.problem()), std::invalid_argument);
}

// The kernel's own rules on a problem (what the expression layer checks before it, for a caller of
// kernels::flash_attention): the exception names the rule and the sizes, and nothing is written.
BOOST_AUTO_TEST_CASE(kernel_rules_name_the_sizes) {
  using test_support::says;
  instance<float> in(make_spec(2, 4, 2, 5, 53, 8, 8), 72);
  const float sentinel = 12345.0f;
  std::fill(in.ob.begin(), in.ob.end(), sentinel);
  const auto problem = [&] { return in.problem(); };
  {
    auto p = problem();
    p.heads = 3;
    BOOST_CHECK_EXCEPTION(ak::flash_attention(p), std::invalid_argument, says({"heads (3) must be a multiple of kv_heads (2)"}));
    p.heads = 4, p.kv_heads = 0;
    BOOST_CHECK_EXCEPTION(ak::flash_attention(p), std::invalid_argument, says({"heads (4) must be a multiple of kv_heads (0)"}));
  }
  const std::size_t lengths[] = {53, 60};
  BOOST_CHECK_EXCEPTION(ak::flash_attention(problem().key_lengths(lengths)), std::out_of_range,
                        says({"key_lengths[1] = 60 exceeds the 53 keys"}));
  BOOST_CHECK_EXCEPTION(ak::flash_attention(problem().multiply(0.5f).causal_lengths(lengths)), std::out_of_range,
                        says({"causal_lengths[1] = 60 exceeds the 53 keys"}));
  BOOST_CHECK_EXCEPTION(ak::flash_attention(problem().key_padding(54)), std::out_of_range,
                        says({"the key padding length 54 exceeds the 53 keys"}));
  BOOST_CHECK_EXCEPTION(ak::flash_attention(problem().key_lengths(nullptr)), std::invalid_argument,
                        says({"key_lengths without lengths"}));
  BOOST_CHECK_EXCEPTION(ak::flash_attention(problem().boolean_mask({})), std::invalid_argument,
                        says({"a mask step without its data"}));
  BOOST_CHECK_EXCEPTION(ak::flash_attention(problem().additive_mask({})), std::invalid_argument,
                        says({"a mask step without its data"}));
  {
    auto p = problem();
    while (p.n_steps < ak::max_score_steps) p.multiply(1.0f);
    BOOST_CHECK_EXCEPTION(p.multiply(1.0f), std::length_error, says({"more than 8 score steps"}));  // the builder
    BOOST_TEST(p.n_steps == ak::max_score_steps);
    p.n_steps = ak::max_score_steps + 1;  // a problem filled in by hand: the kernel's own check
    BOOST_CHECK_EXCEPTION(ak::flash_attention(p), std::invalid_argument, says({"too many score steps"}));
  }
  BOOST_TEST(std::count(in.ob.begin(), in.ob.end(), sentinel) == std::ptrdiff_t(in.ob.size()));
  // the same steps within their bounds run
  const std::size_t fit[] = {53, 40};
  ak::flash_attention(problem().key_lengths(fit).key_padding(53));
  BOOST_TEST(std::count(in.ob.begin(), in.ob.end(), sentinel) == 0);
}
