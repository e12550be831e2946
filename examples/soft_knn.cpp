// Seed 002: attention as a soft k-nearest-neighbour vote. A query asks "which keys look like me?",
// a similarity function scores every key, softmax turns the scores into weights, and the output is
// the weighted mean of the values. Changing the similarity changes the inductive bias:
//   dot     q . k / sqrt(d)                    direction and length
//   cosine  (q/|q|) . (k/|k|) / tau            angle only
//   rbf     -|q - k|^2 / (2 tau^2)             Euclidean neighbourhood
// and the temperature tau sets how sharp the vote is (smaller: closer to argmax).
//
// Prints the weights and outputs of docs/maths.md section 3, temperature sweeps, and the causal mask
// on Q = K = V = the keys; exits non-zero if a number differs from the reference.
#include <attnx/attnx.hpp>

#include <cmath>
#include <cstdio>

using namespace attnx;

namespace {

// Six token embeddings (two clusters near +x and +y, two outliers), values a linear map of them.
constexpr tensor<double, seq_k<6>, d_k<2>> keys{{1.0, 0.2}, {0.9, 0.1}, {0.2, 1.0}, {-0.2, 0.9}, {0.0, -1.0}, {-1.0, -0.6}};
constexpr tensor<double, d_k<2>, d_v<2>> W_v{{0.7, 0.1}, {0.2, 0.9}};
constexpr tensor<double, seq_q<1>, d_k<2>> query{{0.8, 0.15}};  // near the first cluster

int failures = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("  CHECK FAILED: %s\n", what);
    ++failures;
  }
}

template <class Row>
void print_row(const Row& r, std::size_t n) {
  std::printf("[");
  for (std::size_t j = 0; j < n; ++j) std::printf(j ? " %.3f" : "%.3f", r.data()[j]);
  std::printf("]");
}

template <class W>
double entropy(const W& w) {
  double h = 0;
  for (double p : w)
    if (p > 0) h -= p * std::log(p);
  return h;
}

// One similarity: weights and output, against the numbers printed in the seed (3 decimals).
template <class Scores>
void knn(const char* name, Scores&& scores, const double (&want_w)[6], const double (&want_o)[2]) {
  const tensor<double, seq_q<1>, seq_k<6>> w = softmax(scores);
  const tensor<double, seq_q<1>, d_v<2>> out = softmax(scores) * (keys * W_v);
  std::printf("%-28s weights ", name);
  print_row(w, 6);
  std::printf("  output ");
  print_row(out, 2);
  std::printf("\n");
  bool ok = true;
  for (int j = 0; j < 6; ++j) ok = ok && std::abs(w(0, j) - want_w[j]) <= 5e-4;
  for (int c = 0; c < 2; ++c) ok = ok && std::abs(out(0, c) - want_o[c]) <= 5e-4;
  expect(ok, name);
}

}  // namespace

int main() {
  std::printf("Soft k-NN (seed 002): 6 keys, query [0.8, 0.15], V = K W_v\n\n");
  knn("dot (scale 1/sqrt(2))", dot_scores(query, keys, 1 / std::sqrt(2.0)), {0.252, 0.236, 0.174, 0.138, 0.126, 0.075},
      {0.318, 0.221});
  knn("cosine (tau = 0.5)", cosine_scores(query, keys, 0.5), {0.397, 0.394, 0.113, 0.050, 0.037, 0.008}, {0.576, 0.287});
  knn("rbf (tau = 0.5)", rbf_scores(query, keys, 0.5), {0.443, 0.471, 0.055, 0.021, 0.010, 0.000}, {0.651, 0.268});
  std::printf("(the seed prints the same weights and outputs, to 3 decimals)\n");

  // Temperature: the same query, tau from soft to hard. The largest weight grows, the entropy falls.
  const double taus[] = {4.0, 2.0, 1.0, 0.5, 0.25, 0.1, 0.05};
  for (int kind = 0; kind < 2; ++kind) {
    std::printf("\nTemperature sweep, %s:\n  %-6s %-44s %-8s %s\n", kind ? "rbf" : "cosine", "tau", "weights", "max", "entropy");
    double last_max = 0, last_h = 1e9;
    for (double tau : taus) {
      const tensor<double, seq_q<1>, seq_k<6>> w =
          kind ? tensor<double, seq_q<1>, seq_k<6>>(softmax(rbf_scores(query, keys, tau)))
               : tensor<double, seq_q<1>, seq_k<6>>(softmax(cosine_scores(query, keys, tau)));
      double mx = 0;
      for (double p : w) mx = p > mx ? p : mx;
      const double h = entropy(w);
      std::printf("  %-6.2f ", tau);
      print_row(w, 6);
      std::printf("  %.3f    %.3f\n", mx, h);
      expect(mx > last_max && h < last_h, "smaller tau must be sharper (larger max weight, lower entropy)");
      last_max = mx, last_h = h;
    }
  }
  std::printf("  (smaller tau is sharper: the vote approaches argmax; ln 6 = %.3f is the flat maximum)\n", std::log(6.0));
  const tensor<double, seq_q<1>, seq_k<6>> cos1 = cosine_scores(query, keys, 1.0);
  std::printf("  (cosine: keys 0 and 1 point almost the same way as the query, cos = %.4f and %.4f,\n"
              "   so its vote stays split between them long after rbf, which sees key 1 nearer, has chosen)\n",
              cos1(0, 0), cos1(0, 1));

  // Causal mask on Q = K = V = the keys: token t sees tokens 0..t only.
  std::printf("\nCausal mask, Q = K = V = the keys, dot-product similarity (seed 002):\n");
  const tensor<double, seq_k<6>, seq_k<6>> A = softmax(mask(dot_scores(keys, keys), causal));
  const tensor<double, seq_k<6>, seq_k<6>> Ac = softmax(mask(cosine_scores(keys, keys, 0.5), causal));
  const tensor<double, seq_k<6>, seq_k<6>> Ar = softmax(mask(rbf_scores(keys, keys, 0.5), causal));
  const tensor<double, seq_k<6>, d_k<2>> out = softmax(mask(dot_scores(keys, keys), causal)) * keys;
  for (int i = 0; i < 6; ++i) {
    double sum = 0;
    std::printf("  ");
    for (int j = 0; j < 6; ++j) {
      std::printf(" %.3f", A(i, j));
      sum += A(i, j);
    }
    std::printf("   row sum %.15f\n", sum);
  }
  bool triangular = true, sums = true;
  for (const auto* m : {&A, &Ac, &Ar})
    for (int i = 0; i < 6; ++i) {
      double sum = 0;
      for (int j = 0; j < 6; ++j) {
        triangular = triangular && (j > i ? (*m)(i, j) == 0.0 : (*m)(i, j) > 0.0);
        sum += (*m)(i, j);
      }
      sums = sums && std::abs(sum - 1) <= 1e-15;
    }
  std::printf("  lower triangular: %s; every row sums to 1 (dot, cosine and rbf): %s\n", triangular ? "yes" : "NO",
              sums ? "yes" : "NO");
  std::printf("  output row 0 = value 0 = [%.3f, %.3f] (the first token sees only itself)\n", out(0, 0), out(0, 1));
  expect(triangular, "causal weights must be lower triangular");
  expect(sums, "causal rows must sum to 1");
  expect(out(0, 0) == keys(0, 0) && out(0, 1) == keys(0, 1), "row 0 of the causal output is V's row 0");

  std::printf("\n%s\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
