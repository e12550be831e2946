// Attention variants: the named masks of one key interval per query (sliding_window, causal and two-sided;
// documents, prefix_lm, chunked; the varlen entry), bool masks' tile summary, soft-capping (softcap) and ALiBi. Each against the double
// reference (reference.hpp) with the mask written out as a plain predicate on (t, j) here; fused (every instruction
// set) and row by row; the prefill and the decode kernel; skipped tiles against the same mask given as two bool
// tensors that block no whole tile (every tile computed: the same bits); special cases (a window of 0, empty
// documents, more queries than keys, finite fills); the rules on bad input.
#define BOOST_TEST_MODULE variants
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "messages.hpp"
#include "reference.hpp"

using namespace attnx;

namespace {

template <class Tn>
void normal(Tn& t, std::mt19937& g) {
  std::normal_distribution<double> nd;
  for (auto& x : t) x = value_t<Tn>(nd(g));
}

using visible_fn = std::function<bool(std::size_t t, std::size_t j)>;  // t: the query's position

// Q, K, V of one shape, with the reference problem of softmax(mask(s Q K^T, m)) V for a predicate on (t, j).
template <class T, std::size_t B, std::size_t Lq, std::size_t Lk, std::size_t D, std::size_t Dv>
struct data {
  tensor<T, B, Lq, D> Q;
  tensor<T, B, Lk, D> K;
  tensor<T, B, Lk, Dv> V;
  // The predicate as two masks, M1 = M | E and M2 = !E with E one key in every 8 x 8 square that M blocks: neither
  // blocks a whole tile, so every tile is computed (the baseline that skipping must equal bit for bit).
  tensor<bool, Lq, Lk> M1, M2;
  explicit data(unsigned seed) {
    std::mt19937 g(seed);
    normal(Q, g), normal(K, g), normal(V, g);
  }
  // with cap > 0: softcap(s Q K^T, cap) before the mask
  reference::problem problem(double scale, const visible_fn& visible, double fill, double cap = 0) {
    return problem_rows(scale, [&](std::size_t i, std::size_t j) { return i + Lk >= Lq && visible(i + Lk - Lq, j); },
                        fill, cap);
  }
  // the same for a predicate on the query's index i (not its position) and the key j
  reference::problem problem_rows(double scale, const visible_fn& visible, double fill, double cap = 0) {
    reference::problem p;
    p.batch = B, p.lq = Lq, p.lk = Lk, p.dk = D, p.dv = Dv;
    p.q.assign(Q.begin(), Q.end());
    p.k.assign(K.begin(), K.end());
    p.v.assign(V.begin(), V.end());
    reference::score_step s{reference::step::boolean, fill};
    s.allowed.resize(B * Lq * Lk);
    for (std::size_t i = 0; i < Lq; ++i)
      for (std::size_t j = 0; j < Lk; ++j) {
        const bool ok = visible(i, j);
        const bool e = i % 8 == 0 && j % 8 == 0 && !ok;
        M1(i, j) = ok || e;
        M2(i, j) = !e;
        for (std::size_t b = 0; b < B; ++b) s.allowed[(b * Lq + i) * Lk + j] = ok;
      }
    p.steps = {reference::score_step{reference::step::multiply, scale}};
    if (cap > 0)
      p.steps.insert(p.steps.end(), {reference::score_step{reference::step::divide, cap},
                                     reference::score_step{reference::step::tanh},
                                     reference::score_step{reference::step::multiply, cap}});
    p.steps.push_back(s);
    return p;
  }
};

// e fused on every instruction set and row by row against the reference, and fused against `same` (the mask as
// data::M1 and M2, every tile computed) bit for bit unless it is nullptr.
template <class E, class F>
void agree(const E& e, const F& same, const reference::problem& p, const std::string& what) {
  using R = result_t<E>;
  static_assert(is_fused_v<E>, "a named mask fuses");
  const auto ref = reference::attention<value_t<E>>(p);
  constexpr std::size_t cols = R::shape_type::cols;
  const auto at = [](const R& t) { return [&t](std::size_t r, std::size_t c) { return t.data()[r * cols + c]; }; };
  for (simd::isa i : simd::supported()) {
    for (unsigned threads : {1u, 2u}) {
      context fused;
      fused.set_threads(threads).set_isa(i);
      const R a = evaluate(e, fused);
      BOOST_TEST(fused.fused_runs() == 1u, what << ": the fused kernel ran");
      const std::string fa = reference::check(p, ref, at(a));
      BOOST_TEST(fa.empty(), what << " (fused, " << simd::name(i) << ", " << threads << " threads): " << fa);
      if constexpr (!std::is_same_v<F, std::nullptr_t>) {
        const R b = evaluate(same, fused);
        BOOST_TEST(std::memcmp(a.data(), b.data(), sizeof(value_t<E>) * dims_size(dims_of(a))) == 0,
                   what << " (" << simd::name(i) << "): skipped tiles change the bits of the bool-mask result");
      }
    }
  }
  context rows;
  rows.set_fused(false);
  const R c = evaluate(e, rows);
  BOOST_TEST(rows.fused_runs() == 0u, what << ": the row evaluator ran");
  const std::string fc = reference::check(p, ref, at(c));
  BOOST_TEST(fc.empty(), what << " (row by row): " << fc);
}

// Every named mask over one shape (prefill when Lq is large, decode when it is 16 or fewer).
template <class T, std::size_t B, std::size_t Lq, std::size_t Lk, std::size_t D, std::size_t Dv>
void every_mask(unsigned seed, double fill = -std::numeric_limits<double>::infinity()) {
  data<T, B, Lq, Lk, D, Dv> x(seed);
  const T s = T(0.3), f = static_cast<T>(fill);
  const std::string shape = std::string(sizeof(T) == 4 ? "float" : "double") + " B" + std::to_string(B) + " Lq" +
                            std::to_string(Lq) + " Lk" + std::to_string(Lk) + " fill " + std::to_string(fill) + ": ";
  const auto S = scale(x.Q * transpose(x.K), s);
  const auto run = [&](const auto& named, const visible_fn& vis, const std::string& what) {
    const reference::problem p = x.problem(double(s), vis, double(f));
    agree(softmax(mask(S, named, f)) * x.V, softmax(mask(mask(S, allowed(x.M1), f), allowed(x.M2), f)) * x.V, p,
          shape + what);
  };
  for (std::size_t w : {std::size_t{1}, std::size_t{37}, Lk / 3 + 1, Lk})
    run(sliding_window(w), [w](std::size_t t, std::size_t j) { return j <= t && j + w > t; },
        "sliding_window(" + std::to_string(w) + ")");
  run(sliding_window(0), [](std::size_t, std::size_t) { return false; }, "sliding_window(0)");
  run(sliding_window(5, 7), [](std::size_t t, std::size_t j) { return j + 5 >= t && j <= t + 7; }, "sliding_window(5, 7)");
  run(sliding_window(0, 0), [](std::size_t t, std::size_t j) { return j == t; }, "sliding_window(0, 0)");
  run(sliding_window(Lk - 1, Lk - 1), [](std::size_t, std::size_t) { return true; }, "sliding_window(Lk-1, Lk-1)");
  // packed documents, one of them empty
  const std::array<std::size_t, 5> offs{0, Lk / 4, Lk / 4, Lk / 2 + 3, Lk};
  const auto doc = [&offs](std::size_t pos) {
    std::size_t d = 0;
    while (!(offs[d] <= pos && pos < offs[d + 1])) ++d;
    return d;
  };
  run(documents(offs), [&](std::size_t t, std::size_t j) { return doc(t) == doc(j); }, "documents");
  for (std::size_t pre : {std::size_t{0}, Lk / 3, Lk})
    run(prefix_lm(pre), [pre](std::size_t t, std::size_t j) { return j < pre || j <= t; },
        "prefix_lm(" + std::to_string(pre) + ")");
  for (std::size_t c : {std::size_t{1}, std::size_t{24}, std::size_t{64}})
    run(chunked(c), [c](std::size_t t, std::size_t j) { return j / c == t / c; }, "chunked(" + std::to_string(c) + ")");
  // composed with causal (both orders), and with each other
  {
    const reference::problem p = x.problem(double(s), [&](std::size_t t, std::size_t j) { return j <= t && doc(t) == doc(j); }, double(f));
    agree(softmax(mask(mask(S, causal_bottom_right, f), documents(offs), f)) * x.V,
          softmax(mask(mask(S, allowed(x.M1), f), allowed(x.M2), f)) * x.V, p, shape + "causal then documents");
    agree(softmax(mask(mask(S, documents(offs), f), causal_bottom_right, f)) * x.V,
          softmax(mask(mask(S, allowed(x.M1), f), allowed(x.M2), f)) * x.V, p, shape + "documents then causal");
  }
  {
    const reference::problem p =
        x.problem(double(s), [](std::size_t t, std::size_t j) { return j / 24 == t / 24 && j + 30 > t && j <= t; }, double(f));
    agree(softmax(mask(mask(S, chunked(24), f), sliding_window(30), f)) * x.V,
          softmax(mask(mask(S, allowed(x.M1), f), allowed(x.M2), f)) * x.V,
          p, shape + "chunked(24), sliding_window(30)");
  }
}

// Soft-capping, alone and under masks, prefill and decode.
template <class T, std::size_t B, std::size_t Lq, std::size_t Lk, std::size_t D, std::size_t Dv>
void softcapped(unsigned seed) {
  data<T, B, Lq, Lk, D, Dv> x(seed);
  for (auto& v : x.Q) v *= T(3);  // scores of a few tens: the cap bites
  const T s = T(0.3);
  const std::string shape = std::string(sizeof(T) == 4 ? "float" : "double") + " B" + std::to_string(B) + " Lq" +
                            std::to_string(Lq) + " Lk" + std::to_string(Lk) + ": ";
  const auto S = scale(x.Q * transpose(x.K), s);
  constexpr double ninf = -std::numeric_limits<double>::infinity();
  for (T cap : {T(5), T(30)}) {
    const std::string c = "softcap " + std::to_string(double(cap));
    agree(softmax(softcap(S, cap)) * x.V, nullptr,
          x.problem(double(s), [](std::size_t, std::size_t) { return true; }, ninf, double(cap)), shape + c);
    agree(softmax(mask(softcap(S, cap), causal_bottom_right)) * x.V, nullptr,
          x.problem(double(s), [](std::size_t t, std::size_t j) { return j <= t; }, ninf, double(cap)),
          shape + c + ", causal");
    agree(softmax(mask(softcap(S, cap), sliding_window(40))) * x.V, nullptr,
          x.problem(double(s), [](std::size_t t, std::size_t j) { return j <= t && j + 40 > t; }, ninf, double(cap)),
          shape + c + ", sliding_window(40)");
    agree(softmax(mask(softcap(S, cap), causal_bottom_right, T(-1e4))) * x.V, nullptr,
          x.problem(double(s), [](std::size_t t, std::size_t j) { return j <= t; }, -1e4, double(cap)),
          shape + c + ", causal with a finite fill");
  }
}

// varlen: sequence s of queries [cq[s], cq[s + 1]) and keys [ck[s], ck[s + 1]), written out by a linear search.
bool varlen_visible(const std::vector<std::size_t>& cq, const std::vector<std::size_t>& ck, sequence_order order,
                    std::size_t i, std::size_t j) {
  std::size_t s = 0;
  while (!(cq[s] <= i && i < cq[s + 1])) ++s;
  if (j < ck[s] || j >= ck[s + 1]) return false;
  const std::size_t u = i - cq[s], v = j - ck[s], nq = cq[s + 1] - cq[s], nk = ck[s + 1] - ck[s];
  switch (order) {
    case sequence_order::any: return true;
    case sequence_order::causal_top_left: return v <= u;
    case sequence_order::causal_bottom_right: return v + nq <= u + nk;
  }
  return false;
}

// The varlen entry over one shape: packed sequences with query and key lengths of their own (one empty on the query
// side, one on the key side, one on both), in each order, against the reference and the bool-tensor form.
template <class T, std::size_t B, std::size_t Lq, std::size_t Lk, std::size_t D, std::size_t Dv>
void varlen_case(unsigned seed, const std::vector<std::size_t>& cq, const std::vector<std::size_t>& ck) {
  data<T, B, Lq, Lk, D, Dv> x(seed);
  const T s = T(0.3);
  const std::string shape = std::string(sizeof(T) == 4 ? "float" : "double") + " B" + std::to_string(B) + " Lq" +
                            std::to_string(Lq) + " Lk" + std::to_string(Lk) + ": varlen ";
  const auto S = scale(x.Q * transpose(x.K), s);
  constexpr double ninf = -std::numeric_limits<double>::infinity();
  const auto run = [&](const key_range_mask& named, sequence_order order, const std::string& what) {
    const reference::problem p = x.problem_rows(
        double(s), [&](std::size_t i, std::size_t j) { return varlen_visible(cq, ck, order, i, j); }, ninf);
    agree(softmax(mask(S, named)) * x.V, softmax(mask(mask(S, allowed(x.M1)), allowed(x.M2))) * x.V, p, shape + what);
  };
  run(varlen(cq, ck), sequence_order::any, "any order");
  run(varlen(cq, ck, causal), sequence_order::causal_top_left, "causal");
  run(varlen(cq, ck, causal_bottom_right), sequence_order::causal_bottom_right, "causal_bottom_right");
}

}  // namespace

BOOST_AUTO_TEST_CASE(varlen_packed_sequences) {
  varlen_case<float, 1, 200, 260, 16, 16>(30, {0, 50, 50, 120, 120, 200}, {0, 40, 90, 90, 170, 260});
  varlen_case<double, 2, 97, 130, 8, 8>(31, {0, 30, 31, 97}, {0, 60, 70, 130});
  varlen_case<float, 1, 150, 90, 16, 8>(32, {0, 100, 150}, {0, 30, 90});  // more queries than keys
  varlen_case<float, 1, 3, 700, 32, 32>(33, {0, 1, 1, 3}, {0, 300, 301, 700});  // decode rows
  varlen_case<float, 2, 1, 1300, 64, 64>(34, {0, 1}, {0, 1300});
  // equal offsets: varlen is documents (with causal, documents under causal), bit for bit
  constexpr std::size_t L = 120, D = 16;
  tensor<float, L, D> Q, K, V;
  std::mt19937 g(35);
  normal(Q, g), normal(K, g), normal(V, g);
  const std::array<std::size_t, 4> offs{0, 33, 70, L};
  const auto a = evaluate(attention(Q, K, V, varlen(offs, offs, causal)));
  const auto b = evaluate(attention(Q, K, V, causal, documents(offs)));
  BOOST_TEST(std::memcmp(a.data(), b.data(), sizeof(float) * L * D) == 0);
  const auto c = evaluate(attention(Q, K, V, varlen(offs, offs)));
  const auto d = evaluate(attention(Q, K, V, documents(offs)));
  BOOST_TEST(std::memcmp(c.data(), d.data(), sizeof(float) * L * D) == 0);
}

BOOST_AUTO_TEST_CASE(soft_capping) {
  softcapped<float, 1, 200, 200, 16, 16>(20);
  softcapped<double, 2, 97, 130, 8, 8>(21);
  softcapped<float, 2, 1, 1300, 64, 64>(22);  // decode
  softcapped<float, 1, 3, 700, 32, 32>(23);
  softcapped<double, 1, 4, 600, 16, 16>(24);
  // through attention(), and the rule on the cap
  constexpr std::size_t L = 50;
  tensor<float, L, 8> Q, K, V;
  std::mt19937 g(25);
  normal(Q, g), normal(K, g), normal(V, g);
  const auto a = evaluate(attention(Q, K, V, softcap(2.f), causal));
  const auto b = evaluate(softmax(mask(softcap(scaled_scores(Q, K), 2.f), causal)) * V);
  BOOST_TEST(std::memcmp(a.data(), b.data(), sizeof(float) * L * 8) == 0);
  for (float bad : {0.f, -1.f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    BOOST_CHECK_THROW((void)softcap(Q * transpose(K), bad), std::invalid_argument);
}

// ALiBi over (B, H, L, d): the bias written out, -m_h (t - j), as an additive step of the reference.
template <class T, std::size_t H, std::size_t Lq, std::size_t Lk, std::size_t D>
void alibi_case(unsigned seed, bool standard) {
  tensor<T, 1, H, Lq, D> Q;
  tensor<T, 1, H, Lk, D> K, V;
  std::mt19937 g(seed);
  normal(Q, g), normal(K, g), normal(V, g);
  std::array<double, H> m{};
  for (std::size_t h = 0; h < H; ++h) m[h] = standard ? std::exp2(-8.0 * double(h + 1) / double(H)) : 0.1 * double(h + 1);
  reference::problem p;
  p.batch = 1, p.heads = H, p.kv_heads = H, p.lq = Lq, p.lk = Lk, p.dk = D, p.dv = D;
  p.q.assign(Q.begin(), Q.end());
  p.k.assign(K.begin(), K.end());
  p.v.assign(V.begin(), V.end());
  reference::score_step bias{reference::step::additive};
  for (std::size_t h = 0; h < H; ++h)
    for (std::size_t i = 0; i < Lq; ++i)
      for (std::size_t j = 0; j < Lk; ++j) bias.bias.push_back(-m[h] * (double(i + Lk - Lq) - double(j)));
  const T s = T(0.25);
  p.steps = {reference::score_step{reference::step::multiply, double(s)},
             reference::score_step{reference::step::causal_bottom_right, -std::numeric_limits<double>::infinity()}, bias};
  const auto S = mask(scale(Q * transpose(K), s), causal_bottom_right);
  const std::string what = std::string(sizeof(T) == 4 ? "float" : "double") + " H" + std::to_string(H) + " Lq" +
                           std::to_string(Lq) + " Lk" + std::to_string(Lk) + (standard ? " alibi()" : " alibi(slopes)");
  if (standard) agree(softmax(mask(S, alibi())) * V, nullptr, p, what);
  else agree(softmax(mask(S, alibi(m))) * V, nullptr, p, what);
}

BOOST_AUTO_TEST_CASE(alibi_linear_bias) {
  alibi_case<float, 4, 150, 150, 16>(30, true);
  alibi_case<double, 2, 70, 100, 8>(31, false);
  alibi_case<float, 8, 1, 900, 64>(32, true);  // decode
  alibi_case<float, 2, 3, 600, 32>(33, false);
  alibi_case<double, 4, 2, 300, 16>(34, true);
  // the standard slopes: 2^(-8 (h + 1) / H), and BLOOM's interleaving for 6 heads
  const alibi_bias s8 = alibi_slopes(8), s6 = alibi_slopes(6);
  for (std::size_t h = 0; h < 8; ++h) BOOST_TEST(s8.slopes[h] == std::exp2(-double(h + 1)), "8 heads, slope " << h);
  const double want6[] = {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125};
  for (std::size_t h = 0; h < 6; ++h) BOOST_TEST(std::abs(s6.slopes[h] - want6[h]) < 1e-15, "6 heads, slope " << h);
  // rules: a slope count that is neither 1 nor the head count
  tensor<float, 1, 4, 10, 8> q;
  const std::array<double, 3> three{0.1, 0.2, 0.3};
  try {
    (void)mask(q * transpose(q), alibi(three));
    BOOST_TEST(false, "no exception for 3 slopes over 4 heads");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "attnx: alibi: 3 slopes for 4 heads (one per head, or one for all)");
  }
  BOOST_CHECK_THROW((void)alibi_slopes(0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(prefill_self_attention) {
  every_mask<float, 1, 200, 200, 16, 11>(1);
  every_mask<double, 2, 130, 130, 8, 8>(2);
}

BOOST_AUTO_TEST_CASE(prefill_fewer_and_more_queries_than_keys) {
  every_mask<float, 1, 97, 250, 16, 16>(3);   // the queries are the last 97 positions
  every_mask<double, 1, 90, 70, 8, 5>(4);     // the first 20 queries sit before every key: fully masked
}

BOOST_AUTO_TEST_CASE(decode_rows) {
  every_mask<float, 2, 1, 1300, 64, 64>(5);   // one row over 3 decode chunks
  every_mask<float, 1, 4, 1100, 32, 32>(6);
  every_mask<double, 1, 3, 700, 16, 16>(7);
}

// A finite fill: blocked keys keep a weight, so nothing below a start is skipped (and the bits still agree).
BOOST_AUTO_TEST_CASE(finite_fills) {
  every_mask<float, 1, 150, 150, 16, 16>(8, -4.0);
  every_mask<float, 1, 2, 900, 16, 16>(9, 0.5);
}

BOOST_AUTO_TEST_CASE(through_attention_and_dyn_lengths) {
  constexpr std::size_t L = 160, D = 16;
  tensor<float, L, D> Q, K, V;
  std::mt19937 g(10);
  normal(Q, g), normal(K, g), normal(V, g);
  tensor<bool, L, L> M;
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t j = 0; j < L; ++j) M(i, j) = j <= i && j + 40 > i;
  const tensor<float, L, D> a = evaluate(attention(Q, K, V, sliding_window(40)));
  const tensor<float, L, D> b = evaluate(attention(Q, K, V, causal, allowed(M)));
  BOOST_TEST(std::memcmp(a.data(), b.data(), sizeof(float) * dims_size(dims_of(a))) == 0);
  // dyn sequence lengths: the same results
  tensor<float, dyn, D> Qd(L), Kd(L), Vd(L);
  std::copy(Q.begin(), Q.end(), Qd.begin());
  std::copy(K.begin(), K.end(), Kd.begin());
  std::copy(V.begin(), V.end(), Vd.begin());
  const auto c = evaluate(attention(Qd, Kd, Vd, sliding_window(40)));
  BOOST_TEST(std::memcmp(a.data(), c.data(), sizeof(float) * dims_size(dims_of(a))) == 0);
}

// A bool mask's tiles: a tile it blocks entirely is skipped, one it allows entirely runs without the element test.
// Against the same mask written as two (M | E and !E, E one key in every 8 x 8 square that M blocks): neither blocks a
// whole tile, so every tile is computed, with the same scores.
BOOST_AUTO_TEST_CASE(bool_mask_tiles_skipped_without_changing_bits) {
  constexpr std::size_t L = 300, D = 32;
  tensor<float, L, D> Q, K, V;
  std::mt19937 g(11);
  normal(Q, g), normal(K, g), normal(V, g);
  tensor<bool, L, L> M, M1, M2;
  std::bernoulli_distribution open(0.25);
  std::vector<bool> blocks((L / 64 + 1) * (L / 64 + 1));
  for (std::size_t n = 0; n < blocks.size(); ++n) blocks[n] = open(g);
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t j = 0; j < L; ++j) {
      M(i, j) = i == j || blocks[(i / 64) * (L / 64 + 1) + j / 64];
      const bool e = i % 8 == 0 && j % 8 == 0 && !M(i, j);
      M1(i, j) = M(i, j) || e;
      M2(i, j) = !e;
    }
  for (simd::isa i : simd::supported()) {
    context ctx;
    ctx.set_isa(i);
    const tensor<float, L, D> a = evaluate(attention(Q, K, V, allowed(M)), ctx);
    const tensor<float, L, D> b = evaluate(attention(Q, K, V, allowed(M1), allowed(M2)), ctx);
    BOOST_TEST(ctx.fused_runs() == 2u);
    BOOST_TEST(std::memcmp(a.data(), b.data(), sizeof(float) * L * D) == 0, simd::name(i));
    // and the row evaluator's values
    context rows;
    rows.set_fused(false);
    const tensor<float, L, D> c = evaluate(attention(Q, K, V, allowed(M)), rows);
    double worst = 0;
    for (std::size_t e = 0; e < L * D; ++e) worst = std::max(worst, double(std::abs(a.data()[e] - c.data()[e])));
    BOOST_TEST(worst < 1e-5, simd::name(i) << ": fused and row by row differ by " << worst);
  }
}

BOOST_AUTO_TEST_CASE(bad_input_throws) {
  constexpr std::size_t L = 20;
  tensor<float, L, 4> Q, K, V;
  const auto S = Q * transpose(K);
  const auto throws = [&](auto&& make, const std::string& text) {
    try {
      make();
      BOOST_TEST(false, "no exception for " << text);
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()) == text);
    }
  };
  const std::array<std::size_t, 2> from1{1, L};
  const std::array<std::size_t, 4> down{0, 12, 8, L};
  const std::array<std::size_t, 3> short_end{0, 10, L - 1};
  const std::array<std::size_t, 1> one{0};
  throws([&] { (void)mask(S, documents(from1)); }, "attnx: mask: documents(offsets): offsets[0] = 1, must be 0");
  throws([&] { (void)mask(S, documents(down)); },
         "attnx: mask: documents(offsets): offsets must not decrease, but offsets[1] = 12 > offsets[2] = 8");
  throws([&] { (void)mask(S, documents(short_end)); },
         "attnx: mask: documents(offsets): the last offset is 19, must be the number of keys 20");
  throws([&] { (void)mask(S, documents(one)); }, "attnx: mask: documents(offsets) needs at least two offsets (0 and L_k)");
  throws([&] { (void)mask(S, sliding_window(21)); }, "attnx: mask: sliding_window(21) is wider than the 20 keys");
  throws([&] { (void)mask(S, sliding_window(3, 20)); }, "attnx: mask: sliding_window(3, 20) is wider than the 20 keys");
  throws([&] { (void)mask(S, chunked(0)); }, "attnx: mask: chunked(C) needs C > 0");
  const std::array<std::size_t, 3> two{0, 10, L};
  throws([&] { (void)mask(S, varlen(two, from1)); },
         "attnx: mask: varlen(q_offsets, k_offsets): 3 query offsets but 2 key offsets (one more than there are "
         "sequences, each)");
  throws([&] { (void)mask(S, varlen(short_end, two)); },
         "attnx: mask: varlen(q_offsets, k_offsets): q_offsets: the last offset is 19, must be the number of queries 20");
  throws([&] { (void)mask(S, varlen(down, down)); },
         "attnx: mask: varlen(q_offsets, k_offsets): q_offsets: offsets must not decrease, but offsets[1] = 12 > "
         "offsets[2] = 8");
  throws([&] { (void)mask(S, varlen(two, short_end, causal)); },
         "attnx: mask: varlen(q_offsets, k_offsets): k_offsets: the last offset is 19, must be the number of keys 20");
  throws([&] { (void)mask(S, varlen(one, one)); },
         "attnx: mask: varlen(q_offsets, k_offsets): q_offsets needs at least two offsets (0 and L_q)");
  // offsets changed after the expression was built: checked again when it is evaluated, fused or row by row
  std::array<std::size_t, 3> offs{0, 10, L};
  const auto e = softmax(mask(S, documents(offs))) * V;
  offs[1] = 30;
  throws([&] { (void)evaluate(e); },
         "attnx: mask: documents(offsets): offsets must not decrease, but offsets[1] = 30 > offsets[2] = 20");
  context rows;
  rows.set_fused(false);
  throws([&] { (void)evaluate(e, rows); },
         "attnx: mask: documents(offsets): offsets must not decrease, but offsets[1] = 30 > offsets[2] = 20");
}

// The same masks in a constant evaluation, against the bool-tensor form.
namespace {
constexpr std::size_t CL = 6;
constexpr tensor<double, CL, 2> cq = tensor<double, CL, 2>::generate([](auto i, auto c) {
  return double(int(i * 3 + c * 5) % 7 - 3) * 0.5;
});
constexpr bool same(const tensor<double, CL, 2>& a, const tensor<double, CL, 2>& b) {
  for (std::size_t i = 0; i < CL; ++i)
    for (std::size_t c = 0; c < 2; ++c)
      if (a(i, c) != b(i, c)) return false;
  return true;
}
constexpr bool window_agrees() {
  tensor<bool, CL, CL> m{};
  for (std::size_t i = 0; i < CL; ++i)
    for (std::size_t j = 0; j < CL; ++j) m(i, j) = j <= i && j + 2 > i;
  return same(evaluate(attention(cq, cq, cq, sliding_window(2))), evaluate(attention(cq, cq, cq, allowed(m))));
}
constexpr bool documents_agree() {
  const std::array<std::size_t, 3> offs{0, 2, CL};
  tensor<bool, CL, CL> m{};
  for (std::size_t i = 0; i < CL; ++i)
    for (std::size_t j = 0; j < CL; ++j) m(i, j) = (i < 2) == (j < 2);
  return same(evaluate(attention(cq, cq, cq, documents(offs))), evaluate(attention(cq, cq, cq, allowed(m))));
}
constexpr bool varlen_agrees() {  // two sequences: 2 queries over 4 keys, 4 queries over 2 keys; causal bottom-right
  const std::array<std::size_t, 3> qo{0, 2, CL}, ko{0, 4, CL};
  tensor<bool, CL, CL> m{};
  for (std::size_t i = 0; i < CL; ++i)
    for (std::size_t j = 0; j < CL; ++j) m(i, j) = i < 2 ? j < 4 && j <= i + 2 : j >= 4 && j - 4 + 4 <= i - 2 + 2;
  return same(evaluate(attention(cq, cq, cq, varlen(qo, ko, causal_bottom_right))),
              evaluate(attention(cq, cq, cq, allowed(m))));
}
// Soft-capping in a constant evaluation: the row evaluators (constexpr tanh) give every weight in (0, 1) and rows that
// sum to one.
constexpr bool softcap_in_constexpr() {
  const auto w = evaluate(attention_weights(cq, cq, softcap(0.5), sliding_window(3)));
  for (std::size_t i = 0; i < CL; ++i) {
    double sum = 0;
    for (std::size_t j = 0; j < CL; ++j) {
      const bool seen = j <= i && j + 3 > i;
      if (seen != (w(i, j) > 0)) return false;
      sum += w(i, j);
    }
    if (sum < 1 - 1e-12 || sum > 1 + 1e-12) return false;
  }
  return true;
}
static_assert(softcap_in_constexpr());
static_assert(window_agrees());
static_assert(documents_agree());
static_assert(varlen_agrees());
}  // namespace
