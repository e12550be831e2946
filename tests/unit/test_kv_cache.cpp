// The KV cache, multi_head_attention::step and attention states: stepping token by token (or chunk by
// chunk) against the full causal forward pass computed by plain double loops, per-item lengths, GQA and
// MQA, bf16 / f16 storage, the cache's rules, attend(q, cache), partial_attention and merge.
#define BOOST_TEST_MODULE kv_cache
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>

#include "allocation_hooks.hpp"  // allocation failures on demand (a_failed_step_appends_nothing)
#include "support.hpp"

#include <attnx/kernels/tuning.hpp>

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

// Rows [t0, t0 + n) of every item of x (B items of L rows of Dm) as a step's input (B, n, Dm).
template <class T, std::size_t Dm>
attnx::tensor<T, dyn, dyn, Dm> step_rows(const mat& x, std::size_t B, std::size_t L, std::size_t t0, std::size_t n) {
  attnx::tensor<T, dyn, dyn, Dm> xt(B, n);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < Dm; ++c) xt(b, i, c) = static_cast<T>(x[(b * L + t0 + i) * Dm + c]);
  return xt;
}
// A step's output y (B, n, Dm) into rows [t0, t0 + n) of every item of got.
template <class Y>
void keep_step_rows(const Y& y, mat& got, std::size_t B, std::size_t L, std::size_t t0, std::size_t n) {
  constexpr std::size_t Dm = attnx::shape_of_t<Y>::cols;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < Dm; ++c) got[(b * L + t0 + i) * Dm + c] = static_cast<double>(y(b, i, c));
}
// max |got - want| / max |want| (infinite where got is NaN).
inline double max_relative_error(const mat& got, const mat& want) {
  double err = 0, top = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::isnan(got[i]) ? std::numeric_limits<double>::infinity() : std::abs(got[i] - want[i]));
    top = std::max(top, std::abs(want[i]));
  }
  return err / top;
}

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
    const auto xt = step_rows<T, Dm>(x, B, L, t0, n);
    const auto y = w.m.step(xt, cache);
    BOOST_TEST(y.dims()[0] == B);
    BOOST_TEST(y.dims()[1] == n);
    keep_step_rows(y, got, B, L, t0, n);
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

BOOST_AUTO_TEST_CASE(append_from_expressions) {
  // (B, n, kv_heads * d): element c of KV head g of token j of item b is column g d + c of row (b, j).
  attnx::kv_cache<float, 2, 4> cache(2, 6);  // room for 3 more: only the token-count rule refuses below
  attnx::tensor<float, 2, 3, 8> k, v;
  for (std::size_t n = 0; n < k.numel(); ++n) k.data()[n] = float(n), v.data()[n] = -float(n);
  cache.append(k, v + v);  // any expression: the values doubled
  BOOST_TEST(cache.length(0) == 3u);
  BOOST_TEST(cache.length(1) == 3u);
  std::size_t bad = 0;
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t g = 0; g < 2; ++g)
      for (std::size_t j = 0; j < 3; ++j)
        for (std::size_t c = 0; c < 4; ++c) {
          const float x = float((b * 3 + j) * 8 + g * 4 + c);
          bad += cache.key(b, g, j, c) != x;
          bad += cache.value(b, g, j, c) != -2 * x;
        }
  BOOST_TEST(bad == 0u);
  // as many value tokens as key tokens, else nothing is appended
  attnx::tensor<float, 2, 2, 8> v2;
  BOOST_CHECK_EXCEPTION(cache.append(k, v2), attnx::extent_error,
                        says({"kv_cache: append: the keys and the values must have as many tokens: key_tokens 3, value_tokens 2"}));
  BOOST_TEST(cache.length(0) == 3u);
  BOOST_TEST(cache.length(1) == 3u);
  // (n, kv_heads * d) for a cache of batch 1, after what it holds
  attnx::kv_cache<float, 2, 4> one(1, 4);
  attnx::tensor<float, 2, 8> k1, v1;
  for (std::size_t n = 0; n < k1.numel(); ++n) k1.data()[n] = float(n) + 0.5f, v1.data()[n] = float(n) - 0.5f;
  one.append(k1, v1);
  one.append(k1, v1);
  BOOST_TEST(one.length(0) == 4u);
  bad = 0;
  for (std::size_t g = 0; g < 2; ++g)
    for (std::size_t j = 0; j < 4; ++j)
      for (std::size_t c = 0; c < 4; ++c) {
        bad += one.key(0, g, j, c) != k1(j % 2, g * 4 + c);
        bad += one.value(0, g, j, c) != v1(j % 2, g * 4 + c);
      }
  BOOST_TEST(bad == 0u);
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
  BOOST_CHECK_EXCEPTION(attnx::merge(a, b), attnx::extent_error, says({"merge: the attention states' outputs must have one shape (state 1, axis 0): extent 2, first_state_extent 3"}));
}

BOOST_AUTO_TEST_CASE(cache_moves_and_checked_accessors) {
  attnx::kv_cache<float, 2, 4> a(2, 3), b(1, 5), none;
  BOOST_TEST(none.batch() == 0u);
  BOOST_TEST(none.capacity() == 0u);
  std::vector<float> k(2 * 8, 1.0f), v(2 * 8, 2.0f);
  a.append(k.data(), v.data(), 1);
  // moved from: an empty cache (batch 0, capacity 0), not one that still claims its items over no memory
  attnx::kv_cache<float, 2, 4> c = std::move(a);
  BOOST_TEST(a.batch() == 0u);
  BOOST_TEST(a.capacity() == 0u);
  BOOST_TEST(a.lengths().size() == 0u);
  BOOST_CHECK_EXCEPTION((void)a.length(0), std::out_of_range, says({"batch item 0 of a cache of 0"}));
  BOOST_CHECK_EXCEPTION(a.append(0, k.data(), v.data(), 1), std::out_of_range, says({"batch item 0 of a cache of 0"}));
  BOOST_TEST(c.length(1) == 1u);
  // move assignment: the target takes the source's batch, capacity, lengths and rows; the source is empty
  attnx::kv_cache<float, 2, 4> keep = c;  // (a copy: its own rows)
  c = std::move(b);
  BOOST_TEST(c.batch() == 1u);
  BOOST_TEST(c.capacity() == 5u);
  BOOST_TEST(c.length(0) == 0u);
  BOOST_TEST(b.batch() == 0u);
  BOOST_TEST(b.capacity() == 0u);
  BOOST_TEST(b.lengths().size() == 0u);
  // copy assignment (and self-assignment) keep each cache's own rows
  b = keep;
  b = *&b;
  keep.reset();
  BOOST_TEST(b.batch() == 2u);
  BOOST_TEST(b.capacity() == 3u);
  BOOST_TEST(b.length(1) == 1u);
  BOOST_TEST(b.value(1, 1, 0, 3) == 2.0f);
  b.append(k.data(), v.data(), 1);
  BOOST_TEST(b.length(0) == 2u);
  BOOST_CHECK_THROW(b.append(k.data(), v.data(), 2), std::length_error);
  // every index the accessors take is checked
  BOOST_CHECK_EXCEPTION((void)b.key(0, 2, 0, 0), std::out_of_range, says({"kv_cache: KV head 2 of a cache with 2 KV heads"}));
  BOOST_CHECK_EXCEPTION((void)b.key(1, 0, 2, 0), std::out_of_range, says({"kv_cache: token 2 of batch item 1, which holds 2"}));
  BOOST_CHECK_EXCEPTION((void)b.value(0, 0, 0, 4), std::out_of_range, says({"kv_cache: element 4 of a row of 4"}));
  BOOST_CHECK_EXCEPTION((void)b.keys(0, 2), std::out_of_range, says({"KV head 2 of a cache with 2 KV heads"}));
  BOOST_CHECK_EXCEPTION((void)b.values(2, 0), std::out_of_range, says({"batch item 2 of a cache of 2"}));
  b.truncate(0, 1);
  BOOST_CHECK_EXCEPTION((void)b.key(0, 0, 1, 0), std::out_of_range, says({"token 1 of batch item 0, which holds 1"}));
  BOOST_TEST(b.key(0, 1, 0, 3) == 1.0f);
  // sizes past std::size_t: std::length_error, the cache unchanged
  BOOST_CHECK_EXCEPTION(b.reserve(std::size_t(1) << 62), std::length_error, says({"kv_cache: 2 items of", "tokens do not fit in memory"}));
  BOOST_TEST(b.capacity() == 3u);
  BOOST_CHECK_THROW((attnx::kv_cache<float, 2, 64>(std::size_t(1) << 40, std::size_t(1) << 40)), std::length_error);
}

namespace {
// Plain double loops: the attention of one query row over the given keys (rows of d), scale s, plus bias[j] when
// given: out and lse.
void one_row(const double* q, const std::vector<const double*>& keys, const std::vector<const double*>& values, std::size_t d,
             double s, double* out, double& lse, const std::vector<double>& bias = {}) {
  if (keys.empty()) {
    std::fill_n(out, d, 0.0);
    lse = -std::numeric_limits<double>::infinity();
    return;
  }
  std::vector<double> sc(keys.size());
  double mx = -1e300;
  for (std::size_t j = 0; j < keys.size(); ++j) {
    double dot = 0;
    for (std::size_t c = 0; c < d; ++c) dot += q[c] * keys[j][c];
    sc[j] = dot * s + (bias.empty() ? 0.0 : bias[j]);
    mx = std::max(mx, sc[j]);
  }
  double l = 0;
  std::fill_n(out, d, 0.0);
  for (std::size_t j = 0; j < keys.size(); ++j) {
    const double p = std::exp(sc[j] - mx);
    l += p;
    for (std::size_t c = 0; c < d; ++c) out[c] += p * values[j][c];
  }
  for (std::size_t c = 0; c < d; ++c) out[c] /= l;
  lse = mx + std::log(l);
}
}  // namespace

BOOST_AUTO_TEST_CASE(states_over_caches) {
  // A shared prefix in one cache (item 0: 10 tokens, item 1: none) and each item's own tokens in another (5 and 6
  // tokens, the last n = 2 the query rows): partial_attention over the prefix (cache_keys::all) and over the
  // suffix (causal) merge to attention over prefix + suffix; attend and partial_attention take a scale.
  constexpr std::size_t B = 2, H = 4, G = 2, d = 8, n = 2;
  const std::size_t lp[B] = {10, 0}, ls[B] = {5, 6};
  attnx::kv_cache<double, G, d> prefix(B, 16), suffix(B, 16);
  mat pk[B], pv[B], sk[B], sv[B];
  for (std::size_t b = 0; b < B; ++b) {
    pk[b] = naive::random(lp[b] * G * d, 70 + unsigned(b), -2, 2);
    pv[b] = naive::random(lp[b] * G * d, 72 + unsigned(b));
    sk[b] = naive::random(ls[b] * G * d, 74 + unsigned(b), -2, 2);
    sv[b] = naive::random(ls[b] * G * d, 76 + unsigned(b));
    prefix.append(b, pk[b].data(), pv[b].data(), lp[b]);
    suffix.append(b, sk[b].data(), sv[b].data(), ls[b]);
  }
  const mat q = naive::random(B * H * n * d, 78);
  const auto qt = naive::make<attnx::tensor<double, B, H, n, d>>(q);
  const double scale = 0.3;
  const auto sp = attnx::partial_attention(qt, prefix, attnx::cache_keys::all, scale);
  const auto ss = attnx::partial_attention(qt, suffix, attnx::cache_keys::causal_rows, scale);
  const auto m = attnx::merge(sp, ss);
  const auto plain = attnx::attend(qt, suffix, scale);  // the suffix alone, causal
  const auto deflt = attnx::partial_attention(qt, suffix);  // scale 1/sqrt(d), causal
  double err = 0, lerr = 0;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < n; ++i) {
        const double* qr = q.data() + ((b * H + h) * n + i) * d;
        const std::size_t g = h / (H / G), last = ls[b] - n + i;  // the row is suffix token `last`
        std::vector<const double*> kp, vp, ks, vs;
        for (std::size_t j = 0; j < lp[b]; ++j) kp.push_back(pk[b].data() + (j * G + g) * d), vp.push_back(pv[b].data() + (j * G + g) * d);
        for (std::size_t j = 0; j <= last; ++j) ks.push_back(sk[b].data() + (j * G + g) * d), vs.push_back(sv[b].data() + (j * G + g) * d);
        double o[d], l;
        one_row(qr, kp, vp, d, scale, o, l);  // the prefix alone
        for (std::size_t c = 0; c < d; ++c) err = std::max(err, std::abs(sp.out(b, h, i, c) - o[c]));
        if (lp[b] == 0) BOOST_TEST(sp.lse(b, h, i) == -std::numeric_limits<double>::infinity());
        else lerr = std::max(lerr, std::abs(sp.lse(b, h, i) - l));
        one_row(qr, ks, vs, d, scale, o, l);  // the suffix alone
        for (std::size_t c = 0; c < d; ++c) {
          err = std::max(err, std::abs(ss.out(b, h, i, c) - o[c]));
          err = std::max(err, std::abs(plain(b, h, i, c) - o[c]));
        }
        lerr = std::max(lerr, std::abs(ss.lse(b, h, i) - l));
        std::vector<const double*> ka = kp, va = vp;
        ka.insert(ka.end(), ks.begin(), ks.end());
        va.insert(va.end(), vs.begin(), vs.end());
        one_row(qr, ka, va, d, scale, o, l);  // both
        for (std::size_t c = 0; c < d; ++c) err = std::max(err, std::abs(m.out(b, h, i, c) - o[c]));
        lerr = std::max(lerr, std::abs(m.lse(b, h, i) - l));
        one_row(qr, ks, vs, d, 1 / std::sqrt(double(d)), o, l);
        for (std::size_t c = 0; c < d; ++c) err = std::max(err, std::abs(deflt.out(b, h, i, c) - o[c]));
      }
  BOOST_TEST(err <= 1e-13);
  BOOST_TEST(lerr <= 1e-13);
  // a float cache takes a scale of any arithmetic type (converted to float), with or without cache_keys
  attnx::kv_cache<float, G, d> fc(B, 16);
  const std::vector<float> fk(as<float>(sk[1])), fv(as<float>(sv[1]));
  for (std::size_t b = 0; b < B; ++b) fc.append(b, fk.data(), fv.data(), ls[1]);
  const auto qf = naive::make<attnx::tensor<float, B, H, n, d>>(q);
  const auto f1 = attnx::attend(qf, fc, 0.3), f2 = attnx::attend(qf, fc, 0.3f);
  const auto f3 = attnx::partial_attention(qf, fc, 0.3), f4 = attnx::partial_attention(qf, fc, attnx::cache_keys::causal_rows, 0.3);
  BOOST_TEST(std::memcmp(f1.data(), f2.data(), sizeof(float) * f1.numel()) == 0);
  BOOST_TEST(std::memcmp(f3.out.data(), f2.data(), sizeof(float) * f2.numel()) == 0);
  BOOST_TEST(std::memcmp(f4.lse.data(), f3.lse.data(), sizeof(float) * f3.lse.numel()) == 0);
  BOOST_TEST(std::abs(f1(1, 2, 1, 3) - plain(1, 2, 1, 3)) <= 1e-5);  // (the same keys as the suffix's item 1)
  // causal rows must be among the item's tokens: the error names the item
  attnx::kv_cache<double, G, d> short_item(B, 4);
  short_item.append(0, sk[0].data(), sv[0].data(), 3);
  short_item.append(1, sk[1].data(), sv[1].data(), 1);
  BOOST_CHECK_EXCEPTION((void)attnx::attend(qt, short_item), attnx::extent_error,
                        says({"every query row must be one of the cache's tokens (append first; batch item 1): cache_length 1, query_rows 2"}));
  BOOST_CHECK_EXCEPTION((void)attnx::partial_attention(qt, short_item), attnx::extent_error, says({"batch item 1"}));
  // q's batch must be the cache's
  attnx::kv_cache<double, G, d> wider(B + 1, 4);
  BOOST_CHECK_EXCEPTION((void)attnx::attend(qt, wider), attnx::extent_error,
                        says({"attend(q, cache): q's batch must be the cache's: q_batch 2, cache_batch 3"}));
  BOOST_CHECK_EXCEPTION((void)attnx::partial_attention(qt, wider), attnx::extent_error,
                        says({"partial_attention(q, cache): q's batch must be the cache's: q_batch 2, cache_batch 3"}));
  // ... except a cache of one item with cache_keys::all, which every item of q reads (a prefix stored once; the kernel
  // takes the items' rows as rows of one problem): the tokens stored in every item give the same within rounding
  // (double, and bf16 under float queries); causal rows still refuse it
  attnx::kv_cache<double, G, d> once(1, 4), every(B, 4);
  once.append(0, sk[0].data(), sv[0].data(), 3);
  for (std::size_t b = 0; b < B; ++b) every.append(b, sk[0].data(), sv[0].data(), 3);
  const auto s_once = attnx::partial_attention(qt, once, attnx::cache_keys::all);
  const auto s_every = attnx::partial_attention(qt, every, attnx::cache_keys::all);
  const auto all_of = [](const auto& t) { return mat(t.data(), t.data() + t.numel()); };
  BOOST_TEST(max_err(s_once.out, all_of(s_every.out)) <= 1e-14);
  BOOST_TEST(max_err(s_once.lse, all_of(s_every.lse)) <= 1e-14);
  BOOST_TEST(std::abs(s_once.out(1, 2, 1, 3) - s_once.out(0, 2, 1, 3)) > 1e-6);  // (each item's own queries)
  attnx::kv_cache<float, G, d, d, attnx::bf16> once16(1, 4), every16(B, 4);
  const std::vector<float> k0(as<float>(sk[0])), v0(as<float>(sv[0]));
  once16.append(0, k0.data(), v0.data(), 3);
  for (std::size_t b = 0; b < B; ++b) every16.append(b, k0.data(), v0.data(), 3);
  const auto h_once = attnx::partial_attention(qf, once16, attnx::cache_keys::all);
  const auto h_every = attnx::partial_attention(qf, every16, attnx::cache_keys::all);
  BOOST_TEST(max_err(h_once.out, all_of(h_every.out)) <= 1e-6);
  BOOST_TEST(max_err(h_once.lse, all_of(h_every.lse)) <= 1e-6);
  BOOST_CHECK_EXCEPTION((void)attnx::partial_attention(qt, once), attnx::extent_error, says({"q_batch 2, cache_batch 1"}));
  BOOST_CHECK_EXCEPTION((void)attnx::attend(qt, once), attnx::extent_error, says({"q_batch 2, cache_batch 1"}));
  // every item empty, all keys: no key anywhere (L_k 0 for the kernel), out 0 and lse -inf from the kernel
  attnx::kv_cache<double, G, d> empty(B, 4);
  const auto se = attnx::partial_attention(qt, empty, attnx::cache_keys::all);
  BOOST_TEST(se.lse(1, 3, 1) == -std::numeric_limits<double>::infinity());
  BOOST_TEST(se.out(0, 0, 0, 0) == 0.0);
  const auto me = attnx::merge(se, ss);  // adds nothing
  BOOST_TEST(std::memcmp(me.out.data(), ss.out.data(), sizeof(double) * ss.out.numel()) == 0);
}

BOOST_AUTO_TEST_CASE(masked_attention_over_caches) {
  // attend / partial_attention with masks over (B, heads, n, keys), the key axis indexing cache positions: an
  // allowed mask per item and row (capacity wide, one row with no key allowed), a blocked mask of rank 2 (rows,
  // keys: broadcast over items and heads), a bias per head (as wide as the longest item); with the cache's causal
  // order (causal_rows) and over every key held (all); merged states of a prefix and a suffix under masks equal the
  // masked attention over both.
  constexpr std::size_t B = 2, H = 4, G = 2, d = 8, n = 2, cap = 16;
  const std::size_t lp[B] = {7, 3}, ls[B] = {5, 6};
  attnx::kv_cache<double, G, d> prefix(B, cap), suffix(B, cap);
  mat pk[B], pv[B], sk[B], sv[B];
  for (std::size_t b = 0; b < B; ++b) {
    pk[b] = naive::random(lp[b] * G * d, 170 + unsigned(b), -2, 2);
    pv[b] = naive::random(lp[b] * G * d, 172 + unsigned(b));
    sk[b] = naive::random(ls[b] * G * d, 174 + unsigned(b), -2, 2);
    sv[b] = naive::random(ls[b] * G * d, 176 + unsigned(b));
    prefix.append(b, pk[b].data(), pv[b].data(), lp[b]);
    suffix.append(b, sk[b].data(), sv[b].data(), ls[b]);
  }
  const mat q = naive::random(B * H * n * d, 178);
  const auto qt = naive::make<attnx::tensor<double, B, H, n, d>>(q);
  attnx::tensor<bool, B, 1, n, cap> allow;
  attnx::tensor<bool, n, cap> block;
  attnx::tensor<double, 1, H, 1, 7> bias;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < cap; ++j) allow(b, 0, i, j) = !(b == 1 && i == 0) && (j * 7 + b * 3 + i) % 5 != 1;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < cap; ++j) block(i, j) = j == 2 + i;
  for (std::size_t h = 0; h < H; ++h)
    for (std::size_t j = 0; j < 7; ++j) bias(0, h, 0, j) = 0.25 * double((h * 5 + j * 3) % 7) - 0.5;
  const double scale = 0.3;
  const auto ap = attnx::attend(qt, suffix, attnx::allowed(allow), attnx::blocked(block), attnx::additive(bias), scale);
  const auto sp = attnx::partial_attention(qt, suffix, attnx::allowed(allow), attnx::blocked(block), attnx::additive(bias), scale);
  const auto pp = attnx::partial_attention(qt, prefix, attnx::cache_keys::all, attnx::allowed(allow), attnx::blocked(block),
                                           attnx::additive(bias), scale);
  const auto m = attnx::merge(pp, sp);
  // Whether row i of item b sees position j under the two boolean masks (the bias adds to every head's score).
  const auto visible = [&](std::size_t b, std::size_t i, std::size_t j) { return allow(b, 0, i, j) && !block(i, j); };
  double err = 0, lerr = 0;
  std::size_t dark = 0;  // rows with no visible key: out 0, lse -inf
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < n; ++i) {
        const double* qr = q.data() + ((b * H + h) * n + i) * d;
        const std::size_t g = h / (H / G), last = ls[b] - n + i;
        std::vector<const double*> kp, vp, ks, vs;
        std::vector<double> bp, bs;
        for (std::size_t j = 0; j < lp[b]; ++j)
          if (visible(b, i, j))
            kp.push_back(pk[b].data() + (j * G + g) * d), vp.push_back(pv[b].data() + (j * G + g) * d), bp.push_back(bias(0, h, 0, j));
        for (std::size_t j = 0; j <= last; ++j)
          if (visible(b, i, j))
            ks.push_back(sk[b].data() + (j * G + g) * d), vs.push_back(sv[b].data() + (j * G + g) * d), bs.push_back(bias(0, h, 0, j));
        double o[d], l;
        one_row(qr, ks, vs, d, scale, o, l, bs);  // the suffix, causal
        for (std::size_t c = 0; c < d; ++c) err = std::max({err, std::abs(ap(b, h, i, c) - o[c]), std::abs(sp.out(b, h, i, c) - o[c])});
        if (ks.empty()) {
          ++dark;
          BOOST_TEST(sp.lse(b, h, i) == -std::numeric_limits<double>::infinity());
        } else {
          lerr = std::max(lerr, std::abs(sp.lse(b, h, i) - l));
        }
        one_row(qr, kp, vp, d, scale, o, l, bp);  // the prefix, every key
        for (std::size_t c = 0; c < d; ++c) err = std::max(err, std::abs(pp.out(b, h, i, c) - o[c]));
        if (!kp.empty()) lerr = std::max(lerr, std::abs(pp.lse(b, h, i) - l));
        std::vector<const double*> ka = kp, va = vp;
        std::vector<double> ba = bp;
        ka.insert(ka.end(), ks.begin(), ks.end());
        va.insert(va.end(), vs.begin(), vs.end());
        ba.insert(ba.end(), bs.begin(), bs.end());
        one_row(qr, ka, va, d, scale, o, l, ba);  // both
        for (std::size_t c = 0; c < d; ++c) err = std::max(err, std::abs(m.out(b, h, i, c) - o[c]));
        if (!ka.empty()) lerr = std::max(lerr, std::abs(m.lse(b, h, i) - l));
      }
  BOOST_TEST(dark == H);  // (item 1's row 0 in every head)
  BOOST_TEST(err <= 1e-13);
  BOOST_TEST(lerr <= 1e-13);
  // the masks change the result (a test of the masks, not of attention alone)
  const auto unmasked = attnx::attend(qt, suffix, scale);
  BOOST_TEST(std::abs(unmasked(0, 1, 1, 2) - ap(0, 1, 1, 2)) > 1e-3);
  // the default scale, a context, a scale of another arithmetic type: the same bits as spelled out
  const attnx::context& ctx = attnx::current_context();
  const auto d1 = attnx::attend(qt, suffix, attnx::additive(bias));
  const auto d2 = attnx::attend(qt, suffix, attnx::additive(bias), 1 / std::sqrt(double(d)), ctx);
  const auto d3 = attnx::attend(qt, suffix, attnx::additive(bias), ctx);
  const auto d4 = attnx::attend(qt, suffix, attnx::allowed(allow), attnx::blocked(block), attnx::additive(bias), 0.3f);
  BOOST_TEST(std::memcmp(d1.data(), d2.data(), sizeof(double) * d1.numel()) == 0);
  BOOST_TEST(std::memcmp(d1.data(), d3.data(), sizeof(double) * d1.numel()) == 0);
  BOOST_TEST(std::abs(d4(1, 3, 1, 5) - ap(1, 3, 1, 5)) <= 1e-7);  // (0.3f is not 0.3)
  // a float cache of bf16 under the same masks: within bf16's rounding of K and V
  attnx::kv_cache<float, G, d, d, attnx::bf16> half(B, cap);
  for (std::size_t b = 0; b < B; ++b) {
    const std::vector<float> fk(as<float>(sk[b])), fv(as<float>(sv[b]));
    half.append(b, fk.data(), fv.data(), ls[b]);
  }
  const auto qf = naive::make<attnx::tensor<float, B, H, n, d>>(q);
  const attnx::tensor<float, 1, H, 1, 7> fbias = attnx::cast<float>(bias);
  const auto hf = attnx::attend(qf, half, attnx::allowed(allow), attnx::blocked(block), attnx::additive(fbias), 0.3f);
  BOOST_TEST(max_err(ap, mat(hf.data(), hf.data() + hf.numel())) <= 2e-2);
  // a prefix stored once (a cache of one item, read by every item of q with all) under per-item masks: as stored in
  // every item
  attnx::kv_cache<double, G, d> once(1, cap), every(B, cap);
  once.append(0, pk[0].data(), pv[0].data(), lp[0]);
  for (std::size_t b = 0; b < B; ++b) every.append(b, pk[0].data(), pv[0].data(), lp[0]);
  const auto so = attnx::partial_attention(qt, once, attnx::cache_keys::all, attnx::allowed(allow), attnx::additive(bias), scale);
  const auto se = attnx::partial_attention(qt, every, attnx::cache_keys::all, attnx::allowed(allow), attnx::additive(bias), scale);
  const auto all_of = [](const auto& t) { return mat(t.data(), t.data() + t.numel()); };
  BOOST_TEST(max_err(so.out, all_of(se.out)) <= 1e-14);
  BOOST_TEST(std::memcmp(so.lse.data(), se.lse.data(), sizeof(double) * so.lse.numel()) == 0);  // (-inf rows included)
  BOOST_TEST(std::abs(so.out(0, 1, 1, 2) - so.out(1, 1, 1, 2)) > 1e-6);  // (each item's own mask and queries)
  // a scale of any type convertible to T (a bf16 for a float cache) takes the overloads without masks
  const auto hb = attnx::attend(qf, half, attnx::bf16(0.125f));
  const auto hs = attnx::attend(qf, half, 0.125f);
  BOOST_TEST(std::memcmp(hb.data(), hs.data(), sizeof(float) * hb.numel()) == 0);
  // ... and after masks, as the scale of the masked overloads
  const auto hmb = attnx::attend(qf, half, attnx::additive(fbias), attnx::bf16(0.125f));
  const auto hms = attnx::attend(qf, half, attnx::additive(fbias), 0.125f, attnx::current_context());
  BOOST_TEST(std::memcmp(hmb.data(), hms.data(), sizeof(float) * hmb.numel()) == 0);
  BOOST_TEST(std::abs(hmb(0, 1, 1, 2) - hs(0, 1, 1, 2)) > 1e-4);  // (the bias counts)
  // run-time rules, before anything runs: the key axis must cover the longest item (6), other axes match q's
  attnx::tensor<double, 1, 1, 1, attnx::dyn> narrow(5);
  BOOST_CHECK_EXCEPTION((void)attnx::attend(qt, suffix, attnx::additive(narrow)), attnx::extent_error,
                        says({"attend(q, cache): a mask's key axis must cover every key an item holds (or be 1 in its type): "
                              "mask_keys 5, keys 6"}));
  attnx::tensor<bool, attnx::dyn, 1, 1, cap> items(3);
  BOOST_CHECK_EXCEPTION((void)attnx::partial_attention(qt, suffix, attnx::allowed(items)), attnx::extent_error,
                        says({"partial_attention(q, cache): a mask's batch axis must be q's batch (or 1 in its type): mask_batch 3, q_batch 2"}));
  attnx::tensor<bool, attnx::dyn, cap> rows(3);
  BOOST_CHECK_EXCEPTION((void)attnx::partial_attention(qt, prefix, attnx::cache_keys::all, attnx::blocked(rows)),
                        attnx::extent_error, says({"a mask's row axis must be q's rows (or 1 in its type): mask_rows 3, query_rows 2"}));
  // with all, the longest item of the prefix (7) sets the key axis's least extent
  BOOST_CHECK_EXCEPTION((void)attnx::partial_attention(qt, prefix, attnx::cache_keys::all, attnx::additive(narrow)),
                        attnx::extent_error, says({"mask_keys 5, keys 7"}));
}

// The named masks over a cache of ragged items: positions are each item's own (its queries the last n of its
// tokens), so sliding_window(W) is a rolling window over what each item holds. Against the same windows written as a
// bool mask over (B, heads, n, keys) from each item's length (every tile computed: the same bits), on every
// instruction set, prefill (n = 20) and decode (n = 1, 3) over caches past a decode chunk; a window changes the
// result; documents() over a cache throws.
BOOST_AUTO_TEST_CASE(named_masks_over_a_ragged_cache) {
  constexpr std::size_t B = 2, H = 4, G = 2, d = 16, cap = 1400;
  const std::size_t len[B] = {1300, 700};
  attnx::kv_cache<float, G, d> cache(B, cap);
  for (std::size_t b = 0; b < B; ++b) {
    const mat k = naive::random(len[b] * G * d, 300 + unsigned(b), -2, 2), v = naive::random(len[b] * G * d, 302 + unsigned(b));
    const std::vector<float> kf(k.begin(), k.end()), vf(v.begin(), v.end());
    cache.append(b, kf.data(), vf.data(), len[b]);
  }
  const auto run = [&]<std::size_t n>(std::integral_constant<std::size_t, n>) {
    const mat qd = naive::random(B * H * n * d, 310 + unsigned(n));
    attnx::tensor<float, B, H, n, d> q;
    std::copy(qd.begin(), qd.end(), q.begin());
    const auto check = [&](const attnx::key_range_mask& named, auto visible, const char* what) {
      attnx::tensor<bool, B, 1, n, cap> allow;
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t i = 0; i < n; ++i)
          for (std::size_t j = 0; j < cap; ++j) allow(b, 0, i, j) = visible(len[b] - n + i, j);
      for (attnx::simd::isa isa : attnx::simd::supported()) {
        attnx::context ctx;
        ctx.set_isa(isa);
        const auto a = attnx::attend(q, cache, named, ctx), c = attnx::attend(q, cache, attnx::allowed(allow), ctx);
        BOOST_TEST(std::memcmp(a.data(), c.data(), sizeof(float) * a.numel()) == 0,
                   what << " n " << n << " (" << attnx::simd::name(isa) << ")");
      }
      const auto full = attnx::attend(q, cache);
      const auto a = attnx::attend(q, cache, named);
      double diff = 0;
      for (std::size_t e = 0; e < a.numel(); ++e) diff = std::max(diff, double(std::abs(a.data()[e] - full.data()[e])));
      BOOST_TEST(diff > 1e-3, what << " n " << n << ": the mask changes nothing");
    };
    check(attnx::sliding_window(64), [](std::size_t t, std::size_t j) { return j + 64 > t; }, "sliding_window(64)");
    check(attnx::sliding_window(600), [](std::size_t t, std::size_t j) { return j + 600 > t; }, "sliding_window(600)");
    check(attnx::chunked(256), [](std::size_t t, std::size_t j) { return j / 256 == t / 256; }, "chunked(256)");
  };
  run(std::integral_constant<std::size_t, 1>{});
  run(std::integral_constant<std::size_t, 3>{});
  run(std::integral_constant<std::size_t, 20>{});
  attnx::tensor<float, B, H, 1, d> q1;
  const std::array<std::size_t, 2> offs{0, 10};
  try {
    (void)attnx::attend(q1, cache, attnx::documents(offs));
    BOOST_TEST(false, "no exception for documents() over a cache");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("documents(offsets) over a cache is not supported") != std::string::npos);
  }
}

// softcap and alibi over a ragged cache (with a window): item by item against the expression's attention over the
// item's own keys (bottom-right causal), GQA through repeat_heads; decode (n = 1, 2) and prefill over the cache (n = 20).
namespace {
// Item b's query rows of q (1, H, n, d), and the len keys and values it appended (rows j of G heads of d: k, v) as
// (1, G, len, d): attend over a cache written out as attention().
template <std::size_t G, std::size_t H, std::size_t n, std::size_t d, class Q, class Store>
auto item_operands(const Q& q, std::size_t b, const std::vector<Store>& k, const std::vector<Store>& v, std::size_t len) {
  using T = attnx::value_t<Q>;
  attnx::tensor<T, 1, H, n, d> qb;
  attnx::tensor<T, 1, G, dyn, d> kb(len), vb(len);
  for (std::size_t h = 0; h < H; ++h)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < d; ++c) qb(0, h, i, c) = q(b, h, i, c);
  for (std::size_t g = 0; g < G; ++g)
    for (std::size_t j = 0; j < len; ++j)
      for (std::size_t c = 0; c < d; ++c) kb(0, g, j, c) = k[(j * G + g) * d + c], vb(0, g, j, c) = v[(j * G + g) * d + c];
  return std::tuple{qb, kb, vb};
}
}  // namespace

BOOST_AUTO_TEST_CASE(softcap_and_alibi_over_a_ragged_cache) {
  constexpr std::size_t B = 2, H = 4, G = 2, d = 16, cap = 1100;
  const std::size_t len[B] = {1050, 600};
  attnx::kv_cache<float, G, d> cache(B, cap);
  std::vector<float> kf[B], vf[B];
  for (std::size_t b = 0; b < B; ++b) {
    const mat k = naive::random(len[b] * G * d, 320 + unsigned(b), -2, 2), v = naive::random(len[b] * G * d, 322 + unsigned(b));
    kf[b].assign(k.begin(), k.end());
    vf[b].assign(v.begin(), v.end());
    cache.append(b, kf[b].data(), vf[b].data(), len[b]);
  }
  const auto run = [&]<std::size_t n>(std::integral_constant<std::size_t, n>) {
    const mat qd = naive::random(B * H * n * d, 330 + unsigned(n), -3, 3);
    attnx::tensor<float, B, H, n, d> q;
    std::copy(qd.begin(), qd.end(), q.begin());
    const auto got_c = attnx::attend(q, cache, attnx::softcap(2.f), attnx::sliding_window(300));
    const auto got_a = attnx::attend(q, cache, attnx::alibi());
    for (std::size_t b = 0; b < B; ++b) {
      const auto [qb, kb, vb] = item_operands<G, H, n, d>(q, b, kf[b], vf[b], len[b]);
      const auto K = attnx::repeat_heads<H / G>(kb);
      const auto V = attnx::repeat_heads<H / G>(vb);
      const auto want_c = attnx::evaluate(
          attnx::attention(qb, K, V, attnx::softcap(2.f), attnx::causal_bottom_right, attnx::sliding_window(300)));
      const auto want_a = attnx::evaluate(attnx::attention(qb, K, V, attnx::causal_bottom_right, attnx::alibi()));
      double ec = 0, ea = 0;
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t i = 0; i < n; ++i)
          for (std::size_t c = 0; c < d; ++c) {
            ec = std::max(ec, double(std::abs(got_c(b, h, i, c) - want_c(0, h, i, c))));
            ea = std::max(ea, double(std::abs(got_a(b, h, i, c) - want_a(0, h, i, c))));
          }
      BOOST_TEST(ec < 2e-6, "softcap + window, item " << b << ", n " << n << ": " << ec);
      BOOST_TEST(ea < 2e-6, "alibi, item " << b << ", n " << n << ": " << ea);
    }
  };
  run(std::integral_constant<std::size_t, 1>{});
  run(std::integral_constant<std::size_t, 2>{});
  run(std::integral_constant<std::size_t, 20>{});
  attnx::tensor<float, B, H, 1, d> q1;
  BOOST_CHECK_THROW((void)attnx::attend(q1, cache, attnx::softcap(0.f)), std::invalid_argument);
  const std::array<double, 3> three{0.1, 0.2, 0.3};
  BOOST_CHECK_THROW((void)attnx::attend(q1, cache, attnx::alibi(three)), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(rollback_then_step) {
  // Speculative decoding: 6 tokens, 3 drafted tokens stepped and rejected (truncate), then the true tokens: the
  // outputs equal the causal forward pass of the true sequence (the rejected keys are gone).
  using M = attnx::multi_head_attention<double, 32, 4, attnx::mha_options{.kv_heads = 2, .bias = false}>;
  const model<M> w;
  constexpr std::size_t L = 12;
  const mat x = naive::random(L * 32, 81), draft = naive::random(3 * 32, 82);
  attnx::kv_cache<double, 2, 8> cache(1, 8);
  mat got(L * 32);
  const auto step = [&](const double* rows, std::size_t n, double* out) {
    attnx::tensor<double, dyn, 32> xt(n);
    std::copy_n(rows, n * 32, xt.data());
    const auto y = w.m.step(xt, cache, 0);
    if (out) std::copy_n(y.data(), n * 32, out);
  };
  step(x.data(), 6, got.data());
  BOOST_CHECK_THROW(step(draft.data(), 3, nullptr), std::length_error);  // 9 tokens in a capacity of 8
  cache.reserve(16);  // grown: the 6 tokens kept
  BOOST_TEST(cache.capacity() == 16u);
  step(draft.data(), 3, nullptr);
  BOOST_TEST(cache.length(0) == 9u);
  cache.truncate(0, 6);
  step(x.data() + 6 * 32, 2, got.data() + 6 * 32);
  for (std::size_t t = 8; t < L; ++t) step(x.data() + t * 32, 1, got.data() + t * 32);
  const mat want = reference_forward(x, w.wq, w.wk, w.wv, w.wo, 1, L, 32, 4, 2, 8);
  double err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(got[i] - want[i]));
  BOOST_TEST(err <= 1e-12);
  // reset, then the same sequence again: the same outputs
  cache.reset(0);
  mat again(L * 32);
  step(x.data(), L, again.data());
  double err2 = 0;
  for (std::size_t i = 0; i < want.size(); ++i) err2 = std::max(err2, std::abs(again[i] - want[i]));
  BOOST_TEST(err2 <= 1e-12);
}

BOOST_AUTO_TEST_CASE(merge_shapes_ranges_and_special_values) {
  using state = attnx::attention_state<float, attnx::make_shape<dyn, 4>>;
  state a{attnx::tensor<float, dyn, 4>(3), attnx::tensor<float, dyn>(3)}, b{attnx::tensor<float, dyn, 4>(2), attnx::tensor<float, dyn>(2)},
      c{attnx::tensor<float, dyn, 4>(3), attnx::tensor<float, dyn>(2)};
  BOOST_CHECK_EXCEPTION(attnx::merge(a, b), attnx::extent_error,
                        says({"merge: the attention states' outputs must have one shape (state 1, axis 0): extent 2, first_state_extent 3"}));
  // a state whose lse does not match its output: refused before any row is read
  BOOST_CHECK_EXCEPTION(attnx::merge(a, c), attnx::extent_error,
                        says({"lse must have its output's shape without the last axis (state 1, axis 0): lse_extent 2, out_extent 3"}));
  BOOST_CHECK_EXCEPTION(attnx::merge(c), attnx::extent_error, says({"(state 0, axis 0): lse_extent 2, out_extent 3"}));
  // +inf lse (a +inf score in each): the outputs averaged with equal weight, lse +inf; NaN stays NaN; a std::vector
  constexpr float inf = std::numeric_limits<float>::infinity();
  state x{attnx::tensor<float, dyn, 4>(2), attnx::tensor<float, dyn>(2)}, y{attnx::tensor<float, dyn, 4>(2), attnx::tensor<float, dyn>(2)};
  for (std::size_t c4 = 0; c4 < 4; ++c4) {
    x.out(0, c4) = float(c4 + 1);
    y.out(0, c4) = float(3 - c4);
    x.out(1, c4) = 1.0f;
    y.out(1, c4) = 5.0f;
  }
  x.lse(0) = inf;
  y.lse(0) = inf;
  x.lse(1) = std::numeric_limits<float>::quiet_NaN();
  y.lse(1) = 0.5f;
  const std::vector<state> both{x, y};
  const auto m = attnx::merge(both);
  BOOST_TEST(m.lse(0) == inf);
  for (std::size_t c4 = 0; c4 < 4; ++c4) BOOST_TEST(m.out(0, c4) == 2.0f);
  BOOST_TEST(std::isnan(m.lse(1)));
  BOOST_TEST(std::isnan(m.out(1, 0)));
  // one state at +inf and one finite: the +inf one takes all the weight
  y.lse(0) = 3.0f;
  const auto m2 = attnx::merge(x, y);
  BOOST_TEST(m2.lse(0) == inf);
  BOOST_TEST(m2.out(0, 3) == 4.0f);
  // a state of no visible key (lse -inf) adds nothing whatever its output holds (built by hand: NaN here)
  x.lse(0) = -inf;
  x.lse(1) = -inf;
  for (std::size_t c4 = 0; c4 < 4; ++c4) x.out(0, c4) = x.out(1, c4) = std::numeric_limits<float>::quiet_NaN();
  const auto m3 = attnx::merge(x, y);
  BOOST_TEST(std::memcmp(m3.out.data(), y.out.data(), sizeof(float) * y.out.numel()) == 0);
  BOOST_TEST(std::memcmp(m3.lse.data(), y.lse.data(), sizeof(float) * y.lse.numel()) == 0);
}

BOOST_AUTO_TEST_CASE(grow_fork_reorder_and_raw_rows) {
  // Token t of item b, KV head g, element e: key b * 64 + t * 16 + g * 4 + e (below 256: exact in bf16), value
  // its negative.
  constexpr std::size_t G = 2, d = 4;
  using cache_t = attnx::kv_cache<float, G, d, d, attnx::bf16>;
  const auto key_of = [](std::size_t b, std::size_t t, std::size_t g, std::size_t e) { return float(b * 64 + t * 16 + g * 4 + e); };
  const auto fill = [&](cache_t& c, std::size_t b, std::size_t t0, std::size_t n) {
    std::vector<float> k(n * G * d), v(n * G * d);
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t g = 0; g < G; ++g)
        for (std::size_t e = 0; e < d; ++e) {
          k[(t * G + g) * d + e] = key_of(b, t0 + t, g, e);
          v[(t * G + g) * d + e] = -key_of(b, t0 + t, g, e);
        }
    c.append(b, k.data(), v.data(), n);
  };
  cache_t c(3, 2);
  fill(c, 0, 0, 2);
  fill(c, 1, 0, 1);
  BOOST_CHECK_THROW(fill(c, 0, 2, 1), std::length_error);
  c.reserve(1);  // never shrinks
  BOOST_TEST(c.capacity() == 2u);
  c.reserve(5);
  BOOST_TEST(c.capacity() == 5u);
  BOOST_TEST(c.length(0) == 2u);
  BOOST_TEST(c.length(1) == 1u);
  BOOST_TEST(c.length(2) == 0u);
  BOOST_TEST(c.key(0, 1, 1, 3) == key_of(0, 1, 1, 3));
  BOOST_TEST(c.value(1, 0, 0, 0) == -key_of(1, 0, 0, 0));
  fill(c, 0, 2, 2);  // room now
  BOOST_TEST(c.key(0, 1, 3, 1) == key_of(0, 3, 1, 1));
  // fork: item 2 takes item 0's four tokens
  c.copy_item(0, 2);
  BOOST_TEST(c.length(2) == 4u);
  BOOST_TEST(c.key(2, 1, 3, 1) == key_of(0, 3, 1, 1));
  BOOST_TEST(c.value(2, 0, 2, 0) == -key_of(0, 2, 0, 0));
  BOOST_TEST(c.length(0) == 4u);  // the source is unchanged
  // beam search: item 0 <- 1, item 1 <- 1, item 2 <- 0
  fill(c, 2, 4, 1);  // item 2 now differs from item 0 by a fifth token
  const std::size_t beams[3] = {1, 1, 0};
  c.reorder(beams);
  BOOST_TEST(c.length(0) == 1u);
  BOOST_TEST(c.length(1) == 1u);
  BOOST_TEST(c.length(2) == 4u);
  BOOST_TEST(c.key(0, 1, 0, 1) == key_of(1, 0, 1, 1));
  BOOST_TEST(c.key(1, 0, 0, 0) == key_of(1, 0, 0, 0));
  BOOST_TEST(c.key(2, 1, 3, 1) == key_of(0, 3, 1, 1));
  BOOST_TEST(c.capacity() == 5u);
  const std::size_t two[2] = {0, 1}, past[3] = {0, 3, 1};
  BOOST_CHECK_EXCEPTION(c.reorder(two), attnx::extent_error, says({"kv_cache: reorder: one source item per batch item: sources 2, batch 3"}));
  BOOST_CHECK_EXCEPTION(c.reorder(past), std::out_of_range, says({"batch item 3 of a cache of 3"}));
  BOOST_TEST(c.length(2) == 4u);  // a refused reorder changes nothing
  {  // beams forked from survivors (item 0 <- 2, items 1 and 2 keep theirs): in place, the same result
    cache_t f = c;
    const std::size_t forks[3] = {2, 1, 2};
    f.reorder(forks);
    BOOST_TEST(f.length(0) == 4u);
    BOOST_TEST(f.length(1) == 1u);
    BOOST_TEST(f.length(2) == 4u);
    BOOST_TEST(f.key(0, 1, 3, 1) == key_of(0, 3, 1, 1));
    BOOST_TEST(f.value(0, 0, 2, 3) == -key_of(0, 2, 0, 3));
    BOOST_TEST(f.key(1, 0, 0, 0) == key_of(1, 0, 0, 0));
    // another cache's item: into item 1 of a cache of capacity 4; one of 3 is too small for it
    cache_t g(2, 4), small(1, 3);
    g.copy_item(f, 0, 1);
    BOOST_TEST(g.length(0) == 0u);
    BOOST_TEST(g.length(1) == 4u);
    BOOST_TEST(g.key(1, 1, 3, 1) == key_of(0, 3, 1, 1));
    BOOST_CHECK_EXCEPTION(small.copy_item(f, 0, 0), std::length_error,
                          says({"kv_cache: copy_item: batch item 0 holds 4 tokens, more than the capacity 3"}));
    BOOST_TEST(small.length(0) == 0u);
    BOOST_CHECK_THROW(g.copy_item(f, 3, 0), std::out_of_range);
    small.copy_item(f, 1, 0);
    BOOST_TEST(small.length(0) == 1u);
    BOOST_TEST(small.value(0, 1, 0, 2) == -key_of(1, 0, 1, 2));
  }
  // the stored rows as stored: save item 2 and restore it into another cache, bit for bit
  const auto kr = c.key_rows(2, 1), vr = c.value_rows(2, 1);
  BOOST_TEST(kr.size() == 4 * d);
  BOOST_TEST(float(kr[3 * d + 1]) == key_of(0, 3, 1, 1));
  cache_t r(1, 8);
  std::vector<float> k(4 * G * d), v(4 * G * d);
  for (std::size_t g = 0; g < G; ++g) {
    const auto kg = c.key_rows(2, g), vg = c.value_rows(2, g);
    for (std::size_t t = 0; t < 4; ++t)
      for (std::size_t e = 0; e < d; ++e) {
        k[(t * G + g) * d + e] = float(kg[t * d + e]);
        v[(t * G + g) * d + e] = float(vg[t * d + e]);
      }
  }
  r.append(0, k.data(), v.data(), 4);
  for (std::size_t g = 0; g < G; ++g) {
    BOOST_TEST(std::memcmp(r.key_rows(0, g).data(), c.key_rows(2, g).data(), 4 * d * sizeof(attnx::bf16)) == 0);
    BOOST_TEST(std::memcmp(r.value_rows(0, g).data(), c.value_rows(2, g).data(), 4 * d * sizeof(attnx::bf16)) == 0);
  }
  BOOST_TEST(vr.size() == 4 * d);
  BOOST_CHECK_EXCEPTION((void)c.key_rows(0, 2), std::out_of_range, says({"KV head 2"}));
}

BOOST_AUTO_TEST_CASE(rows_per_item_step) {
  // One call with rows per item (item 0 prefills 4 tokens while item 1 prefills 3), then 1 and 1 twice, then 0 and 1:
  // each item's rows equal the causal forward pass of its own sequence (GQA, float storage); the rules.
  using M = attnx::multi_head_attention<double, 32, 4, attnx::mha_options{.kv_heads = 2, .bias = false}>;
  const model<M> w;
  const std::size_t total[2] = {6, 6};
  const mat x0 = naive::random(total[0] * 32, 91), x1 = naive::random(total[1] * 32, 92);
  const mat* xs[2] = {&x0, &x1};
  attnx::kv_cache<double, 2, 8> cache(2, 8);
  mat got[2] = {mat(total[0] * 32), mat(total[1] * 32)};
  std::size_t at[2] = {0, 0};
  const std::size_t calls[4][2] = {{4, 3}, {1, 1}, {1, 1}, {0, 1}};  // (equal counts: one kernel call for both)
  for (const auto& counts : calls) {
    attnx::tensor<double, dyn, 32> rows(counts[0] + counts[1]);
    for (std::size_t b = 0, r = 0; b < 2; r += counts[b], ++b) std::copy_n(xs[b]->data() + at[b] * 32, counts[b] * 32, rows.data() + r * 32);
    const std::vector<std::size_t> n(std::begin(counts), std::end(counts));
    const auto y = w.m.step(rows, cache, n);
    for (std::size_t b = 0, r = 0; b < 2; r += counts[b], ++b) {
      std::copy_n(y.data() + r * 32, counts[b] * 32, got[b].data() + at[b] * 32);
      at[b] += counts[b];
    }
  }
  BOOST_TEST(cache.length(0) == 6u);
  BOOST_TEST(cache.length(1) == 6u);
  for (std::size_t b = 0; b < 2; ++b) {
    const mat want = reference_forward(*xs[b], w.wq, w.wk, w.wv, w.wo, 1, total[b], 32, 4, 2, 8);
    double err = 0;
    for (std::size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(got[b][i] - want[i]));
    BOOST_TEST(err <= 1e-12);
  }
  // the rules, each before anything is appended
  attnx::tensor<double, dyn, 32> three(3);
  const std::size_t one_count[1] = {3}, wrong_sum[2] = {1, 1}, too_many[2] = {3, 0};
  BOOST_CHECK_EXCEPTION(w.m.step(three, cache, std::span<const std::size_t>(one_count)), attnx::extent_error,
                        says({"multi_head_attention::step: one row count per batch item of the cache: row_counts 1, cache_batch 2"}));
  BOOST_CHECK_EXCEPTION(w.m.step(three, cache, std::span<const std::size_t>(wrong_sum)), attnx::extent_error,
                        says({"x must hold the items' rows, one item after another: input_rows 3, rows_per_item_sum 2"}));
  BOOST_CHECK_EXCEPTION(w.m.step(three, cache, std::span<const std::size_t>(too_many)), std::length_error,
                        says({"appending 3 tokens to batch item 0 of length 6 exceeds the capacity 8"}));
  attnx::tensor<double, dyn, 32> four(4);
  const std::size_t second_full[2] = {1, 3};  // item 0 would fit, item 1 does not: neither is appended
  BOOST_CHECK_EXCEPTION(w.m.step(four, cache, std::span<const std::size_t>(second_full)), std::length_error,
                        says({"appending 3 tokens to batch item 1 of length 6 exceeds the capacity 8"}));
  BOOST_TEST(cache.length(0) == 6u);
  BOOST_TEST(cache.length(1) == 6u);
}

namespace {

// The forward pass with masks, in plain loops: for item b, head h, query i and key j <= i the score is
// q_i . k_j / sqrt(d) + bias(b, h, i, j) where allowed(b, h, i, j), else -inf; a row with no key left gives 0;
// y = merge_heads(heads) W_O (GQA, the module without biases). x (B, L, Dm).
template <class Allowed, class Bias>
mat reference_masked(const mat& x, const mat& wq, const mat& wk, const mat& wv, const mat& wo, std::size_t B, std::size_t L,
                     std::size_t Dm, std::size_t H, std::size_t Hkv, std::size_t d, Allowed allowed, Bias bias) {
  const std::size_t G = H / Hkv;
  mat heads(B * L * H * d, 0.0);  // (B, L, H d)
  for (std::size_t b = 0; b < B; ++b) {
    const mat xb(x.begin() + long(b * L * Dm), x.begin() + long((b + 1) * L * Dm));
    const mat q = naive::matmul(xb, wq, L, Dm, H * d), k = naive::matmul(xb, wk, L, Dm, Hkv * d),
              v = naive::matmul(xb, wv, L, Dm, Hkv * d);
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < L; ++i) {
        mat s(i + 1, -std::numeric_limits<double>::infinity());
        double top = -std::numeric_limits<double>::infinity();
        for (std::size_t j = 0; j <= i; ++j) {
          if (!allowed(b, h, i, j)) continue;
          double dot = 0;
          for (std::size_t c = 0; c < d; ++c) dot += q[i * H * d + h * d + c] * k[j * Hkv * d + (h / G) * d + c];
          s[j] = dot / std::sqrt(double(d)) + bias(b, h, i, j);
          top = std::max(top, s[j]);
        }
        if (top == -std::numeric_limits<double>::infinity()) continue;  // no key: 0
        double sum = 0;
        for (std::size_t j = 0; j <= i; ++j) sum += std::exp(s[j] - top);
        for (std::size_t j = 0; j <= i; ++j) {
          const double p = std::exp(s[j] - top) / sum;
          for (std::size_t c = 0; c < d; ++c) heads[(b * L + i) * H * d + h * d + c] += p * v[j * Hkv * d + (h / G) * d + c];
        }
      }
  }
  return naive::matmul(heads, wo, B * L, H * d, Dm);
}

// An ALiBi-like bias, the slope by head, plus a small term of its own for every (b, h, i, j).
double step_bias(std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
  const double slope = std::pow(2.0, -double(h + 1));
  return -slope * double(i - j) + 0.25 * std::sin(double(1 + b * 7 + h * 5 + i * 3 + j));
}
// Keys blocked by item: a padding inside the cache (a key at 0 is never blocked).
bool step_blocked(std::size_t b, std::size_t j) { return b == 0 ? j % 7 == 2 : j % 5 == 3; }
// Per head and row: row i of head 1 blocks key i - 1 (a tree mask of speculative decoding, say).
bool step_head_blocked(std::size_t h, std::size_t i, std::size_t j) { return h == 1 && j + 1 == i; }

// step(x, cache, blocked(pad), blocked(tree), additive(bias)) chunk by chunk against reference_masked. The
// padding mask (B, 1, 1, keys) and the tree mask (B, H, n, keys) are as wide as the capacity (wide = true) or as
// the keys after the append; the bias (B, H, n, keys) is NaN past each row's own position (never read).
template <class T, std::size_t Dm, std::size_t H, std::size_t Hkv, class Store = T>
void check_masked_steps(std::size_t B, std::size_t L, std::size_t chunk, bool wide, double tol) {
  using M = attnx::multi_head_attention<T, Dm, H, attnx::mha_options{.kv_heads = Hkv, .bias = false}>;
  constexpr std::size_t d = Dm / H;
  const model<M> w;
  const mat x = rounded<T>(B * L * Dm, 23);
  const mat want = reference_masked(
      x, w.wq, w.wk, w.wv, w.wo, B, L, Dm, H, Hkv, d,
      [](std::size_t b, std::size_t h, std::size_t i, std::size_t j) { return !step_blocked(b, j) && !step_head_blocked(h, i, j); },
      [](std::size_t b, std::size_t h, std::size_t i, std::size_t j) { return double(T(step_bias(b, h, i, j))); });
  const std::size_t cap = L + 5;
  attnx::kv_cache<T, Hkv, d, d, Store> cache(B, cap);
  mat got(B * L * Dm);
  for (std::size_t t0 = 0; t0 < L; t0 += chunk) {
    const std::size_t n = std::min(chunk, L - t0), K = wide ? cap : t0 + n;
    const auto xt = step_rows<T, Dm>(x, B, L, t0, n);
    attnx::tensor<bool, dyn, 1, 1, dyn> pad(B, K);
    attnx::tensor<bool, dyn, H, dyn, dyn> tree(B, n, K);
    attnx::tensor<T, dyn, H, dyn, dyn> bias(B, n, K);
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t j = 0; j < K; ++j) {
        pad(b, 0, 0, j) = step_blocked(b, j);
        for (std::size_t h = 0; h < H; ++h)
          for (std::size_t i = 0; i < n; ++i) {
            tree(b, h, i, j) = step_head_blocked(h, t0 + i, j);
            bias(b, h, i, j) = j <= t0 + i ? T(step_bias(b, h, t0 + i, j)) : std::numeric_limits<T>::quiet_NaN();
          }
      }
    const auto y = w.m.step(xt, cache, attnx::blocked(pad), attnx::blocked(tree), attnx::additive(bias));
    keep_step_rows(y, got, B, L, t0, n);
  }
  const double err = max_relative_error(got, want);
  BOOST_TEST_MESSAGE("masked steps of " << chunk << ", H " << H << ", kv_heads " << Hkv << ", storage of " << sizeof(Store)
                                        << " bytes: max error / max |y| " << err);
  BOOST_TEST(err <= tol);
}

}  // namespace

BOOST_AUTO_TEST_CASE(steps_with_masks) {
  // Token by token (GQA groups of 1, 2 and 4 rows), in chunks of 7 (the decode kernel's blocks) and of 25 (the
  // prefill kernel over the cache); masks as wide as the capacity or as the keys; double, float, bf16 and f16
  // storage. Then at d 64 and 128, where the decode kernel's own loops run (one_row; few_rows and four_rows for two
  // to four rows; on AVX-512 and AVX2), under each CPU family's tuning (kernels::detail::decode_tuning).
  check_masked_steps<double, 32, 4, 2>(2, 37, 1, true, 1e-12);
  check_masked_steps<double, 32, 4, 1>(2, 37, 1, false, 1e-12);
  check_masked_steps<double, 32, 4, 2>(2, 50, 7, false, 1e-12);
  check_masked_steps<double, 32, 4, 2>(2, 60, 25, true, 1e-12);
  check_masked_steps<float, 64, 4, 4>(2, 40, 1, true, 2e-5);
  check_masked_steps<float, 64, 4, 1>(2, 40, 1, false, 2e-5);
  check_masked_steps<float, 64, 4, 2>(2, 70, 30, false, 2e-5);
  check_masked_steps<float, 64, 4, 2, attnx::bf16>(2, 40, 1, true, 4e-3);
  check_masked_steps<float, 64, 4, 2, attnx::f16>(2, 40, 7, false, 5e-4);
  namespace kd = attnx::kernels::detail;
  for (const int family : kd::decode_families) {
    BOOST_TEST_MESSAGE("decode tuning of CPU family " << family);
    kd::decode_tuning().store(family);
    check_masked_steps<float, 256, 4, 4>(1, 24, 1, true, 2e-5);    // d 64, one row per KV head
    check_masked_steps<float, 512, 4, 4>(1, 24, 1, false, 2e-5);   // d 128, one row
    check_masked_steps<float, 512, 4, 2>(1, 24, 1, true, 2e-5);    // two rows
    check_masked_steps<float, 384, 3, 1>(1, 24, 1, true, 2e-5);    // three rows
    check_masked_steps<float, 512, 4, 1>(1, 24, 1, true, 2e-5);    // four rows
    check_masked_steps<float, 512, 4, 4>(1, 24, 3, true, 2e-5);    // three rows (chunks of 3)
    check_masked_steps<float, 512, 4, 4, attnx::bf16>(1, 24, 1, true, 4e-3);  // 16-bit: one row
    check_masked_steps<float, 512, 4, 1, attnx::bf16>(1, 24, 1, false, 4e-3);  // four rows
    check_masked_steps<float, 512, 4, 1, attnx::f16>(1, 24, 1, true, 5e-4);
    check_masked_steps<float, 384, 3, 1, attnx::f16>(1, 24, 1, true, 5e-4);
    check_masked_steps<float, 512, 4, 2, attnx::bf16>(1, 40, 25, true, 4e-3);  // prefill over a 16-bit cache
  }
  kd::decode_tuning().store(-1);
}

// multi_head_attention::step under sliding_window(W): a rolling window over each item's cache positions, against
// the forward pass's double reference with the window written as the predicate j > i - W (chunks of 1: the decode
// kernel; 7 and 25: the prefill kernel over the cache).
template <class T, std::size_t Dm, std::size_t H, std::size_t Hkv>
void check_window_steps(std::size_t B, std::size_t L, std::size_t chunk, std::size_t W, double tol, bool capped = false) {
  using M = attnx::multi_head_attention<T, Dm, H, attnx::mha_options{.kv_heads = Hkv, .bias = false}>;
  constexpr std::size_t d = Dm / H;
  const model<M> w;
  const mat x = rounded<T>(B * L * Dm, 29);
  const mat want = reference_masked(
      x, w.wq, w.wk, w.wv, w.wo, B, L, Dm, H, Hkv, d,
      [W](std::size_t, std::size_t, std::size_t i, std::size_t j) { return j + W > i; },
      [](std::size_t, std::size_t, std::size_t, std::size_t) { return 0.0; });
  attnx::kv_cache<T, Hkv, d, d> cache(B, L);
  mat got(B * L * Dm);
  for (std::size_t t0 = 0; t0 < L; t0 += chunk) {
    const std::size_t n = std::min(chunk, L - t0);
    const auto xt = step_rows<T, Dm>(x, B, L, t0, n);
    // (a cap of 1e6 leaves scores of order 1 unchanged to 1e-12: softcap's three steps in step's program)
    const auto y = capped ? w.m.step(xt, cache, attnx::softcap(1e6), attnx::sliding_window(W))
                          : w.m.step(xt, cache, attnx::sliding_window(W));
    keep_step_rows(y, got, B, L, t0, n);
  }
  const double err = max_relative_error(got, want);
  BOOST_TEST(err < tol, "chunk " << chunk << ", window " << W << ": relative error " << err);
}

BOOST_AUTO_TEST_CASE(steps_with_a_sliding_window) {
  check_window_steps<double, 32, 4, 2>(2, 60, 1, 9, 1e-12);
  check_window_steps<double, 32, 4, 1>(2, 60, 7, 16, 1e-12);
  check_window_steps<double, 32, 4, 2>(2, 60, 1, 9, 1e-10, true);
  check_window_steps<double, 32, 4, 2>(2, 60, 25, 9, 1e-10, true);
  check_window_steps<float, 64, 4, 2>(2, 70, 25, 20, 2e-5);
  check_window_steps<float, 256, 4, 4>(1, 40, 1, 5, 2e-5);  // d 64: the decode kernel's own loops
}

BOOST_AUTO_TEST_CASE(masked_step_by_item_and_rows_per_item) {
  // step(x, cache, b, masks...) over (heads, n, keys) and step(rows, cache, counts, masks...) over (heads, N, keys):
  // each item's rows equal the masked forward pass of its own sequence; a context as the last argument.
  using M = attnx::multi_head_attention<double, 32, 4, attnx::mha_options{.kv_heads = 2, .bias = false}>;
  const model<M> w;
  const std::size_t total = 9;
  const mat x0 = naive::random(total * 32, 93), x1 = naive::random(total * 32, 94);
  const mat* xs[2] = {&x0, &x1};
  const auto allowed = [](std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
    return !step_blocked(b, j) && !step_head_blocked(h, i, j);
  };
  attnx::kv_cache<double, 2, 8> cache(2, 12);
  mat got[2] = {mat(total * 32), mat(total * 32)};
  // item 0: 5 tokens then 1; item 1: 2 then 1, through step(x, cache, b, masks...)
  std::size_t at[2] = {0, 0};
  const std::size_t firsts[2][2] = {{5, 1}, {2, 1}};
  attnx::context one_thread;
  one_thread.set_threads(1);
  for (std::size_t s = 0; s < 2; ++s)
    for (std::size_t b = 0; b < 2; ++b) {
      const std::size_t n = firsts[b][s], K = 12;
      attnx::tensor<double, dyn, 32> xt(n);
      std::copy_n(xs[b]->data() + at[b] * 32, n * 32, xt.data());
      attnx::tensor<bool, 4, dyn, dyn> allow(n, K);
      attnx::tensor<double, 4, dyn, dyn> bias(n, K);
      for (std::size_t h = 0; h < 4; ++h)
        for (std::size_t i = 0; i < n; ++i)
          for (std::size_t j = 0; j < K; ++j) {
            allow(h, i, j) = allowed(b, h, at[b] + i, j);
            bias(h, i, j) = step_bias(b, h, at[b] + i, j);
          }
      const auto y = s == 0 ? w.m.step(xt, cache, b, attnx::allowed(allow), attnx::additive(bias))
                            : w.m.step(xt, cache, b, attnx::allowed(allow), attnx::additive(bias), one_thread);
      std::copy_n(y.data(), n * 32, got[b].data() + at[b] * 32);
      at[b] += n;
    }
  // then rows per item: 2 and 3 (two kernel calls), 1 and 1 (one call for both items), 0 and 2, 0 and 0
  const std::size_t calls[4][2] = {{2, 3}, {1, 1}, {0, 2}, {0, 0}};
  for (const auto& counts : calls) {
    const std::size_t N = counts[0] + counts[1], K = std::max(at[0] + counts[0], at[1] + counts[1]);
    attnx::tensor<double, dyn, 32> rows(N);
    attnx::tensor<bool, 4, dyn, dyn> allow(N, K);
    attnx::tensor<double, 4, dyn, dyn> bias(N, K);
    for (std::size_t b = 0, r = 0; b < 2; r += counts[b], ++b) {
      std::copy_n(xs[b]->data() + at[b] * 32, counts[b] * 32, rows.data() + r * 32);
      for (std::size_t h = 0; h < 4; ++h)
        for (std::size_t i = 0; i < counts[b]; ++i)
          for (std::size_t j = 0; j < K; ++j) {
            allow(h, r + i, j) = allowed(b, h, at[b] + i, j);
            bias(h, r + i, j) = step_bias(b, h, at[b] + i, j);
          }
    }
    const std::vector<std::size_t> n(std::begin(counts), std::end(counts));
    const auto y = w.m.step(rows, cache, n, attnx::allowed(allow), attnx::additive(bias));
    for (std::size_t b = 0, r = 0; b < 2; r += counts[b], ++b) {
      std::copy_n(y.data() + r * 32, counts[b] * 32, got[b].data() + at[b] * 32);
      at[b] += counts[b];
    }
  }
  BOOST_TEST(cache.length(0) == total);
  BOOST_TEST(cache.length(1) == total);
  for (std::size_t b = 0; b < 2; ++b) {
    const mat want = reference_masked(
        *xs[b], w.wq, w.wk, w.wv, w.wo, 1, total, 32, 4, 2, 8,
        [&](std::size_t, std::size_t h, std::size_t i, std::size_t j) { return allowed(b, h, i, j); },
        [&](std::size_t, std::size_t h, std::size_t i, std::size_t j) { return step_bias(b, h, i, j); });
    double err = 0;
    for (std::size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(got[b][i] - want[i]));
    BOOST_TEST(err <= 1e-12);
  }
}

BOOST_AUTO_TEST_CASE(masked_step_rules_and_empty_rows) {
  // The run-time rules of step's masks (each names both sizes, and nothing is appended); a row whose every key is
  // blocked gives 0 (the module has no bias, so y's row is 0); -inf biases block as a false does.
  using M = attnx::multi_head_attention<double, 32, 4, attnx::mha_options{.kv_heads = 2, .bias = false}>;
  const model<M> w;
  attnx::kv_cache<double, 2, 8> cache(2, 8);
  attnx::tensor<double, 2, 3, 32> x;
  const mat xr = naive::random(x.numel(), 95);
  std::copy(xr.begin(), xr.end(), x.data());
  (void)w.m.step(x, cache);  // 3 tokens each
  attnx::tensor<double, 2, 1, 32> x1;
  std::copy_n(xr.data(), 64, x1.data());
  attnx::tensor<bool, dyn, dyn, 1, dyn> heads3(2, 3, 8);
  BOOST_CHECK_EXCEPTION(w.m.step(x1, cache, attnx::allowed(heads3)), attnx::extent_error,
                        says({"a mask's heads axis must be the module's heads", "mask_heads 3, heads 4"}));
  attnx::tensor<bool, dyn, 1, 1, dyn> short_keys(2, 3);  // 4 keys after the append
  BOOST_CHECK_EXCEPTION(w.m.step(x1, cache, attnx::blocked(short_keys)), attnx::extent_error,
                        says({"a mask's key axis must cover every key an item holds after the append", "mask_keys 3, keys 4"}));
  attnx::tensor<double, dyn, 1, dyn, dyn> batch3(3, 1, 8);
  BOOST_CHECK_EXCEPTION(w.m.step(x1, cache, attnx::additive(batch3)), attnx::extent_error,
                        says({"a mask's batch axis must be the cache's batch", "mask_batch 3, cache_batch 2"}));
  attnx::tensor<double, 1, dyn, dyn> rows2(2, 8);
  attnx::tensor<double, dyn, 32> one(1);
  BOOST_CHECK_EXCEPTION(w.m.step(one, cache, 0, attnx::additive(rows2)), attnx::extent_error,
                        says({"a mask's row axis must be the new rows", "mask_rows 2, query_rows 1"}));
  BOOST_TEST(cache.length(0) == 3u);
  BOOST_TEST(cache.length(1) == 3u);
  // Item 0's new row blocks every key, item 1's has -inf on every key but its first: item 0's row is 0, item 1's
  // the first token's value row through W_O (softmax of one key).
  attnx::tensor<bool, dyn, 1, 1, dyn> none(2, 4);
  attnx::tensor<double, dyn, 1, 1, dyn> bias(2, 4);
  for (std::size_t j = 0; j < 4; ++j) {
    none(0, 0, 0, j) = true;
    none(1, 0, 0, j) = false;
    bias(0, 0, 0, j) = 0;
    bias(1, 0, 0, j) = j == 0 ? 0.5 : -std::numeric_limits<double>::infinity();
  }
  const auto y = w.m.step(x1, cache, attnx::blocked(none), attnx::additive(bias));
  BOOST_TEST(cache.length(0) == 4u);
  for (std::size_t c = 0; c < 32; ++c) BOOST_TEST(y(0, 0, c) == 0.0);
  const mat v = naive::matmul(mat(xr.begin() + 3 * 32, xr.begin() + 4 * 32), w.wv, 1, 32, 16);  // item 1's first token
  mat heads(32);
  for (std::size_t h = 0; h < 4; ++h)
    for (std::size_t c = 0; c < 8; ++c) heads[h * 8 + c] = v[(h / 2) * 8 + c];
  const mat want = naive::matmul(heads, w.wo, 1, 32, 32);
  for (std::size_t c = 0; c < 32; ++c) BOOST_TEST(std::abs(y(1, 0, c) - want[c]) < 1e-12);
}

namespace {
// run(cache) made to fail at each of its allocations in turn: it throws std::bad_alloc and every item of the cache
// keeps its length (lengths: before), including when the failure comes after the append; then it succeeds, the
// items at `after`, and gives what run(clean) gave (clean: a copy of the cache never failed). Returns the failures.
template <class Run, class Cache>
std::size_t fail_in_turn(const Run& run, Cache& cache, Cache& clean, const std::vector<std::size_t>& before,
                         const std::vector<std::size_t>& after) {
  const auto want = run(clean);
  std::optional<decltype(run(cache))> got;  // (the step's own result: no allocation of the test's in the attempt)
  const std::size_t failures = allocation_hooks::fail_each_in_turn([&] { got.emplace(run(cache)); }, [&] {
    for (std::size_t b = 0; b < before.size(); ++b) BOOST_TEST(cache.length(b) == before[b]);
  });
  for (std::size_t b = 0; b < after.size(); ++b) BOOST_TEST(cache.length(b) == after[b]);
  BOOST_TEST(max_err(*got, mat(want.data(), want.data() + want.numel())) == 0.0);
  return failures;
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_failed_step_appends_nothing) {
  // Every allocation of a step made to fail in turn (the projections, the kernel's buffers, the masks' evaluation,
  // the output, W_O; a block's feed-forward): the cache is as before (fail_in_turn). multi_head_attention::step for
  // the batch (decode n = 1, the decode kernel's blocks n = 7, the prefill kernel n = 25; with and without a mask)
  // and for one item; transformer_block::step.
  using M = attnx::multi_head_attention<float, 64, 4, attnx::mha_options{.kv_heads = 2, .bias = false}>;
  const model<M> w;
  attnx::context one;
  one.set_threads(1);
  const mat r0 = naive::random(2 * 5 * 64, 96);
  for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{25}})
    for (const bool masked : {false, true}) {
      attnx::kv_cache<float, 2, 16> cache(2, 64), clean(2, 64);
      attnx::tensor<float, 2, dyn, 64> x0(5), x(n);
      const mat r = naive::random(x.numel(), 97);
      std::copy(r0.begin(), r0.end(), x0.data());
      std::copy(r.begin(), r.end(), x.data());
      (void)w.m.step(x0, cache, one);
      (void)w.m.step(x0, clean, one);
      attnx::tensor<bool, 2, 4, dyn, 64> block(n);  // (B, heads, n, keys): key 1 blocked (evaluated: allowed(!block))
      for (std::size_t i = 0; i < block.numel(); ++i) block.data()[i] = i % 64 == 1;
      const auto run = [&](auto& c) {
        if (masked) return w.m.step(x, c, attnx::blocked(block), one);
        return w.m.step(x, c, one);
      };
      const std::size_t failures = fail_in_turn(run, cache, clean, {5, 5}, {5 + n, 5 + n});
      BOOST_TEST_MESSAGE("step of " << n << (masked ? " rows with a mask: " : " rows: ") << failures << " allocations failed in turn");
      BOOST_TEST(failures >= 5u);
    }
  {  // one item
    attnx::kv_cache<float, 2, 16> cache(2, 64), clean(2, 64);
    attnx::tensor<float, dyn, 64> x(3);
    const mat r = naive::random(x.numel(), 98);
    std::copy(r.begin(), r.end(), x.data());
    const auto run = [&](auto& c) { return w.m.step(x, c, 1, one); };
    BOOST_TEST(fail_in_turn(run, cache, clean, {0, 0}, {0, 3}) >= 5u);
  }
  {  // a transformer block (its default weights: what matters here is that the feed-forward allocates after the
     // self-attention appended)
    const attnx::nn::transformer_block<float, 64, 4, 128, attnx::nn::activation::gelu, attnx::nn::norm_position::pre,
                                       attnx::mha_options{.kv_heads = 2}>
        blk;
    attnx::kv_cache<float, 2, 16> cache(2, 64), clean(2, 64);
    attnx::tensor<float, 2, dyn, 64> x(4);
    const mat r = naive::random(x.numel(), 100);
    std::copy(r.begin(), r.end(), x.data());
    const auto run = [&](auto& c) { return blk.step(x, c, one); };
    const std::size_t failures = fail_in_turn(run, cache, clean, {0, 0}, {4, 4});
    BOOST_TEST_MESSAGE("transformer_block::step: " << failures << " allocations failed in turn");
    BOOST_TEST(failures >= 8u);
  }
}

// Sinks over a ragged cache: attend(q, cache, ..., sinks(t)) against attention(..., sinks(t)) over the item's keys
// written out; partial_attention's lse against ln(e^lse + e^sigma_h) of the state without them, in double.
BOOST_AUTO_TEST_CASE(sinks_over_a_ragged_cache) {
  constexpr std::size_t B = 2, H = 4, G = 2, d = 16, cap = 900;
  const std::size_t len[B] = {800, 37};
  attnx::kv_cache<double, G, d> cache(B, cap);
  std::vector<double> kf[B], vf[B];
  for (std::size_t b = 0; b < B; ++b) {
    kf[b] = naive::random(len[b] * G * d, 340 + unsigned(b), -2, 2), vf[b] = naive::random(len[b] * G * d, 342 + unsigned(b));
    cache.append(b, kf[b].data(), vf[b].data(), len[b]);
  }
  attnx::tensor<double, H> table;
  for (std::size_t h = 0; h < H; ++h) table(h) = -1.5 + double(h);  // (heads whose sink takes little, and much)
  const auto run = [&]<std::size_t n>(std::integral_constant<std::size_t, n>) {
    const mat qd = naive::random(B * H * n * d, 350 + unsigned(n), -1, 1);
    attnx::tensor<double, B, H, n, d> q;
    std::copy(qd.begin(), qd.end(), q.begin());
    const auto got = attnx::attend(q, cache, attnx::sliding_window(30), attnx::sinks(table));
    const auto got1 = attnx::attend(q, cache, attnx::sinks(0.25));
    const auto plain = attnx::partial_attention(q, cache);
    const auto sunk = attnx::partial_attention(q, cache, attnx::sinks(table));
    for (std::size_t b = 0; b < B; ++b) {
      const auto [qb, kb, vb] = item_operands<G, H, n, d>(q, b, kf[b], vf[b], len[b]);
      const auto K = attnx::repeat_heads<H / G>(kb);
      const auto V = attnx::repeat_heads<H / G>(vb);
      const auto want = attnx::evaluate(
          attnx::attention(qb, K, V, attnx::causal_bottom_right, attnx::sliding_window(30), attnx::sinks(table)));
      const auto want1 = attnx::evaluate(attnx::attention(qb, K, V, attnx::causal_bottom_right, attnx::sinks(0.25)));
      double e = 0, e1 = 0, el = 0;
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t i = 0; i < n; ++i) {
          for (std::size_t c = 0; c < d; ++c) {
            e = std::max(e, std::abs(got(b, h, i, c) - want(0, h, i, c)));
            e1 = std::max(e1, std::abs(got1(b, h, i, c) - want1(0, h, i, c)));
          }
          const double l = plain.lse(b, h, i), s = table(h), big = std::max(l, s);
          el = std::max(el, std::abs(sunk.lse(b, h, i) - (big + std::log(std::exp(l - big) + std::exp(s - big)))));
        }
      BOOST_TEST(e < 1e-13, "sinks + window, item " << b << ", n " << n << ": " << e);
      BOOST_TEST(e1 < 1e-13, "one sink, item " << b << ", n " << n << ": " << e1);
      BOOST_TEST(el < 1e-13, "lse with sinks, item " << b << ", n " << n << ": " << el);
    }
  };
  run(std::integral_constant<std::size_t, 1>{});
  run(std::integral_constant<std::size_t, 3>{});
  run(std::integral_constant<std::size_t, 30>{});
  attnx::tensor<double, B, H, 1, d> q1;
  const attnx::tensor<double, 3> three{};
  try {
    (void)attnx::attend(q1, cache, attnx::sinks(three));
    BOOST_TEST(false, "3 sinks for 4 heads");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "attnx: sinks: 3 sink logits for 4 heads (one per head, or one for all)");
  }
}

// mha_options' variants (softcap, window, ALiBi, sinks): the module with them equals the module without them given
// the same variants on each call, bit for bit (forward, cross-attention, weights); its steps over a cache equal its
// forward pass, token by token and chunk by chunk; so do attend_memory's rows the cross-attention's.
BOOST_AUTO_TEST_CASE(mha_options_variants) {
  constexpr std::size_t B = 2, L = 40, Lm = 13, Dm = 32, H = 4, Hkv = 2, d = Dm / H, W = 9;
  constexpr attnx::mha_options opt{.kv_heads = Hkv, .bias = false, .softcap = 2, .window = W, .alibi = true, .sinks = true};
  using MO = attnx::multi_head_attention<double, Dm, H, opt>;
  using MP = attnx::multi_head_attention<double, Dm, H, attnx::mha_options{.kv_heads = Hkv, .bias = false}>;
  static_assert(sizeof(MP::sinks_type) == 1 && sizeof(MO::sinks_type) > 1);
  model<MO> wo;
  const model<MP> wp;
  for (std::size_t h = 0; h < H; ++h) wo.m.sinks(h) = 0.5 * double(h) - 1;
  const mat xd = rounded<double>(B * L * Dm, 31), md = rounded<double>(B * Lm * Dm, 32);
  attnx::tensor<double, B, L, Dm> x;
  attnx::tensor<double, B, Lm, Dm> mem;
  std::copy(xd.begin(), xd.end(), x.begin());
  std::copy(md.begin(), md.end(), mem.begin());
  const auto& t = wo.m.sinks;
  const auto same = [](const auto& a, const auto& b) {
    return std::memcmp(a.data(), b.data(), sizeof(double) * attnx::dims_size(attnx::dims_of(a))) == 0;
  };
  const auto y = attnx::evaluate(wo.m(x, attnx::causal));
  BOOST_TEST(same(y, attnx::evaluate(wp.m(x, attnx::softcap(2.0), attnx::causal, attnx::sliding_window(W), attnx::alibi(),
                                          attnx::sinks(t)))));
  BOOST_TEST(!same(y, attnx::evaluate(wp.m(x, attnx::causal))));
  const auto yx = attnx::evaluate(wo.m(x, mem));  // cross: softcap and sinks (positions of two sequences: no window)
  BOOST_TEST(same(yx, attnx::evaluate(wp.m(x, mem, attnx::softcap(2.0), attnx::sinks(t)))));
  BOOST_TEST(same(attnx::evaluate(wo.m.weights(x, attnx::causal)),
                  attnx::evaluate(wp.m.weights(x, attnx::softcap(2.0), attnx::causal, attnx::sliding_window(W), attnx::alibi()))));
  for (std::size_t chunk : {std::size_t{1}, std::size_t{7}, L}) {
    attnx::kv_cache<double, Hkv, d> cache(B, L);
    mat got(B * L * Dm), want(y.begin(), y.end());
    for (std::size_t t0 = 0; t0 < L; t0 += chunk) {
      const std::size_t n = std::min(chunk, L - t0);
      keep_step_rows(wo.m.step(step_rows<double, Dm>(xd, B, L, t0, n), cache), got, B, L, t0, n);
    }
    const double err = max_relative_error(got, want);
    BOOST_TEST(err < 1e-12, "steps of " << chunk << ": relative error " << err);
  }
  attnx::kv_cache<double, Hkv, d> memory(B, Lm);
  wo.m.project_memory(mem, memory);
  const auto ym = wo.m.attend_memory(x, memory);
  const double err = max_relative_error(mat(ym.begin(), ym.end()), mat(yx.begin(), yx.end()));
  BOOST_TEST(err < 1e-12, "attend_memory: relative error " << err);
}
