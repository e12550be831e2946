// Independent references for the unit tests: plain double-precision loops over std::vector, written
// without any attnx code, in the most obvious way.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

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
template <class Tensor>
Tensor make(const mat& m) {
  if (m.size() != Tensor::size) throw std::length_error("naive::make: wrong element count");
  Tensor t;
  for (std::size_t i = 0; i < Tensor::size; ++i) t.data()[i] = static_cast<typename Tensor::value_type>(m[i]);
  return t;
}

inline mat random(std::size_t n, unsigned seed, double lo = -1, double hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  mat m(n);
  for (auto& x : m) x = dist(gen);
  return m;
}

}  // namespace naive
