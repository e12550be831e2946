// The consumer test's program: a product and a causal attention (the run-time kernels: the compiled library's, or
// the translation unit's own with attnx::header_only), checked against values computed here.
#include <attnx/attnx.hpp>
#include <cmath>
#include <cstdio>
int main() {
  attnx::tensor<double, 2, 2> a{{1, 2}, {3, 4}};
  attnx::tensor<double, 2, 2> b = a * a;           // matmul, evaluated on assignment
  static_assert(attnx::tensor<double, 2, 2>::rank == 2);
  // Two keys, causal: row 0 sees key 0 alone; row 1 weighs v0 and v1 by softmax(q1 . k / sqrt(2)).
  attnx::tensor<float, attnx::dyn, 2> q(32), k(32), v(32);
  for (std::size_t i = 0; i < 32; ++i)
    for (std::size_t c = 0; c < 2; ++c) {
      q(i, c) = float(i % 3) * 0.5f + float(c);
      k(i, c) = float(i % 5) * 0.25f - float(c);
      v(i, c) = float(i) + 10.0f * float(c);
    }
  attnx::tensor<float, attnx::dyn, 2> o = attnx::attention(q, k, v, attnx::causal);
  const double s0 = (double(q(1, 0)) * k(0, 0) + double(q(1, 1)) * k(0, 1)) / std::sqrt(2.0);
  const double s1 = (double(q(1, 0)) * k(1, 0) + double(q(1, 1)) * k(1, 1)) / std::sqrt(2.0);
  const double w1 = 1 / (1 + std::exp(s0 - s1));
  const double want = (1 - w1) * v(0, 1) + w1 * v(1, 1);
  std::printf("%g %g (expected %g %g)\n", b(1, 1), double(o(1, 1)), 22.0, want);
  return b(1, 1) == 22.0 && o(0, 1) == v(0, 1) && std::abs(o(1, 1) - want) < 1e-4 ? 0 : 1;
}
