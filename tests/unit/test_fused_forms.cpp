// Which expressions take the fused kernel (is_fused_v, checked at compile time), and that for each of them
// the kernel, the row-by-row evaluator and the double reference of reference.hpp agree, special values
// included: chains of scales and temperatures, any fill value, masks in any order, cast<T>(attention).
// Also the regression tests of the defects the fault probes found (issue "Reliability"): the additive
// -FLT_MAX convention on a fully masked row, the order of masks as written, Q never pre-scaled, and
// key_lengths changed after the expression was built.
#define BOOST_TEST_MODULE fused_forms
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference.hpp"

using namespace attnx;

namespace {

constexpr std::size_t Lq = 37, Lk = 53, D = 16, Dv = 11;

template <class T>
struct data {
  tensor<T, Lq, D> Q;
  tensor<T, Lk, D> K;
  tensor<T, Lk, Dv> V;
  tensor<T, Lq, Lk> A;     // a bias
  tensor<bool, Lq, Lk> M;  // a boolean mask, ~20% blocked, row 5 fully blocked
  explicit data(unsigned seed) {
    std::mt19937 g(seed);
    std::normal_distribution<double> nd;
    for (auto& x : Q) x = T(nd(g));
    for (auto& x : K) x = T(nd(g));
    for (auto& x : V) x = T(nd(g));
    for (auto& x : A) x = T(nd(g));
    std::bernoulli_distribution keep(0.8);
    for (auto& x : M) x = keep(g);
    for (std::size_t j = 0; j < Lk; ++j) M(5, j) = false;
  }
  // The reference problem with the given steps.
  reference::problem problem(std::vector<reference::score_step> steps) const {
    reference::problem p;
    p.lq = Lq, p.lk = Lk, p.dk = D, p.dv = Dv;
    p.q.assign(Q.begin(), Q.end());
    p.k.assign(K.begin(), K.end());
    p.v.assign(V.begin(), V.end());
    p.steps = std::move(steps);
    return p;
  }
  reference::score_step bias() const {
    reference::score_step s{reference::step::additive};
    s.bias.assign(A.begin(), A.end());
    return s;
  }
  reference::score_step boolean(double fill) const {
    reference::score_step s{reference::step::boolean, fill};
    s.allowed.assign(M.begin(), M.end());
    return s;
  }
};

reference::score_step mul(double x) { return {reference::step::multiply, x}; }
reference::score_step div(double x) { return {reference::step::divide, x}; }
reference::score_step causal_tl(double fill) { return {reference::step::causal_top_left, fill}; }
reference::score_step causal_br(double fill) { return {reference::step::causal_bottom_right, fill}; }
reference::score_step padding(std::size_t n, double fill) {
  reference::score_step s{reference::step::key_padding, fill};
  s.length = n;
  return s;
}

// Evaluates e fused (the default context) and row by row, checks that the fused path ran, and compares
// both with the reference.
// Evaluates e fused, on every instruction set this CPU has, and row by row, checks which path ran, and
// compares each result with the reference.
template <class E>
void agree(const E& e, const reference::problem& p, const char* what) {
  using R = result_t<E>;
  static_assert(is_fused_v<E>, "the form must take the fused kernel");
  const auto ref = reference::attention<value_t<E>>(p);
  const auto at = [](const R& t) { return [&t](std::size_t r, std::size_t c) { return t.data()[r * R::shape_type::cols + c]; }; };
  for (simd::isa i : simd::supported()) {
    context fused;
    fused.set_isa(i);
    const R a = evaluate(e, fused);
    BOOST_TEST(fused.fused_runs() == 1u, what << ": the fused kernel ran");
    const std::string fa = reference::check(p, ref, at(a));
    BOOST_TEST(fa.empty(), what << " (fused, " << simd::name(i) << "): " << fa);
  }
  context rows;
  rows.set_fused(false);
  const R b = evaluate(e, rows);
  BOOST_TEST(rows.fused_runs() == 0u, what << ": the row evaluator ran");
  const std::string fb = reference::check(p, ref, at(b));
  BOOST_TEST(fb.empty(), what << " (row by row): " << fb);
}

constexpr double ninf = -std::numeric_limits<double>::infinity();

}  // namespace

// ---- what fuses, at compile time --------------------------------------------------------------------------
namespace forms {
using Tf = tensor<float, Lq, D>;
using Kf = tensor<float, Lk, D>;
using Vf = tensor<float, Lk, Dv>;
extern const Tf q;
extern const Kf k;
extern const Vf v;
extern const tensor<float, Lq, Lk> a;
extern const tensor<bool, Lq, Lk> m;
using S = decltype(q * transpose(k));
inline constexpr std::size_t len[1] = {3};

static_assert(is_fused_v<decltype(attention(q, k, v))>);
static_assert(is_fused_v<decltype(attention(q, k, v, causal, key_padding<9>, allowed(m), additive(a)))>);
static_assert(is_fused_v<decltype(attention(q, k, v, blocked(m), causal))>);  // blocked stores !m: still the kernel
static_assert(is_fused_v<decltype(softmax(scale(scale(q * transpose(k), 0.5f), 0.25f)) * v)>);
static_assert(is_fused_v<decltype(softmax(temperature(scale(q * transpose(k), 0.5f), 0.7f)) * v)>);
static_assert(is_fused_v<decltype(softmax(-(q * transpose(k))) * v)>);
static_assert(is_fused_v<decltype(softmax(scale(mask(q * transpose(k), causal, -1e9f), 2.0f)) * v)>);
static_assert(is_fused_v<decltype(softmax(mask(mask(q * transpose(k), additive(a)), causal)) * v)>);
static_assert(is_fused_v<decltype(softmax(q * transpose(k) + a) * v)>);
static_assert(is_fused_v<decltype(softmax(mask(dot_scores(q, k), causal_bottom_right)) * v)>);
static_assert(is_fused_v<decltype(softmax(q * transpose(k)) * (v * tensor<float, Dv, Dv>{}))>);  // V an expression
static_assert(is_fused_v<decltype(cast<double>(attention(q, k, v)))>);
// functions of the scores and their positions: tile_function steps
static_assert(is_fused_v<decltype(softmax(exp(q * transpose(k))) * v)>);
static_assert(is_fused_v<decltype(softmax(q * transpose(k) - 0.5f * (q_pos - k_pos)) * v)>);
static_assert(is_fused_v<decltype(softmax(mask(q * transpose(k), mask_fn(q_pos >= k_pos))) * v)>);
static_assert(is_fused_v<decltype(softmax(map([](float s, auto, auto, auto i, auto j) { return s + float(i - j); }, q * transpose(k))) * v)>);
static_assert(is_fused_v<decltype(softmax(2.f - relu(q * transpose(k))) * v)>);
// not fused: other similarities, other functions of the scores, no V, integer types, too many steps
static_assert(!is_fused_v<decltype(softmax(cosine_scores(q, k, 0.5)) * v)>);
static_assert(!is_fused_v<decltype(softmax(rbf_scores(q, k, 0.5)) * v)>);
static_assert(!is_fused_v<decltype(softmax(hadamard(q * transpose(k), a)) * v)>);
static_assert(!is_fused_v<decltype(softmax(q * transpose(k) - a) * v)>);
static_assert(!is_fused_v<decltype(attention_weights(q, k))>);
static_assert(!is_fused_v<decltype(softmax(scale(scale(scale(scale(scale(scale(scale(scale(scale(q * transpose(k), 1.f), 1.f), 1.f), 1.f), 1.f), 1.f), 1.f), 1.f), 1.f)) * v)>);
static_assert(!is_fused_v<decltype(softmax(tensor<int, 3, 3>{} * transpose(tensor<int, 3, 3>{})) * tensor<int, 3, 3>{})>);
static_assert(fused_attention<decltype(attention(q, k, v))>);
// why not: the first part the recogniser rejects, in words
static_assert(why_not_fused_v<decltype(attention(q, k, v, causal, softcap(30.f)))>.empty());
static_assert(why_not_fused_v<decltype(softmax(q * transpose(k) - a) * v)> ==
              "scores minus a tensor (a bias is added: S + (-M), or additive(-M))");
static_assert(why_not_fused_v<decltype(softmax(exp(q * transpose(k))) * v)>.empty());
static_assert(why_not_fused_v<decltype(softmax(mask(hadamard(q * transpose(k), a), causal)) * v)> ==
              "scores multiplied by a tensor (hadamard): only numbers scale them");
static_assert(why_not_fused_v<decltype(softmax(cosine_scores(q, k, 0.5)) * v)> ==
              "a similarity other than the dot product (cosine, rbf and additive scores run row by row)");
static_assert(why_not_fused_v<decltype(attention_weights(q, k))>.starts_with("the expression is not softmax(P) * V"));
static_assert(why_not_fused_v<decltype(softmax(scale(scale(scale(scale(scale(scale(scale(scale(scale(q * transpose(k), 1.f), 1.f), 1.f), 1.f), 1.f), 1.f), 1.f), 1.f), 1.f)) * v)> ==
              "more than 8 score steps");
static_assert(why_not_fused_v<decltype(softmax(tensor<int, 3, 3>{} * transpose(tensor<int, 3, 3>{})) * tensor<int, 3, 3>{})> ==
              "the element type is not float or double");
}  // namespace forms

// ---- what they compute ------------------------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(chains_of_scales_and_temperatures) {
  const data<float> f(1);
  const float s = 1 / std::sqrt(float(D));
  agree(attention(f.Q, f.K, f.V), f.problem({mul(s)}), "attention");
  agree(softmax(scale(scale(f.Q * transpose(f.K), 0.5f), 0.25f)) * f.V, f.problem({mul(0.5), mul(0.25)}), "scale x2");
  agree(softmax(temperature(scale(f.Q * transpose(f.K), s), 0.7f)) * f.V, f.problem({mul(s), div(0.7f)}), "scale, temperature");
  agree(softmax(temperature(f.Q * transpose(f.K), 3.0f)) * f.V, f.problem({div(3.0f)}), "temperature alone");
  agree(softmax(-scale(f.Q * transpose(f.K), s)) * f.V, f.problem({mul(s), mul(-1)}), "negated");
  agree(softmax(f.Q * transpose(f.K)) * f.V, f.problem({}), "no scale");
  const data<double> d(2);
  agree(softmax(temperature(scale(d.Q * transpose(d.K), 0.3), 1e-300)) * d.V, d.problem({mul(0.3), div(1e-300)}),
        "a temperature whose reciprocal overflows: divided");
}

BOOST_AUTO_TEST_CASE(fill_values_and_mask_orders) {
  const data<float> f(3);
  const float s = 0.25f;
  const auto S = scale(f.Q * transpose(f.K), s);
  agree(softmax(mask(S, causal, -1e9f)) * f.V, f.problem({mul(s), causal_tl(-1e9f)}), "causal, fill -1e9");
  agree(softmax(mask(mask(S, allowed(f.M), -1e4f), causal)) * f.V, f.problem({mul(s), f.boolean(-1e4f), causal_tl(ninf)}),
        "boolean (-1e4), then causal (-inf)");
  agree(softmax(mask(mask(S, causal), allowed(f.M), 3.0f)) * f.V, f.problem({mul(s), causal_tl(ninf), f.boolean(3.0f)}),
        "causal, then boolean with a fill above the scores");
  agree(softmax(mask(mask(S, additive(f.A)), causal_bottom_right)) * f.V,
        f.problem({mul(s), f.bias(), causal_br(ninf)}), "additive, then bottom-right causal");
  agree(softmax(mask(mask(S, causal_bottom_right), additive(f.A))) * f.V,
        f.problem({mul(s), causal_br(ninf), f.bias()}), "bottom-right causal, then additive");
  agree(softmax(scale(mask(mask(S, key_padding<20>, -30.0f), causal), 2.0f)) * f.V,
        f.problem({mul(s), padding(20, -30.0f), causal_tl(ninf), mul(2)}), "padding (-30), causal, then a scale");
  agree(softmax(mask(scale(mask(S, causal, -5.0f), -1.0f), key_padding<40>)) * f.V,
        f.problem({mul(s), causal_tl(-5.0f), mul(-1), padding(40, ninf)}), "a negative scale after a finite fill");
}

// Seed 003's finite fill: a fully masked row weighs every key equally, so its output is the mean of V's
// rows (softmax of equal scores), on both paths; with -inf it is 0.
BOOST_AUTO_TEST_CASE(finite_fill_fully_masked_rows_average_v) {
  const data<double> d(4);
  const auto S = scale(d.Q * transpose(d.K), 0.25);
  context rows;
  rows.set_fused(false);
  for (const context* c : std::array<const context*, 2>{&default_context(), &rows}) {
    const tensor<double, Lq, Dv> o = evaluate(softmax(mask(S, key_padding<0>, -1e9)) * d.V, *c);
    const tensor<double, Lq, Dv> z = evaluate(softmax(mask(S, key_padding<0>)) * d.V, *c);
    for (std::size_t c2 = 0; c2 < Dv; ++c2) {
      double mean = 0;
      for (std::size_t j = 0; j < Lk; ++j) mean += d.V(j, c2) / Lk;
      for (std::size_t i = 0; i < Lq; ++i) {
        BOOST_TEST(std::abs(o(i, c2) - mean) <= 1e-14);
        BOOST_TEST(z(i, c2) == 0.0);
      }
    }
  }
}

// PyTorch's convention for additive masks: torch.finfo(dtype).min where blocked. A row blocked
// everywhere has equal scores (s + min rounds to min), so softmax gives equal weights: the output is the
// mean of V's rows (PyTorch 1.13: softmax(full((1, 4), finfo(float32).min)) = [0.25, 0.25, 0.25, 0.25]),
// on the fused path and row by row. A partly blocked row ignores the blocked keys.
BOOST_AUTO_TEST_CASE(additive_finfo_min_convention) {
  const data<float> f(5);
  tensor<float, Lq, Lk> bias;
  const float lowest = std::numeric_limits<float>::lowest();
  for (std::size_t i = 0; i < Lq; ++i)
    for (std::size_t j = 0; j < Lk; ++j) bias(i, j) = i == 7 || j > i ? lowest : 0.0f;
  const auto e = attention(f.Q, f.K, f.V, additive(bias));
  context rows;
  rows.set_fused(false);
  const tensor<float, Lq, Dv> a = e, b = evaluate(e, rows);
  for (std::size_t c = 0; c < Dv; ++c) {
    double mean = 0;
    for (std::size_t j = 0; j < Lk; ++j) mean += f.V(j, c) / double(Lk);
    BOOST_TEST(std::abs(a(7, c) - mean) <= 1e-5, "fused row 7 column " << c << ": " << a(7, c) << " vs " << mean);
    BOOST_TEST(std::abs(b(7, c) - mean) <= 1e-5, "row evaluator row 7 column " << c);
    BOOST_TEST(a(0, c) == f.V(0, c));  // row 0 sees key 0 only
  }
  reference::score_step st{reference::step::additive};
  st.bias.assign(bias.begin(), bias.end());
  agree(e, f.problem({mul(1 / std::sqrt(float(D))), st}), "finfo.min bias");
}

// The masks' order as written: attention(q, k, v, causal, additive(A)) is (S masked by causal) + A, so a
// +inf or NaN of A where causal blocks makes the score -inf + inf = NaN and the row NaN, as the row
// evaluator computes it; written the other way round the mask wins and the row is finite.
BOOST_AUTO_TEST_CASE(masks_apply_in_the_order_written) {
  const data<float> f(6);
  for (float special : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    tensor<float, Lq, Lk> bias = f.A;
    bias(3, 20) = special;  // blocked for row 3 by causal (20 > 3), in a key block the kernel skips
    bias(30, 31) = special;  // blocked for row 30, in the diagonal block
    const auto after = attention(f.Q, f.K, f.V, causal, additive(bias));
    const auto before = attention(f.Q, f.K, f.V, additive(bias), causal);
    context rows;
    rows.set_fused(false);
    for (const context* c : std::array<const context*, 2>{&default_context(), &rows}) {
      const tensor<float, Lq, Dv> a = evaluate(after, *c), b = evaluate(before, *c);
      for (std::size_t i = 0; i < Lq; ++i) {
        BOOST_TEST(std::isnan(a(i, 0)) == (i == 3 || i == 30), "causal then additive, row " << i);
        BOOST_TEST(!std::isnan(b(i, 0)), "additive then causal, row " << i);
      }
    }
    reference::score_step st{reference::step::additive};
    st.bias.assign(bias.begin(), bias.end());
    const float s = 1 / std::sqrt(float(D));
    agree(after, f.problem({mul(s), causal_tl(ninf), st}), "causal, additive with +inf/NaN");
    agree(before, f.problem({mul(s), st, causal_tl(ninf)}), "additive with +inf/NaN, causal");
  }
}

// The scale multiplies q . k, never q: a huge q times k = 0 is 0 (before: q * scale * log2 e overflowed to
// inf, and inf * 0 gave NaN from all-finite inputs), a subnormal q times inf is inf (before: q times a
// factor below 0.5 underflowed to 0, and 0 * inf gave NaN).
BOOST_AUTO_TEST_CASE(queries_are_not_prescaled) {
  context rows;
  rows.set_fused(false);
  {
    data<float> f(7);
    for (std::size_t c = 0; c < D; ++c) f.Q(2, c) = c == 0 ? 3e38f : 0.0f;
    for (std::size_t j = 0; j < Lk; ++j) f.K(j, 0) = 0.0f;
    const auto e = softmax(temperature(f.Q * transpose(f.K), 0.25f)) * f.V;  // factor 4: 4 log2 e * 3e38 = inf
    const tensor<float, Lq, Dv> a = e, b = evaluate(e, rows);
    for (std::size_t c = 0; c < Dv; ++c) {
      double mean = 0;  // every score of row 2 is 0: equal weights
      for (std::size_t j = 0; j < Lk; ++j) mean += f.V(j, c) / double(Lk);
      BOOST_TEST(std::abs(a(2, c) - mean) <= 1e-5, "fused: " << a(2, c) << " vs " << mean);
      BOOST_TEST(std::abs(b(2, c) - mean) <= 1e-5, "row by row: " << b(2, c) << " vs " << mean);
    }
    agree(e, f.problem({div(0.25f)}), "a huge query against zero keys");
  }
  {
    data<float> f(8);
    for (std::size_t c = 0; c < D; ++c) f.Q(4, c) = c == 0 ? std::numeric_limits<float>::denorm_min() : 0.0f;
    for (std::size_t j = 0; j < Lk; ++j) f.K(j, 0) = j == 9 ? std::numeric_limits<float>::infinity() : 0.0f;
    const auto e = softmax(scale(f.Q * transpose(f.K), 0.25f)) * f.V;  // 0.25 log2 e < 0.5
    const tensor<float, Lq, Dv> a = e, b = evaluate(e, rows);
    for (std::size_t c = 0; c < Dv; ++c) {  // row 4: key 9 scores +inf, the only one: its V row
      BOOST_TEST(a(4, c) == f.V(9, c));
      BOOST_TEST(b(4, c) == f.V(9, c));
    }
    agree(e, f.problem({mul(0.25f)}), "a subnormal query against an infinite key");
  }
}

// key_lengths live in the caller's memory: a length changed after the expression was built is checked
// when it is evaluated, on both paths, with the same message as when building.
BOOST_AUTO_TEST_CASE(key_lengths_checked_when_evaluated) {
  const data<float> f(8);
  std::vector<std::size_t> lens{Lk};
  const auto e = attention(f.Q, f.K, f.V, key_lengths(lens));
  context rows;
  rows.set_fused(false);
  for (std::size_t bad : {Lk + 1, std::size_t{1} << 63, ~std::size_t{0}}) {
    lens[0] = bad;
    for (const context* c : std::array<const context*, 2>{&default_context(), &rows}) {
      try {
        const tensor<float, Lq, Dv> o = evaluate(e, *c);
        (void)o;
        BOOST_ERROR("a key length of " << bad << " was accepted");
      } catch (const std::out_of_range& x) {
        BOOST_TEST(std::string(x.what()).find("exceeds the 53 keys") != std::string::npos, x.what());
      }
    }
  }
  lens[0] = 10;
  agree(e, [&] {
    reference::score_step st{reference::step::key_lengths, ninf};
    st.lengths = {10};
    return f.problem({mul(1 / std::sqrt(float(D))), st});
  }(), "key lengths 10");
}

// cast<T>(attention): the kernel runs in the attention's type, the result is converted.
BOOST_AUTO_TEST_CASE(cast_of_attention_runs_the_kernel) {
  const data<float> f(9);
  context c;
  const tensor<double, Lq, Dv> o = evaluate(cast<double>(attention(f.Q, f.K, f.V, causal)), c);
  const tensor<float, Lq, Dv> of = attention(f.Q, f.K, f.V, causal);
  BOOST_TEST(c.fused_runs() == 1u);
  for (std::size_t i = 0; i < o.size; ++i) BOOST_TEST(o.data()[i] == double(of.data()[i]));
}

namespace forms {
const Tf q{};
const Kf k{};
const Vf v{};
const tensor<float, Lq, Lk> a{};
const tensor<bool, Lq, Lk> m{};
}  // namespace forms

// ---- PyTorch's key_padding_mask (B, L_k), true = padding -----------------------------------------------------
namespace {
// Attention of item b, head h, row i against a plain double loop: the keys j with pad(b, j) false (and j <= i
// when causal), softmax over them; a row with none is 0.
template <class T, class Pad>
double padded_error(const T* q, const T* k, const T* v, const T* out, std::size_t B, std::size_t H, std::size_t L,
                    std::size_t d, bool causal_on, Pad pad) {
  double worst = 0;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < L; ++i) {
        std::vector<double> w(L, 0.0);
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        const std::size_t qo = ((b * H + h) * L + i) * d;
        for (std::size_t j = 0; j < L; ++j) {
          if (pad(b, j) || (causal_on && j > i)) continue;
          double s = 0;
          for (std::size_t c = 0; c < d; ++c) s += double(q[qo + c]) * double(k[((b * H + h) * L + j) * d + c]);
          w[j] = s / std::sqrt(double(d));
          mx = std::max(mx, w[j]);
        }
        for (std::size_t j = 0; j < L; ++j)
          if (!pad(b, j) && !(causal_on && j > i)) sum += (w[j] = std::exp(w[j] - mx));
          else w[j] = 0;
        for (std::size_t c = 0; c < d; ++c) {
          double acc = 0;
          for (std::size_t j = 0; j < L; ++j) acc += w[j] * double(v[((b * H + h) * L + j) * d + c]);
          const double want = sum == 0 ? 0.0 : acc / sum;
          worst = std::max(worst, std::abs(double(out[qo + c]) - want));
        }
      }
  return worst;
}
}  // namespace

BOOST_AUTO_TEST_CASE(key_padding_mask_as_pytorch_gives_it) {
  constexpr std::size_t B = 3, H = 2, L = 7, d = 4;
  std::mt19937 g(17);
  std::normal_distribution<double> nd;
  tensor<float, B, H, L, d> q, k, v;
  for (auto* t : {&q, &k, &v})
    for (auto& x : *t) x = float(nd(g));
  tensor<bool, B, L> kpm;  // item 0: no padding; item 1: its last 3 keys; item 2: every key (its rows are 0)
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t j = 0; j < L; ++j) kpm(b, j) = b == 2 || (b == 1 && j >= L - 3);
  const auto pad = [&](std::size_t b, std::size_t j) { return kpm(b, j); };
  for (bool fused : {true, false}) {
    context ctx;
    ctx.set_fused(fused);
    BOOST_TEST_CONTEXT("fused " << fused) {
      // (B, H, L_q, L_k) scores: the multi-head form, with and without causal.
      const tensor<float, B, H, L, d> o4 = evaluate(attention(q, k, v, key_padding_mask(kpm)), ctx);
      BOOST_TEST(padded_error(q.data(), k.data(), v.data(), o4.data(), B, H, L, d, false, pad) < 1e-6);
      const tensor<float, B, H, L, d> c4 = evaluate(attention(q, k, v, causal, key_padding_mask(kpm)), ctx);
      BOOST_TEST(padded_error(q.data(), k.data(), v.data(), c4.data(), B, H, L, d, true, pad) < 1e-6);
      for (std::size_t n = 2 * H * L * d; n < o4.numel(); ++n) BOOST_TEST(o4.data()[n] == 0.0f);  // item 2
      // (B, L_q, L_k) scores: head 0 of each item as a batch of single-head problems.
      tensor<float, B, L, d> q3, k3, v3;
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t i = 0; i < L; ++i)
          for (std::size_t c = 0; c < d; ++c) q3(b, i, c) = q(b, 0, i, c), k3(b, i, c) = k(b, 0, i, c), v3(b, i, c) = v(b, 0, i, c);
      const tensor<float, B, L, d> o3 = evaluate(attention(q3, k3, v3, key_padding_mask(kpm)), ctx);
      BOOST_TEST(padded_error(q3.data(), k3.data(), v3.data(), o3.data(), B, 1, L, d, false, pad) < 1e-6);
      // A dyn batch (a view of the caller's memory), the same numbers.
      const view<const bool, dyn, L> kpm_dyn(kpm.data(), B);
      const tensor<float, B, L, d> d3 = evaluate(attention(q3, k3, v3, key_padding_mask(kpm_dyn)), ctx);
      BOOST_TEST(std::equal(d3.data(), d3.data() + d3.numel(), o3.data()));
      // (L_q, L_k) scores: one sequence's mask, (L_k) or (1, L_k).
      const view<const bool, L> row1(kpm.data() + L, L);  // item 1's row
      const view<const bool, 1, L> row1b(kpm.data() + L, L);
      const view<const float, L, d> q2(q3.data() + L * d, L * d), k2(k3.data() + L * d, L * d), v2(v3.data() + L * d, L * d);
      const tensor<float, L, d> o2 = evaluate(attention(q2, k2, v2, key_padding_mask(row1)), ctx);
      const tensor<float, L, d> o2b = evaluate(attention(q2, k2, v2, key_padding_mask(row1b)), ctx);
      BOOST_TEST(padded_error(q2.data(), k2.data(), v2.data(), o2.data(), 1, 1, L, d, false,
                              [&](std::size_t, std::size_t j) { return kpm(1, j); }) < 1e-6);
      BOOST_TEST(std::equal(o2b.data(), o2b.data() + o2b.numel(), o2.data()));
      // ... and a dyn batch of 3 against them is refused when the expression is built, naming both facts.
      BOOST_CHECK_EXCEPTION(
          (void)attention(q2, k2, v2, key_padding_mask(kpm_dyn)), std::invalid_argument, [](const std::invalid_argument& e) {
            return std::string(e.what()).find("key_padding_mask: scores without a batch axis take the mask of one sequence") !=
                       std::string::npos &&
                   std::string(e.what()).find("mask_batch 3") != std::string::npos;
          });
    }
  }
}
