// Seed 001's worked example (docs/maths.md section 2): proven at compile time by static_assert and
// checked again at run time, from inputs the compiler cannot see through.
#define BOOST_TEST_MODULE worked_example
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "../../examples/seed001.hpp"

using namespace attnx;

namespace {
constexpr double rel(double a, double b) {
  const double d = a > b ? a - b : b - a;
  const double m = (a < 0 ? -a : a) > (b < 0 ? -b : b) ? (a < 0 ? -a : a) : (b < 0 ? -b : b);
  return m == 0 ? d : d / m;
}
constexpr double scores_ref[9] = {7.071067811865475,  41.012193308819754, 74.95331880577403,   //
                                  41.012193308819754, 165.46298679765212, 289.91378028648444,  //
                                  74.95331880577403,  289.91378028648444, 504.8742417671949};
constexpr double weights_ref[9] = {3.304554921194982e-30,   1.817843480939703e-15,  0.9999999999999982,  //
                                   8.005975166354454e-109,  8.947611506069599e-55,  1.0,                 //
                                   1.9396148616922218e-187, 4.404105881665553e-94,  1.0};
constexpr double output_ref[6] = {17.999999999999986, 19.999999999999986, 18, 20, 18, 20};

template <class T, class S>
constexpr double max_rel(const basic_tensor<T, S>& t, const double* want) {
  double worst = 0;
  for (std::size_t i = 0; i < S::size; ++i) worst = rel(t.data()[i], want[i]) > worst ? rel(t.data()[i], want[i]) : worst;
  return worst;
}

// Compile time.
static_assert(seed001::Q == tensor<double, seq<3>, d_k<2>>{{1, 5}, {9, 13}, {17, 21}});
static_assert(seed001::K == tensor<double, seq<3>, d_k<2>>{{5, 1}, {13, 9}, {21, 17}});
static_assert(seed001::V == tensor<double, seq<3>, d_v<2>>{{2, 4}, {10, 12}, {18, 20}});
static_assert(seed001::QKt == tensor<double, seq<3>, seq<3>>{{10, 58, 106}, {58, 234, 410}, {106, 410, 714}});
static_assert(max_rel(seed001::scores, scores_ref) <= 4e-16);
static_assert(max_rel(seed001::weights, weights_ref) <= 1e-13);
static_assert(max_rel(seed001::output, output_ref) <= 1e-15);
// One expression from X to the output, at compile time.
static_assert(max_rel(evaluate(attention(seed001::X * seed001::W_Q, seed001::X * seed001::W_K, seed001::X * seed001::W_V)),
                      output_ref) <= 1e-15);
}  // namespace

BOOST_AUTO_TEST_CASE(worked_example_at_run_time) {
  volatile double zero = 0;  // keeps the compiler from folding the run-time path
  seed001::X_t X = seed001::X;
  X(0, 0) += zero;
  const tensor<double, seq<3>, d_k<2>> Q = X * seed001::W_Q;
  const tensor<double, seq<3>, d_k<2>> K = X * seed001::W_K;
  const tensor<double, seq<3>, d_v<2>> V = X * seed001::W_V;
  BOOST_TEST(Q == seed001::Q);
  BOOST_TEST(K == seed001::K);
  BOOST_TEST(V == seed001::V);
  const tensor<double, seq<3>, seq<3>> QKt = Q * transpose(K);
  BOOST_TEST(QKt(1, 2) == 410.0);  // the article prints 400
  BOOST_TEST(QKt(2, 1) == 410.0);
  BOOST_TEST(QKt == seed001::QKt);
  BOOST_TEST(max_rel(evaluate(scaled_scores(Q, K)), scores_ref) <= 4e-16);
  BOOST_TEST(max_rel(evaluate(softmax(scaled_scores(Q, K))), weights_ref) <= 1e-13);
  BOOST_TEST(max_rel(evaluate(attention(Q, K, V)), output_ref) <= 1e-15);
  const tensor<double, seq<3>, d_v<2>> fused = attention(X * seed001::W_Q, X * seed001::W_K, X * seed001::W_V);
  BOOST_TEST(max_rel(fused, output_ref) <= 1e-15);
  // Run time and compile time agree to the last bit on the exact steps (-ffp-contract=off).
  BOOST_TEST(fused == seed001::output);
  // exp(504.87) does not overflow double (it overflows past 709.78),
  // but it does overflow float (past 88.72): the unstable form gives inf / inf = NaN in float.
  BOOST_TEST(!std::isinf(std::exp(seed001::scores(2, 2))));
  BOOST_TEST(std::isinf(std::exp(static_cast<float>(seed001::scores(2, 2)))));
}

BOOST_AUTO_TEST_CASE(worked_example_in_float) {
  tensor<float, 3, 4> X{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}};
  tensor<float, 4, 2> WQ{{1, 0}, {1, 0}, {0, 1}, {0, 1}}, WK{{0, 1}, {0, 1}, {1, 0}, {1, 0}}, WV{{1, 0}, {0, 1}, {1, 0}, {0, 1}};
  tensor<float, 3, 2> O = attention(X * WQ, X * WK, X * WV);
  // Scores reach 504.87: exp overflows float there, so only the stable softmax gives a result.
  for (std::size_t i = 0; i < 6; ++i) BOOST_TEST(std::abs(O.data()[i] - float(output_ref[i])) <= 1e-5f);
}
