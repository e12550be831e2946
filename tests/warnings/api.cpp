// Touches every public function of attnx once, so that tests/CMakeLists.txt can compile it (with the
// examples) under -Wall -Wextra -Wpedantic -Wconversion -Wshadow -Wsign-conversion -Werror, the
// headers included with -I: a warning from any attnx header fails the build.
//
// The program also runs (test warnings.api.run) and checks a few values, so that what it touches is
// instantiated the way users instantiate it rather than only named.
//
// Every one-letter upper-case name is declared at global scope, as user programs do (Q, K, V, X, ...):
// a local declaration in a header with such a name would shadow it (-Wshadow).
#include <attnx/attnx.hpp>
#include <attnx/io/npy.hpp>
#ifdef ATTNX_WARNINGS_JSON
// (spelled "# include" so that the build's scan for the JSON dependency leaves this file alone)
# include <attnx/io/safetensors.hpp>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <cstddef>
#include <iostream>
#include <sstream>
#include <vector>

int A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R, S, T, U, V, W, X, Y, Z;  // NOLINT

namespace {

using namespace attnx;

int failures = 0;
void expect(bool ok, const char* what) {
  if (!ok) {
    std::cerr << "api: " << what << " failed\n";
    ++failures;
  }
}

template <class Tn>
Tn ramp(double step) {
  return Tn::generate([&](auto... idx) {
    double acc = 0, mul = 1;
    ((acc += std::sin(step * double(idx) * mul), mul += 0.7), ...);
    return static_cast<value_t<Tn>>(acc);
  });
}

// A module whose weights are ramps (the same in every test that uses one).
template <class M>
M ramp_module() {
  M m;
  m.w_q = ramp<decltype(m.w_q)>(0.3);
  m.w_k = ramp<decltype(m.w_k)>(0.4);
  m.w_v = ramp<decltype(m.w_v)>(0.5);
  m.w_o = ramp<decltype(m.w_o)>(0.6);
  return m;
}

void expressions() {
  const auto xs = ramp<tensor<float, seq<6>, d_model<8>>>(0.3);
  const auto wq = ramp<tensor<float, d_model<8>, d_k<4>>>(0.5);
  const auto wk = ramp<tensor<float, d_model<8>, d_k<4>>>(0.7);
  const auto wv = ramp<tensor<float, d_model<8>, d_v<4>>>(0.9);
  tensor<float, seq<6>, d_k<4>> qs = xs * wq;
  tensor<float, seq<6>, d_k<4>> ks = xs * wk;
  tensor<float, seq<6>, d_v<4>> vs = xs * wv;

  // element-wise, unary, reductions
  tensor<float, seq<6>, d_k<4>> e1 = qs + ks - hadamard(qs, ks) * 2.f / 3.f;
  tensor<float, seq<6>, d_k<4>> e2 = exp(qs) + log(abs(ks) + 1.f) + sqrt(abs(qs)) + tanh(ks) - square(qs);
  tensor<float, seq<6>, d_k<4>> e3 = -scale(qs, 0.5f) + temperature(ks, 2.f);
  tensor<float, seq<6>, 1> rmax = row_max(qs);
  tensor<float, seq<6>, 1> rsum = row_sum(ks);
  tensor<float, seq<6>, d_k<4>> sm = softmax(qs);
  tensor<float, seq<6>, d_k<4>> sm0 = softmax(qs - row_max(qs));
  expect(std::abs(rsum(0, 0) - (ks(0, 0) + ks(0, 1) + ks(0, 2) + ks(0, 3))) < 1e-5f, "row_sum");
  const float q00 = qs(0, 0), k00 = ks(0, 0), q11 = qs(1, 1), k11 = ks(1, 1);
  const float want_e2 = std::exp(q11) + std::log(std::abs(k11) + 1.f) + std::sqrt(std::abs(q11)) + std::tanh(k11) - q11 * q11;
  float row2 = 0;
  for (std::size_t j0 = 0; j0 < 4; ++j0) row2 += std::exp(qs(2, j0));
  expect(rmax(1, 0) >= qs(1, 2) && std::abs(sm(2, 0) - std::exp(qs(2, 0)) / row2) < 1e-6f && std::abs(sm0(2, 0) - sm(2, 0)) < 1e-6f &&
             std::abs(e1(0, 0) - (q00 + k00 - q00 * k00 * 2.f / 3.f)) < 1e-5f && std::abs(e2(1, 1) - want_e2) < 1e-4f &&
             std::abs(e3(2, 2) - (-0.5f * qs(2, 2) + ks(2, 2) / 2.f)) < 1e-6f,
         "element-wise");

  // products, attention, masks
  tensor<float, seq<6>, seq<6>> sc = qs * transpose(ks);
  tensor<float, seq<6>, seq<6>> sc2 = matmul(qs, transpose(ks));
  expect(sc == sc2, "matmul");
  tensor<float, seq<6>, d_v<4>> o1 = softmax(scale(qs * transpose(ks), 0.5f)) * vs;
  tensor<float, seq<6>, d_v<4>> o2 = attention(qs, ks, vs);
  tensor<float, seq<6>, d_v<4>> o3 = attention(qs, ks, vs, causal);
  tensor<float, seq<6>, d_v<4>> o4 = attention(qs, ks, vs, causal_bottom_right, key_padding<5>);
  tensor<bool, seq<6>, seq<6>> keep = tensor<bool, seq<6>, seq<6>>::generate([](std::size_t r0, std::size_t c0) { return c0 <= r0 + 1; });
  tensor<float, seq<6>, seq<6>> bias = tensor<float, seq<6>, seq<6>>::generate([](std::size_t r0, std::size_t c0) { return -0.1f * float(c0 + r0); });
  tensor<float, seq<6>, d_v<4>> o5 = attention(qs, ks, vs, allowed(keep), additive(bias));
  tensor<float, seq<6>, d_v<4>> o6 = softmax(mask(scaled_scores(qs, ks), causal, -1e9f)) * vs;
  tensor<float, seq<6>, seq<6>> aw = attention_weights(qs, ks, causal);
  tensor<float, seq<6>, seq<6>> ms = mask(sc, allowed(keep));
  tensor<float, seq<6>, seq<6>> mb = mask(sc, blocked(sc > 1e30f));  // nothing blocked
  tensor<float, seq<6>, seq<6>> ma = mask(sc, additive(bias));
  // o1 scales by 0.5 = 1/sqrt(d_k): attention's own scale. Row 0 of a causal attention (either alignment,
  // as L_q = L_k) sees key 0 only. Row 0 of o5 sees keys 0 and 1: a convex mix of their values.
  expect(std::abs(o3(0, 1) - vs(0, 1)) < 1e-5f && aw(0, 1) == 0.f && std::abs(o1(3, 2) - o2(3, 2)) < 1e-5f, "causal attention");
  const bool mixed = std::min(vs(0, 2), vs(1, 2)) - 1e-5f <= o5(0, 2) && o5(0, 2) <= std::max(vs(0, 2), vs(1, 2)) + 1e-5f;
  expect(std::abs(o4(0, 3) - vs(0, 3)) < 1e-5f && mixed && std::abs(o6(4, 2) - o3(4, 2)) < 1e-4f && ms(0, 5) < 0 &&
             ms(2, 1) == sc(2, 1) && mb(0, 5) == sc(0, 5) && std::abs(ma(1, 2) - (sc(1, 2) - 0.3f)) < 1e-5f,
         "masks");

  // batches, heads, key lengths
  const auto xb = ramp<tensor<float, batch<2>, seq<5>, d_model<8>>>(0.4);
  const auto wo = ramp<tensor<float, d_model<8>, d_model<8>>>(0.2);
  auto qh = split_heads<2>(xb * wo);
  tensor<float, batch<2>, heads<2>, seq<5>, d_k<4>> qhs = qh;
  tensor<float, batch<2>, seq<5>, d_model<8>> merged = merge_heads(qhs);
  expect(std::abs(merged(1, 2, 7) - tensor<float, batch<2>, seq<5>, d_model<8>>(xb * wo)(1, 2, 7)) < 1e-4f, "heads");
  auto kv = split_heads<1>(xb * wo);
  tensor<float, batch<2>, heads<2>, seq<5>, d_model<8>> rep = repeat_heads<2>(kv);
  expect(rep(1, 1, 2, 3) == rep(1, 0, 2, 3), "repeat_heads");
  const std::vector<std::size_t> lens{3, 5};
  tensor<float, batch<2>, seq<5>, d_model<8>> att = merge_heads(attention(qhs, qhs, qhs, key_lengths(lens)));
  // key_lengths {3, 5}: batch item 0 sees its first 3 keys, as key_padding<3> does
  tensor<float, batch<2>, seq<5>, d_model<8>> pad3 = merge_heads(attention(qhs, qhs, qhs, key_padding<3>));
  tensor<float, batch<2>, seq<5>, d_model<8>> all5 = merge_heads(attention(qhs, qhs, qhs));
  expect(std::abs(att(0, 4, 6) - pad3(0, 4, 6)) < 1e-5f && std::abs(att(1, 4, 6) - all5(1, 4, 6)) < 1e-5f, "key_lengths");

  // similarities
  tensor<float, seq<6>, seq<6>> dsc = dot_scores(qs, ks);
  tensor<float, seq<6>, seq<6>> dsc2 = dot_scores(qs, ks, 0.5);
  tensor<float, seq<6>, seq<6>> cs = cosine_scores(qs, ks, 0.1);
  tensor<float, seq<6>, seq<6>> rb = rbf_scores(qs, qs, 1.0);
  const auto w1 = ramp<tensor<float, d_k<4>, d_model<8>>>(0.3);
  const auto w2 = ramp<tensor<float, d_k<4>, d_model<8>>>(0.6);
  const auto wa = ramp<tensor<float, d_model<8>>>(0.8);
  tensor<float, seq<6>, seq<6>> ad = additive_scores(qs, ks, w1, w2, wa);
  tensor<float, seq<6>, seq<6>> pw = pairwise(qs, ks, [](std::span<const float> a0, std::span<const float> b0) {
    float acc = 0;
    for (std::size_t i0 = 0; i0 < a0.size(); ++i0) acc += a0[i0] * b0[i0];
    return acc;
  });
  float qq = 0, kk = 0, qk = 0;
  for (std::size_t j0 = 0; j0 < 4; ++j0) qq += qs(0, j0) * qs(0, j0), kk += ks(0, j0) * ks(0, j0), qk += qs(0, j0) * ks(0, j0);
  const float want_cos = qk / ((std::sqrt(qq) + 1e-9f) * (std::sqrt(kk) + 1e-9f)) / 0.1f;
  float want_ad = 0;  // sum_a w_a tanh((q_0 W1)_a + (k_1 W2)_a)
  for (std::size_t h0 = 0; h0 < 8; ++h0) {
    float u = 0;
    for (std::size_t j0 = 0; j0 < 4; ++j0) u += qs(0, j0) * w1(j0, h0) + ks(1, j0) * w2(j0, h0);
    want_ad += wa(h0) * std::tanh(u);
  }
  if (std::getenv("ATTNX_API_VERBOSE"))
    std::cout << dsc(2, 3) << " " << sc(2, 3) << " " << pw(1, 4) << " " << sc(1, 4) << " " << dsc2(0, 1) << " " << sc(0, 1) << " "
              << cs(0, 0) << " " << rb(1, 1) << " " << ad(0, 0) << "\n";
  // dot_scores scales by 1/sqrt(d_k) = 1/2 unless told otherwise
  expect(std::abs(2 * dsc(2, 3) - sc(2, 3)) < 1e-3f && std::abs(pw(1, 4) - sc(1, 4)) < 1e-4f &&
             std::abs(2 * dsc2(0, 1) - sc(0, 1)) < 1e-4f && std::abs(cs(0, 0) - want_cos) < 1e-4f && rb(1, 1) == 0.f &&
             std::abs(ad(0, 1) - want_ad) < 1e-4f,
         "similarities");

  // casts, evaluation, views
  tensor<double, seq<6>, d_k<4>> qd = cast<double>(qs);
  expect(qd(1, 1) == double(qs(1, 1)), "cast");
  tensor<float, seq<6>, d_k<4>> ev = evaluate(qs + ks);
  context ctx;
  ctx.set_threads(2);
  ctx.set_isa(simd::isa::scalar);
  tensor<float, seq<6>, d_v<4>> o7 = evaluate(attention(qs, ks, vs), ctx);
  expect(std::abs(o7(3, 3) - o2(3, 3)) < 1e-5f && ctx.threads() == 2 && ctx.fused_runs() == 1, "context");
  {
    context_scope scope(ctx);
    tensor<float, seq<6>, d_v<4>> o8 = attention(qs, ks, vs);
    expect(o8 == o7, "context_scope");
  }
  tensor<float, seq<6>, d_v<4>> o9;
  assign(o9, attention(qs, ks, vs), ctx);
  expect(o9 == o7, "assign");
  std::vector<float> buffer(24);
  view<float, 6, 4> out(buffer);
  out = qs + qs;
  expect(ev(1, 2) == qs(1, 2) + ks(1, 2), "evaluate");
  view<const float, seq<6>, d_k<4>> in(qs);
  tensor<float, seq<6>, d_k<4>> twice = in + in;
  expect(buffer[5] == twice.data()[5], "views");
  std::ostringstream os;
  os << qs << out << shape_string<shape_of_t<decltype(qs)>>();
  expect(!os.str().empty(), "printing");

  // instruction sets
  os << simd::name(simd::best_supported()) << simd::supported_list() << simd::supported().size()
     << simd::compiled(simd::isa::avx2) << simd::cpu_supports(simd::isa::avx512)
     << simd::parse("avx2").has_value() << exec::hardware_threads() << default_context().threads();
  set_threads(default_context().threads());
}

constexpr double constant_attention() {
  constexpr tensor<double, seq<3>, d_k<2>> q3{{1, 0}, {0, 1}, {1, 1}};
  tensor<double, seq<3>, d_k<2>> o3 = attention(q3, q3, q3, causal);
  return o3(0, 0);
}
static_assert(constant_attention() == 1.0);

void modules() {
  using mha_t = multi_head_attention<float, 8, 2, mha_options{.kv_heads = 1, .bias = true}>;
  const auto mha = ramp_module<mha_t>();
  const auto xb = ramp<tensor<float, batch<2>, seq<5>, d_model<8>>>(0.4);
  tensor<float, batch<2>, seq<5>, d_model<8>> y1 = mha(xb, causal);
  tensor<float, batch<2>, seq<5>, d_model<8>> y2 = mha(xb, xb);
  tensor<float, batch<2>, heads<2>, seq<5>, seq<5>> wts = mha.weights(xb, causal);
  // Cross-attention to itself is self-attention; the last row of a causal one sees every key; a rank-2
  // input is one batch item.
  tensor<float, batch<2>, seq<5>, d_model<8>> self = mha(xb);
  const auto x0 = tensor<float, seq<5>, d_model<8>>::generate([&](std::size_t i0, std::size_t j0) { return xb(1, i0, j0); });
  tensor<float, seq<5>, d_model<8>> y0 = mha(x0);
  expect(std::abs(y2(1, 4, 7) - self(1, 4, 7)) < 1e-5f && std::abs(y1(1, 4, 2) - self(1, 4, 2)) < 1e-5f &&
             std::abs(y1(1, 0, 2) - self(1, 0, 2)) > 1e-7f && std::abs(y0(3, 5) - self(1, 3, 5)) < 1e-5f &&
             wts(0, 0, 0, 1) == 0.f && std::abs(wts(1, 1, 4, 0) + wts(1, 1, 4, 1) + wts(1, 1, 4, 2) + wts(1, 1, 4, 3) + wts(1, 1, 4, 4) - 1.f) < 1e-5f,
         "multi_head_attention");
#ifdef ATTNX_WARNINGS_JSON
  const auto path = std::filesystem::temp_directory_path() / "attnx_warnings_api.safetensors";
  safetensors::save(path, {safetensors::make_entry("x", xb)}, {{"note", "api"}});
  const safetensors::file st(path);
  const auto back = st.load<tensor<float, batch<2>, seq<5>, d_model<8>>>("x");
  std::filesystem::remove(path);
  expect(back == xb && !safetensors::shape_text(st.tensors().at("x").shape).empty(), "safetensors");
  const auto mask_path = std::filesystem::temp_directory_path() / "attnx_warnings_api_mask.safetensors";
  const tensor<bool, 2, 3> mask{{true, false, true}, {false, false, true}};
  safetensors::save(mask_path, {safetensors::make_entry("m", mask, true)});
  const auto mask_back = safetensors::file(mask_path).load_transposed<tensor<bool, 2, 3>>("m");
  std::filesystem::remove(mask_path);
  const auto mha_path = std::filesystem::temp_directory_path() / "attnx_warnings_api_mha.safetensors";
  safetensors::save_mha(mha_path, mha, safetensors::mha_names::hugging_face(), safetensors::weight_layout::out_in);
  const safetensors::file mf(mha_path);
  safetensors::check_heads(mf, mha_t::heads, mha_t::kv_heads);
  const auto mha_back = safetensors::load_mha<mha_t>(mf, safetensors::mha_names::hugging_face(), safetensors::weight_layout::out_in);
  std::filesystem::remove(mha_path);
  expect(mask_back == mask && mha_back.w_k == mha.w_k && mf.metadata().at("attnx.heads") == "2", "safetensors: bool, save_mha");
#endif
  const auto npy_path = (std::filesystem::temp_directory_path() / "attnx_warnings_api.npy").string();
  npy::save(npy_path, xb);
  const auto npy_back = npy::load<tensor<double, batch<2>, seq<dyn>, d_model<8>>>(npy_path);
  std::vector<float> npy_mem(80);
  npy::load_into(npy_path, view<float, 2, 5, 8>(npy_mem));
  const auto npy_info = npy::inspect(npy_path);
  std::filesystem::remove(npy_path);
  expect(npy_back.dims()[1] == 5 && npy_back(1, 4, 7) == static_cast<double>(xb(1, 4, 7)) && npy_mem[79] == xb(1, 4, 7) &&
             npy_info.elements() == 80 && npy_info.descr == npy::descr_of<float>(),
         "npy");
}

// Run-time extents (dyn): the same operations, the module, views, the loader, a rule that throws.
void dynamic_extents() {
  const auto xs = ramp<tensor<float, batch<2>, seq<5>, d_model<8>>>(0.4);
  tensor<float, dyn, seq<dyn>, d_model<8>> xd = xs;
  expect(xd.dims()[1] == 5 && xd.numel() == 80 && xd(1, 2, 3) == xs(1, 2, 3), "dyn tensor from a static one");
  std::vector<float> mem(xd.begin(), xd.end());
  const view<const float, dyn, seq<dyn>, d_model<8>> xv(mem.data(), std::size_t{2}, std::size_t{5});
  const view<const float, dyn, d_model<8>> rows(mem);
  const auto wq = ramp<tensor<float, d_model<8>, d_k<4>>>(0.3);
  tensor<float, dyn, seq<dyn>, d_k<4>> qd = xv * wq;
  tensor<float, dyn, seq<dyn>, d_k<4>> od = attention(qd, qd, qd, causal_bottom_right);
  tensor<float, dyn, seq<dyn>, seq<dyn>> wd = attention_weights(qd, qd, causal);
  tensor<float, dyn, heads<2>, seq<dyn>, dyn> hd = split_heads<2>(qd);
  tensor<float, dyn, seq<dyn>, dyn> md = merge_heads(hd) + 1.f;
  tensor<float, dyn, seq<dyn>, dyn> cd = softmax(cosine_scores(qd, qd, 0.5) - row_max(wd));
  const std::size_t lens[] = {3, 5};
  tensor<float, dyn, seq<dyn>, d_k<4>> kd = attention(qd, qd, qd, key_lengths(lens));
  expect(rows.dims()[0] == 10 && od.dims()[1] == 5 && wd(0, 0, 1) == 0.f && md.dims()[2] == 4 && cd.dims()[2] == 5 &&
             kd.dims()[0] == 2,
         "dyn expressions");
  using mha_t = multi_head_attention<float, 8, 2>;
  const auto mha = ramp_module<mha_t>();
  tensor<float, dyn, seq<dyn>, d_model<8>> yd = mha(xd, causal);
  tensor<float, batch<2>, seq<5>, d_model<8>> ys = mha(xs, causal);
  expect(std::abs(yd(1, 4, 7) - ys(1, 4, 7)) < 1e-6f, "multi_head_attention on dyn extents");
  bool threw = false;
  try {
    tensor<float, dyn, dyn> a34(3, 4), b52(5, 2);
    const auto bad = a34 * b52;
    (void)bad;
  } catch (const extent_error&) {
    threw = true;
  }
  expect(threw, "a dyn rule throws extent_error");
#ifdef ATTNX_WARNINGS_JSON
  const auto path = std::filesystem::temp_directory_path() / "attnx_warnings_dyn.safetensors";
  safetensors::save(path, {safetensors::make_entry("x", xd)});
  const safetensors::file st(path);
  const auto back = st.load<tensor<float, dyn, seq<dyn>, d_model<8>>>("x");
  std::filesystem::remove(path);
  expect(back == xd, "safetensors, dyn");
#endif
}

// Decoding: a KV cache (float, bf16, f16), the module's step, attend over a cache, attention states.
void decoding() {
  using mha_t = multi_head_attention<float, 8, 2, mha_options{.kv_heads = 1, .bias = true}>;
  const auto mha = ramp_module<mha_t>();
  const auto xb = ramp<tensor<float, batch<2>, seq<5>, d_model<8>>>(0.4);
  const tensor<float, batch<2>, seq<5>, d_model<8>> full = mha(xb, causal);
  kv_cache<float, 1, 4> cache(2, 8);
  kv_cache<float, 1, 4, 4, bf16> half(2, 8);
  kv_cache<float, 1, 4, 4, f16> ieee(2, 8);
  float worst = 0, worst16 = 0;
  for (std::size_t t = 0; t < 5; ++t) {
    tensor<float, batch<2>, seq<1>, d_model<8>> xt;
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t c = 0; c < 8; ++c) xt(b, 0, c) = xb(b, t, c);
    const auto yt = mha.step(xt, cache);
    const auto yh = mha.step(xt, half);
    const auto yi = mha.step(xt, ieee);
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t c = 0; c < 8; ++c) {
        worst = std::max(worst, std::abs(yt(b, 0, c) - full(b, t, c)));
        worst16 = std::max({worst16, std::abs(yh(b, 0, c) - full(b, t, c)), std::abs(yi(b, 0, c) - full(b, t, c))});
      }
  }
  float top = 0;
  for (std::size_t i = 0; i < full.numel(); ++i) top = std::max(top, std::abs(full.data()[i]));
  expect(worst < 1e-6f * top && worst16 < 1e-2f * top && cache.length(1) == 5 && cache.keys(0, 0).dims()[0] == 5,
         "multi_head_attention::step");
  tensor<float, batch<2>, heads<2>, seq<1>, d_k<4>> q1;
  q1(1, 1, 0, 2) = 1.f;
  const auto o1 = attend(q1, cache);
  cache.truncate(0, 2);
  cache.reset(1);
  expect(o1.dims()[1] == 2 && cache.length(0) == 2 && cache.length(1) == 0 && float(bf16(1.5f)) == 1.5f &&
             float(f16(-2.f)) == -2.f,
         "attend over a cache, truncate, reset, 16-bit storage types");
  const auto qs = ramp<tensor<float, seq<3>, d_k<4>>>(0.2);
  const auto k1 = ramp<tensor<float, seq<6>, d_k<4>>>(0.3);
  const auto k2 = ramp<tensor<float, seq<4>, d_k<4>>>(0.7);
  const auto s1 = partial_attention(attention(qs, k1, k1));
  const auto s2 = partial_attention(attention(qs, k2, k2));
  const auto m = merge(s1, s2);
  expect(m.lse(2) > s1.lse(2) && m.lse(2) > s2.lse(2) && std::isfinite(m.out(1, 3)), "attention states");
}

// The operations around attention: activations, maximum / minimum, map, comparisons, where, the normalisations,
// log_softmax, compound assignment.
void operations() {
  auto xs = ramp<tensor<float, seq<6>, d_model<8>>>(0.3);
  const auto w = ramp<tensor<float, d_model<8>>>(0.5);
  const auto b = ramp<tensor<float, d_model<8>>>(0.7);
  tensor<float, seq<6>, d_model<8>> a1 = relu(xs) + sigmoid(xs) + silu(xs) + gelu(xs) + gelu_tanh(xs);
  tensor<float, seq<6>, d_model<8>> a2 = maximum(xs, 0.f) - minimum(xs, w) + maximum(1.f, xs) + minimum(xs, 2.f);
  const float shift = 0.5f;
  tensor<float, seq<6>, d_model<8>> a3 = map([shift](float v) { return v * v + shift; }, xs);
  tensor<bool, seq<6>, d_model<8>> c1 = xs < w;
  tensor<bool, seq<6>, d_model<8>> c2 = xs <= 0.f;
  tensor<bool, seq<6>, d_model<8>> c3 = xs > 0.f;
  tensor<bool, seq<6>, d_model<8>> c4 = 1.f >= xs;
  tensor<bool, seq<6>, d_model<8>> c5 = equal(xs, w);
  tensor<bool, seq<6>, d_model<8>> c6 = not_equal(xs, 1.f);
  tensor<float, seq<6>, d_model<8>> a4 = where(c1, xs, w) + where(xs > 0.f, 1.f, xs) + where(c3, xs, 0.f);
  tensor<float, seq<6>, d_model<8>> n1 = layer_norm(xs, w, b) + layer_norm(xs, 1e-3f) + rms_norm(xs, w) + rms_norm(xs);
  tensor<float, seq<6>, d_model<8>> n2 = log_softmax(xs);
  const float x01 = xs(0, 1), w1 = w(1);
  xs += a1;
  xs -= w;
  xs *= 0.5f;
  xs /= 2.f;
  float buf[8] = {};
  view<float, d_model<8>> v(buf, 8);
  v += w;
  v *= 2.f;
  // slices, concatenation, row selection, reshape
  tensor<float, seq<6>, d_model<4>> s1 = slice<1, 2, 4>(xs);
  tensor<float, seq<dyn>, d_model<8>> s2 = slice<0>(xs, 1, 3);
  tensor<float, seq<12>, d_model<8>> cc = concat<0>(xs, a1);
  const int ids[3] = {5, 0, 5};
  tensor<float, dyn, d_model<8>> sel = index_select(xs, ids);
  const auto rs = reshape<12, 4>(xs);
  // PyTorch's mask polarity, said explicitly
  const tensor<bool, seq<6>, seq<6>> pt_mask = equal(ramp<tensor<float, seq<6>, seq<6>>>(1.0), 3.f);
  tensor<float, seq<6>, seq<6>> pm = softmax(mask(ramp<tensor<float, seq<6>, seq<6>>>(0.1), blocked(pt_mask))) +
                                     softmax(mask(ramp<tensor<float, seq<6>, seq<6>>>(0.1), allowed(pt_mask)));
  expect(s1(0, 0) == xs(0, 2) && s2.dims()[0] == 3 && cc(6, 0) == a1(0, 0) && sel(2, 1) == xs(5, 1) && rs(1, 0) == xs(0, 4) &&
             std::isfinite(pm(0, 0)),
         "slice, concat, index_select, reshape, mask polarity");
  expect(c2(0, 1) == !c3(0, 1) && c4(0, 1) == (1.f >= x01) && c5(0, 1) == (x01 == w1) && c6(0, 1) == (x01 != 1.f) && std::isfinite(a2(1, 1) + a3(1, 1) + a4(1, 1)) &&
             std::abs(n2(0, 0)) > 0.f && std::isfinite(n1(2, 2)) && buf[1] == 2 * w(1),
         "element-wise and row-wise operations, compound assignment");
}

// The nn layers and the transformer block.
void layers() {
  const auto x = ramp<tensor<float, seq<5>, d_model<8>>>(0.05);
  nn::linear<float, 8, 16> lin;
  nn::linear<float, 8, 16, false> lin_nb;
  nn::layer_norm<float, 8> ln;
  nn::rms_norm<float, 8> rn;
  nn::embedding<float, 10, 8> emb;
  nn::feed_forward<float, 8, 16, nn::activation::gelu_tanh> ff;
  nn::feed_forward<float, 8, 16, nn::activation::silu, true, false> swiglu;
  nn::transformer_block<float, 8, 2, 16> pre;
  nn::transformer_block<float, 8, 2, 16, nn::activation::relu, nn::norm_position::post> post;
  const std::int32_t ids[2] = {3, 9};
  tensor<float, seq<5>, 16> l1 = lin(x) + lin_nb(x);
  tensor<float, seq<5>, d_model<8>> l2 = ln(x) + rn(x) + ff(x) + swiglu(x) + swiglu(x * 2.f);
  tensor<float, dyn, 8> e = emb(ids);
  const auto y1 = pre.forward(x, causal);
  const auto y2 = post.forward(x);
  kv_cache<float, 2, 4> cache(1, 8);
  const auto y3 = pre.step(slice<0, 0, 2>(x), cache, 0);
  expect(std::isfinite(l1(0, 0) + l2(1, 1) + e(1, 1) + y1(4, 7) + y2(4, 7) + y3(1, 7)) && cache.length(0) == 2,
         "nn layers and transformer blocks");
  // position encodings
  nn::sinusoidal_encoding<float, 16, 8> pe;
  tensor<float, seq<5>, d_model<8>> p1 = pe(x, 3) + sinusoidal_positions<float, 5, 8>() + sinusoidal_positions<float, 8>(5, 2);
  tensor<float, seq<5>, d_model<8>> p2 = rotary(x, rope_style::half, 4) + rotary(x, rope_style::interleaved, 0, 500000.0);
  multi_head_attention<float, 8, 2, mha_options{.kv_heads = 1, .rope = rope_style::half}> rope_mha;
  kv_cache<float, 1, 4> rope_cache(1, 8);
  const tensor<float, seq<5>, d_model<8>> p3 = rope_mha(x, causal);
  const auto p4 = rope_mha.step(slice<0, 0, 2>(x), rope_cache, 0);
  expect(std::isfinite(p1(4, 7) + p2(4, 7) + p3(4, 7) + p4(1, 7)), "position encodings");
  // an encoder-decoder: cross-attention over the encoder's output, forward and step
  nn::transformer_block<float, 8, 2, 16, nn::activation::gelu, nn::norm_position::pre, mha_options{}, true> dec;
  const auto mem = post.forward(ramp<tensor<float, seq<7>, d_model<8>>>(0.02));
  kv_cache<float, 2, 4> dec_cache(1, 8);
  const auto c1 = dec.forward(x, nn::cross(mem), causal);
  const auto c2 = dec.step(slice<0, 0, 2>(x), dec_cache, nn::cross(mem), 0);
  expect(std::isfinite(c1(4, 7) + c2(1, 7)), "cross-attention");
  // the memory projected once: read by forward, step and the module's attend_memory
  kv_cache<float, 2, 4> mem_cache(1, 8), dec_cache2(1, 8);
  dec.cross_attn.project_memory(mem, mem_cache, 0);
  const auto c3 = dec.forward(x, nn::cross(mem_cache), causal);
  const auto c4 = dec.step(slice<0, 0, 2>(x), dec_cache2, nn::cross(mem_cache), 0);
  const auto c5 = dec.cross_attn.attend_memory(x, mem_cache, 0);
  expect(std::abs(c3(4, 7) - c1(4, 7)) < 1e-4f && std::abs(c4(1, 7) - c2(1, 7)) < 1e-4f && std::isfinite(c5(4, 7)),
         "cross-attention over a projected memory");
  // rows per item (one item here: its first two tokens), through the decoder and the module; a cache reordered
  kv_cache<float, 2, 4> dec_cache3(1, 8);
  const std::vector<std::size_t> rows{2};
  const auto c6 = dec.step(slice<0, 0, 2>(x), dec_cache3, nn::cross(mem_cache), rows);
  const auto c7 = dec.cross_attn.attend_memory(slice<0, 0, 2>(x), mem_cache, rows);
  const std::vector<std::size_t> same{0};
  const kv_cache<float, 2, 4> moved = dec_cache3.reordered(same);
  expect(std::abs(c6(1, 7) - c2(1, 7)) < 1e-4f && std::isfinite(c7(1, 7)) && moved.length(0) == 2 &&
             dec_cache3.reorders_in_place(same),
         "rows per item");
}

// Gradients: grad and backward over a fused attention (the fused backward) and over elementwise rules.
void gradients() {
  tensor<float, seq<6>, d_model<4>> x;
  tensor<float, d_model<4>, d_k<4>> w;
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t j = 0; j < 4; ++j) x(i, j) = 0.1f * static_cast<float>(i) - 0.2f * static_cast<float>(j);
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j) w(i, j) = i == j ? 1.0f : 0.1f;
  const auto [dx, dw] = grad(attention(x * w, x * w, x, causal), wrt(x, w));
  tensor<float, seq<6>, d_model<4>> dy;
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t j = 0; j < 4; ++j) dy(i, j) = 1.0f;
  const auto [dx2] = backward(tanh(x), dy, wrt(x));
  expect(std::isfinite(dx(5, 3)) && std::isfinite(dw(0, 0)) && std::abs(dx2(0, 0) - 1.0f) < 1e-6f, "gradients");
}

}  // namespace

int main() {
  expressions();
  modules();
  dynamic_extents();
  decoding();
  operations();
  layers();
  gradients();
  if (failures == 0) std::cout << "api: all checks passed\n";
  return failures == 0 ? 0 : 1;
}
