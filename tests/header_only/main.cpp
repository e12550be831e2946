// A program built with attnx::header_only (ATTNX_HEADER_ONLY=1): it links no attnx library, instantiates the
// kernels itself, and the fused attention and the GEMM give the values of naive loops written here. Compiled
// without ATTNX_HEADER_ONLY and not linked with the library it does not link (the test
// header_only.unresolved_without_library).
#include <attnx/attnx.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

template <class T>
int check_attention(const char* name) {
  constexpr std::size_t L = 37, D = 16;
  attnx::tensor<T, L, D> q(attnx::uninitialized), k(attnx::uninitialized), v(attnx::uninitialized), o(attnx::uninitialized);
  std::mt19937 g(3);
  std::normal_distribution<double> nd;
  for (auto* t : {&q, &k, &v})
    for (auto& x : *t) x = T(nd(g));
  attnx::context ctx;
  attnx::assign(o, attnx::attention(q, k, v, attnx::causal), ctx);
  if (ctx.fused_runs() != 1) {
    std::printf("%s: the fused kernel did not run\n", name);
    return 1;
  }
  double worst = 0;
  for (std::size_t i = 0; i < L; ++i) {
    std::vector<double> s(i + 1);
    double m = -INFINITY, sum = 0;
    for (std::size_t j = 0; j <= i; ++j) {
      double a = 0;
      for (std::size_t c = 0; c < D; ++c) a += double(q(i, c)) * double(k(j, c));
      s[j] = a / std::sqrt(double(D));
      m = std::max(m, s[j]);
    }
    for (auto& x : s) sum += (x = std::exp(x - m));
    for (std::size_t c = 0; c < D; ++c) {
      double a = 0;
      for (std::size_t j = 0; j <= i; ++j) a += s[j] / sum * double(v(j, c));
      worst = std::max(worst, std::abs(a - double(o(i, c))));
    }
  }
  const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  std::printf("%s attention: max abs error %.3g (tolerance %.0g)\n", name, worst, tol);
  return worst <= tol ? 0 : 1;
}

template <class T>
int check_product(const char* name) {
  constexpr std::size_t M = 40, K = 24, N = 33;
  attnx::tensor<T, M, K> a(attnx::uninitialized);
  attnx::tensor<T, K, N> b(attnx::uninitialized);
  attnx::tensor<T, M, N> c(attnx::uninitialized);
  std::mt19937 g(4);
  std::normal_distribution<double> nd;
  for (auto& x : a) x = T(nd(g));
  for (auto& x : b) x = T(nd(g));
  attnx::context ctx;
  attnx::assign(c, a * b, ctx);
  if (ctx.gemm_blocks() == 0) {
    std::printf("%s: the GEMM did not run\n", name);
    return 1;
  }
  double worst = 0;
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      double s = 0;
      for (std::size_t p = 0; p < K; ++p) s += double(a(i, p)) * double(b(p, j));
      worst = std::max(worst, std::abs(s - double(c(i, j))));
    }
  const double tol = sizeof(T) == 4 ? 1e-4 : 1e-12;
  std::printf("%s product: max abs error %.3g (tolerance %.0g)\n", name, worst, tol);
  return worst <= tol ? 0 : 1;
}

}  // namespace

int main() {
  return check_attention<float>("float") | check_attention<double>("double") | check_product<float>("float") |
         check_product<double>("double");
}
