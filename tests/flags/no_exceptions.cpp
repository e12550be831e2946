// A program compiled with -fno-exceptions linking the compiled library. Run without arguments it computes a causal
// attention and checks it against double loops. `no_exceptions header` breaks a rule checked in attnx's headers (a
// view over too few elements): the message on stderr, then std::abort. `no_exceptions library` breaks one the
// library checks (a problem whose heads are not a multiple of its KV heads): its exception reaches std::terminate,
// which prints the message.
#include <attnx/attnx.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "header") == 0) {
    std::vector<float> few(10);
    const attnx::view<const float, 4, 4> v(few);  // 16 elements needed
    return v(0, 0) == 0.0f ? 2 : 3;               // (not reached)
  }
  if (argc > 1 && std::strcmp(argv[1], "library") == 0) {
    float x[8] = {};
    attnx::kernels::attention_problem<float> p;
    p.q = p.k = p.v = {x, 0, 0, 2};
    p.o = {x, 0, 0, 2};
    p.heads = 3;
    p.kv_heads = 2;
    p.lq = p.lk = 1;
    p.dk = p.dv = 2;
    attnx::kernels::flash_attention(p);
    return 4;  // (not reached)
  }
  constexpr std::size_t L = 24, D = 8;
  attnx::tensor<double, attnx::dyn, D> q(L), k(L), v(L);
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t c = 0; c < D; ++c) {
      q(i, c) = std::sin(0.3 * double(i) + 0.7 * double(c));
      k(i, c) = std::cos(0.2 * double(i) - 0.5 * double(c));
      v(i, c) = double(i) - double(c);
    }
  attnx::tensor<double, attnx::dyn, D> o = attnx::attention(q, k, v, attnx::causal);
  double worst = 0;
  for (std::size_t i = 0; i < L; ++i) {
    double s[L], mx = -1e300, sum = 0;
    for (std::size_t j = 0; j <= i; ++j) {
      s[j] = 0;
      for (std::size_t c = 0; c < D; ++c) s[j] += q(i, c) * k(j, c);
      s[j] /= std::sqrt(double(D));
      mx = std::fmax(mx, s[j]);
    }
    for (std::size_t j = 0; j <= i; ++j) sum += (s[j] = std::exp(s[j] - mx));
    for (std::size_t c = 0; c < D; ++c) {
      double want = 0;
      for (std::size_t j = 0; j <= i; ++j) want += s[j] / sum * v(j, c);
      worst = std::fmax(worst, std::fabs(want - o(i, c)));
    }
  }
  std::printf("-fno-exceptions: attention max error %.2g\n", worst);
  return worst < 1e-12 ? 0 : 1;
}
