// Independent references for the unit tests: plain double-precision loops over std::vector, written
// without any attnx code, in the most obvious way.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <vector>

#include "random.hpp"

namespace naive {

using mat = std::vector<double>;  // row-major

inline mat matmul(const mat& a, const mat& b, std::size_t m, std::size_t k, std::size_t n) {
  mat c(m * n, 0.0);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::size_t p = 0; p < k; ++p) s += a[i * k + p] * b[p * n + j];
      c[i * n + j] = s;
    }
  return c;
}

inline mat transpose(const mat& a, std::size_t m, std::size_t n) {
  mat t(m * n);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) t[j * m + i] = a[i * n + j];
  return t;
}

// Stable row softmax. A row of only -inf gives zeros (attnx's documented choice).
inline mat softmax_rows(const mat& s, std::size_t m, std::size_t n) {
  mat p(m * n);
  for (std::size_t i = 0; i < m; ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < n; ++j) mx = std::max(mx, s[i * n + j]);
    if (mx == -std::numeric_limits<double>::infinity()) {
      for (std::size_t j = 0; j < n; ++j) p[i * n + j] = 0;
      continue;
    }
    double sum = 0;
    for (std::size_t j = 0; j < n; ++j) sum += std::exp(s[i * n + j] - mx);
    for (std::size_t j = 0; j < n; ++j) p[i * n + j] = std::exp(s[i * n + j] - mx) / sum;
  }
  return p;
}

// Scaled dot-product attention of one (Lq x d) Q, (Lk x d) K, (Lk x dv) V, with allowed(i, j).
template <class Allowed>
mat attention(const mat& q, const mat& k, const mat& v, std::size_t lq, std::size_t lk, std::size_t d, std::size_t dv,
              Allowed allowed) {
  mat s(lq * lk);
  for (std::size_t i = 0; i < lq; ++i)
    for (std::size_t j = 0; j < lk; ++j) {
      double dot = 0;
      for (std::size_t p = 0; p < d; ++p) dot += q[i * d + p] * k[j * d + p];
      s[i * lk + j] = allowed(i, j) ? dot / std::sqrt(double(d)) : -std::numeric_limits<double>::infinity();
    }
  return matmul(softmax_rows(s, lq, lk), v, lq, lk, dv);
}

// A static-shape tensor (any type with size, value_type and data()) filled from m, element by element.
// A size mismatch is a bug in the test: it throws.
// Grouped-query self-attention heads of x (B, L, Dm): q = x wq (Dm, H d), k = x wk and v = x wv (Dm, Hkv d);
// query head h reads key/value head h / (H / Hkv); allowed(b, i, j). The heads (B, H, L, d), row-major.
template <class Allowed>
mat gqa_heads(const mat& x, const mat& wq, const mat& wk, const mat& wv, std::size_t B, std::size_t L, std::size_t Dm,
              std::size_t H, std::size_t Hkv, std::size_t d, Allowed allowed) {
  const std::size_t G = H / Hkv;
  mat heads(B * H * L * d);
  for (std::size_t b = 0; b < B; ++b) {
    const mat xb(x.begin() + long(b * L * Dm), x.begin() + long((b + 1) * L * Dm));
    const mat q = matmul(xb, wq, L, Dm, H * d), k = matmul(xb, wk, L, Dm, Hkv * d), v = matmul(xb, wv, L, Dm, Hkv * d);
    for (std::size_t h = 0; h < H; ++h) {
      mat qh(L * d), kh(L * d), vh(L * d);
      for (std::size_t l = 0; l < L; ++l)
        for (std::size_t c = 0; c < d; ++c) {
          qh[l * d + c] = q[l * H * d + h * d + c];
          kh[l * d + c] = k[l * Hkv * d + (h / G) * d + c];
          vh[l * d + c] = v[l * Hkv * d + (h / G) * d + c];
        }
      const mat oh = attention(qh, kh, vh, L, L, d, d, [&](std::size_t i, std::size_t j) { return allowed(b, i, j); });
      std::copy(oh.begin(), oh.end(), heads.begin() + long(((b * H + h) * L) * d));
    }
  }
  return heads;
}

// Heads (B, H, L, d) side by side: (B, L, H d).
inline mat merge_heads(const mat& heads, std::size_t B, std::size_t H, std::size_t L, std::size_t d) {
  mat out(heads.size());
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t l = 0; l < L; ++l)
        for (std::size_t c = 0; c < d; ++c) out[((b * L + l) * H + h) * d + c] = heads[((b * H + h) * L + l) * d + c];
  return out;
}

template <class Tensor>
Tensor make(const mat& m) {
  if (m.size() != Tensor::size) throw std::length_error("naive::make: wrong element count");
  Tensor t;
  for (std::size_t i = 0; i < Tensor::size; ++i) t.data()[i] = static_cast<typename Tensor::value_type>(m[i]);
  return t;
}

inline mat random(std::size_t n, unsigned seed, double lo = -1, double hi = 1) {
  test_random::rng gen(seed);
  mat m(n);
  for (auto& x : m) x = gen.uniform(lo, hi);
  return m;
}

}  // namespace naive
