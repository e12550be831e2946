// multi_head_attention against a plain double-precision multi-head attention written below with loops:
// bias on and off, self- and cross-attention (L_q != L_k), batch 1 and 3 and unbatched inputs, every
// mask kind (causal, key_lengths per batch item, boolean (B, 1, L_q, L_k)), GQA and MQA, d_k != d_model
// / heads, d_v != d_k, float and double; the weights() call; the fused path taken (default_context().fused_runs()) and the
// same numbers row by row (set_fused(false)); owned and viewed weights; size errors.
#define BOOST_TEST_MODULE mha
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "naive.hpp"
#include "support.hpp"

using namespace attnx;
using naive::make;
using naive::mat;
using namespace test_support;

namespace {

// ---- the reference: one plain function, no attnx code ------------------------------------------
struct ref_config {
  std::size_t B, Lq, Lk, D, H, Hkv, dk, dv;
  bool bias;
};
struct ref_weights {
  mat wq, wk, wv, wo, bq, bk, bv, bo;  // (D x H*dk), (D x Hkv*dk), (D x Hkv*dv), (H*dv x D); biases
};
using allowed_fn = std::function<bool(std::size_t b, std::size_t i, std::size_t j)>;

// out: (B, Lq, D); probs: (B, H, Lq, Lk).
void reference_mha(const ref_config& c, const ref_weights& w, const mat& x, const mat& mem, const allowed_fn& allowed,
                   mat& out, mat& probs) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::size_t G = c.H / c.Hkv;
  out.assign(c.B * c.Lq * c.D, 0.0);
  probs.assign(c.B * c.H * c.Lq * c.Lk, 0.0);
  for (std::size_t b = 0; b < c.B; ++b) {
    // projections
    mat q(c.Lq * c.H * c.dk), k(c.Lk * c.Hkv * c.dk), v(c.Lk * c.Hkv * c.dv);
    for (std::size_t i = 0; i < c.Lq; ++i)
      for (std::size_t o = 0; o < c.H * c.dk; ++o) {
        double s = c.bias ? w.bq[o] : 0.0;
        for (std::size_t f = 0; f < c.D; ++f) s += x[(b * c.Lq + i) * c.D + f] * w.wq[f * c.H * c.dk + o];
        q[i * c.H * c.dk + o] = s;
      }
    for (std::size_t j = 0; j < c.Lk; ++j) {
      for (std::size_t o = 0; o < c.Hkv * c.dk; ++o) {
        double s = c.bias ? w.bk[o] : 0.0;
        for (std::size_t f = 0; f < c.D; ++f) s += mem[(b * c.Lk + j) * c.D + f] * w.wk[f * c.Hkv * c.dk + o];
        k[j * c.Hkv * c.dk + o] = s;
      }
      for (std::size_t o = 0; o < c.Hkv * c.dv; ++o) {
        double s = c.bias ? w.bv[o] : 0.0;
        for (std::size_t f = 0; f < c.D; ++f) s += mem[(b * c.Lk + j) * c.D + f] * w.wv[f * c.Hkv * c.dv + o];
        v[j * c.Hkv * c.dv + o] = s;
      }
    }
    // attention per head, concatenated
    mat concat(c.Lq * c.H * c.dv, 0.0);
    for (std::size_t h = 0; h < c.H; ++h) {
      const std::size_t g = h / G;  // the key/value head of query head h
      for (std::size_t i = 0; i < c.Lq; ++i) {
        std::vector<double> s(c.Lk);
        double mx = -inf;
        for (std::size_t j = 0; j < c.Lk; ++j) {
          double dot = 0;
          for (std::size_t t = 0; t < c.dk; ++t) dot += q[i * c.H * c.dk + h * c.dk + t] * k[j * c.Hkv * c.dk + g * c.dk + t];
          s[j] = allowed(b, i, j) ? dot / std::sqrt(double(c.dk)) : -inf;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (std::size_t j = 0; j < c.Lk; ++j) {
          s[j] = mx == -inf ? 0.0 : std::exp(s[j] - mx);  // every key blocked: weights 0
          sum += s[j];
        }
        for (std::size_t j = 0; j < c.Lk; ++j) {
          const double p = sum > 0 ? s[j] / sum : 0.0;
          probs[((b * c.H + h) * c.Lq + i) * c.Lk + j] = p;
          for (std::size_t t = 0; t < c.dv; ++t) concat[i * c.H * c.dv + h * c.dv + t] += p * v[j * c.Hkv * c.dv + g * c.dv + t];
        }
      }
    }
    // output projection
    for (std::size_t i = 0; i < c.Lq; ++i)
      for (std::size_t o = 0; o < c.D; ++o) {
        double s = c.bias ? w.bo[o] : 0.0;
        for (std::size_t f = 0; f < c.H * c.dv; ++f) s += concat[i * c.H * c.dv + f] * w.wo[f * c.D + o];
        out[(b * c.Lq + i) * c.D + o] = s;
      }
  }
}

// ---- fixtures -----------------------------------------------------------------------------------

template <class M>
struct fixture {
  using T = typename M::value_type;
  ref_weights w;
  std::vector<T> wq, wk, wv, wo, bq, bk, bv, bo;  // the module's memory (also used by the viewed module)
  M m;
  explicit fixture(unsigned seed)
      : w{rounded<T>(M::w_q_shape::size, seed), rounded<T>(M::w_k_shape::size, seed + 1),
          rounded<T>(M::w_v_shape::size, seed + 2), rounded<T>(M::w_o_shape::size, seed + 3),
          rounded<T>(M::b_q_shape::size, seed + 4), rounded<T>(M::b_k_shape::size, seed + 5),
          rounded<T>(M::b_v_shape::size, seed + 6), rounded<T>(M::b_o_shape::size, seed + 7)},
        wq(as<T>(w.wq)), wk(as<T>(w.wk)), wv(as<T>(w.wv)), wo(as<T>(w.wo)),
        bq(M::has_bias ? as<T>(w.bq) : std::vector<T>{}), bk(M::has_bias ? as<T>(w.bk) : std::vector<T>{}),
        bv(M::has_bias ? as<T>(w.bv) : std::vector<T>{}), bo(M::has_bias ? as<T>(w.bo) : std::vector<T>{}),
        m(M::from_memory(flat())) {}
  template <class Module = M>
  typename Module::flat_weights flat() const {
    return {wq, wk, wv, wo, bq, bk, bv, bo};
  }
  ref_config config(std::size_t B, std::size_t Lq, std::size_t Lk) const {
    return {B, Lq, Lk, M::d_model, M::heads, M::kv_heads, M::d_k, M::d_v, M::has_bias};
  }
};

struct self_t {};
template <class S>
constexpr std::size_t batch_of = S::rank == 3 ? S::extents[0] : 1;
template <class S>
constexpr std::size_t length_of = S::extents[S::rank - 2];

template <class M, class X, class Mem, class... Masks>
auto call(const M& m, const X& x, const Mem& mem, const Masks&... masks) {
  if constexpr (std::is_same_v<Mem, self_t>) {
    return m(x, masks...);
  } else {
    return m(x, mem, masks...);
  }
}
template <class M, class X, class Mem, class... Masks>
auto call_weights(const M& m, const X& x, const Mem& mem, const Masks&... masks) {
  if constexpr (std::is_same_v<Mem, self_t>) {
    return m.weights(x, masks...);
  } else {
    return m.weights(x, mem, masks...);
  }
}

// Runs the module on x (and the memory, unless self_t), fused and row by row, plus its weights(), and
// compares all of them with the reference.
template <class M, class X, class Mem, class... Masks>
void check(const std::string& what, const fixture<M>& f, const X& x, const Mem& mem, const allowed_fn& allowed, double tol,
           const Masks&... masks) {
  using SX = shape_of_t<X>;
  constexpr bool self = std::is_same_v<Mem, self_t>;
  using SM = std::conditional_t<self, SX, shape_of_t<std::conditional_t<self, X, Mem>>>;
  const std::size_t B = batch_of<SX>, Lq = length_of<SX>, Lk = length_of<SM>;
  const mat xs(x.data(), x.data() + SX::size);
  mat ms;
  if constexpr (self) {
    ms = xs;
  } else {
    ms.assign(mem.data(), mem.data() + SM::size);
  }
  mat want, want_probs;
  reference_mha(f.config(B, Lq, Lk), f.w, xs, ms, allowed, want, want_probs);

  using Y = result_t<decltype(call(f.m, x, mem, masks...))>;
  static_assert(shape_of_t<Y>::extents == SX::extents, "the output has the input's shape");
  const auto runs0 = default_context().fused_runs();
  Y fused = call(f.m, x, mem, masks...);
  BOOST_TEST(default_context().fused_runs() == runs0 + 1, what << ": the fused kernel ran once");
  default_context().set_fused(false);
  Y plain = call(f.m, x, mem, masks...);
  default_context().set_fused(true);
  BOOST_TEST(default_context().fused_runs() == runs0 + 1, what << ": no fused run with fused_enabled = false");
  BOOST_TEST(max_err(fused, want) <= tol, what << ": fused error " << max_err(fused, want));
  BOOST_TEST(max_err(plain, want) <= tol, what << ": row-by-row error " << max_err(plain, want));

  using A = result_t<decltype(call_weights(f.m, x, mem, masks...))>;
  static_assert(A::rank == SX::rank + 1, "(B, H, Lq, Lk), or (H, Lq, Lk) unbatched");
  static_assert(A::extents[A::rank - 3] == M::heads && A::extents[A::rank - 2] == length_of<SX> && shape_of_t<A>::cols == length_of<SM>);
  const A probs = call_weights(f.m, x, mem, masks...);
  BOOST_TEST(default_context().fused_runs() == runs0 + 1, what << ": weights() does not run the fused kernel");
  BOOST_TEST(max_err(probs, want_probs) <= tol, what << ": weights error " << max_err(probs, want_probs));
}

template <class S>
mat random_input(unsigned seed) {
  return naive::random(S::size, seed);
}

const auto all = [](std::size_t, std::size_t, std::size_t) { return true; };
const auto causal_ok = [](std::size_t, std::size_t i, std::size_t j) { return j <= i; };

}  // namespace

// ---- bias, batch, self-attention ------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(self_attention_bias_batch3_causal_double) {
  using M = multi_head_attention<double, 12, 4>;
  static_assert(M::d_k == 3 && M::d_v == 3 && M::kv_heads == 4 && M::group == 1 && M::has_bias);
  const fixture<M> f(10);
  const auto x = make<tensor<double, 3, 7, 12>>(random_input<make_shape<3, 7, 12>>(1));
  check("bias, B=3, causal", f, x, self_t{}, causal_ok, 1e-12, causal);
  check("bias, B=3, no mask", f, x, self_t{}, all, 1e-12);
}

BOOST_AUTO_TEST_CASE(self_attention_no_bias_batch1_float) {
  using M = multi_head_attention<float, 12, 4, mha_options{.bias = false}>;
  static_assert(!M::has_bias && sizeof(M) == 4 * sizeof(M::w_q_type), "no storage for absent biases");
  const fixture<M> f(20);
  const auto x = make<tensor<float, 1, 6, 12>>(random_input<make_shape<1, 6, 12>>(2));
  check("no bias, B=1, float", f, x, self_t{}, all, 3e-5);
  check("no bias, B=1, float, causal", f, x, self_t{}, causal_ok, 3e-5, causal);
}

// ---- cross-attention, every mask kind --------------------------------------------------------------
BOOST_AUTO_TEST_CASE(cross_attention_every_mask_kind) {
  constexpr std::size_t B = 3, Lq = 5, Lk = 9;
  using M = multi_head_attention<double, 12, 4>;
  const fixture<M> f(30);
  const auto x = make<tensor<double, B, Lq, 12>>(random_input<make_shape<B, Lq, 12>>(3));
  const auto mem = make<tensor<double, B, Lk, 12>>(random_input<make_shape<B, Lk, 12>>(4));
  const std::vector<std::size_t> lens{9, 4, 0};  // batch item 2: every key blocked (its attention rows are 0)
  tensor<bool, B, 1, Lq, Lk> bm;                  // per batch item, broadcast over the heads
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < Lq; ++i)
      for (std::size_t j = 0; j < Lk; ++j) bm(b, 0, i, j) = (i * 7 + j * 3 + b) % 5 != 0;
  auto by_len = [&](std::size_t b, std::size_t, std::size_t j) { return j < lens[b]; };
  auto by_bool = [&](std::size_t b, std::size_t i, std::size_t j) { return bm(b, 0, i, j); };
  check("cross, no mask", f, x, mem, all, 1e-12);
  check("cross, causal (top-left, Lq < Lk)", f, x, mem, causal_ok, 1e-12, causal);
  check("cross, key_lengths", f, x, mem, by_len, 1e-12, key_lengths(lens));
  check("cross, boolean (B,1,Lq,Lk)", f, x, mem, by_bool, 1e-12, allowed(bm));
  check("cross, causal + key_lengths + boolean", f, x, mem,
        [&](std::size_t b, std::size_t i, std::size_t j) { return j <= i && j < lens[b] && bm(b, 0, i, j); }, 1e-12, causal,
        key_lengths(lens), allowed(bm));
}

BOOST_AUTO_TEST_CASE(cross_attention_float_masks) {
  constexpr std::size_t B = 3, Lq = 8, Lk = 5;
  using M = multi_head_attention<float, 16, 2, mha_options{.bias = false}>;
  const fixture<M> f(40);
  const auto x = make<tensor<float, B, Lq, 16>>(random_input<make_shape<B, Lq, 16>>(5));
  const auto mem = make<tensor<float, B, Lk, 16>>(random_input<make_shape<B, Lk, 16>>(6));
  const std::vector<std::size_t> lens{1, 5, 3};
  tensor<bool, B, 1, Lq, Lk> bm;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < Lq; ++i)
      for (std::size_t j = 0; j < Lk; ++j) bm(b, 0, i, j) = (i + 2 * j + b) % 3 != 1;
  check("float cross, causal (Lq > Lk)", f, x, mem, causal_ok, 3e-5, causal);
  check("float cross, key_lengths", f, x, mem, [&](auto b, auto, auto j) { return j < lens[b]; }, 3e-5, key_lengths(lens));
  check("float cross, boolean", f, x, mem, [&](auto b, auto i, auto j) { return bm(b, 0, i, j); }, 3e-5, allowed(bm));
}

// ---- grouped-query and multi-query attention --------------------------------------------------------
BOOST_AUTO_TEST_CASE(grouped_query_attention) {
  using M = multi_head_attention<double, 16, 4, mha_options{.kv_heads = 2}>;
  static_assert(M::kv_heads == 2 && M::group == 2 && M::w_k_shape::cols == 8 && M::w_q_shape::cols == 16);
  const fixture<M> f(50);
  const auto x = make<tensor<double, 3, 6, 16>>(random_input<make_shape<3, 6, 16>>(7));
  const auto mem = make<tensor<double, 3, 10, 16>>(random_input<make_shape<3, 10, 16>>(8));
  const std::vector<std::size_t> lens{6, 2, 5};
  check("GQA self, causal + key_lengths", f, x, self_t{}, [&](auto b, auto i, auto j) { return j <= i && j < lens[b]; }, 1e-12,
        causal, key_lengths(lens));
  // the named masks pass through the module's masks (L = 6)
  const std::array<std::size_t, 3> offs{0, 2, 6};
  check("GQA self, sliding_window(3)", f, x, self_t{}, [](auto, auto i, auto j) { return j <= i && j + 3 > i; }, 1e-12,
        sliding_window(3));
  check("GQA self, causal + documents", f, x, self_t{}, [](auto, auto i, auto j) { return j <= i && (i < 2) == (j < 2); },
        1e-12, causal, documents(offs));
  // masks as functions of the position, through the module's masks as well
  check("GQA self, mask_fn(window of 3)", f, x, self_t{}, [](auto, auto i, auto j) { return j <= i && j + 3 > i; }, 1e-12,
        mask_fn(q_pos >= k_pos && q_pos - k_pos < 3));
  check("GQA self, mask_fn(f(b, h, i, j))", f, x, self_t{}, [](auto b, auto i, auto j) { return b == 1 ? j <= i : j != 1; },
        1e-12, mask_fn([](std::ptrdiff_t b, std::ptrdiff_t, std::ptrdiff_t i, std::ptrdiff_t j) { return b == 1 ? j <= i : j != 1; }));
  check("GQA cross", f, x, mem, all, 1e-12);

  using MF = multi_head_attention<float, 16, 4, mha_options{.kv_heads = 2, .bias = false}>;
  const fixture<MF> ff(55);
  const auto xf = make<tensor<float, 3, 6, 16>>(random_input<make_shape<3, 6, 16>>(7));
  check("GQA float, causal", ff, xf, self_t{}, causal_ok, 3e-5, causal);
}

BOOST_AUTO_TEST_CASE(multi_query_attention) {
  using M = multi_head_attention<double, 12, 6, mha_options{.kv_heads = 1}>;
  static_assert(M::kv_heads == 1 && M::group == 6 && M::w_k_shape::cols == M::d_k);
  const fixture<M> f(60);
  const auto x = make<tensor<double, 3, 4, 12>>(random_input<make_shape<3, 4, 12>>(9));
  const auto mem = make<tensor<double, 3, 7, 12>>(random_input<make_shape<3, 7, 12>>(10));
  tensor<bool, 3, 1, 4, 7> bm;
  for (std::size_t b = 0; b < 3; ++b)
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 7; ++j) bm(b, 0, i, j) = (3 * i + j + b) % 4 != 0;
  check("MQA self, causal", f, x, self_t{}, causal_ok, 1e-12, causal);
  check("MQA cross, boolean", f, x, mem, [&](auto b, auto i, auto j) { return bm(b, 0, i, j); }, 1e-12, allowed(bm));
}

// ---- head widths other than d_model / heads ---------------------------------------------------------
BOOST_AUTO_TEST_CASE(d_k_and_d_v_chosen) {
  // d_model 10 is not divisible by 3 heads: allowed, since both widths are given.
  using M = multi_head_attention<double, 10, 3, mha_options{.d_k = 5, .d_v = 7}>;
  static_assert(M::d_k == 5 && M::d_v == 7 && M::w_q_shape::cols == 15 && M::w_v_shape::cols == 21 &&
                M::w_o_shape::extents[0] == 21);
  const fixture<M> f(70);
  const auto x = make<tensor<double, 2, 5, 10>>(random_input<make_shape<2, 5, 10>>(11));
  const auto mem = make<tensor<double, 2, 8, 10>>(random_input<make_shape<2, 8, 10>>(12));
  check("d_k=5, d_v=7, causal", f, x, self_t{}, causal_ok, 1e-12, causal);
  check("d_k=5, d_v=7, cross", f, x, mem, all, 1e-12);

  using MG = multi_head_attention<float, 8, 4, mha_options{.d_k = 3, .d_v = 5, .kv_heads = 2}>;
  const fixture<MG> fg(75);
  const auto xf = make<tensor<float, 3, 5, 8>>(random_input<make_shape<3, 5, 8>>(13));
  check("GQA with d_k=3, d_v=5, float", fg, xf, self_t{}, causal_ok, 3e-5, causal);
}

// ---- unbatched inputs (L, d_model) --------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(unbatched_inputs) {
  using M = multi_head_attention<double, 12, 4, mha_options{.kv_heads = 2}>;
  const fixture<M> f(80);
  const auto x = make<tensor<double, 6, 12>>(random_input<make_shape<6, 12>>(14));
  const auto mem = make<tensor<double, 9, 12>>(random_input<make_shape<9, 12>>(15));
  const std::vector<std::size_t> lens{4};  // one length: a batch of one
  tensor<bool, 6, 9> bm;
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t j = 0; j < 9; ++j) bm(i, j) = (i + j) % 3 != 2;
  check("unbatched self, causal", f, x, self_t{}, causal_ok, 1e-12, causal);
  check("unbatched self, key_lengths", f, x, self_t{}, [](auto, auto, auto j) { return j < 4; }, 1e-12, key_lengths(lens));
  check("unbatched cross, boolean (Lq, Lk)", f, x, mem, [&](auto, auto i, auto j) { return bm(i, j); }, 1e-12, allowed(bm));
}

// ---- named axes, rvalue inputs, forward(), owned vs viewed ----------------------------------------
BOOST_AUTO_TEST_CASE(named_axes_rvalues_and_forward) {
  using M = multi_head_attention<double, 12, 4>;
  const fixture<M> f(90);
  const mat xs = random_input<make_shape<2, 5, 12>>(16);
  using X = tensor<double, batch<2>, seq<5>, d_model<12>>;
  const auto x = make<X>(xs);
  X y = f.m(x, causal);  // names flow through: (batch, seq, d_model)
  static_assert(std::is_same_v<shape_of_t<decltype(f.m(x, causal))>, shape_of_t<X>>);
  const X y2 = f.m.forward(x, causal);
  BOOST_TEST((y == y2));
  // A temporary input is moved into the expression, which may outlive the statement.
  auto e = f.m(make<X>(xs), causal);
  const X y3 = e;
  BOOST_TEST((y == y3));
  // An expression as input: the positional-encoding style x + P.
  const X y4 = f.m(x + 0.0, causal);
  BOOST_TEST(max_err(y4, mat(y.begin(), y.end())) == 0.0);
}

BOOST_AUTO_TEST_CASE(owned_and_viewed_weights_agree) {
  using M = multi_head_attention<double, 12, 3, mha_options{.kv_heads = 1}>;
  using V = multi_head_attention_view<double, 12, 3, mha_options{.kv_heads = 1}>;
  static_assert(V::storage == weights_storage::viewed && std::is_same_v<V::w_q_type, view<const double, d_model<12>, 12>>);
  const fixture<M> f(100);
  const V viewed = V::from_memory(f.flat<V>());
  BOOST_TEST(viewed.w_k.data() == f.wk.data(), "views refer to the caller's memory");
  // Views of the owned module's tensors, and an owned copy built from views.
  const V of_tensors(f.m.w_q, f.m.w_k, f.m.w_v, f.m.w_o, f.m.b_q, f.m.b_k, f.m.b_v, f.m.b_o);
  const M copied(viewed.w_q, viewed.w_k, viewed.w_v, viewed.w_o, viewed.b_q, viewed.b_k, viewed.b_v, viewed.b_o);
  const auto x = make<tensor<double, 2, 5, 12>>(random_input<make_shape<2, 5, 12>>(17));
  const tensor<double, 2, 5, 12> a = f.m(x, causal), b = viewed(x, causal), c = of_tensors(x, causal), d = copied(x, causal);
  BOOST_TEST((a == b));
  BOOST_TEST((a == c));
  BOOST_TEST((a == d));
}

BOOST_AUTO_TEST_CASE(size_errors_name_the_parameter) {
  using M = multi_head_attention<float, 8, 2>;
  std::vector<float> w64(64), w63(63), b8(8), b7(7);
  auto message_has = [](const std::string& a, const std::string& b) {
    return [=](const std::exception& e) {
      const std::string m = e.what();
      BOOST_TEST_MESSAGE(m);
      return m.find(a) != std::string::npos && m.find(b) != std::string::npos;
    };
  };
  BOOST_CHECK_EXCEPTION(M::from_memory({w64, w63, w64, w64, b8, b8, b8, b8}), std::length_error,
                        message_has("W_K of shape [d_model=8, 8]", "needs 64 elements, got 63"));
  BOOST_CHECK_EXCEPTION(M::from_memory({w64, w64, w64, w64, b8, b8, b7, b8}), std::length_error,
                        message_has("b_V of shape [8]", "got 7"));
  BOOST_CHECK_EXCEPTION(M::from_memory({w64, w64, w64, w64}), std::length_error, message_has("b_Q", "got 0"));
  using MV = multi_head_attention_view<float, 8, 2>;
  BOOST_CHECK_EXCEPTION(MV::from_memory({w64, w64, w64, w63, b8, b8, b8, b8}), std::length_error,
                        message_has("W_O of shape [8, d_model=8]", "got 63"));
  using NB = multi_head_attention<float, 8, 2, mha_options{.bias = false}>;
  BOOST_CHECK_EXCEPTION(NB::from_memory({w64, w64, w64, w64, b8}), std::invalid_argument,
                        message_has("b_Q was given", "no biases"));
  BOOST_CHECK_NO_THROW(NB::from_memory({w64, w64, w64, w64}));
}
