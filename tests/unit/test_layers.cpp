#define BOOST_TEST_MODULE layers
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "messages.hpp"
#include "naive.hpp"

// The nn layers (linear, feed_forward plain and gated, embedding, layer_norm / rms_norm modules) and the
// transformer block (pre-norm and post-norm, forward and step with a KV cache) against plain double loops; a
// tiny block evaluated at compile time against scripts/block_reference.py's values.

using namespace attnx;
using naive::mat;

namespace {

// The parameter formula shared with scripts/block_reference.py.
constexpr double param(int tag, std::size_t i, std::size_t j) {
  return double(int((i * 7 + j * 3 + std::size_t(tag) * 5) % 11) - 5) / 10;
}
template <class Tn>
constexpr void fill(Tn& t, int tag, double scale = 1, double offset = 0) {
  const auto d = t.dims();
  if constexpr (Tn::rank == 1) {
    for (std::size_t j = 0; j < d[0]; ++j) t(j) = typename Tn::value_type(offset + scale * param(tag, 0, j));
  } else {
    for (std::size_t i = 0; i < d[0]; ++i)
      for (std::size_t j = 0; j < d[1]; ++j) t(i, j) = typename Tn::value_type(offset + scale * param(tag, i, j));
  }
}

// ---- the reference, in double --------------------------------------------------------------------------
mat add_row(mat a, const mat& v) {
  for (std::size_t i = 0; i < a.size(); ++i) a[i] += v[i % v.size()];
  return a;
}
mat layer_norm_rows(const mat& a, std::size_t n, const mat& w, const mat& b) {
  mat out(a.size());
  for (std::size_t r = 0; r < a.size() / n; ++r) {
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < n; ++j) mean += a[r * n + j];
    mean /= double(n);
    for (std::size_t j = 0; j < n; ++j) var += (a[r * n + j] - mean) * (a[r * n + j] - mean);
    var /= double(n);
    for (std::size_t j = 0; j < n; ++j) out[r * n + j] = (a[r * n + j] - mean) / std::sqrt(var + 1e-5) * w[j] + b[j];
  }
  return out;
}
double gelu(double t) { return 0.5 * t * (1 + std::erf(t / std::sqrt(2.0))); }
double silu(double t) { return t / (1 + std::exp(-t)); }
template <class Tn>
mat values(const Tn& t) {
  return mat(t.data(), t.data() + t.numel());
}

// Multi-head attention with biases (the module's weights): queries from xq (Lq, D), keys and values from xk (Lk, D),
// allowed(i, j).
template <class M, class Allowed>
mat mha_reference(const M& m, const mat& xq, std::size_t Lq, const mat& xk, std::size_t Lk, Allowed allowed) {
  constexpr std::size_t D = M::d_model, H = M::heads, d = M::d_k;
  const mat q = add_row(naive::matmul(xq, values(m.w_q), Lq, D, H * d), values(m.b_q));
  const mat k = add_row(naive::matmul(xk, values(m.w_k), Lk, D, H * d), values(m.b_k));
  const mat v = add_row(naive::matmul(xk, values(m.w_v), Lk, D, H * d), values(m.b_v));
  mat merged(Lq * H * d);
  for (std::size_t h = 0; h < H; ++h) {
    mat qh(Lq * d), kh(Lk * d), vh(Lk * d);
    for (std::size_t l = 0; l < Lq; ++l)
      for (std::size_t c = 0; c < d; ++c) qh[l * d + c] = q[l * H * d + h * d + c];
    for (std::size_t l = 0; l < Lk; ++l)
      for (std::size_t c = 0; c < d; ++c) kh[l * d + c] = k[l * H * d + h * d + c], vh[l * d + c] = v[l * H * d + h * d + c];
    const mat o = naive::attention(qh, kh, vh, Lq, Lk, d, d, allowed);
    for (std::size_t l = 0; l < Lq; ++l)
      for (std::size_t c = 0; c < d; ++c) merged[l * H * d + h * d + c] = o[l * d + c];
  }
  return add_row(naive::matmul(merged, values(m.w_o), Lq, H * d, D), values(m.b_o));
}
// One sequence (L, D) through causal multi-head self-attention.
template <class M>
mat mha_reference(const M& m, const mat& x, std::size_t L) {
  return mha_reference(m, x, L, x, L, [](std::size_t i, std::size_t j) { return j <= i; });
}

// A block (gelu) over one sequence x (L, D): self-attention with self_allowed(i, j); with cross-attention, over the
// memory mem (Lm, D) with cross_allowed(i, j).
template <class Block, class SelfAllowed, class CrossAllowed>
mat block_reference(const Block& blk, const mat& x, std::size_t L, SelfAllowed self_allowed, const mat& mem, std::size_t Lm,
                    CrossAllowed cross_allowed) {
  constexpr std::size_t D = Block::d_model, Hid = Block::hidden;
  const auto ln = [&](const auto& n, const mat& a) { return layer_norm_rows(a, D, values(n.weight), values(n.bias)); };
  const auto mlp = [&](const mat& a) {
    mat u = add_row(naive::matmul(a, values(blk.mlp.up.weight), L, D, Hid), values(blk.mlp.up.bias));
    for (auto& t : u) t = gelu(t);
    return add_row(naive::matmul(u, values(blk.mlp.down.weight), L, Hid, D), values(blk.mlp.down.bias));
  };
  const auto plus = [](mat a, const mat& b) {
    for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    return a;
  };
  const auto self = [&](const mat& a) { return mha_reference(blk.attn, a, L, a, L, self_allowed); };
  const auto cross = [&](const mat& a) {
    if constexpr (Block::cross_attention) return mha_reference(blk.cross_attn, a, L, mem, Lm, cross_allowed);
    else return mat(a.size(), 0.0);
  };
  if constexpr (Block::norm == nn::norm_position::pre) {
    mat h = plus(x, self(ln(blk.ln_1, x)));
    if constexpr (Block::cross_attention) h = plus(h, cross(ln(blk.ln_x, h)));
    return plus(h, mlp(ln(blk.ln_2, h)));
  } else {
    mat h = ln(blk.ln_1, plus(x, self(x)));
    if constexpr (Block::cross_attention) h = ln(blk.ln_x, plus(h, cross(h)));
    return ln(blk.ln_2, plus(h, mlp(h)));
  }
}
template <class Block>
mat block_reference(const Block& blk, const mat& x, std::size_t L) {
  const auto causal_ij = [](std::size_t i, std::size_t j) { return j <= i; };
  return block_reference(blk, x, L, causal_ij, mat{}, 0, causal_ij);
}

template <class Block>
constexpr void fill_block(Block& b) {
  fill(b.attn.w_q, 1), fill(b.attn.w_k, 2), fill(b.attn.w_v, 3), fill(b.attn.w_o, 4);
  fill(b.attn.b_q, 5), fill(b.attn.b_k, 6), fill(b.attn.b_v, 7), fill(b.attn.b_o, 8);
  fill(b.ln_1.weight, 9, 1, 1), fill(b.ln_1.bias, 10), fill(b.ln_2.weight, 11, 1, 1), fill(b.ln_2.bias, 12);
  fill(b.mlp.up.weight, 13), fill(b.mlp.up.bias, 14), fill(b.mlp.down.weight, 15), fill(b.mlp.down.bias, 16);
  if constexpr (Block::cross_attention) {
    fill(b.cross_attn.w_q, 17), fill(b.cross_attn.w_k, 18), fill(b.cross_attn.w_v, 19), fill(b.cross_attn.w_o, 20);
    fill(b.cross_attn.b_q, 21), fill(b.cross_attn.b_k, 22), fill(b.cross_attn.b_v, 23), fill(b.cross_attn.b_o, 24);
    fill(b.ln_x.weight, 25, 1, 1), fill(b.ln_x.bias, 26);
  }
}

double max_abs_diff(const double* a, const mat& b) {
  double w = 0;
  for (std::size_t i = 0; i < b.size(); ++i) w = std::max(w, std::abs(a[i] - b[i]));
  return w;
}

}  // namespace

// 1. linear, feed_forward (plain and gated), embedding against loops.
BOOST_AUTO_TEST_CASE(linear_feed_forward_embedding) {
  constexpr std::size_t B = 2, L = 5, D = 8, Hid = 12;
  nn::linear<double, D, Hid> lin;
  fill(lin.weight, 1), fill(lin.bias, 2);
  tensor<double, B, L, D> x;
  const mat xs = naive::random(B * L * D, 3);
  for (std::size_t i = 0; i < xs.size(); ++i) x.data()[i] = xs[i];
  const tensor<double, B, L, Hid> y = lin(x);
  BOOST_TEST(max_abs_diff(y.data(), add_row(naive::matmul(xs, values(lin.weight), B * L, D, Hid), values(lin.bias))) < 1e-14);

  nn::feed_forward<double, D, Hid> ff;  // gelu
  fill(ff.up.weight, 3), fill(ff.up.bias, 4), fill(ff.down.weight, 5), fill(ff.down.bias, 6);
  const tensor<double, B, L, D> f = ff(x);
  mat u = add_row(naive::matmul(xs, values(ff.up.weight), B * L, D, Hid), values(ff.up.bias));
  for (auto& t : u) t = gelu(t);
  BOOST_TEST(max_abs_diff(f.data(), add_row(naive::matmul(u, values(ff.down.weight), B * L, Hid, D), values(ff.down.bias))) < 1e-14);

  nn::feed_forward<double, D, Hid, nn::activation::silu, true, false> sw;  // SwiGLU without biases
  fill(sw.up.weight, 7), fill(sw.gate.weight, 8), fill(sw.down.weight, 9);
  const tensor<double, B, L, D> g = sw(x * 0.5);  // an expression input: evaluated once
  const mat xh = [&] {
    mat t = xs;
    for (auto& e : t) e *= 0.5;
    return t;
  }();
  const mat gate = naive::matmul(xh, values(sw.gate.weight), B * L, D, Hid), up = naive::matmul(xh, values(sw.up.weight), B * L, D, Hid);
  mat hmid(gate.size());
  for (std::size_t i = 0; i < gate.size(); ++i) hmid[i] = silu(gate[i]) * up[i];
  BOOST_TEST(max_abs_diff(g.data(), naive::matmul(hmid, values(sw.down.weight), B * L, Hid, D)) < 1e-14);
  // a temporary tensor is moved into the expression (it would dangle if referred to)
  const auto lazy = sw(tensor<double, B, L, D>(g));
  const tensor<double, B, L, D> g2 = lazy, g3 = sw(g);
  BOOST_TEST(max_abs_diff(g2.data(), values(g3)) == 0.0);

  nn::embedding<float, 10, 4> emb;
  fill(emb.weight, 3);
  const std::vector<std::int32_t> ids{9, 0, 9, 4};
  const tensor<float, dyn, 4> e = emb(ids);
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t j = 0; j < 4; ++j) BOOST_TEST(e(i, j) == emb.weight(std::size_t(ids[i]), j));

  nn::rms_norm<double, D> rn;
  fill(rn.weight, 4, 1, 1);
  const tensor<double, B, L, D> r = rn(x);
  for (std::size_t row = 0; row < B * L; ++row) {
    double ms = 0;
    for (std::size_t j = 0; j < D; ++j) ms += xs[row * D + j] * xs[row * D + j];
    const double inv = 1 / std::sqrt(ms / D + 1e-6);
    for (std::size_t j = 0; j < D; ++j) BOOST_TEST(std::abs(r.data()[row * D + j] - xs[row * D + j] * inv * rn.weight(j)) < 1e-14);
  }
}

// 2. The transformer block, pre-norm and post-norm, causal: forward against the loops, and stepping token by
// token (and in chunks) through a KV cache gives forward's rows.
template <nn::norm_position Norm>
void block_case() {
  constexpr std::size_t L = 7, D = 16, H = 4, Hid = 32;
  nn::transformer_block<double, D, H, Hid, nn::activation::gelu, Norm> blk;
  fill_block(blk);
  const mat xs = naive::random(L * D, 11, -2, 2);
  tensor<double, L, D> x;
  for (std::size_t i = 0; i < xs.size(); ++i) x.data()[i] = xs[i];
  const auto y = blk.forward(x, causal);
  const double err = max_abs_diff(y.data(), block_reference(blk, xs, L));
  BOOST_TEST_MESSAGE((Norm == nn::norm_position::pre ? "pre-norm" : "post-norm") << " block: " << err);
  BOOST_TEST(err < 1e-12);

  kv_cache<double, H, D / H> cache(1, L);
  std::size_t at = 0;
  for (std::size_t n : {1u, 1u, 3u, 2u}) {  // token by token, then chunks
    const tensor<double, dyn, D> step = blk.step(slice<0>(x, at, n), cache, 0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < D; ++j) BOOST_TEST(std::abs(step(i, j) - y(at + i, j)) < 1e-12);
    at += n;
  }
  BOOST_TEST(cache.length(0) == L);
}
BOOST_AUTO_TEST_CASE(transformer_block_pre_norm) { block_case<nn::norm_position::pre>(); }
BOOST_AUTO_TEST_CASE(transformer_block_post_norm) { block_case<nn::norm_position::post>(); }

// An encoder-decoder pair: the encoder (post-norm) over a batch whose items have 5 and 3 tokens (key_lengths), the
// decoder (cross-attention) reading its output with the same lengths; both against the loops, item by item.
// Then the decoder stepped token by token with each item's memory cut to its length gives forward's rows.
template <nn::norm_position Norm>
void encoder_decoder_case() {
  constexpr std::size_t B = 2, Ls = 5, Lt = 4, D = 16, H = 4, Hid = 24;
  nn::transformer_block<double, D, H, Hid, nn::activation::gelu, nn::norm_position::post> enc;
  nn::transformer_block<double, D, H, Hid, nn::activation::gelu, Norm, mha_options{}, true> dec;
  fill_block(enc);
  fill_block(dec);
  const mat src = naive::random(B * Ls * D, 31, -2, 2), tgt = naive::random(B * Lt * D, 32, -2, 2);
  tensor<double, B, Ls, D> xs;
  tensor<double, B, Lt, D> xt;
  for (std::size_t i = 0; i < src.size(); ++i) xs.data()[i] = src[i];
  for (std::size_t i = 0; i < tgt.size(); ++i) xt.data()[i] = tgt[i];
  const std::vector<std::size_t> lens{5, 3};
  const auto memory = enc.forward(xs, key_lengths(lens));
  const auto y = dec.forward(xt, nn::cross(memory, key_lengths(lens)), causal);
  double err_enc = 0, err_dec = 0;
  for (std::size_t b = 0; b < B; ++b) {
    const auto padded = [&](std::size_t, std::size_t j) { return j < lens[b]; };
    const mat xb(src.begin() + long(b * Ls * D), src.begin() + long((b + 1) * Ls * D));
    const mat mb = block_reference(enc, xb, Ls, padded, mat{}, 0, padded);
    err_enc = std::max(err_enc, max_abs_diff(memory.data() + b * Ls * D, mb));
    const mat tb(tgt.begin() + long(b * Lt * D), tgt.begin() + long((b + 1) * Lt * D));
    const mat yb = block_reference(dec, tb, Lt, [](std::size_t i, std::size_t j) { return j <= i; }, mb, Ls, padded);
    err_dec = std::max(err_dec, max_abs_diff(y.data() + b * Lt * D, yb));
  }
  BOOST_TEST_MESSAGE("encoder with padding: " << err_enc << ", decoder with cross-attention: " << err_dec);
  BOOST_TEST(err_enc < 1e-12);
  BOOST_TEST(err_dec < 1e-12);
  // the padded keys matter: without the lengths the encoder's item 1 differs
  const auto unpadded = enc.forward(xs);
  BOOST_TEST(std::abs(unpadded(1, 0, 0) - memory(1, 0, 0)) > 1e-6);

  kv_cache<double, H, D / H> cache(B, Lt);
  for (std::size_t t = 0; t < Lt; ++t)
    for (std::size_t b = 0; b < B; ++b) {
      const view<const double, dyn, D> mem_b(memory.data() + b * Ls * D, lens[b]);  // item b's memory, its length
      tensor<double, dyn, D> row(1);
      for (std::size_t j = 0; j < D; ++j) row(0, j) = xt(b, t, j);
      const tensor<double, dyn, D> out = dec.step(row, cache, nn::cross(mem_b), b);
      for (std::size_t j = 0; j < D; ++j) BOOST_TEST(std::abs(out(0, j) - y(b, t, j)) < 1e-12);
    }
  // the whole batch at once, the memory with its masks
  kv_cache<double, H, D / H> cache2(B, Lt);
  const tensor<double, B, 2, D> two = slice<1, 0, 2>(xt);
  const tensor<double, B, 2, D> out2 = dec.step(two, cache2, nn::cross(memory, key_lengths(lens)));
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < 2; ++t)
      for (std::size_t j = 0; j < D; ++j) BOOST_TEST(std::abs(out2(b, t, j) - y(b, t, j)) < 1e-12);

  // The memory's keys and values projected once into a cache, item by item at its own length, then read by every
  // step of the whole batch (one token each), by steps of one item, and by forward: forward's rows every time.
  kv_cache<double, H, D / H> mem_cache(B, Ls);
  for (std::size_t b = 0; b < B; ++b)
    dec.cross_attn.project_memory(view<const double, dyn, D>(memory.data() + b * Ls * D, lens[b]), mem_cache, b);
  BOOST_TEST(mem_cache.length(0) == 5u);
  BOOST_TEST(mem_cache.length(1) == 3u);
  kv_cache<double, H, D / H> cache3(B, Lt), cache4(B, Lt);
  double err_cached = 0;
  for (std::size_t t = 0; t < Lt; ++t) {
    const tensor<double, B, 1, D> step_in = slice<1>(xt, t, 1);
    const tensor<double, B, 1, D> out = dec.step(step_in, cache3, nn::cross(mem_cache));
    for (std::size_t b = 0; b < B; ++b) {
      for (std::size_t j = 0; j < D; ++j) err_cached = std::max(err_cached, std::abs(out(b, 0, j) - y(b, t, j)));
      tensor<double, dyn, D> row(1);
      for (std::size_t j = 0; j < D; ++j) row(0, j) = xt(b, t, j);
      const tensor<double, dyn, D> one = dec.step(row, cache4, nn::cross(mem_cache), b);
      for (std::size_t j = 0; j < D; ++j) err_cached = std::max(err_cached, std::abs(one(0, j) - y(b, t, j)));
    }
  }
  const tensor<double, B, Lt, D> y_cached = dec.forward(xt, nn::cross(mem_cache), causal);
  for (std::size_t i = 0; i < y.numel(); ++i) err_cached = std::max(err_cached, std::abs(y_cached.data()[i] - y.data()[i]));
  BOOST_TEST_MESSAGE("decoder over a projected memory: " << err_cached);
  BOOST_TEST(err_cached < 1e-12);
  // the whole batch's memory projected at once (every item Ls rows): the same as the memory without masks
  kv_cache<double, H, D / H> full(B, Ls);
  dec.cross_attn.project_memory(memory, full);
  const tensor<double, B, Lt, D> y_full = dec.forward(xt, nn::cross(memory), causal);
  const tensor<double, B, Lt, D> y_full_cached = dec.forward(xt, nn::cross(full), causal);
  for (std::size_t i = 0; i < y.numel(); ++i) BOOST_TEST(std::abs(y_full_cached.data()[i] - y_full.data()[i]) < 1e-12);
  BOOST_TEST(std::abs(y_full(1, 0, 0) - y(1, 0, 0)) > 1e-6);  // (item 1's padding rows are read here)
  // the module alone: attend_memory over the per-item cache = the module over the padded memory with key_lengths
  const tensor<double, B, Lt, D> m_direct = dec.cross_attn(xt, memory, key_lengths(lens));
  const tensor<double, B, Lt, D> m_cached = dec.cross_attn.attend_memory(xt, mem_cache);
  for (std::size_t i = 0; i < m_direct.numel(); ++i) BOOST_TEST(std::abs(m_cached.data()[i] - m_direct.data()[i]) < 1e-12);
  // two new tokens at once over the cached memory: forward's first two rows
  kv_cache<double, H, D / H> cache5(B, Lt);
  const tensor<double, B, 2, D> two_cached = dec.step(two, cache5, nn::cross(mem_cache));
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < 2; ++t)
      for (std::size_t j = 0; j < D; ++j) BOOST_TEST(std::abs(two_cached(b, t, j) - y(b, t, j)) < 1e-12);
  // an unbatched x reads a cache of one item: item 1's memory alone
  kv_cache<double, H, D / H> one_item(1, Ls);
  dec.cross_attn.project_memory(view<const double, dyn, D>(memory.data() + Ls * D, lens[1]), one_item, 0);
  const view<const double, dyn, D> x1(xt.data() + Lt * D, Lt);  // item 1's tokens
  const tensor<double, dyn, D> y1 = dec.forward(x1, nn::cross(one_item), causal);
  for (std::size_t t = 0; t < Lt; ++t)
    for (std::size_t j = 0; j < D; ++j) BOOST_TEST(std::abs(y1(t, j) - y(1, t, j)) < 1e-12);
  BOOST_CHECK_THROW((void)dec.forward(x1, nn::cross(mem_cache), causal), extent_error);  // two items: which one?

  // run-time rules, nothing appended when one fails: a memory with no room for item 1 (item 0 has room)
  kv_cache<double, H, D / H> partial(B, Ls);
  dec.cross_attn.project_memory(view<const double, dyn, D>(memory.data(), 3), partial, 1);  // item 1: 3 of 5
  BOOST_CHECK_THROW(dec.cross_attn.project_memory(memory, partial), std::length_error);
  BOOST_TEST(partial.length(0) == 0u);
  BOOST_TEST(partial.length(1) == 3u);
  const tensor<double, 1, 1, D> lone{};
  BOOST_CHECK_THROW((void)dec.cross_attn.attend_memory(lone, full), extent_error);
  BOOST_CHECK_THROW((void)dec.cross_attn.attend_memory(tensor<double, 1, D>{}, full, 2), std::out_of_range);
  // a step whose memory cache does not fit throws before the self-attention appends to its cache
  kv_cache<double, H, D / H> self(B, Lt);
  BOOST_CHECK_EXCEPTION((void)dec.step(tensor<double, 1, D>{}, self, nn::cross(one_item), 1), std::out_of_range,
                        test_support::is("attnx: multi_head_attention: batch item 1 of a cache of 1"));
  BOOST_CHECK_THROW((void)dec.step(slice<1, 0, 1>(xt), self, nn::cross(one_item)), extent_error);
  BOOST_TEST(self.length(0) == 0u);
  BOOST_TEST(self.length(1) == 0u);
  // Over a memory given as such, its rules are checked where the cross-attention reads it, after the
  // self-attention appended: a step that fails there takes the new tokens out again (the whole batch, or item b),
  // and the next step gives forward's rows.
  kv_cache<double, H, D / H> undo(B, Lt);
  (void)dec.step(slice<1, 0, 1>(xt), undo, nn::cross(memory, key_lengths(lens)));
  const tensor<double, B, 1, D> second = slice<1, 1, 1>(xt);
  const tensor<double, dyn, Ls, D> three_items(3);
  BOOST_CHECK_EXCEPTION((void)dec.step(second, undo, nn::cross(three_items)), extent_error,
                        test_support::says({"memory_batch 3", "input_batch 2"}));
  const std::vector<std::size_t> too_long{9, 3}, nine{9};
  BOOST_CHECK_EXCEPTION((void)dec.step(second, undo, nn::cross(memory, key_lengths(too_long))), std::out_of_range,
                        test_support::says({"key_lengths[0] = 9"}));
  const view<const double, dyn, D> mem_1(memory.data() + Ls * D, Ls);
  tensor<double, dyn, D> row_1(1);
  for (std::size_t j = 0; j < D; ++j) row_1(0, j) = xt(1, 1, j);
  BOOST_CHECK_EXCEPTION((void)dec.step(row_1, undo, nn::cross(mem_1, key_lengths(nine)), 1), std::out_of_range,
                        test_support::says({"key_lengths[0] = 9"}));
  BOOST_TEST(undo.length(0) == 1u);
  BOOST_TEST(undo.length(1) == 1u);
  const tensor<double, B, 1, D> after = dec.step(second, undo, nn::cross(memory, key_lengths(lens)));
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t j = 0; j < D; ++j) BOOST_TEST(std::abs(after(b, 0, j) - y(b, 1, j)) < 1e-12);
  BOOST_TEST(undo.length(0) == 2u);
}
BOOST_AUTO_TEST_CASE(encoder_decoder_pre_norm) { encoder_decoder_case<nn::norm_position::pre>(); }
BOOST_AUTO_TEST_CASE(encoder_decoder_post_norm) { encoder_decoder_case<nn::norm_position::post>(); }

// Masks on a block's steps (multi_head_attention::step's, through the block): a sliding window of Win keys over
// the cache, given at each step as blocked(m) over (1, keys) or additive(m) with -inf, the whole batch or item by
// item (with a context), and on a decoder reading a memory (given as such, or projected into a cache): every row
// against the loops with the window as the self-attention's mask. A mask that does not cover the keys throws before
// anything is appended; a memory that fails after the self-attention appended takes the new tokens out again.
BOOST_AUTO_TEST_CASE(transformer_block_step_with_masks) {
  constexpr std::size_t B = 2, L = 6, D = 16, H = 4, Hid = 32, Win = 3, Ls = 5;
  const auto window = [](std::size_t i, std::size_t j) { return j <= i && i - j < Win; };
  const auto every = [](std::size_t, std::size_t) { return true; };
  const mat xs = naive::random(B * L * D, 41, -2, 2), ms = naive::random(B * Ls * D, 42, -2, 2);
  tensor<double, B, L, D> x;
  tensor<double, B, Ls, D> memory;
  for (std::size_t i = 0; i < xs.size(); ++i) x.data()[i] = xs[i];
  for (std::size_t i = 0; i < ms.size(); ++i) memory.data()[i] = ms[i];
  const auto item = [](const mat& m, std::size_t b, std::size_t n) {
    return mat(m.begin() + long(b * n * D), m.begin() + long((b + 1) * n * D));
  };
  const auto row_of = [&](std::size_t b, std::size_t t) {
    tensor<double, dyn, D> r(1);
    for (std::size_t j = 0; j < D; ++j) r(0, j) = x(b, t, j);
    return r;
  };
  // step t's window: keys older than t - Win + 1 blocked (keys after t: the cache's causal order)
  const auto old_at = [](std::size_t t) {
    tensor<bool, 1, L> m;
    for (std::size_t j = 0; j < L; ++j) m(0, j) = j + Win <= t;
    return m;
  };
  const auto bias_at = [](std::size_t t) {
    tensor<double, 1, L> m;
    for (std::size_t j = 0; j < L; ++j) m(0, j) = j + Win <= t ? -std::numeric_limits<double>::infinity() : 0.0;
    return m;
  };

  nn::transformer_block<double, D, H, Hid, nn::activation::gelu, nn::norm_position::pre> blk;
  fill_block(blk);
  kv_cache<double, H, D / H> batched(B, L), by_item(B, L);
  context two_threads;
  two_threads.set_threads(2);
  double err = 0;
  for (std::size_t b = 0; b < B; ++b) {
    const mat ref = block_reference(blk, item(xs, b, L), L, window, mat{}, 0, every);
    const mat causal_ref = block_reference(blk, item(xs, b, L), L);
    BOOST_TEST(std::abs(ref[(L - 1) * D] - causal_ref[(L - 1) * D]) > 1e-6);  // (the window matters)
    for (std::size_t t = 0; t < L; ++t) {
      if (b == 0) {
        const tensor<double, B, 1, D> y = blk.step(slice<1>(x, t, 1), batched, blocked(old_at(t)));
        for (std::size_t c = 0; c < B; ++c) {
          const mat rc = block_reference(blk, item(xs, c, L), L, window, mat{}, 0, every);
          for (std::size_t j = 0; j < D; ++j) err = std::max(err, std::abs(y(c, 0, j) - rc[t * D + j]));
        }
      }
      const tensor<double, dyn, D> y = blk.step(row_of(b, t), by_item, b, additive(bias_at(t)), two_threads);
      for (std::size_t j = 0; j < D; ++j) err = std::max(err, std::abs(y(0, j) - ref[t * D + j]));
    }
  }
  BOOST_TEST_MESSAGE("block steps under a sliding window: " << err);
  BOOST_TEST(err < 1e-12);

  // a decoder: the memory as such (the whole batch) and projected into a cache (item by item)
  nn::transformer_block<double, D, H, Hid, nn::activation::gelu, nn::norm_position::post, mha_options{}, true> dec;
  fill_block(dec);
  kv_cache<double, H, D / H> mem_cache(B, Ls), self_a(B, L), self_b(B, L);
  dec.cross_attn.project_memory(memory, mem_cache);
  double err_dec = 0;
  for (std::size_t t = 0; t < L; ++t) {
    const tensor<double, B, 1, D> y = dec.step(slice<1>(x, t, 1), self_a, nn::cross(memory), blocked(old_at(t)));
    for (std::size_t b = 0; b < B; ++b) {
      const mat ref = block_reference(dec, item(xs, b, L), L, window, item(ms, b, Ls), Ls, every);
      for (std::size_t j = 0; j < D; ++j) err_dec = std::max(err_dec, std::abs(y(b, 0, j) - ref[t * D + j]));
      const tensor<double, dyn, D> yb = dec.step(row_of(b, t), self_b, nn::cross(mem_cache), b, blocked(old_at(t)));
      for (std::size_t j = 0; j < D; ++j) err_dec = std::max(err_dec, std::abs(yb(0, j) - ref[t * D + j]));
    }
  }
  BOOST_TEST_MESSAGE("decoder steps under a sliding window: " << err_dec);
  BOOST_TEST(err_dec < 1e-12);

  // a mask narrower than the keys an item holds after the append: the rule, and nothing appended
  kv_cache<double, H, D / H> undo(B, L);
  (void)blk.step(slice<1, 0, 2>(x), undo, blocked(old_at(1)));
  const tensor<bool, 1, 2> narrow{};
  BOOST_CHECK_EXCEPTION((void)blk.step(slice<1>(x, 2, 1), undo, blocked(narrow)), extent_error,
                        test_support::says({"mask_keys 2", "keys 3"}));
  BOOST_TEST(undo.length(0) == 2u);
  BOOST_TEST(undo.length(1) == 2u);
  kv_cache<double, H, D / H> undo_dec(B, L);
  (void)dec.step(slice<1>(x, 0, 1), undo_dec, nn::cross(memory), blocked(old_at(0)));
  const tensor<double, dyn, Ls, D> three_items(3);  // (checked where the cross-attention reads it: after the append)
  BOOST_CHECK_EXCEPTION((void)dec.step(slice<1>(x, 1, 1), undo_dec, nn::cross(three_items), blocked(old_at(1))),
                        extent_error, test_support::says({"memory_batch 3", "input_batch 2"}));
  BOOST_TEST(undo_dec.length(0) == 1u);
  BOOST_TEST(undo_dec.length(1) == 1u);
}

// Rows per item through a block (continuous batching): three items whose new tokens come in different counts at
// each step (an item prefilling while another decodes, one with none, runs of items with one count), x (N, D) the items' rows one after another;
// an encoder block (causal, then under a sliding window given as a mask over (N, keys), with a context) and a
// decoder reading each item's own memory (of different lengths) from a memory cache: every row against the loops.
// The rules: one count per item, N their sum (the memory cache's batch too), nothing appended when one fails.
BOOST_AUTO_TEST_CASE(transformer_block_step_rows_per_item) {
  constexpr std::size_t B = 3, L = 6, D = 16, H = 4, Hid = 32, Win = 3;
  const std::size_t Lm[B] = {5, 2, 4};
  // 6 tokens each; runs of items with one count (one kernel call for them, the mask's rows offset to theirs)
  const std::vector<std::vector<std::size_t>> schedule = {{2, 2, 0}, {2, 1, 3}, {2, 3, 3}};
  const auto causal_ij = [](std::size_t i, std::size_t j) { return j <= i; };
  const auto window = [](std::size_t i, std::size_t j) { return j <= i && i - j < Win; };
  const auto every = [](std::size_t, std::size_t) { return true; };
  const mat xs = naive::random(B * L * D, 51, -2, 2);
  const auto item = [&](std::size_t b) { return mat(xs.begin() + long(b * L * D), xs.begin() + long((b + 1) * L * D)); };
  std::vector<mat> mems;
  for (std::size_t b = 0; b < B; ++b) mems.push_back(naive::random(Lm[b] * D, 52 + unsigned(b), -2, 2));

  nn::transformer_block<double, D, H, Hid, nn::activation::gelu, nn::norm_position::pre> enc;
  nn::transformer_block<double, D, H, Hid, nn::activation::gelu, nn::norm_position::post, mha_options{}, true> dec;
  fill_block(enc);
  fill_block(dec);
  kv_cache<double, H, D / H> plain(B, L), windowed(B, L), self(B, L), mem_cache(B, 5);
  for (std::size_t b = 0; b < B; ++b) {
    tensor<double, dyn, D> m(Lm[b]);
    for (std::size_t i = 0; i < m.numel(); ++i) m.data()[i] = mems[b][i];
    dec.cross_attn.project_memory(m, mem_cache, b);
  }
  context two_threads;
  two_threads.set_threads(2);
  double err = 0, err_win = 0, err_dec = 0;
  std::size_t at[B] = {};  // tokens each item has stepped
  for (const std::vector<std::size_t>& counts : schedule) {
    std::size_t N = 0;
    for (const std::size_t c : counts) N += c;
    tensor<double, dyn, D> x(N);
    tensor<bool, dyn, L> old(N);  // row r (item b, position t): keys older than t - Win + 1 blocked
    for (std::size_t b = 0, r = 0; b < B; ++b)
      for (std::size_t t = at[b]; t < at[b] + counts[b]; ++t, ++r) {
        for (std::size_t j = 0; j < D; ++j) x(r, j) = xs[(b * L + t) * D + j];
        for (std::size_t j = 0; j < L; ++j) old(r, j) = j + Win <= t;
      }
    const tensor<double, dyn, D> y = enc.step(x, plain, counts);
    const tensor<double, dyn, D> yw = enc.step(x, windowed, std::span<const std::size_t>(counts), blocked(old), two_threads);
    const tensor<double, dyn, D> yd = dec.step(x, self, nn::cross(mem_cache), counts);
    for (std::size_t b = 0, r = 0; b < B; ++b) {
      const mat ref = block_reference(enc, item(b), L);
      const mat ref_win = block_reference(enc, item(b), L, window, mat{}, 0, every);
      const mat ref_dec = block_reference(dec, item(b), L, causal_ij, mems[b], Lm[b], every);
      for (std::size_t t = at[b]; t < at[b] + counts[b]; ++t, ++r)
        for (std::size_t j = 0; j < D; ++j) {
          err = std::max(err, std::abs(y(r, j) - ref[t * D + j]));
          err_win = std::max(err_win, std::abs(yw(r, j) - ref_win[t * D + j]));
          err_dec = std::max(err_dec, std::abs(yd(r, j) - ref_dec[t * D + j]));
        }
      at[b] += counts[b];
    }
  }
  for (std::size_t b = 0; b < B; ++b) BOOST_TEST(self.length(b) == L);
  BOOST_TEST_MESSAGE("block steps with rows per item: " << err << ", windowed " << err_win << ", decoder " << err_dec);
  BOOST_TEST(err < 1e-12);
  BOOST_TEST(err_win < 1e-12);
  BOOST_TEST(err_dec < 1e-12);

  // the rules, before anything is appended
  kv_cache<double, H, D / H> fresh(B, L), small_memory(2, 5);
  const tensor<double, dyn, D> x3(3);
  const std::vector<std::size_t> two_counts = {1, 2}, wrong_sum = {1, 1, 2}, right = {1, 1, 1};
  BOOST_CHECK_EXCEPTION((void)enc.step(x3, fresh, two_counts), extent_error,
                        test_support::says({"one row count per batch item", "row_counts 2", "cache_batch 3"}));
  BOOST_CHECK_EXCEPTION((void)enc.step(x3, fresh, wrong_sum), extent_error,
                        test_support::says({"input_rows 3", "rows_per_item_sum 4"}));
  BOOST_CHECK_EXCEPTION((void)dec.step(x3, fresh, nn::cross(small_memory), right), extent_error,
                        test_support::says({"attend_memory", "row_counts 3", "cache_batch 2"}));
  const std::vector<std::size_t> wrapping = {std::size_t(-2), 4, 1};  // (a sum that wraps to 3)
  BOOST_CHECK_EXCEPTION((void)enc.step(x3, fresh, wrapping), extent_error, test_support::says({"input_rows 3"}));
  BOOST_CHECK_EXCEPTION((void)dec.cross_attn.attend_memory(x3, mem_cache, wrapping), extent_error,
                        test_support::says({"attend_memory", "input_rows 3"}));
  for (std::size_t b = 0; b < B; ++b) BOOST_TEST(fresh.length(b) == 0u);
}

// 3. A block verified at compile time: d_model 4, 2 heads, hidden 8, causal, L = 3, every element against
// scripts/block_reference.py (plain Python loops).
// scripts/block_reference.py
constexpr double block_expected[3][4] = {
    {-3.0781471415919373, 0.6552662989274338, 1.4219445026113624, 1.0784765008695056},
    {-0.5535244449721075, 3.0122180302645885, -0.5445300640491395, -0.0860027875063793},
    {-2.256148695851496, 1.2344913901780128, 1.5286327351163997, -1.228270604296724},
};
using tiny_block = nn::transformer_block<double, 4, 2, 8>;
constexpr tensor<double, 3, 4> tiny_forward() {
  tiny_block b;
  fill_block(b);
  tensor<double, 3, 4> x;
  fill(x, 0, 4);
  return b.forward(x, causal);
}
constexpr bool tiny_matches() {
  const tensor<double, 3, 4> y = tiny_forward();
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 4; ++j) {
      const double d = y(i, j) - block_expected[i][j];
      if (d > 1e-12 || d < -1e-12) return false;
    }
  return true;
}
static_assert(tiny_matches());
BOOST_AUTO_TEST_CASE(tiny_block_at_run_time_too) {
  const tensor<double, 3, 4> y = tiny_forward();
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 4; ++j) BOOST_TEST(std::abs(y(i, j) - block_expected[i][j]) < 1e-12);
}
