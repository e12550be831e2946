// Seed 002's soft k-NN (docs/maths.md section 3), dot-product similarity, and its causal example.
#define BOOST_TEST_MODULE seed002
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <algorithm>
#include <cmath>

using namespace attnx;

namespace {
constexpr tensor<double, 6, 2> keys{{1.0, 0.2}, {0.9, 0.1}, {0.2, 1.0}, {-0.2, 0.9}, {0.0, -1.0}, {-1.0, -0.6}};
constexpr tensor<double, 2, 2> W_v{{0.7, 0.1}, {0.2, 0.9}};
constexpr tensor<double, 1, 2> query{{0.8, 0.15}};
}  // namespace

BOOST_AUTO_TEST_CASE(soft_knn_dot_product) {
  const tensor<double, 6, 2> V = keys * W_v;
  const tensor<double, 1, 6> w = attention_weights(query, keys);  // softmax(q k^T / sqrt(2))
  const tensor<double, 1, 2> out = attention(query, keys, keys * W_v);
  const double want_w[6] = {0.252, 0.236, 0.174, 0.138, 0.126, 0.075};  // printed to 3 decimals
  for (int j = 0; j < 6; ++j) BOOST_TEST(std::abs(w(0, j) - want_w[j]) <= 0.0005 + 1e-12, "weight " << j << " = " << w(0, j));
  BOOST_TEST(std::abs(out(0, 0) - 0.318) <= 0.0005 + 1e-12, "output 0 = " << out(0, 0));
  BOOST_TEST(std::abs(out(0, 1) - 0.221) <= 0.0005 + 1e-12, "output 1 = " << out(0, 1));
  // And against the definition, with plain loops.
  double s[6], mx = -1e300, sum = 0;
  for (int j = 0; j < 6; ++j) s[j] = (0.8 * keys(j, 0) + 0.15 * keys(j, 1)) / std::sqrt(2.0), mx = std::max(mx, s[j]);
  for (int j = 0; j < 6; ++j) sum += std::exp(s[j] - mx);
  double o0 = 0, o1 = 0;
  for (int j = 0; j < 6; ++j) {
    const double p = std::exp(s[j] - mx) / sum;
    BOOST_TEST(std::abs(w(0, j) - p) <= 1e-15);
    o0 += p * V(j, 0), o1 += p * V(j, 1);
  }
  BOOST_TEST(std::abs(out(0, 0) - o0) <= 1e-15);
  BOOST_TEST(std::abs(out(0, 1) - o1) <= 1e-15);
}

BOOST_AUTO_TEST_CASE(causal_triangle_rows_sum_to_one) {
  const tensor<double, 6, 6> A = attention_weights(keys, keys, causal);
  for (int i = 0; i < 6; ++i) {
    double sum = 0;
    for (int j = 0; j < 6; ++j) {
      if (j > i) BOOST_TEST(A(i, j) == 0.0);
      else BOOST_TEST(A(i, j) > 0.0);
      sum += A(i, j);
    }
    BOOST_TEST(std::abs(sum - 1) <= 1e-15);
  }
  BOOST_TEST(A(0, 0) == 1.0);
}

// The same weights at compile time.
static_assert([] {
  const tensor<double, 6, 6> A = attention_weights(keys, keys, causal);
  return A(0, 0) == 1.0 && A(0, 1) == 0.0 && A(2, 3) == 0.0 && A(5, 0) > 0.0;
}());
