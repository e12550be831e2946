// Seed 002 (docs/maths.md section 4): why scores are scaled by 1/sqrt(d).
//
// The dot product of two random d-dimensional vectors with standard-normal entries has variance d.
// Unscaled, the 64 scores of a query's row spread over a range that grows like sqrt(d), and softmax
// puts nearly all the weight on the largest one (entropy near 0: argmax, vanishing gradients).
// Divided by sqrt(d), the scores have variance 1 whatever d is, and the softmax entropy stays put.
//
// For d = 256, 512, ..., 16384: 64 queries and 64 keys with N(0, 1) entries, 5 trials; prints the
// mean row entropy of softmax(Q K^T) and of softmax(Q K^T / sqrt(d)) (maximum ln 64 = 4.159).
// With a path argument it also writes the table as CSV (scripts/plot_entropy.py draws it).
// Exits non-zero unless the scaled entropy stays near 3.68 and the unscaled one is far lower and
// falling.
#include <attnx/attnx.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <utility>

#include "support/normal.hpp"

using namespace attnx;

namespace {

constexpr std::size_t n_queries = 64, n_keys = 64, trials = 5;

// Mean over rows of -sum p log p, with p clipped to [1e-12, 1] as in the seed.
template <class P>
double mean_row_entropy(const P& p) {
  double total = 0;
  for (std::size_t i = 0; i < n_queries; ++i) {
    double h = 0;
    for (std::size_t j = 0; j < n_keys; ++j) {
      const double x = p(i, j) < 1e-12 ? 1e-12 : p(i, j);
      h -= x * std::log(x);
    }
    total += h;
  }
  return total / n_queries;
}

struct result {
  std::size_t d;
  double unscaled, scaled;
};

template <std::size_t D>
result run(normal_source& rng) {
  // 64 x D doubles: 128 KiB to 8 MiB, on the heap (tensor storage beyond 64 KiB).
  using queries = tensor<double, seq_q<n_queries>, d_k<D>>;
  using keys = tensor<double, seq_k<n_keys>, d_k<D>>;
  double hu = 0, hs = 0;
  for (std::size_t t = 0; t < trials; ++t) {
    const auto Q = queries::generate([&](auto, auto) { return rng(); });
    const auto K = keys::generate([&](auto, auto) { return rng(); });
    const tensor<double, seq_q<n_queries>, seq_k<n_keys>> S = dot_scores(Q, K, 1.0);  // Q K^T, unscaled
    const tensor<double, seq_q<n_queries>, seq_k<n_keys>> Pu = softmax(S);
    const tensor<double, seq_q<n_queries>, seq_k<n_keys>> Ps = softmax(scale(S, 1 / std::sqrt(double(D))));
    hu += mean_row_entropy(Pu);
    hs += mean_row_entropy(Ps);
  }
  return {D, hu / trials, hs / trials};
}

template <std::size_t... I>
auto run_all(normal_source& rng, std::index_sequence<I...>) {
  return std::array<result, sizeof...(I)>{run<(std::size_t{256} << I)>(rng)...};
}

}  // namespace

int main(int argc, char** argv) {
  normal_source rng(2002);
  // d = 256 << i, i = 0..6: 256 ... 16384 (evaluated in order: the brace list is sequenced)
  const auto rows = run_all(rng, std::make_index_sequence<7>{});
  const double h_max = std::log(double(n_keys));

  std::printf("Mean row entropy of softmax over %zu keys (%zu queries, %zu trials, N(0,1) entries); max ln %zu = %.3f\n\n",
              n_keys, n_queries, trials, n_keys, h_max);
  std::printf("%7s  %9s  %7s\n", "d", "unscaled", "scaled");
  for (const auto& r : rows) std::printf("%7zu  %9.3f  %7.3f\n", r.d, r.unscaled, r.scaled);
  std::printf("\nscaled by 1/sqrt(d): near %.2f for every d; unscaled: near-argmax, and sharper as d grows\n",
              rows[3].scaled);

  if (argc > 1) {
    std::ofstream csv(argv[1]);
    csv << "d,unscaled,scaled,max\n";
    char line[96];
    for (const auto& r : rows) {
      std::snprintf(line, sizeof line, "%zu,%.6f,%.6f,%.6f\n", r.d, r.unscaled, r.scaled, h_max);
      csv << line;
    }
    if (!csv) {
      std::printf("could not write %s\n", argv[1]);
      return 1;
    }
    std::printf("wrote %s\n", argv[1]);
  }

  // The shape of the seed's result (its numbers are random): scaled ~3.68 everywhere, unscaled far
  // lower and falling (allowing trial noise between neighbours, a clear fall from first to last).
  bool ok = true;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    ok = ok && std::abs(rows[i].scaled - 3.68) < 0.08;
    ok = ok && rows[i].unscaled < 0.5 && rows[i].unscaled < rows[i].scaled / 8;
    if (i > 0) ok = ok && rows[i].unscaled < rows[i - 1].unscaled * 1.15;
  }
  ok = ok && rows.back().unscaled < rows.front().unscaled / 4;
  std::printf("%s\n", ok ? "check passed" : "CHECK FAILED");
  return ok ? 0 : 1;
}
