// Seeds 000 and 002: 1/sqrt(d_k) keeps the softmax's gradients alive.
//
// The dot product of two random d-dimensional vectors with N(0, 1) entries has variance d. Unscaled, a row of
// scores spreads over a range that grows like sqrt(d); softmax then puts almost all the weight on one key, and its
// Jacobian, diag(p) - p p^T, goes to zero: the gradient that reaches the scores (and through them W_Q and W_K)
// vanishes. Divided by sqrt(d), the scores have variance 1 for every d and the gradient keeps its size.
//
// For d = 4, 16, ..., 4096: 64 queries and 64 keys with N(0, 1) entries, values V (64 x 16) and an output gradient
// dY (64 x 16), N(0, 1), 5 trials. With z the scores (Q K^T, or Q K^T / sqrt(d)) and Y = softmax(z) V, attnx's
// backward gives dL/dz for L = sum(dY o Y); the example prints the median row norm of dL/dz (the mean is carried by
// the few rows whose two largest scores happen to be close) and the mean largest weight of a row. With a path argument it also writes the table as CSV (scripts/plot_gradient_norm.py draws it into
// docs/gradient_norm.png). Exits non-zero unless the scaled norm stays within a factor 2 of its value at d = 4 and
// the unscaled one falls by more than 10x from d = 16 to d = 4096, to below a tenth of the scaled one.
#include <attnx/attnx.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <vector>

#include "support/normal.hpp"

using namespace attnx;

namespace {

constexpr std::size_t n_queries = 64, n_keys = 64, d_v = 16, trials = 5;

struct row_stats {
  double grad_norm = 0, max_weight = 0;
};

template <class Tn>
void fill(Tn& t, normal_source& rng) {
  for (auto& x : t) x = rng();
}

// dL/dz for scores z and its median row norm; the mean largest weight of softmax(z).
template <class Z, class Vt, class G>
row_stats softmax_gradient(const Z& z, const Vt& v, const G& dy) {
  const auto [dz] = backward(softmax(z) * v, dy, wrt(z));
  const tensor<double, n_queries, n_keys> p = softmax(z);
  row_stats s;
  std::vector<double> norms(n_queries);
  for (std::size_t i = 0; i < n_queries; ++i) {
    double sq = 0, mx = 0;
    for (std::size_t j = 0; j < n_keys; ++j) sq += dz(i, j) * dz(i, j), mx = std::max(mx, p(i, j));
    norms[i] = std::sqrt(sq);
    s.max_weight += mx / n_queries;
  }
  std::nth_element(norms.begin(), norms.begin() + n_queries / 2, norms.end());
  s.grad_norm = norms[n_queries / 2];
  return s;
}

struct result {
  std::size_t d;
  row_stats unscaled, scaled;
};

result run(std::size_t d, normal_source& rng) {
  result r{d, {}, {}};
  for (std::size_t t = 0; t < trials; ++t) {
    tensor<double, n_queries, dyn> q(d);
    tensor<double, n_keys, dyn> k(d);
    tensor<double, n_keys, d_v> v;
    tensor<double, n_queries, d_v> dy;
    fill(q, rng), fill(k, rng), fill(v, rng), fill(dy, rng);
    const tensor<double, n_queries, n_keys> z = dot_scores(q, k, 1.0);                       // Q K^T
    const tensor<double, n_queries, n_keys> zs = dot_scores(q, k, 1.0 / std::sqrt(double(d)));  // Q K^T / sqrt(d)
    const row_stats u = softmax_gradient(z, v, dy), s = softmax_gradient(zs, v, dy);
    r.unscaled.grad_norm += u.grad_norm / trials, r.unscaled.max_weight += u.max_weight / trials;
    r.scaled.grad_norm += s.grad_norm / trials, r.scaled.max_weight += s.max_weight / trials;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  normal_source rng(2000);
  std::vector<result> rows;
  for (std::size_t d = 4; d <= 4096; d *= 4) rows.push_back(run(d, rng));

  std::printf("Median row norm of dL/dz, z the scores of softmax(z) V (%zu queries, %zu keys, %zu trials, N(0,1) entries)\n\n",
              n_queries, n_keys, trials);
  std::printf("%6s  %14s  %14s  %12s  %12s\n", "d", "|dL/dz| unscl.", "|dL/dz| scaled", "max p unscl.", "max p scaled");
  for (const auto& r : rows)
    std::printf("%6zu  %14.3e  %14.3e  %12.3f  %12.3f\n", r.d, r.unscaled.grad_norm, r.scaled.grad_norm,
                r.unscaled.max_weight, r.scaled.max_weight);
  std::printf("\nscaled by 1/sqrt(d): the gradient keeps its size; unscaled: softmax saturates and the gradient vanishes\n");

  if (argc > 1) {
    std::ofstream csv(argv[1]);
    csv << "d,unscaled,scaled,max_weight_unscaled,max_weight_scaled\n";
    for (const auto& r : rows)
      csv << r.d << ',' << r.unscaled.grad_norm << ',' << r.scaled.grad_norm << ',' << r.unscaled.max_weight << ','
          << r.scaled.max_weight << '\n';
    if (!csv) {
      std::fprintf(stderr, "gradient_norm: cannot write %s\n", argv[1]);
      return 1;
    }
  }

  bool ok = true;
  const double s0 = rows.front().scaled.grad_norm;
  for (const auto& r : rows) ok = ok && r.scaled.grad_norm > s0 / 2 && r.scaled.grad_norm < s0 * 2;
  ok = ok && rows.back().unscaled.grad_norm < rows[1].unscaled.grad_norm / 10 &&
       rows.back().unscaled.grad_norm < rows.back().scaled.grad_norm / 10;
  if (!ok) std::printf("CHECK FAILED: the gradient norms do not have the expected shape\n");
  return ok ? 0 : 1;
}
