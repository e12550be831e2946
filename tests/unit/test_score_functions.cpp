// Functions of the score and its position (expr/score_position.hpp): scores with a position expression (q_pos, k_pos,
// head_pos, batch_pos, tables read at a position), map(f, S) with f(score, b, h, i, j), mask_fn and the element-wise
// functions of the scores that the kernel runs as tile_function steps. Each against a plain double loop written here
// (scores, the function, softmax, times V), fused on every instruction set with 1 and 2 threads (the same bits) and
// row by row; mask_fn's skipped tiles, and a bool mask's summary kept across calls (block_mask), against the same
// mask as two bool tensors that block no whole tile (the same bits); attention sinks; sizes 1, 3, 17, 65, 130 with a
// dyn length; fully masked rows and NaN; gradients against central differences, the sinks' own included; the same
// expressions in a constant evaluation; the rules on bad input.
#define BOOST_TEST_MODULE score_functions
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using namespace attnx;

namespace {

constexpr std::size_t B = 2, H = 3, D = 8;
using idx = std::ptrdiff_t;
using score_fn = std::function<double(double s, idx b, idx h, idx i, idx j)>;
using allow_fn = std::function<bool(idx b, idx h, idx i, idx j)>;

template <class T>
struct inputs {
  tensor<T, B, H, dyn, D> Q, K, V;
  std::size_t L;
  inputs(std::size_t l, unsigned seed) : Q(l), K(l), V(l), L(l) {
    std::mt19937 g(seed);
    std::normal_distribution<double> nd;
    for (auto* t : {&Q, &K, &V})
      for (auto& x : *t) x = T(nd(g));
  }
};

// softmax_j(f(s q_i . k_j, b, h, i, j), -inf where !allow) V, in double; a row with no allowed key is 0.
template <class T>
std::vector<double> reference(const inputs<T>& x, double s, const score_fn& f, const allow_fn& allow,
                              const std::vector<double>& sinks = {}) {
  const std::size_t L = x.L;
  std::vector<double> out(B * H * L * D, 0.0), sc(L);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < L; ++i) {
        double m = -std::numeric_limits<double>::infinity();
        bool nan = false;
        for (std::size_t j = 0; j < L; ++j) {
          double d = 0;
          for (std::size_t c = 0; c < D; ++c) d += double(x.Q(b, h, i, c)) * double(x.K(b, h, j, c));
          const idx ib = idx(b), ih = idx(h), ii = idx(i), ij = idx(j);
          sc[j] = allow(ib, ih, ii, ij) ? f(s * d, ib, ih, ii, ij) : -std::numeric_limits<double>::infinity();
          nan = nan || sc[j] != sc[j];
          m = std::max(m, sc[j]);
        }
        double* o = &out[((b * H + h) * L + i) * D];
        const double sink = sinks.empty() ? -std::numeric_limits<double>::infinity() : sinks[sinks.size() == 1 ? 0 : h];
        if (sink > m || sink != sink) m = sink;
        nan = nan || sink != sink;
        if (nan) {
          for (std::size_t c = 0; c < D; ++c) o[c] = std::numeric_limits<double>::quiet_NaN();
          continue;
        }
        if (m == -std::numeric_limits<double>::infinity()) continue;
        double sum = sink == -std::numeric_limits<double>::infinity() ? 0 : std::exp(sink - m);
        for (std::size_t j = 0; j < L; ++j) sum += (sc[j] = std::exp(sc[j] - m));
        for (std::size_t j = 0; j < L; ++j)
          for (std::size_t c = 0; c < D; ++c) o[c] += sc[j] / sum * double(x.V(b, h, j, c));
      }
  return out;
}

template <class R>
std::string compare(const R& a, const std::vector<double>& ref) {
  using T = value_t<R>;
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  for (std::size_t k = 0; k < ref.size(); ++k) {
    const double v = double(a.data()[k]), r = ref[k];
    if (r != r ? v == v : !(std::fabs(v - r) <= tol * (1 + std::fabs(r))))
      return "element " + std::to_string(k) + ": " + std::to_string(v) + " against " + std::to_string(r);
  }
  return "";
}

// e fused on every instruction set (1 and 2 threads: the same bits) and row by row, against ref; against `same` bit
// for bit unless it is nullptr.
template <class E, class F>
void agree(const E& e, const F& same, const std::vector<double>& ref, const std::string& what) {
  static_assert(is_fused_v<E>, "a function of the scores and their positions fuses");
  static_assert(why_not_fused_v<E>.empty());
  using R = result_t<E>;
  for (simd::isa i : simd::supported()) {
    R one;
    for (unsigned threads : {1u, 2u}) {
      context c;
      c.set_threads(threads).set_isa(i);
      const R a = evaluate(e, c);
      BOOST_TEST(c.fused_runs() == 1u, what << ": the fused kernel ran");
      const std::string d = compare(a, ref);
      BOOST_TEST(d.empty(), what << " (fused, " << simd::name(i) << ", " << threads << " threads): " << d);
      if (threads == 1) one = a;
      else
        BOOST_TEST(std::memcmp(one.data(), a.data(), sizeof(value_t<E>) * ref.size()) == 0,
                   what << " (" << simd::name(i) << "): 2 threads change the bits");
      if constexpr (!std::is_same_v<F, std::nullptr_t>) {
        const R b = evaluate(same, c);
        BOOST_TEST(std::memcmp(a.data(), b.data(), sizeof(value_t<E>) * ref.size()) == 0,
                   what << " (" << simd::name(i) << "): skipped tiles change the bits");
      }
    }
  }
  context rows;
  rows.set_fused(false);
  const R r = evaluate(e, rows);
  const std::string d = compare(r, ref);
  BOOST_TEST(d.empty(), what << " (row by row): " << d);
}

// A mask as two bool tensors, M1 = M | E and M2 = !E with E one key in every 8 x 8 square that M blocks: neither
// blocks a whole tile, so every tile is computed (the baseline that skipping must equal bit for bit).
struct every_tile {
  tensor<bool, B, 1, dyn, dyn> M1, M2;
  every_tile(std::size_t L, const std::function<bool(idx b, idx h, idx i, idx j)>& allow) : M1(L, L), M2(L, L) {
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t i = 0; i < L; ++i)
        for (std::size_t j = 0; j < L; ++j) {
          const bool ok = allow(idx(b), 0, idx(i), idx(j));
          const bool e = i % 8 == 0 && j % 8 == 0 && !ok;
          M1(b, 0, i, j) = ok || e;
          M2(b, 0, i, j) = !e;
        }
  }
};

const score_fn identity = [](double s, idx, idx, idx, idx) { return s; };
const allow_fn everything = [](idx, idx, idx, idx) { return true; };

template <class T>
void every_form(std::size_t L, unsigned seed) {
  inputs<T> x(L, seed);
  const T s = T(0.35);
  const auto S = scale(x.Q * transpose(x.K), s);
  const std::string at = std::string(sizeof(T) == 4 ? "float" : "double") + " L=" + std::to_string(L) + ": ";
  const double ds = double(s);

  // a linear bias of the distance, either order of the operands
  agree(softmax(S + T(0.25) * (q_pos - k_pos)) * x.V, nullptr,
        reference(x, ds, [](double v, idx, idx, idx i, idx j) { return v + double(float(0.25) * float(i - j)); },
                  everything),
        at + "S + 0.25 (q_pos - k_pos)");
  agree(softmax((k_pos - q_pos) * T(0.125) + S) * x.V, nullptr,
        reference(x, ds, [](double v, idx, idx, idx i, idx j) { return 0.125 * double(j - i) + v; }, everything),
        at + "(k_pos - q_pos) 0.125 + S");

  // ALiBi written out with a table of slopes read at the head
  tensor<T, H> slopes;
  for (std::size_t h = 0; h < H; ++h) slopes(h) = T(std::pow(2.0, -double(h + 1)));
  agree(softmax(mask(S - index_select(slopes, head_pos) * (q_pos - k_pos), causal)) * x.V, nullptr,
        reference(x, ds, [&](double v, idx, idx h, idx i, idx j) { return v - double(slopes(std::size_t(h))) * double(i - j); },
                  [](idx, idx, idx i, idx j) { return j <= i; }),
        at + "S - slope(head_pos) (q_pos - k_pos), causal");

  // a relative bias table (T5): the index clamped at both ends
  constexpr std::size_t R = 9;
  tensor<T, 2 * R + 1> rel;
  for (std::size_t k = 0; k < 2 * R + 1; ++k) rel(k) = T(0.1 * double(k) - 0.7);
  agree(softmax(S + index_select(rel, k_pos - q_pos + idx(R))) * x.V, nullptr,
        reference(x, ds, [&](double v, idx, idx, idx i, idx j) {
          const idx k = std::clamp<idx>(j - i + idx(R), 0, idx(2 * R));
          return v + double(rel(std::size_t(k)));
        }, everything),
        at + "S + rel[k_pos - q_pos + R]");

  // map with the whole position, batch item and head included
  const auto f5 = [](T v, idx b, idx h, idx i, idx j) { return v * T(1 + b) + T(0.01) * T(h * (i % 5) - j % 3); };
  agree(softmax(map(f5, S)) * x.V, nullptr,
        reference(x, ds, [&](double v, idx b, idx h, idx i, idx j) { return double(f5(T(v), b, h, i, j)); }, everything),
        at + "map(f(score, b, h, i, j), S)");
  agree(attention(x.Q, x.K, x.V, score_mod(f5), causal), nullptr,
        reference(x, 1 / std::sqrt(double(D)), [&](double v, idx b, idx h, idx i, idx j) { return double(f5(T(v), b, h, i, j)); },
                  [](idx, idx, idx i, idx j) { return j <= i; }),
        at + "attention(score_mod(f), causal)");

  // element-wise functions of the scores and numbers
  agree(softmax(relu(S) - T(2)) * x.V, nullptr,
        reference(x, ds, [](double v, idx, idx, idx, idx) { return std::max(v, 0.0) - 2; }, everything), at + "relu(S) - 2");
  agree(softmax(T(3) - abs(S)) * x.V, nullptr,
        reference(x, ds, [](double v, idx, idx, idx, idx) { return 3 - std::fabs(v); }, everything), at + "3 - abs(S)");

  // masks as functions: a band, and blocks by batch item (documents of 16 positions in item 1 only)
  const auto band = mask_fn(abs(q_pos - k_pos) <= 20 && q_pos >= k_pos);
  const allow_fn band_ref = [](idx, idx, idx i, idx j) { return i - j <= 20 && i >= j; };
  const auto blocks = mask_fn([](idx b, idx, idx i, idx j) { return b == 0 || i / 16 == j / 16; });
  const allow_fn blocks_ref = [](idx b, idx, idx i, idx j) { return b == 0 || i / 16 == j / 16; };
  for (const auto* which : {&band_ref, &blocks_ref}) {
    const every_tile E(L, *which);
    // (up to 16 queries the bool masks take the decode kernel, another order of sums: no bit
    // comparison there)
    const auto same = softmax(mask(mask(S, allowed(E.M1)), allowed(E.M2))) * x.V;
    const auto ref = reference(x, ds, identity, *which);
    const bool prefill = L > 16;  // (the kernels' decode_max_rows)
    if (which == &band_ref) {
      if (prefill) agree(softmax(mask(S, band)) * x.V, same, ref, at + "mask_fn(band)");
      else agree(softmax(mask(S, band)) * x.V, nullptr, ref, at + "mask_fn(band)");
    } else {
      if (prefill) agree(softmax(mask(S, blocks)) * x.V, same, ref, at + "mask_fn(blocks)");
      else agree(softmax(mask(S, blocks)) * x.V, nullptr, ref, at + "mask_fn(blocks)");
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_form_every_size) {
  unsigned seed = 1;
  for (std::size_t L : {1u, 3u, 17u, 65u, 130u}) {
    every_form<float>(L, seed++);
    every_form<double>(L, seed++);
  }
}

// block_mask: a bool mask's summary kept across calls skips the same tiles, with the same bits, and refresh() follows
// a changed mask.
template <class T>
void summarised(std::size_t L, unsigned seed) {
  inputs<T> x(L, seed);
  const auto S = scale(x.Q * transpose(x.K), T(0.3));
  const std::string at = std::string(sizeof(T) == 4 ? "float" : "double") + " L=" + std::to_string(L) + ": ";
  tensor<bool, B, 1, dyn, dyn> M(L, L);
  allow_fn allow = [](idx b, idx, idx i, idx j) { return ((i / 40 + j / 40 + b) % 4 == 0) || i / 40 == j / 40; };
  const auto fill_mask = [&] {
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t i = 0; i < L; ++i)
        for (std::size_t j = 0; j < L; ++j) M(b, 0, i, j) = allow(idx(b), 0, idx(i), idx(j));
  };
  fill_mask();
  block_mask bm(M);
  for (int round = 0; round < 2; ++round) {
    const every_tile E(L, allow);
    const auto ref = reference(x, double(T(0.3)), identity, allow);
    const std::string what = at + "allowed(block_mask) round " + std::to_string(round);
    if (L > 16) agree(softmax(mask(S, allowed(bm))) * x.V, softmax(mask(mask(S, allowed(E.M1)), allowed(E.M2))) * x.V, ref, what);
    else agree(softmax(mask(S, allowed(bm))) * x.V, nullptr, ref, what);
    allow = [](idx, idx, idx i, idx j) { return (i / 24) % 3 != 0 && j <= i + 5; };  // M changes: refreshed
    fill_mask();
    bm.refresh();
  }
}

BOOST_AUTO_TEST_CASE(block_mask_summary) {
  summarised<float>(300, 21);
  summarised<double>(130, 22);
  summarised<float>(17, 23);
  summarised<double>(5, 24);
}

BOOST_AUTO_TEST_CASE(alibi_written_out_is_alibi) {
  inputs<double> x(70, 7);
  const auto S = scale(x.Q * transpose(x.K), 0.3);
  const alibi_bias a = alibi_slopes(H);
  tensor<double, H> slopes;
  for (std::size_t h = 0; h < H; ++h) slopes(h) = a.slopes[h];
  const result_t<decltype(softmax(S) * x.V)> named = softmax(mask(mask(S, causal), alibi())) * x.V;
  const result_t<decltype(softmax(S) * x.V)> written = softmax(mask(S + index_select(slopes, head_pos) * (k_pos - q_pos), causal)) * x.V;
  double m = 0;
  for (std::size_t k = 0; k < named.numel(); ++k) m = std::max(m, std::fabs(named.data()[k] - written.data()[k]));
  BOOST_TEST(m < 1e-13);
}

BOOST_AUTO_TEST_CASE(few_query_rows_and_more_keys) {
  // Lq of 1 and 4 against 100 keys (the decode kernel's sizes: the prefill kernel takes functions of the position)
  for (std::size_t lq : {1u, 4u}) {
    std::mt19937 g{unsigned(lq)};
    std::normal_distribution<double> nd;
    tensor<float, 2, dyn, D> Q(lq), K(100), V(100);
    for (auto* t : {&Q, &K, &V})
      for (auto& v : *t) v = float(nd(g));
    const auto e = softmax(mask(Q * transpose(K) + 0.05f * (q_pos - k_pos), mask_fn(k_pos % 3 != 0))) * V;
    const result_t<decltype(e)> a = e;
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t i = 0; i < lq; ++i) {
        std::vector<double> sc(100);
        double m = -1e300, sum = 0;
        for (std::size_t j = 0; j < 100; ++j) {
          double d = 0;
          for (std::size_t c = 0; c < D; ++c) d += double(Q(b, i, c)) * double(K(b, j, c));
          sc[j] = j % 3 != 0 ? d + double(0.05f * float(idx(i) - idx(j))) : -1e300;
          m = std::max(m, sc[j]);
        }
        for (auto& v : sc) sum += (v = std::exp(v - m));
        for (std::size_t c = 0; c < D; ++c) {
          double o = 0;
          for (std::size_t j = 0; j < 100; ++j) o += sc[j] / sum * double(V(b, j, c));
          BOOST_TEST(std::fabs(a(b, i, c) - o) < 2e-5 * (1 + std::fabs(o)), "lq " << lq << " b " << b << " i " << i);
        }
      }
  }
}

BOOST_AUTO_TEST_CASE(special_values) {
  inputs<float> x(40, 11);
  const auto S = scale(x.Q * transpose(x.K), 0.3f);
  // rows 5..9 see no key at all: zero rows, fused and row by row
  const auto none = mask_fn(q_pos < 5 || q_pos >= 10);
  const auto e = softmax(mask(S, none)) * x.V;
  const auto ref = reference(x, 0.3, identity, [](idx, idx, idx i, idx) { return i < 5 || i >= 10; });
  agree(e, nullptr, ref, "fully masked rows");
  const result_t<decltype(e)> a = e;
  for (std::size_t c = 0; c < D; ++c) BOOST_TEST(a(1, 2, 7, c) == 0.f);
  // a function that gives NaN on one query's scores: that row NaN, the others untouched
  const auto nan = map([](float v, idx, idx, idx i, idx) { return i == 3 ? std::numeric_limits<float>::quiet_NaN() : v; }, S);
  agree(softmax(nan) * x.V, nullptr,
        reference(x, 0.3, [](double v, idx, idx, idx i, idx) { return i == 3 ? std::nan("") : v; }, everything), "a NaN row");
  // +inf from the function: the weight shared by the +inf scores (the evaluator's rule)
  const auto inf = map([](float v, idx, idx, idx i, idx j) { return i == j ? std::numeric_limits<float>::infinity() : v; }, S);
  const result_t<decltype(e)> o = softmax(inf) * x.V;
  for (std::size_t c = 0; c < D; ++c) BOOST_TEST(o(0, 1, 4, c) == x.V(0, 1, 4, c));
}

// Attention sinks (expr/sinks.hpp): a logit per head in every row's denominator.
template <class T>
void with_sink_logits(std::size_t L, unsigned seed) {
  inputs<T> x(L, seed);
  const std::string at = std::string(sizeof(T) == 4 ? "float" : "double") + " L=" + std::to_string(L) + ": ";
  tensor<T, H> t;
  t(0) = T(-1.5), t(1) = T(0.5), t(2) = T(3);
  const std::vector<double> sig{double(t(0)), double(t(1)), double(t(2))};
  const double ds = 1 / std::sqrt(double(D));
  const allow_fn causal_ref = [](idx, idx, idx i, idx j) { return j <= i; };
  agree(attention(x.Q, x.K, x.V, causal, sinks(t)), nullptr, reference(x, ds, identity, causal_ref, sig), at + "causal, sinks(t)");
  agree(attention(x.Q, x.K, x.V, sinks(0.25)), nullptr, reference(x, ds, identity, everything, {0.25}), at + "sinks(0.25)");
  agree(with_sinks(softmax(mask(scale(x.Q * transpose(x.K), T(ds)), mask_fn(q_pos - k_pos < 4 && q_pos >= k_pos))) * x.V, t),
        nullptr, reference(x, double(T(ds)), identity, [](idx, idx, idx i, idx j) { return i - j < 4 && i >= j; }, sig),
        at + "with_sinks(mask_fn window)");
  // merge_heads of attention with sinks (the kernel writes the heads side by side)
  const result_t<decltype(merge_heads(attention(x.Q, x.K, x.V, causal, sinks(t))))> m =
      merge_heads(attention(x.Q, x.K, x.V, causal, sinks(t)));
  const auto ref = reference(x, ds, identity, causal_ref, sig);
  double worst = 0;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < L; ++i)
        for (std::size_t c = 0; c < D; ++c)
          worst = std::max(worst, std::fabs(double(m(b, i, h * D + c)) - ref[((b * H + h) * L + i) * D + c]));
  BOOST_TEST(worst < (sizeof(T) == 4 ? 2e-5 : 1e-12), at << "merge_heads(with sinks) off by " << worst);
}

BOOST_AUTO_TEST_CASE(attention_sinks) {
  unsigned seed = 40;
  for (std::size_t L : {1u, 3u, 17u, 65u, 130u}) {
    with_sink_logits<float>(L, seed++);
    with_sink_logits<double>(L, seed++);
  }
  // special values: no visible key gives 0; a sink of -inf changes nothing; +inf takes all the weight
  inputs<double> x(20, 3);
  const auto S = scale(x.Q * transpose(x.K), 0.3);
  const auto none = mask_fn(q_pos >= 4);
  const result_t<decltype(softmax(S) * x.V)> a = with_sinks(softmax(mask(S, none)) * x.V, 2.0);
  for (std::size_t c = 0; c < D; ++c) BOOST_TEST(a(1, 2, 3, c) == 0.0);
  const result_t<decltype(softmax(S) * x.V)> plain = softmax(S) * x.V;
  const result_t<decltype(softmax(S) * x.V)> minus_inf = with_sinks(softmax(S) * x.V, -std::numeric_limits<double>::infinity());
  BOOST_TEST(std::memcmp(plain.data(), minus_inf.data(), sizeof(double) * plain.numel()) == 0);
  const result_t<decltype(softmax(S) * x.V)> plus_inf = with_sinks(softmax(S) * x.V, std::numeric_limits<double>::infinity());
  BOOST_TEST(*std::max_element(plus_inf.begin(), plus_inf.end()) == 0.0);
  BOOST_TEST(*std::min_element(plus_inf.begin(), plus_inf.end()) == 0.0);
  // one sink per head, or one for all: anything else throws
  tensor<double, 2> two{};
  BOOST_CHECK_THROW((void)attention(x.Q, x.K, x.V, sinks(two)), std::invalid_argument);
}

// partial_attention with sinks: the sink is one more key of that state, so keys split in two, the sinks given to one
// part, merge to attention with sinks over all the keys; the state's lse is ln(sum_j e^(s_ij) + e^(sigma_h)).
BOOST_AUTO_TEST_CASE(sinks_in_attention_states) {
  inputs<double> x(40, 12);
  tensor<double, H> t;
  t(0) = 0.5, t(1) = -2, t(2) = 4;
  const auto K1 = slice<2>(x.K, 0, 25), K2 = slice<2>(x.K, 25, 15), V1 = slice<2>(x.V, 0, 25), V2 = slice<2>(x.V, 25, 15);
  const auto a = partial_attention(attention(x.Q, K1, V1, sinks(t)));
  const auto b = partial_attention(attention(x.Q, K2, V2));
  const auto m = merge(a, b);
  const auto ref = reference(x, 1 / std::sqrt(double(D)), identity, everything, {0.5, -2.0, 4.0});
  BOOST_TEST(compare(m.out, ref).empty(), compare(m.out, ref));
  const auto whole = partial_attention(attention(x.Q, x.K, x.V, sinks(t)));
  double worst = 0;
  for (std::size_t b0 = 0; b0 < B; ++b0)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < 40; ++i) {
        double sum = std::exp(double(t(h)));
        for (std::size_t j = 0; j < 40; ++j) {
          double dot = 0;
          for (std::size_t c = 0; c < D; ++c) dot += x.Q(b0, h, i, c) * x.K(b0, h, j, c);
          sum += std::exp(dot / std::sqrt(double(D)));
        }
        worst = std::max({worst, std::fabs(whole.lse(b0, h, i) - std::log(sum)), std::fabs(m.lse(b0, h, i) - std::log(sum))});
      }
  BOOST_TEST(worst < 1e-12, "lse off by " << worst);
}

// The largest difference between grad and central differences of loss() (h = 1e-5) over every 7th element of t (each
// one when t has fewer than 10).
template <class Tn, class G, class L>
double central_difference_error(Tn& t, const G& grad, const L& loss) {
  double worst = 0;
  for (std::size_t k = 0; k < t.numel(); k += t.numel() < 10 ? 1 : 7) {
    const double keep = t.data()[k], h = 1e-5;
    t.data()[k] = keep + h;
    const double up = loss();
    t.data()[k] = keep - h;
    const double down = loss();
    t.data()[k] = keep;
    worst = std::max(worst, std::fabs((up - down) / (2 * h) - grad.data()[k]));
  }
  return worst;
}

// d/dQ, d/dK, d/dV of sum(softmax(f(S)) V o W) against central differences, in double.
template <class Make>
void check_gradients(const Make& make, const std::string& what) {
  inputs<double> x(17, 3);
  tensor<double, B, H, dyn, D> W(17);
  std::mt19937 g(5);
  std::normal_distribution<double> nd;
  for (auto& v : W) v = nd(g);
  const auto loss = [&] {
    const result_t<decltype(make(x))> o = make(x);
    double l = 0;
    for (std::size_t k = 0; k < o.numel(); ++k) l += o.data()[k] * W.data()[k];
    return l;
  };
  const auto [dq, dk, dv] = backward(make(x), W, wrt(x.Q, x.K, x.V));
  const auto check = [&](auto& t, const auto& grad, const char* name) {
    const double worst = central_difference_error(t, grad, loss);
    BOOST_TEST(worst < 1e-7, what << ": d" << name << " off by " << worst);
  };
  check(x.Q, dq, "Q");
  check(x.K, dk, "K");
  check(x.V, dv, "V");
}

BOOST_AUTO_TEST_CASE(gradients) {
  check_gradients([](const inputs<double>& x) { return softmax(scale(x.Q * transpose(x.K), 0.3) + 0.2 * (q_pos - k_pos)) * x.V; },
                  "S + p");
  check_gradients([](const inputs<double>& x) {
    return softmax(mask((1.5 + 0.1 * (q_pos % 3)) * scale(x.Q * transpose(x.K), 0.3), mask_fn(q_pos >= k_pos))) * x.V;
  }, "p S, mask_fn");
  check_gradients([](const inputs<double>& x) { return softmax(scale(x.Q * transpose(x.K), 0.3) / (2.0 + k_pos % 2)) * x.V; },
                  "S / p");
  check_gradients([](const inputs<double>& x) { return softmax(relu(scale(x.Q * transpose(x.K), 0.3)) - 1.0) * x.V; },
                  "relu(S) - 1");
}

// The sinks' own gradient too, fused and by the rules.
BOOST_AUTO_TEST_CASE(sink_gradients) {
  for (const bool fused : {true, false}) {
    context ctx;
    ctx.set_fused(fused);
    const context_scope scope(ctx);
    inputs<double> x(17, 9);
    tensor<double, H> t;
    t(0) = -1, t(1) = 0.5, t(2) = 2;
    tensor<double, B, H, dyn, D> W(17);
    std::mt19937 g(6);
    std::normal_distribution<double> nd;
    for (auto& v : W) v = nd(g);
    const auto make = [&] { return attention(x.Q, x.K, x.V, causal, sinks(t)); };
    const auto loss = [&] {
      const result_t<decltype(make())> o = make();
      double l = 0;
      for (std::size_t k = 0; k < o.numel(); ++k) l += o.data()[k] * W.data()[k];
      return l;
    };
    const auto [dq, dk, dv, dt] = backward(make(), W, wrt(x.Q, x.K, x.V, t));
    const auto check = [&](auto& tn, const auto& grad, const char* name) {
      const double worst = central_difference_error(tn, grad, loss);
      BOOST_TEST(worst < 1e-7, (fused ? "fused" : "rules") << ": d" << name << " off by " << worst);
    };
    check(x.Q, dq, "Q");
    check(x.K, dk, "K");
    check(x.V, dv, "V");
    check(t, dt, "sinks");
  }
}

// The same expressions in a constant evaluation, against the loop written out.
namespace {
constexpr std::size_t CL = 5;
constexpr tensor<double, CL, 2> cq = tensor<double, CL, 2>::generate([](auto i, auto c) { return 0.3 * double(i) - 0.2 * double(c); });
constexpr tensor<double, CL, 2> ck = tensor<double, CL, 2>::generate([](auto i, auto c) { return 0.1 * double(i * c) + 0.4; });
constexpr tensor<double, CL, 2> cv = tensor<double, CL, 2>::generate([](auto i, auto c) { return double(i) + 10.0 * double(c); });
// o against causal attention of cq, ck, cv written out: scores scale q.k - slope (i - j), and a sink logit unless it is
// -inf.
constexpr bool agrees_with_loop(const tensor<double, CL, 2>& o, double scale, double slope, double sink) {
  const bool sunk = sink > -1e300;
  for (std::size_t i = 0; i < CL; ++i) {
    double w[CL]{}, m = sunk ? sink : -1e300, sum = 0;
    for (std::size_t j = 0; j <= i; ++j) {
      w[j] = (cq(i, 0) * ck(j, 0) + cq(i, 1) * ck(j, 1)) * scale - slope * double(idx(i) - idx(j));
      m = w[j] > m ? w[j] : m;
    }
    for (std::size_t j = 0; j <= i; ++j) sum += (w[j] = math::exp(w[j] - m));
    if (sunk) sum += math::exp(sink - m);
    for (std::size_t c = 0; c < 2; ++c) {
      double r = 0;
      for (std::size_t j = 0; j <= i; ++j) r += w[j] / sum * cv(j, c);
      const double d = o(i, c) - r;
      if (d > 1e-13 || d < -1e-13) return false;
    }
  }
  return true;
}
constexpr bool position_bias_in_constexpr() {
  const tensor<double, CL, 2> o = softmax(mask(cq * transpose(ck) - 0.5 * (q_pos - k_pos), mask_fn(q_pos >= k_pos))) * cv;
  return agrees_with_loop(o, 1.0, 0.5, -std::numeric_limits<double>::infinity());
}
static_assert(position_bias_in_constexpr());
constexpr double map_in_constexpr() {
  const tensor<double, CL, CL> s = map([](double v, idx, idx, idx i, idx j) { return v * double(i + 1) - double(j); }, cq * transpose(ck));
  return s(3, 2) - ((cq(3, 0) * ck(2, 0) + cq(3, 1) * ck(2, 1)) * 4.0 - 2.0);
}
static_assert(map_in_constexpr() == 0.0);
constexpr bool sinks_in_constexpr() {
  const tensor<double, CL, 2> o = attention(cq, ck, cv, causal, sinks(1.5));
  return agrees_with_loop(o, 1 / math::sqrt(2.0), 0.0, 1.5);
}
static_assert(sinks_in_constexpr());
}  // namespace

BOOST_AUTO_TEST_CASE(bad_input_throws) {
  tensor<float, dyn> empty(0);
  BOOST_CHECK_THROW((void)index_select(empty, q_pos), std::invalid_argument);
}
