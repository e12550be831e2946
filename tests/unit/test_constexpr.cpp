// The public API in constant expressions: every node, the masks, views over constexpr arrays, and
// tensors large enough to live on the heap (C++20 transient allocation). Each static_assert is
// repeated at run time so that the two paths are compared.
#define BOOST_TEST_MODULE constexpr_eval
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <array>
#include <cmath>

using namespace attnx;

namespace {

constexpr bool near(double a, double b, double tol) { return (a > b ? a - b : b - a) <= tol; }

constexpr double all_nodes() {
  const tensor<double, 2, 3> a{{1, 2, 3}, {4, 5, 6}};
  const tensor<double, 3> bias{0.5, -0.5, 1};
  const tensor<double, 2, 3> b = exp(a - row_max(a)) / row_sum(exp(a - row_max(a))) + bias * 2.0 - tanh(a) + sqrt(a) + log(a);
  const tensor<double, 2, 2> c = a * transpose(a);  // [[14, 32], [32, 77]]
  const tensor<double, 2, 3> s = softmax(mask(a, causal));
  return b(1, 2) + c(1, 0) + s(0, 0) + s(1, 1);
}
double all_nodes_at_run_time() {
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0);
  const double sm = 1.0 / (1 + e1 + e2);  // softmax of [4, 5, 6] at 6
  const double b12 = sm + 2.0 - std::tanh(6.0) + std::sqrt(6.0) + std::log(6.0);
  return b12 + 32 + 1.0 + 1 / (1 + std::exp(-1.0));
}

// A constexpr model: weights in constexpr arrays, viewed; the view is usable at compile time.
constexpr std::array<float, 8> weight_memory{1, 0, 0, 1, 1, 0, 0, 1};
constexpr float viewed() {
  const view<const float, 4, 2> W(weight_memory);
  const tensor<float, 2, 4> x{{1, 2, 3, 4}, {5, 6, 7, 8}};
  const tensor<float, 2, 2> y = x * W;
  return y(1, 1);  // 6 + 8
}

// 100 x 100 doubles = 80 kB: heap storage, evaluated at compile time.
constexpr double heap_at_compile_time() {
  using big = tensor<double, 100, 100>;
  const big a = big::generate([](auto i, auto j) { return double((i + j) % 3); });
  const big b = a + a;
  return b(99, 98) + b(1, 1);  // 2 * (197 % 3 = 2) + 2 * 2
}

// Attention at a size the default constexpr budgets allow on every compiler (clang: about L = 32, d = 16).
template <class T>
constexpr T attention_16() {
  const auto Q = tensor<T, 16, 8>::generate([](auto i, auto j) { return T(int(i * 3 + j * 5) % 7) / T(7); });
  const auto K = tensor<T, 16, 8>::generate([](auto i, auto j) { return T(int(i * 5 + j * 3) % 11) / T(11); });
  const auto V = tensor<T, 16, 4>::generate([](auto i, auto j) { return T(i) + T(j) / T(4); });
  const tensor<T, 16, 4> O = attention(Q, K, V, causal);
  T sum = 0;
  for (T x : O) sum += x;
  return sum;
}

}  // namespace

static_assert(near(all_nodes(), 39.63756103476526, 1e-13));  // value from Python's math module
static_assert(viewed() == 14.0f);
static_assert(heap_at_compile_time() == 8.0);
static_assert(attention_16<double>() > 0 && attention_16<float>() > 0);

BOOST_AUTO_TEST_CASE(compile_time_equals_run_time) {
  constexpr double ct = all_nodes();
  const double rt = all_nodes_at_run_time();
  BOOST_TEST(std::abs(ct - rt) <= 1e-14);
  volatile int zero = 0;
  BOOST_TEST(viewed() + float(zero) == 14.0f);
  constexpr double ad = attention_16<double>();
  double (*volatile f)() = attention_16<double>;  // the run-time path (std::exp) against constexpr (cexp)
  BOOST_TEST(std::abs(ad - f()) <= 1e-12 * std::abs(ad));
  constexpr float af = attention_16<float>();
  float (*volatile g)() = attention_16<float>;
  BOOST_TEST(std::abs(af - g()) <= 1e-5f * std::abs(af));
  BOOST_TEST(heap_at_compile_time() == 8.0);
}
