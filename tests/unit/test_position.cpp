#define BOOST_TEST_MODULE position
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "naive.hpp"

// Position encodings: sinusoidal_positions and nn::sinusoidal_encoding against the formula written out with
// std::sin / std::cos / std::pow; rotary (both layouts) against pairs rotated by hand; RoPE's defining property
// (a query-key dot product depends only on the distance of the positions); multi_head_attention with
// mha_options::rope against a double-loop model, and its step through a KV cache against the forward pass.

using namespace attnx;
using naive::mat;

namespace {

// The pairs of RoPE, written out: interleaved (2i, 2i+1), half (i, i + d/2); angle p * base^(-2i/d).
void rotate_ref(double* x, std::size_t d, std::size_t p, rope_style style, double base = 10000) {
  for (std::size_t i = 0; i < d / 2; ++i) {
    const double a = double(p) * std::pow(base, -double(2 * i) / double(d));
    const std::size_t u = style == rope_style::interleaved ? 2 * i : i;
    const std::size_t w = style == rope_style::interleaved ? 2 * i + 1 : i + d / 2;
    const double x0 = x[u], x1 = x[w];
    x[u] = x0 * std::cos(a) - x1 * std::sin(a);
    x[w] = x0 * std::sin(a) + x1 * std::cos(a);
  }
}

template <class Tn>
void fill_from(Tn& t, const mat& m) {
  for (std::size_t i = 0; i < m.size(); ++i) t.data()[i] = static_cast<typename Tn::value_type>(m[i]);
}

// Causal self-attention with RoPE in double loops: project (no biases), rotate each head's rows by their
// position, attention per head (query head h reads key/value head h / (H / Hkv)), W_O. x (B, L, Dm).
mat rope_mha_reference(const mat& xs, const mat& wq, const mat& wk, const mat& wv, const mat& wo, std::size_t B,
                       std::size_t L, std::size_t Dm, std::size_t H, std::size_t Hkv, rope_style Style,
                       std::size_t window = 0) {  // window w > 0: row i sees keys i - w + 1 .. i only
  const std::size_t d = Dm / H;
  mat want(B * L * Dm);
  for (std::size_t b = 0; b < B; ++b) {
    const mat xb(xs.begin() + long(b * L * Dm), xs.begin() + long((b + 1) * L * Dm));
    mat q = naive::matmul(xb, wq, L, Dm, H * d), k = naive::matmul(xb, wk, L, Dm, Hkv * d);
    const mat v = naive::matmul(xb, wv, L, Dm, Hkv * d);
    for (std::size_t l = 0; l < L; ++l) {
      for (std::size_t h = 0; h < H; ++h) rotate_ref(q.data() + l * H * d + h * d, d, l, Style);
      for (std::size_t h = 0; h < Hkv; ++h) rotate_ref(k.data() + l * Hkv * d + h * d, d, l, Style);
    }
    mat merged(L * H * d);
    for (std::size_t h = 0; h < H; ++h) {
      mat qh(L * d), kh(L * d), vh(L * d);
      for (std::size_t l = 0; l < L; ++l)
        for (std::size_t c = 0; c < d; ++c) {
          qh[l * d + c] = q[l * H * d + h * d + c];
          kh[l * d + c] = k[l * Hkv * d + (h / (H / Hkv)) * d + c];
          vh[l * d + c] = v[l * Hkv * d + (h / (H / Hkv)) * d + c];
        }
      const mat oh = naive::attention(qh, kh, vh, L, L, d, d,
                                      [&](std::size_t i, std::size_t j) { return j <= i && (window == 0 || i - j < window); });
      for (std::size_t l = 0; l < L; ++l)
        for (std::size_t c = 0; c < d; ++c) merged[l * H * d + h * d + c] = oh[l * d + c];
    }
    const mat yb = naive::matmul(merged, wo, L, H * d, Dm);
    std::copy(yb.begin(), yb.end(), want.begin() + long(b * L * Dm));
  }
  return want;
}

}  // namespace

// ---- sinusoidal ------------------------------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(sinusoidal_table) {
  constexpr std::size_t L = 9, D = 7;  // (an odd D: the last column is a sine)
  const auto pe = sinusoidal_positions<double, L, D>(3);
  for (std::size_t p = 0; p < L; ++p)
    for (std::size_t j = 0; j < D; ++j) {
      const double a = double(p + 3) / std::pow(10000.0, double(j - j % 2) / double(D));
      BOOST_TEST(std::abs(pe(p, j) - (j % 2 == 0 ? std::sin(a) : std::cos(a))) < 1e-15, p << ", " << j);
    }
  const auto dynpe = sinusoidal_positions<float, D>(L + 3);  // run-time length, from position 0
  BOOST_TEST(dynpe.dims()[0] == L + 3);
  for (std::size_t p = 0; p < L; ++p)
    for (std::size_t j = 0; j < D; ++j) BOOST_TEST(std::abs(double(dynpe(p + 3, j)) - pe(p, j)) < 1e-6);
}
// at compile time: PE[1] = (sin 1, cos 1, sin(1/100), cos(1/100)) for D = 4
static_assert([] {
  constexpr auto pe = sinusoidal_positions<double, 2, 4>();
  const double want[4] = {0.8414709848078965, 0.5403023058681398, 0.009999833334166664, 0.9999500004166653};
  for (std::size_t j = 0; j < 4; ++j) {
    const double d = pe(1, j) - want[j];
    if (d > 1e-15 || d < -1e-15 || pe(0, j) != (j % 2 == 0 ? 0.0 : 1.0)) return false;
  }
  return true;
}());

BOOST_AUTO_TEST_CASE(sinusoidal_module) {
  nn::sinusoidal_encoding<float, 16, 6> enc;
  tensor<float, 2, 5, 6> x;
  fill_from(x, naive::random(60, 3));
  const tensor<float, 2, 5, 6> y = enc(x, 4);
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t l = 0; l < 5; ++l)
      for (std::size_t j = 0; j < 6; ++j) {
        const double a = double(l + 4) / std::pow(10000.0, double(j - j % 2) / 6.0);
        const double want = double(x(b, l, j)) + (j % 2 == 0 ? std::sin(a) : std::cos(a));
        BOOST_TEST(std::abs(double(y(b, l, j)) - want) < 1e-6);
      }
  BOOST_CHECK_NO_THROW(enc(x, 11));  // positions 11..15: the last ones
  BOOST_CHECK_THROW(enc(x, 12), std::out_of_range);
  try {
    (void)enc(x, 12);
  } catch (const std::out_of_range& e) {
    BOOST_TEST(std::string(e.what()) == "attnx: nn::sinusoidal_encoding: the positions run past max_length: end 17, max_length 16");
  }
}

// ---- rotary ----------------------------------------------------------------------------------------------
template <rope_style Style>
void rotary_case() {
  constexpr std::size_t B = 2, H = 3, L = 5, D = 8;
  const mat xs = naive::random(B * H * L * D, 7);
  tensor<double, B, H, L, D> x;
  fill_from(x, xs);
  const tensor<double, B, H, L, D> y = rotary(x, Style, 2);
  mat want = xs;
  for (std::size_t r = 0; r < B * H * L; ++r) rotate_ref(want.data() + r * D, D, 2 + r % L, Style);
  double err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(y.data()[i] - want[i]));
  BOOST_TEST(err < 1e-15);
  // float, and a base of 500000 (LLaMA 3)
  tensor<float, L, D> xf;
  fill_from(xf, mat(xs.begin(), xs.begin() + L * D));
  const tensor<float, L, D> yf = rotary(xf, Style, 0, 500000.0);
  mat wf(xs.begin(), xs.begin() + L * D);
  for (std::size_t l = 0; l < L; ++l) rotate_ref(wf.data() + l * D, D, l, Style, 500000.0);
  for (std::size_t i = 0; i < L * D; ++i) BOOST_TEST(std::abs(double(yf.data()[i]) - wf[i]) < 1e-6);
}
BOOST_AUTO_TEST_CASE(rotary_interleaved) { rotary_case<rope_style::interleaved>(); }
BOOST_AUTO_TEST_CASE(rotary_half) { rotary_case<rope_style::half>(); }

BOOST_AUTO_TEST_CASE(rotary_scores_depend_on_the_distance_only) {
  // q at position p and k at position p - t: the same dot product for every p
  constexpr std::size_t D = 16, L = 40;
  const mat qs = naive::random(D, 1), ks = naive::random(D, 2);
  tensor<double, L, D> q, k;
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t j = 0; j < D; ++j) q(l, j) = qs[j], k(l, j) = ks[j];
  for (rope_style style : {rope_style::interleaved, rope_style::half}) {
    const tensor<double, L, D> rq = rotary(q, style), rk = rotary(k, style);
    for (std::size_t t : {0u, 1u, 7u}) {
      auto dot = [&](std::size_t p) {
        double s = 0;
        for (std::size_t j = 0; j < D; ++j) s += rq(p, j) * rk(p - t, j);
        return s;
      };
      for (std::size_t p = t + 1; p < L; ++p) BOOST_TEST(std::abs(dot(p) - dot(t)) < 1e-13);
    }
    // norms kept
    double n0 = 0, n1 = 0;
    for (std::size_t j = 0; j < D; ++j) n0 += qs[j] * qs[j], n1 += rq(L - 1, j) * rq(L - 1, j);
    BOOST_TEST(std::abs(n0 - n1) < 1e-13);
  }
}

BOOST_AUTO_TEST_CASE(rotary_special_cases) {
  tensor<double, 3, 4> x{{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}};
  const tensor<double, 3, 4> same = rotary(x, rope_style::none, 5);
  for (std::size_t i = 0; i < 12; ++i) BOOST_TEST(same.data()[i] == x.data()[i]);
  const tensor<double, 3, 4> first = rotary(x, rope_style::half);
  for (std::size_t j = 0; j < 4; ++j) BOOST_TEST(first(0, j) == x(0, j));  // position 0: the identity
  // a run-time feature extent must be even
  tensor<double, 2, dyn> odd(2, 5);
  BOOST_CHECK_THROW((void)rotary(odd, rope_style::half), extent_error);
  try {
    (void)rotary(odd, rope_style::half);
  } catch (const extent_error& e) {
    BOOST_TEST(std::string(e.what()) == "attnx: rotary: the feature extent (the last axis) must be even: features 5");
  }
  // NaN stays in its pair
  x(1, 0) = std::numeric_limits<double>::quiet_NaN();
  const tensor<double, 3, 4> r = rotary(x, rope_style::interleaved);
  BOOST_TEST((std::isnan(r(1, 0)) && std::isnan(r(1, 1)) && !std::isnan(r(1, 2)) && !std::isnan(r(0, 0))));
}

// at compile time: (1, 0) at position 1 with D = 2 is (cos 1, sin 1); in the half layout, pairs (0, 2), (1, 3)
static_assert([] {
  tensor<double, 2, 2> x{{1, 0}, {1, 0}};
  const tensor<double, 2, 2> y = rotary(x, rope_style::interleaved);
  const double d0 = y(1, 0) - 0.5403023058681398, d1 = y(1, 1) - 0.8414709848078965;
  tensor<double, 2, 4> h{{0, 0, 0, 0}, {1, 0, 0, 0}};
  const tensor<double, 2, 4> yh = rotary(h, rope_style::half);
  const double e0 = yh(1, 0) - 0.5403023058681398, e2 = yh(1, 2) - 0.8414709848078965;
  return y(0, 0) == 1 && y(0, 1) == 0 && d0 < 1e-15 && d0 > -1e-15 && d1 < 1e-15 && d1 > -1e-15 && e0 < 1e-15 &&
         e0 > -1e-15 && e2 < 1e-15 && e2 > -1e-15 && yh(1, 1) == 0 && yh(1, 3) == 0;
}());

// ---- multi_head_attention with RoPE ------------------------------------------------------------------------
// The RoPE cases' module (d_model 16, 4 heads over 2 KV heads, no biases) and its weights and input (B x L tokens),
// drawn from seeds seed .. seed + 4.
template <rope_style Style, std::size_t B, std::size_t L>
struct rope_setup {
  static constexpr std::size_t Dm = 16, H = 4, Hkv = 2, d = Dm / H;
  using mha_t = multi_head_attention<double, Dm, H, mha_options{.kv_heads = Hkv, .bias = false, .rope = Style}>;
  mat wq, wk, wv, wo, xs;
  tensor<double, Dm, H * d> WQ;
  tensor<double, Dm, Hkv * d> WK, WV;
  tensor<double, H * d, Dm> WO;
  explicit rope_setup(unsigned seed)
      : wq(naive::random(Dm * H * d, seed)), wk(naive::random(Dm * Hkv * d, seed + 1)), wv(naive::random(Dm * Hkv * d, seed + 2)),
        wo(naive::random(H * d * Dm, seed + 3)), xs(naive::random(B * L * Dm, seed + 4, -2, 2)) {
    fill_from(WQ, wq), fill_from(WK, wk), fill_from(WV, wv), fill_from(WO, wo);
  }
  mha_t module() const { return mha_t(WQ, WK, WV, WO); }
};

template <rope_style Style>
void mha_rope_case() {
  constexpr std::size_t B = 2, L = 6, Dm = 16, H = 4, Hkv = 2, d = Dm / H;
  const rope_setup<Style, B, L> su(11);
  const mat &wq = su.wq, &wk = su.wk, &wv = su.wv, &wo = su.wo, &xs = su.xs;
  const auto& WQ = su.WQ;
  const auto& WK = su.WK;
  const auto& WV = su.WV;
  const auto& WO = su.WO;
  const auto mha = su.module();
  tensor<double, B, L, Dm> x;
  fill_from(x, xs);
  const tensor<double, B, L, Dm> y = mha(x, causal);

  const mat want = rope_mha_reference(xs, wq, wk, wv, wo, B, L, Dm, H, Hkv, Style);
  double err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(y.data()[i] - want[i]));
  BOOST_TEST_MESSAGE("mha with rope: " << err);
  BOOST_TEST(err < 1e-13);
  // without the rotation the output differs (the test would notice a module that ignored the option)
  const multi_head_attention<double, Dm, H, mha_options{.kv_heads = Hkv, .bias = false}> plain(WQ, WK, WV, WO);
  const tensor<double, B, L, Dm> y0 = plain(x, causal);
  double diff = 0;
  for (std::size_t i = 0; i < want.size(); ++i) diff = std::max(diff, std::abs(y0.data()[i] - want[i]));
  BOOST_TEST(diff > 1e-3);

  // decoding: item 0 token by token, item 1 in chunks (different lengths at every step), the forward's rows
  kv_cache<double, Hkv, d> cache(B, L);
  std::size_t at[2] = {0, 0};
  const std::size_t chunks[2][4] = {{1, 1, 1, 3}, {3, 2, 1, 0}};
  for (std::size_t s = 0; s < 4; ++s)
    for (std::size_t b = 0; b < B; ++b) {
      const std::size_t n = chunks[b][s];
      if (n == 0) continue;
      tensor<double, dyn, Dm> rows(n);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < Dm; ++j) rows(i, j) = x(b, at[b] + i, j);
      const tensor<double, dyn, Dm> out = mha.step(rows, cache, b);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < Dm; ++j) BOOST_TEST(std::abs(out(i, j) - y(b, at[b] + i, j)) < 1e-12);
      at[b] += n;
    }
  BOOST_TEST(cache.length(0) == L);
  BOOST_TEST(cache.length(1) == L);

  // the whole batch at once, the items at different lengths (item 0 primed with 2 tokens, item 1 with 1)
  kv_cache<double, Hkv, d> cache2(B, L);
  for (std::size_t b = 0; b < B; ++b) {
    tensor<double, dyn, Dm> first(2 - b);
    for (std::size_t i = 0; i < 2 - b; ++i)
      for (std::size_t j = 0; j < Dm; ++j) first(i, j) = x(b, i, j);
    (void)mha.step(first, cache2, b);
  }
  tensor<double, B, 3, Dm> next;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < Dm; ++j) next(b, i, j) = x(b, 2 - b + i, j);
  const tensor<double, B, 3, Dm> out3 = mha.step(next, cache2);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < Dm; ++j) BOOST_TEST(std::abs(out3(b, i, j) - y(b, 2 - b + i, j)) < 1e-12);

  // rows per item in one call (continuous batching): item 0 in 1, 2, 3 rows, item 1 in 3, 0, 3 (idle in the
  // middle call); the rows of both items one after another, each at its own positions
  kv_cache<double, Hkv, d> cache3(B, L);
  std::size_t pos[2] = {0, 0};
  const std::size_t ragged[3][2] = {{1, 3}, {2, 0}, {3, 3}};
  for (const auto& counts : ragged) {
    tensor<double, dyn, Dm> rows(counts[0] + counts[1]);
    std::size_t r = 0;
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t i = 0; i < counts[b]; ++i, ++r)
        for (std::size_t j = 0; j < Dm; ++j) rows(r, j) = x(b, pos[b] + i, j);
    const tensor<double, dyn, Dm> out = mha.step(rows, cache3, std::span<const std::size_t>(counts));
    r = 0;
    for (std::size_t b = 0; b < B; ++b) {
      for (std::size_t i = 0; i < counts[b]; ++i, ++r)
        for (std::size_t j = 0; j < Dm; ++j) BOOST_TEST(std::abs(out(r, j) - y(b, pos[b] + i, j)) < 1e-12);
      pos[b] += counts[b];
    }
  }
  BOOST_TEST(cache3.length(0) == L);
  BOOST_TEST(cache3.length(1) == L);

  // cross-attention does not rotate (two sequences' positions have no relative meaning): the plain module's output
  tensor<double, B, 4, Dm> memory;
  fill_from(memory, naive::random(B * 4 * Dm, 16));
  const tensor<double, B, L, Dm> c_rope = mha(x, memory), c_plain = plain(x, memory);
  for (std::size_t i = 0; i < c_rope.numel(); ++i) BOOST_TEST(c_rope.data()[i] == c_plain.data()[i]);
}
// a decoder block with RoPE: its cross-attention has the same heads and no RoPE
static_assert(nn::transformer_block<float, 16, 4, 32, nn::activation::gelu, nn::norm_position::pre,
                                    mha_options{.rope = rope_style::half}, true>::cross_attention_type::options.rope ==
              rope_style::none);
static_assert(nn::transformer_block<float, 16, 4, 32, nn::activation::gelu, nn::norm_position::pre,
                                    mha_options{.rope = rope_style::half}, true>::attention_type::options.rope ==
              rope_style::half);
// A sliding window of Win keys over a cache whose oldest tokens drop_front takes out: every row rotated at its true
// position (the cache's offset + length) and seeing its last Win tokens, against the double loops with that window.
// Item 0 in a cache of capacity Win, the window kept exactly (drop_front before each token); item 1 in a cache of
// capacity Win + 2, tokens dropped three at a time and a blocked(m) mask over the cache's positions for the rest.
template <rope_style Style>
void sliding_window_case() {
  constexpr std::size_t B = 2, L = 11, Dm = 16, H = 4, Hkv = 2, d = Dm / H, Win = 4;
  const rope_setup<Style, B, L> su(21);
  const mat &wq = su.wq, &wk = su.wk, &wv = su.wv, &wo = su.wo, &xs = su.xs;
  const auto mha = su.module();
  const mat want = rope_mha_reference(xs, wq, wk, wv, wo, B, L, Dm, H, Hkv, Style, Win);
  const mat causal_want = rope_mha_reference(xs, wq, wk, wv, wo, B, L, Dm, H, Hkv, Style);
  BOOST_TEST(std::abs(want[(L - 1) * Dm] - causal_want[(L - 1) * Dm]) > 1e-6);  // (the window matters)
  const auto row = [&](std::size_t b, std::size_t t) {
    tensor<double, dyn, Dm> r(1);
    for (std::size_t j = 0; j < Dm; ++j) r(0, j) = xs[(b * L + t) * Dm + j];
    return r;
  };
  kv_cache<double, Hkv, d> exact(1, Win), lazy(1, Win + 2);
  double err = 0;
  for (std::size_t t = 0; t < L; ++t) {
    if (exact.length(0) + 1 > Win) exact.drop_front(0, exact.length(0) + 1 - Win);
    const tensor<double, dyn, Dm> y0 = mha.step(row(0, t), exact, 0);
    for (std::size_t j = 0; j < Dm; ++j) err = std::max(err, std::abs(y0(0, j) - want[t * Dm + j]));
    BOOST_TEST(exact.offset(0) + exact.length(0) == t + 1);
    if (lazy.length(0) == lazy.capacity()) lazy.drop_front(0, 3);
    const std::size_t held = lazy.length(0) + 1;  // after the append; the new row is held - 1
    tensor<bool, 1, Win + 2> old;
    for (std::size_t j = 0; j < Win + 2; ++j) old(0, j) = j + Win <= held - 1;
    const tensor<double, dyn, Dm> y1 = mha.step(row(1, t), lazy, 0, blocked(old));
    for (std::size_t j = 0; j < Dm; ++j) err = std::max(err, std::abs(y1(0, j) - want[(L + t) * Dm + j]));
  }
  BOOST_TEST_MESSAGE("sliding window with RoPE: " << err);
  BOOST_TEST(err < 1e-12);
  BOOST_TEST(exact.offset(0) == L - Win);
  BOOST_TEST(lazy.offset(0) + lazy.length(0) == L);
  // the offset travels with the item's tokens (copy_item, reserve) and goes with reset; drop_front past the length throws
  kv_cache<double, Hkv, d> two(2, Win);
  two.copy_item(exact, 0, 1);
  BOOST_TEST(two.offset(1) == L - Win);
  BOOST_TEST(two.offset(0) == 0u);
  two.reserve(2 * Win);
  BOOST_TEST(two.offset(1) == L - Win);
  BOOST_TEST(two.key(1, 1, 0, 2) == exact.key(0, 1, 0, 2));
  BOOST_CHECK_EXCEPTION(two.drop_front(1, Win + 1), std::out_of_range, [](const std::out_of_range& e) {
    return std::string(e.what()) == "attnx: kv_cache: drop_front: 5 tokens of batch item 1, which holds 4";
  });
  kv_cache<double, Hkv, d> three(3, Win);
  three.copy_item(exact, 0, 2);
  const std::size_t from[3] = {2, 2, 0};  // (not in place: the whole cache copied once)
  three.reorder(from);
  BOOST_TEST(three.offset(0) == L - Win);
  BOOST_TEST(three.offset(1) == L - Win);
  BOOST_TEST(three.offset(2) == 0u);
  two.reset(1);
  BOOST_TEST(two.offset(1) == 0u);
  // over a bf16 cache the stored bits move as they are
  kv_cache<float, 1, 16, 16, bf16> half(1, 8);
  const mat kr = naive::random(5 * 16, 26), vr = naive::random(5 * 16, 27);
  const std::vector<float> kf(kr.begin(), kr.end()), vf(vr.begin(), vr.end());
  half.append(0, kf.data(), vf.data(), 5);
  const std::vector<bf16> k_before(half.key_rows(0, 0).begin(), half.key_rows(0, 0).end()),
      v_before(half.value_rows(0, 0).begin(), half.value_rows(0, 0).end());
  half.drop_front(0, 2);
  BOOST_TEST(half.length(0) == 3u);
  BOOST_TEST(half.offset(0) == 2u);
  for (std::size_t i = 0; i < 3 * 16; ++i) {
    BOOST_TEST(half.key_rows(0, 0)[i].bits == k_before[2 * 16 + i].bits);
    BOOST_TEST(half.value_rows(0, 0)[i].bits == v_before[2 * 16 + i].bits);
  }
}
BOOST_AUTO_TEST_CASE(sliding_window_interleaved) { sliding_window_case<rope_style::interleaved>(); }
BOOST_AUTO_TEST_CASE(sliding_window_half) { sliding_window_case<rope_style::half>(); }

BOOST_AUTO_TEST_CASE(mha_rope_interleaved) { mha_rope_case<rope_style::interleaved>(); }
BOOST_AUTO_TEST_CASE(mha_rope_half) { mha_rope_case<rope_style::half>(); }

// float: the fused kernel reads the rotated heads
BOOST_AUTO_TEST_CASE(mha_rope_float_fused) {
  // float, through the fused kernel (which reads the rotated heads), against the double loops
  constexpr std::size_t L = 33, Dm = 64, H = 4;
  const mat wq = naive::random(Dm * Dm, 21, -0.3, 0.3), wk = naive::random(Dm * Dm, 22, -0.3, 0.3),
            wv = naive::random(Dm * Dm, 23, -0.3, 0.3), wo = naive::random(Dm * Dm, 24, -0.3, 0.3), xs = naive::random(L * Dm, 25);
  multi_head_attention<float, Dm, H, mha_options{.bias = false, .rope = rope_style::half}> mf;
  fill_from(mf.w_q, wq), fill_from(mf.w_k, wk), fill_from(mf.w_v, wv), fill_from(mf.w_o, wo);
  tensor<float, L, Dm> xf;
  fill_from(xf, xs);
  const auto runs = default_context().fused_runs();
  const tensor<float, L, Dm> yf = mf(xf, causal);
  BOOST_TEST(default_context().fused_runs() == runs + 1);
  const mat want = rope_mha_reference(xs, wq, wk, wv, wo, 1, L, Dm, H, H, rope_style::half);
  double err = 0;
  for (std::size_t i = 0; i < L * Dm; ++i) err = std::max(err, std::abs(double(yf.data()[i]) - want[i]));
  BOOST_TEST_MESSAGE("float mha with rope (fused) vs double loops: " << err);
  BOOST_TEST(err < 2e-5);
}
