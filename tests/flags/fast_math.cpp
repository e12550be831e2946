// A program compiled with -ffast-math (or any -ffinite-math-only) linking the compiled library: attention, with a
// fully masked row, and a product give the values of double loops written here. The kernels are the library's,
// built without -ffast-math, so their rules on special values hold (a row with every key masked gives 0).
#include <attnx/attnx.hpp>

#include <cmath>
#include <cstdio>

int main() {
  constexpr std::size_t L = 40, D = 16;
  attnx::tensor<float, attnx::dyn, D> q(L), k(L), v(L);
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t c = 0; c < D; ++c) {
      q(i, c) = float(std::sin(0.3 * double(i) + 0.7 * double(c)));
      k(i, c) = float(std::cos(0.2 * double(i) - 0.5 * double(c)));
      v(i, c) = float(std::sin(0.11 * double(i * c) + 1.0));
    }
  // Keys j < 2 visible to every row, none to row 0 (blocked(m): true = masked out).
  attnx::tensor<bool, L, L> m;
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t j = 0; j < L; ++j) m(i, j) = i == 0 || j > i;
  attnx::context ctx;
  attnx::tensor<float, attnx::dyn, D> o(L);
  attnx::assign(o, attnx::attention(q, k, v, attnx::blocked(m)), ctx);
  double worst = 0;
  for (std::size_t i = 0; i < L; ++i) {
    double mx = -1e300, sum = 0, s[L];
    for (std::size_t j = 0; j <= i && i > 0; ++j) {
      s[j] = 0;
      for (std::size_t c = 0; c < D; ++c) s[j] += double(q(i, c)) * double(k(j, c));
      s[j] /= std::sqrt(double(D));
      mx = std::fmax(mx, s[j]);
    }
    for (std::size_t j = 0; j <= i && i > 0; ++j) sum += (s[j] = std::exp(s[j] - mx));
    for (std::size_t c = 0; c < D; ++c) {
      double want = 0;
      for (std::size_t j = 0; j <= i && i > 0; ++j) want += s[j] / sum * double(v(j, c));
      worst = std::fmax(worst, std::fabs(want - double(o(i, c))));
    }
  }
  attnx::tensor<float, attnx::dyn, D> p = q * transpose(k) * v;  // (L x L) (L x D): the GEMM
  double worst_p = 0;
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t c = 0; c < D; ++c) {
      double want = 0;
      for (std::size_t j = 0; j < L; ++j) {
        double s = 0;
        for (std::size_t x = 0; x < D; ++x) s += double(q(i, x)) * double(k(j, x));
        want += s * double(v(j, c));
      }
      worst_p = std::fmax(worst_p, std::fabs(want - double(p(i, c))) / (1 + std::fabs(want)));
    }
  std::printf("-ffast-math: attention max error %.2g (row 0, fully masked: %g), product %.2g; fused runs %zu\n", worst,
              double(o(0, 0)), worst_p, ctx.fused_runs());
  const bool ok = worst < 1e-5 && o(0, 0) == 0.0f && worst_p < 1e-4 && ctx.fused_runs() == 1;
  return ok ? 0 : 1;
}
