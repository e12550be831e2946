// The unfused baselines' row softmax. This file alone is built with -ffast-math, so that
// GCC vectorises expf through glibc's libmvec; the inputs are finite (no -inf is written:
// masked entries are set to 0 directly).
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "bench_common.hpp"

namespace bench {

void softmax_rows(float* S, std::size_t rows, std::size_t cols, std::size_t ld, bool causal, std::size_t row0) {
  for (std::size_t r = 0; r < rows; ++r) {
    float* s = S + r * ld;
    const std::size_t n = causal ? std::min(cols, row0 + r + 1) : cols;
    float m = s[0];
    for (std::size_t j = 1; j < n; ++j) m = std::max(m, s[j]);
    float sum = 0;
    for (std::size_t j = 0; j < n; ++j) {
      s[j] = std::exp(s[j] - m);
      sum += s[j];
    }
    const float inv = 1.0f / sum;
    for (std::size_t j = 0; j < n; ++j) s[j] *= inv;
    for (std::size_t j = n; j < cols; ++j) s[j] = 0.0f;
  }
}

}  // namespace bench
