// The KV cache, multi_head_attention::step and attention states: stepping token by token (or chunk by
// chunk) against the full causal forward pass computed by plain double loops, per-item lengths, GQA and
// MQA, bf16 / f16 storage, the cache's rules, attend(q, cache), partial_attention and merge.
#define BOOST_TEST_MODULE kv_cache
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "support.hpp"

using namespace test_support;
using attnx::dyn;

namespace {

// y = merge_heads(causal GQA attention of x) W_O, module without biases; x (B, L, Dm).
mat reference_forward(const mat& x, const mat& wq, const mat& wk, const mat& wv, const mat& wo, std::size_t B,
                      std::size_t L, std::size_t Dm, std::size_t H, std::size_t Hkv, std::size_t d) {
  const mat heads = naive::gqa_heads(x, wq, wk, wv, B, L, Dm, H, Hkv, d,
                                     [](std::size_t, std::size_t i, std::size_t j) { return j <= i; });
  return naive::matmul(naive::merge_heads(heads, B, H, L, d), wo, B * L, H * d, Dm);
}

// Weights in [-1/8, 1/8] (an exact scaling): scores of order one, as in a trained model.
template <class T>
mat weights(std::size_t n, unsigned seed) {
  mat m = rounded<T>(n, seed);
  for (auto& x : m) x *= 0.125;
  return m;
}

template <class M>
struct model {
  using T = typename M::value_type;
  mat wq = weights<T>(M::w_q_shape::size, 11), wk = weights<T>(M::w_k_shape::size, 12),
      wv = weights<T>(M::w_v_shape::size, 13), wo = weights<T>(M::w_o_shape::size, 14);
  std::vector<T> fq = as<T>(wq), fk = as<T>(wk), fv = as<T>(wv), fo = as<T>(wo);
  M m = M::from_memory({fq, fk, fv, fo, {}, {}, {}, {}});
};

template <class T, std::size_t Dm, std::size_t H, std::size_t Hkv, class Store = T>
void check_steps(std::size_t B, std::size_t L, std::size_t chunk, double tol) {
  using M = attnx::multi_head_attention<T, Dm, H, attnx::mha_options{.kv_heads = Hkv, .bias = false}>;
  constexpr std::size_t d = Dm / H;
  const model<M> w;
  const mat x = rounded<T>(B * L * Dm, 21);
  const mat want = reference_forward(x, w.wq, w.wk, w.wv, w.wo, B, L, Dm, H, Hkv, d);
  attnx::kv_cache<T, Hkv, d, d, Store> cache(B, L);
  mat got(B * L * Dm);
  for (std::size_t t0 = 0; t0 < L; t0 += chunk) {
    const std::size_t n = std::min(chunk, L - t0);
    attnx::tensor<T, dyn, dyn, Dm> xt(B, n);
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t c = 0; c < Dm; ++c) xt(b, i, c) = static_cast<T>(x[(b * L + t0 + i) * Dm + c]);
    const auto y = w.m.step(xt, cache);
    BOOST_TEST(y.dims()[0] == B);
    BOOST_TEST(y.dims()[1] == n);
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t c = 0; c < Dm; ++c) got[(b * L + t0 + i) * Dm + c] = static_cast<double>(y(b, i, c));
  }
  for (std::size_t b = 0; b < B; ++b) BOOST_TEST(cache.length(b) == L);
  double err = 0, top = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]));
    top = std::max(top, std::abs(want[i]));
  }
  err /= top;  // relative to the largest output
  BOOST_TEST_MESSAGE("steps of " << chunk << ", H " << H << ", kv_heads " << Hkv << ", L " << L << ", storage of "
                                 << sizeof(Store) << " bytes: max error / max |y| " << err << " (max |y| " << top << ")");
  BOOST_TEST(err <= tol);
}

}  // namespace

BOOST_AUTO_TEST_CASE(token_by_token_equals_the_causal_forward_pass) {
  check_steps<double, 32, 4, 4>(2, 37, 1, 1e-12);  // MHA
  check_steps<double, 32, 4, 2>(2, 37, 1, 1e-12);  // GQA
  check_steps<double, 32, 4, 1>(1, 37, 1, 1e-12);  // MQA
  check_steps<float, 64, 8, 2>(2, 70, 1, 2e-5);
  check_steps<float, 64, 8, 1>(3, 40, 1, 2e-5);
}

BOOST_AUTO_TEST_CASE(chunked_prefill_then_decode) {
  check_steps<double, 32, 4, 2>(2, 50, 7, 1e-12);   // chunks of 7 (decode kernel)
  check_steps<double, 32, 4, 2>(2, 60, 25, 1e-12);  // chunks of 25 (prefill kernel over the cache)
  check_steps<float, 64, 8, 4>(2, 90, 20, 2e-5);
}

BOOST_AUTO_TEST_CASE(items_of_different_lengths) {
  // Item 0 gets 9 tokens, item 1 gets 4, each through step(x, cache, b); then one batched step appends a
  // token to both: each item attends over its own prefix only.
  using M = attnx::multi_head_attention<double, 32, 4, attnx::mha_options{.kv_heads = 2, .bias = false}>;
  const model<M> w;
  const std::size_t lens[2] = {9, 4};
  const mat x0 = naive::random(10 * 32, 31), x1 = naive::random(5 * 32, 32);
  const mat* xs[2] = {&x0, &x1};
  attnx::kv_cache<double, 2, 8> cache(2, 16);
  mat got[2] = {mat(10 * 32), mat(5 * 32)};
  for (std::size_t b = 0; b < 2; ++b) {
    attnx::tensor<double, dyn, 32> xt(lens[b]);
    std::copy_n(xs[b]->data(), lens[b] * 32, xt.data());
    const auto y = w.m.step(xt, cache, b);
    std::copy_n(y.data(), lens[b] * 32, got[b].data());
  }
  BOOST_TEST(cache.length(0) == 9);
  BOOST_TEST(cache.length(1) == 4);
  attnx::tensor<double, 2, 1, 32> last;
  for (std::size_t b = 0; b < 2; ++b) std::copy_n(xs[b]->data() + lens[b] * 32, 32, last.data() + b * 32);
  const auto y = w.m.step(last, cache);
  for (std::size_t b = 0; b < 2; ++b) {
    std::copy_n(y.data() + b * 32, 32, got[b].data() + lens[b] * 32);
    const mat want = reference_forward(*xs[b], w.wq, w.wk, w.wv, w.wo, 1, lens[b] + 1, 32, 4, 2, 8);
    double err = 0;
    for (std::size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(got[b][i] - want[i]));
    BOOST_TEST(err <= 1e-12);
  }
}

BOOST_AUTO_TEST_CASE(reduced_precision_caches) {
  // Against the double reference of the unrounded values: the error of storing K and V in 16 bits, relative
  // to the largest output (measured 1.6e-3 for bf16, 1.8e-4 for f16; float storage 3e-7).
  check_steps<float, 64, 8, 2, attnx::bf16>(2, 70, 1, 4e-3);
  check_steps<float, 64, 8, 2, attnx::f16>(2, 70, 1, 5e-4);
  check_steps<float, 64, 8, 2, attnx::bf16>(2, 70, 30, 4e-3);  // prefill over a bf16 cache
  check_steps<float, 64, 8, 2, attnx::f16>(2, 70, 30, 5e-4);
  // The cache holds the rounded values.
  attnx::kv_cache<float, 1, 2, 2, attnx::bf16> c(1, 4);
  const float k[2] = {1.00390625f, 3.0f}, v[2] = {-2.0f, 0.1f};  // 1 + 2^-8: a tie, rounds to 1 (even)
  c.append(k, v, 1);
  BOOST_TEST(c.key(0, 0, 0, 0) == 1.0f);
  BOOST_TEST(c.key(0, 0, 0, 1) == 3.0f);
  BOOST_TEST(c.value(0, 0, 0, 1) == 0.10009765625f);
}

BOOST_AUTO_TEST_CASE(cache_rules) {
  attnx::kv_cache<float, 2, 4> cache(2, 3);
  std::vector<float> k(2 * 2 * 8, 1.0f), v(2 * 2 * 8, 2.0f);
  cache.append(k.data(), v.data(), 2);
  BOOST_TEST(cache.length(0) == 2);
  BOOST_TEST(cache.keys(1, 1).dims()[0] == 2);
  BOOST_TEST(cache.values(1, 1)(1, 3) == 2.0f);
  BOOST_CHECK_EXCEPTION(cache.append(k.data(), v.data(), 2), std::length_error,
                        says({"kv_cache: appending 2 tokens to batch item 0 of length 2 exceeds the capacity 3"}));
  BOOST_TEST(cache.length(0) == 2);  // nothing appended
  BOOST_TEST(cache.length(1) == 2);
  cache.append(1, k.data(), v.data(), 1);
  BOOST_TEST(cache.length(1) == 3);
  BOOST_CHECK_THROW(cache.append(1, k.data(), v.data(), 1), std::length_error);
  BOOST_CHECK_EXCEPTION(cache.truncate(0, 3), std::out_of_range, says({"truncate item 0 to 3 tokens, but it holds 2"}));
  cache.truncate(1, 1);
  BOOST_TEST(cache.length(1) == 1);
  // an item past the batch: std::out_of_range naming it and the batch, wherever an item is named
  BOOST_CHECK_EXCEPTION((void)cache.length(2), std::out_of_range, says({"kv_cache: batch item 2 of a cache of 2"}));
  BOOST_CHECK_EXCEPTION(cache.reset(5), std::out_of_range, says({"batch item 5 of a cache of 2"}));
  BOOST_CHECK_EXCEPTION(cache.truncate(2, 0), std::out_of_range, says({"batch item 2 of a cache of 2"}));
  // (the item through a volatile: with a constant 2, g++ 12 -O2 warns -Warray-bounds about the write that the
  // check before it never lets happen)
  const volatile std::size_t past = 2;
  BOOST_CHECK_EXCEPTION(cache.append(past, k.data(), v.data(), 1), std::out_of_range, says({"batch item 2 of a cache of 2"}));
  // the keys and values sit in 64-byte aligned storage (each row of d_k = 4 floats starts 16 bytes on)
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(cache.keys(0, 0).data()) % 64 == 0u);
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(cache.values(0, 0).data()) % 64 == 0u);
  BOOST_TEST(cache.lengths().size() == 2u);
  BOOST_TEST(cache.lengths()[0] == 2u);
  BOOST_TEST(cache.lengths()[1] == 1u);
  {  // a copy holds its own keys and lengths
    attnx::kv_cache<float, 2, 4> copy = cache;
    copy.truncate(0, 0);
    BOOST_TEST(copy.length(0) == 0u);
    BOOST_TEST(cache.length(0) == 2u);
    BOOST_TEST(copy.values(1, 1)(0, 3) == 2.0f);
    attnx::kv_cache<float, 2, 4> moved = std::move(copy);
    BOOST_TEST(moved.length(1) == 1u);
    BOOST_TEST(moved.keys(1, 0)(0, 0) == 1.0f);
  }
  cache.reset(0);
  BOOST_TEST(cache.length(0) == 0);
  cache.reset();
  BOOST_TEST(cache.length(1) == 0);
  // append from expressions: the batch and feature rules
  attnx::tensor<float, 3, 1, 8> wrong_batch;
  BOOST_CHECK_EXCEPTION(cache.append(wrong_batch, wrong_batch), attnx::extent_error,
                        says({"kv_cache: append: the batch extent must be the cache's: batch 3, cache_batch 2"}));
  // the module's step on a full cache appends nothing
  using M = attnx::multi_head_attention<float, 16, 4, attnx::mha_options{.kv_heads = 2, .bias = false}>;
  const model<M> w;
  attnx::kv_cache<float, 2, 4> small(1, 2);
  attnx::tensor<float, 1, 3, 16> x3;
  BOOST_CHECK_EXCEPTION(w.m.step(x3, small), std::length_error, says({"appending 3 tokens", "capacity 2"}));
  BOOST_TEST(small.length(0) == 0);
  attnx::tensor<float, 2, 1, 16> x2;
  BOOST_CHECK_EXCEPTION(w.m.step(x2, small), attnx::extent_error,
                        says({"step: x's batch extent must be the cache's: input_batch 2, cache_batch 1"}));
}

BOOST_AUTO_TEST_CASE(attend_over_a_cache) {
  // q (B, H, n, d) against the cache: the last n tokens of each item, causal.
  constexpr std::size_t B = 2, H = 4, G = 2, d = 8, L = 20, n = 3;
  const mat k = naive::random(B * L * G * d, 41), v = naive::random(B * L * G * d, 42), q = naive::random(B * H * n * d, 43);
  attnx::kv_cache<double, G, d> cache(B, 32);
  cache.append(k.data(), v.data(), L);
  attnx::tensor<double, B, H, n, d> qt = naive::make<attnx::tensor<double, B, H, n, d>>(q);
  const auto out = attnx::attend(qt, cache);
  double err = 0;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h) {
      mat qh(n * d), kh(L * d), vh(L * d);
      std::copy_n(q.data() + (b * H + h) * n * d, n * d, qh.data());
      for (std::size_t j = 0; j < L; ++j)
        for (std::size_t c = 0; c < d; ++c) {
          kh[j * d + c] = k[((b * L + j) * G + h / 2) * d + c];
          vh[j * d + c] = v[((b * L + j) * G + h / 2) * d + c];
        }
      const mat want = naive::attention(qh, kh, vh, n, L, d, d, [&](std::size_t i, std::size_t j) { return j <= i + L - n; });
      for (std::size_t i = 0; i < n * d; ++i) err = std::max(err, std::abs(out.data()[(b * H + h) * n * d + i] - want[i]));
    }
  BOOST_TEST(err <= 1e-12);
}

BOOST_AUTO_TEST_CASE(states_merge_to_the_whole) {
  // Keys split in three shards (one of them with every key masked for one batch item): merging the
  // shards' states gives attention over all keys, and lse = ln sum_j exp(s_ij).
  constexpr std::size_t B = 2, H = 3, Lq = 5, d = 16, L1 = 30, L2 = 45, L3 = 20, L = L1 + L2 + L3;
  const mat q = naive::random(B * H * Lq * d, 51), k = naive::random(B * H * L * d, 52, -2, 2),
            v = naive::random(B * H * L * d, 53);
  const auto shard = [&](const mat& m, std::size_t j0, std::size_t n) {
    mat s(B * H * n * d);
    for (std::size_t bh = 0; bh < B * H; ++bh) std::copy_n(m.data() + (bh * L + j0) * d, n * d, s.data() + bh * n * d);
    return s;
  };
  using attnx::tensor;
  const auto qt = naive::make<tensor<double, B, H, Lq, d>>(q);
  const auto k1 = naive::make<tensor<double, B, H, L1, d>>(shard(k, 0, L1)), v1 = naive::make<tensor<double, B, H, L1, d>>(shard(v, 0, L1));
  const auto k2 = naive::make<tensor<double, B, H, L2, d>>(shard(k, L1, L2)), v2 = naive::make<tensor<double, B, H, L2, d>>(shard(v, L1, L2));
  const auto k3 = naive::make<tensor<double, B, H, L3, d>>(shard(k, L1 + L2, L3)),
             v3 = naive::make<tensor<double, B, H, L3, d>>(shard(v, L1 + L2, L3));
  const std::size_t none[B] = {L3, 0};  // item 1 sees no key of the third shard
  const auto s1 = attnx::partial_attention(attnx::attention(qt, k1, v1));
  const auto s2 = attnx::partial_attention(attnx::attention(qt, k2, v2));
  const auto s3 = attnx::partial_attention(attnx::attention(qt, k3, v3, attnx::key_lengths(none)));
  const auto m = attnx::merge(s1, s2, s3);
  double err = 0, lerr = 0;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < Lq; ++i) {
        const std::size_t visible = b == 0 ? L : L1 + L2;
        std::vector<double> s(visible);
        double mx = -1e300;
        for (std::size_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (std::size_t c = 0; c < d; ++c) dot += q[((b * H + h) * Lq + i) * d + c] * k[((b * H + h) * L + j) * d + c];
          s[j] = dot / std::sqrt(double(d));
          mx = std::max(mx, s[j]);
        }
        double l = 0;
        std::vector<double> o(d);
        for (std::size_t j = 0; j < visible; ++j) {
          const double p = std::exp(s[j] - mx);
          l += p;
          for (std::size_t c = 0; c < d; ++c) o[c] += p * v[((b * H + h) * L + j) * d + c];
        }
        for (std::size_t c = 0; c < d; ++c) err = std::max(err, std::abs(m.out(b, h, i, c) - o[c] / l));
        lerr = std::max(lerr, std::abs(m.lse(b, h, i) - (mx + std::log(l))));
        BOOST_TEST(s3.lse(1, h, i) == -std::numeric_limits<double>::infinity());
        BOOST_TEST(s3.out(1, h, i, 0) == 0.0);
      }
  BOOST_TEST(err <= 1e-13);
  BOOST_TEST(lerr <= 1e-13);
  // merge is order-independent up to rounding, and a single state merges to itself.
  const auto r = attnx::merge(s3, s1, s2);
  BOOST_TEST(max_err(r.out, mat(m.out.data(), m.out.data() + m.out.numel())) <= 1e-14);
  const auto one = attnx::merge(s1);
  BOOST_TEST(std::memcmp(one.out.data(), s1.out.data(), sizeof(double) * s1.out.numel()) == 0);
  // float: the decode kernel (Lq <= 16) and the prefill kernel write the same lse.
  const auto qf = naive::make<tensor<float, 1, 1, 40, 16>>(naive::random(40 * 16, 61));
  const auto kf = naive::make<tensor<float, 1, 1, 300, 16>>(naive::random(300 * 16, 62));
  const auto vf = naive::make<tensor<float, 1, 1, 300, 16>>(naive::random(300 * 16, 63));
  const auto wide = attnx::partial_attention(attnx::attention(qf, kf, vf));
  tensor<float, 1, 1, 4, 16> q4;
  std::copy_n(qf.data(), 4 * 16, q4.data());
  const auto narrow = attnx::partial_attention(attnx::attention(q4, kf, vf));
  for (std::size_t i = 0; i < 4; ++i) BOOST_TEST(std::abs(narrow.lse(0, 0, i) - wide.lse(0, 0, i)) <= 2e-6);
}

BOOST_AUTO_TEST_CASE(merge_rules) {
  std::vector<attnx::attention_state<float, attnx::make_shape<dyn, 4>>> none;
  BOOST_CHECK_THROW(attnx::merge(std::span<const attnx::attention_state<float, attnx::make_shape<dyn, 4>>>(none)),
                    std::invalid_argument);
  attnx::attention_state<float, attnx::make_shape<dyn, 4>> a{attnx::tensor<float, dyn, 4>(3), attnx::tensor<float, dyn>(3)},
      b{attnx::tensor<float, dyn, 4>(2), attnx::tensor<float, dyn>(2)};
  BOOST_CHECK_EXCEPTION(attnx::merge(a, b), attnx::extent_error, says({"merge: the attention states must have one shape"}));
}
