// Incremental decoding with a KV cache: what a generation loop does with attnx.
//
// One attention layer of a small model (d_model 256, 8 query heads over 2 KV heads: GQA, RoPE, no biases) and
// one sequence of 40 tokens. The whole causal forward pass over the 40 tokens is the reference; then
//   1. a float cache: a prompt of 24 tokens prefilled in one step, then 16 steps of one token each;
//   2. the same over a bf16 cache (half the bytes per token; the error of storing K and V in 16 bits);
//   3. an ALiBi bias given to every step as a mask over the cache's positions, against the forward pass
//      with the same bias;
//   4. speculative decoding: 3 draft tokens stepped, 2 rejected (truncate), the accepted one kept, decoding
//      going on as if the draft had never been.
// Each output row is compared with the forward pass's (relative to its largest output); the program exits 1
// if any differs by more than the bound printed next to it.
#include <attnx/attnx.hpp>

#include "support/wave.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

using namespace attnx;

constexpr std::size_t D = 256, H = 8, G = 2, dk = D / H, L = 40, prompt = 24;
using mha_t = multi_head_attention<float, D, H, mha_options{.kv_heads = G, .bias = false, .rope = rope_style::half}>;
using rows_t = tensor<float, dyn, D>;

// ALiBi: head h adds -slope_h (i - j) to the score of query position i and key j (slopes 2^-1 ... 2^-8).
float alibi(std::size_t h, std::size_t i, std::size_t j) {
  return -std::ldexp(1.0f, -int(h + 1)) * (float(i) - float(j));
}

// The largest |a - b| over rows [r0, r0 + n) of a (b's rows from b0), relative to the largest |b|.
double max_diff(const rows_t& a, std::size_t r0, const rows_t& b, std::size_t b0, std::size_t n) {
  double m = 0, top = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t c = 0; c < D; ++c) {
      m = std::max(m, double(std::abs(a(r0 + i, c) - b(b0 + i, c))));
      top = std::max(top, double(std::abs(b(b0 + i, c))));
    }
  return m / top;
}

template <class Cache, class... Mask>
rows_t decode(const mha_t& mha, const rows_t& x, Cache& cache, const Mask&... mask_of) {
  rows_t y(L);
  const auto put = [&](const rows_t& part, std::size_t at) { std::copy_n(part.data(), part.numel(), y.data() + at * D); };
  // the prompt in one step (chunked prefill), then one token at a time; mask_of(at, n): the step's masks
  put(mha.step(slice<0>(x, 0, prompt), cache, 0, mask_of(0, prompt)...), 0);
  for (std::size_t t = prompt; t < L; ++t) put(mha.step(slice<0>(x, t, 1), cache, 0, mask_of(t, 1)...), t);
  return y;
}

int main() {
  const auto f = [](std::size_t n, double c) {  // deterministic weights, scaled to scores of order one
    std::vector<float> w(n);
    for (std::size_t i = 0; i < n; ++i) w[i] = float(0.05 * std::sin(0.37 * double(i) + c));
    return w;
  };
  const std::vector<float> wq = f(mha_t::w_q_shape::size, 0.1), wk = f(mha_t::w_k_shape::size, 0.2),
                           wv = f(mha_t::w_v_shape::size, 0.3), wo = f(mha_t::w_o_shape::size, 0.4);
  const mha_t mha = mha_t::from_memory({wq, wk, wv, wo, {}, {}, {}, {}});
  const rows_t x = wave<tensor<float, L, D>>(1.0, 0.21, 0.5);
  bool ok = true;
  const auto report = [&](const char* what, double err, double bound) {
    std::printf("%-55s max |y - forward| / max |forward| %.1e (bound %.0e)%s\n", what, err, bound, err <= bound ? "" : "  FAILED");
    ok = ok && err <= bound;
  };

  const rows_t full = mha(x, causal);  // the reference: the causal forward pass over all 40 tokens

  kv_cache<float, G, dk> cache(1, 64);  // batch 1, capacity 64 tokens
  report("1. float cache: prefill 24, then 16 single steps", max_diff(decode(mha, x, cache), 0, full, 0, L), 1e-5);

  kv_cache<float, G, dk, dk, bf16> half(1, 64);
  report("2. bf16 cache (K and V rounded to 8 significant bits)", max_diff(decode(mha, x, half), 0, full, 0, L), 4e-3);

  // 3. ALiBi: each step's bias over (heads, n, keys), keys = the capacity (positions past a row's own are
  // never read); the forward pass takes the same bias over (heads, L, L).
  tensor<float, H, L, L> bias_full;
  for (std::size_t h = 0; h < H; ++h)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < L; ++j) bias_full(h, i, j) = alibi(h, i, j);
  const rows_t full_alibi = mha(x, causal, additive(bias_full));
  kv_cache<float, G, dk> cache3(1, 64);
  tensor<float, H, dyn, dyn> bias_step(prompt, 64);  // reused: a step of n rows reads its first n rows
  const auto step_bias = [&](std::size_t at, std::size_t n) {
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < 64; ++j) bias_step(h, i, j) = alibi(h, at + i, j);
    return additive(slice<1>(bias_step, 0, n));
  };
  report("3. ALiBi bias as a mask of every step", max_diff(decode(mha, x, cache3, step_bias), 0, full_alibi, 0, L), 1e-5);

  // 4. Speculative decoding after the prompt: a draft of 3 tokens (the true next token, then 2 wrong ones) is
  // stepped at once; the verifier accepts the first only, so the cache is cut back to prompt + 1 tokens.
  kv_cache<float, G, dk> cache4(1, 64);
  rows_t y4(L);
  (void)mha.step(slice<0>(x, 0, prompt), cache4, 0);
  rows_t draft(3);
  std::copy_n(x.data() + prompt * D, D, draft.data());                  // the true token prompt
  std::copy_n(x.data() + 3 * D, 2 * D, draft.data() + D);               // 2 wrong ones
  const rows_t verified = mha.step(draft, cache4, 0);                   // 3 rows, each causal over the cache
  std::copy_n(verified.data(), D, y4.data() + prompt * D);              // row 0: the accepted token's output
  cache4.truncate(0, prompt + 1);                                       // the 2 rejected tokens out
  for (std::size_t t = prompt + 1; t < L; ++t) {
    const rows_t yt = mha.step(slice<0>(x, t, 1), cache4, 0);
    std::copy_n(yt.data(), D, y4.data() + t * D);
  }
  report("4. draft of 3, 2 rejected (truncate), decoding on", max_diff(y4, prompt, full, prompt, L - prompt), 1e-5);
  std::printf("cache lengths: %zu %zu %zu %zu of capacity %zu\n", cache.length(0), half.length(0), cache3.length(0),
              cache4.length(0), cache.capacity());
  return ok ? 0 : 1;
}
