// kernels/pointwise.hpp: the vector activations and derivatives, on every instruction set this CPU runs, float and
// double, against the functions in double (std::exp, std::tanh) with the scalar functions' special values; and the
// row evaluator that calls them (evaluate(gelu_tanh(x)) at run time), the constant evaluation's scalar values, and
// the gradients that read them.
#define BOOST_TEST_MODULE pointwise
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>
#include <attnx/kernels/pointwise.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {
using attnx::kernels::pointwise;
namespace simd = attnx::simd;

// The functions in double, from their definitions (the limits at +-inf as the scalar functions give them).
double reference(pointwise f, double x) {
  const double inf = std::numeric_limits<double>::infinity();
  const double c = 0.79788456080286535588, k = 0.044715;
  const auto sig = [](double t) { return t >= 0 ? 1 / (1 + std::exp(-t)) : std::exp(t) / (1 + std::exp(t)); };
  switch (f) {
    case pointwise::tanh: return std::tanh(x);
    case pointwise::sigmoid: return sig(x);
    case pointwise::silu: return x == -inf ? 0.0 : x * sig(x);
    case pointwise::d_silu: return x == -inf ? 0.0 : sig(x) * (1 + x * (1 - sig(x)));
    case pointwise::gelu_tanh:
    case pointwise::d_gelu_tanh: {
      // 1 + tanh u = 2 sig(2u) and 1 - tanh^2 u = 4 sig(2u) sig(-2u): the definitions without their cancellation
      // where tanh u is near -1 (x below about -4), where the functions' values are tiny but not 0.
      if (x >= 10) return f == pointwise::gelu_tanh ? x : 1.0;
      if (x <= -10) return f == pointwise::gelu_tanh ? -0.0 : 0.0;
      const double u = c * (x + k * x * x * x);
      if (f == pointwise::gelu_tanh) return x * sig(2 * u);
      return sig(2 * u) + 2 * x * sig(2 * u) * sig(-2 * u) * c * (1 + 3 * k * x * x);
    }
  }
  return std::numeric_limits<double>::quiet_NaN();
}

const pointwise all_functions[] = {pointwise::tanh,   pointwise::sigmoid,   pointwise::silu,
                                   pointwise::d_silu, pointwise::gelu_tanh, pointwise::d_gelu_tanh};
const char* name(pointwise f) {
  const char* names[] = {"tanh", "sigmoid", "silu", "d_silu", "gelu_tanh", "d_gelu_tanh"};
  return names[int(f)];
}

// Inputs: a sweep over [-12, 12] (both sides of the +-10 cut-offs), large magnitudes, the special values; n not a
// multiple of any vector width (the tail).
template <class T>
std::vector<T> inputs() {
  std::vector<T> x;
  for (int i = -1200; i <= 1200; i += 7) x.push_back(T(i) / T(100));
  const T inf = std::numeric_limits<T>::infinity();
  for (T v : {T(0), T(-0.0), T(1e-30), T(-1e-30), T(10), T(-10), T(9.999), T(-9.999), T(80), T(-80), T(1e20), T(-1e20),
              std::numeric_limits<T>::max(), std::numeric_limits<T>::lowest(), inf, -inf})
    x.push_back(v);
  x.push_back(std::numeric_limits<T>::quiet_NaN());
  std::mt19937 g(5);
  std::normal_distribution<double> n(0, 2);
  for (int i = 0; i < 37; ++i) x.push_back(T(n(g)));
  return x;
}

// The magnitude of the argument of the one exponential each function takes (the kernel's exp(t) = 2^(t log2 e): the
// product's rounding costs about |t| / 2 units of T's epsilon, as any exp whose argument is rounded to T).
double exp_argument(pointwise f, double x) {
  const double a = std::abs(x);
  if (f == pointwise::gelu_tanh || f == pointwise::d_gelu_tanh) return 2 * 0.79788456080286535588 * (a + 0.044715 * a * a * a);
  return f == pointwise::tanh ? 2 * a : a;
}

// Within (16 + 2 |t|) units of T's epsilon (at most 2000) of the double value, relative; the derivatives relative to
// max(|value|, 1), as their terms, of magnitude up to 1, cancel where the derivative crosses 0. gelu_tanh's exact
// zeros keep their sign (-0 for x <= -10).
template <class T>
void check(pointwise f, simd::isa isa) {
  const std::vector<T> x = inputs<T>();
  std::vector<T> y(x.size());
  attnx::kernels::pointwise_map(f, x.data(), y.data(), x.size(), isa);
  const bool derivative = f == pointwise::d_silu || f == pointwise::d_gelu_tanh;
  int bad = 0;
  std::string first;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = reference(f, double(x[i]));
    const double got = double(y[i]);
    const double units = std::min(16 + 2 * exp_argument(f, double(x[i])), 2000.0);
    const double tol = units * double(std::numeric_limits<T>::epsilon()) * std::max(std::abs(want), derivative ? 1.0 : 0.0);
    bool ok;
    if (std::isnan(want)) ok = std::isnan(got);
    else if (std::isinf(want)) ok = got == want;
    else ok = std::abs(got - want) <= tol && (want != 0 || f != pointwise::gelu_tanh || std::signbit(got) == std::signbit(want));
    if (!ok && bad++ == 0)
      first = std::string(name(f)) + "(" + std::to_string(double(x[i])) + ") = " + std::to_string(got) + ", want " +
              std::to_string(want);
  }
  BOOST_TEST(bad == 0, simd::name(isa) << " " << name(f) << ": " << bad << " wrong, first " << first);
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_function_every_isa_float_and_double) {
  for (simd::isa i : simd::supported())
    for (pointwise f : all_functions) {
      check<float>(f, i);
      check<double>(f, i);
    }
}

// In place (y == x), and runs of every length below two vectors of the widest path (the tail copy).
BOOST_AUTO_TEST_CASE(in_place_and_every_tail_length) {
  for (simd::isa i : simd::supported())
    for (std::size_t n = 0; n < 40; ++n) {
      std::vector<float> x(n), y(n);
      for (std::size_t j = 0; j < n; ++j) x[j] = float(j) * 0.37f - 6.0f;
      attnx::kernels::pointwise_map(pointwise::gelu_tanh, x.data(), y.data(), n, i);
      attnx::kernels::pointwise_map(pointwise::gelu_tanh, x.data(), x.data(), n, i);
      for (std::size_t j = 0; j < n; ++j) {
        const double want = reference(pointwise::gelu_tanh, double(float(j) * 0.37f - 6.0f));
        BOOST_TEST(x[j] == y[j]);
        BOOST_TEST(std::abs(double(y[j]) - want) <= 1e-6 * std::max(std::abs(want), 1e-3));
      }
    }
}

// The row evaluator: evaluate(f(x)) at run time is the kernel's value, row by row, for an operand that is itself an
// expression (x * 2), on a dyn shape.
BOOST_AUTO_TEST_CASE(evaluator_rows_match_the_kernel) {
  attnx::tensor<float, attnx::dyn, 19> x(7, 19);
  for (std::size_t i = 0; i < x.numel(); ++i) x.data()[i] = float(int(i % 23) - 11) * 0.41f;
  const auto y = attnx::evaluate(attnx::gelu_tanh(x * 2.0f));
  const auto s = attnx::evaluate(attnx::silu(x));
  for (std::size_t i = 0; i < x.numel(); ++i) {
    BOOST_TEST(std::abs(double(y.data()[i]) - reference(pointwise::gelu_tanh, 2.0 * double(x.data()[i]))) <= 2e-6 * std::max(1.0, std::abs(2.0 * double(x.data()[i]))));
    BOOST_TEST(std::abs(double(s.data()[i]) - reference(pointwise::silu, double(x.data()[i]))) <= 2e-6 * std::max(1.0, std::abs(double(x.data()[i]))));
  }
}

// A constant evaluation keeps the scalar functions: gelu_tanh(1) in double to the last digits.
constexpr attnx::tensor<double, 3> cx{-1.0, 1.0, 12.0};
constexpr auto cy = attnx::evaluate(attnx::gelu_tanh(cx));
static_assert(cy(2) == 12.0);
BOOST_AUTO_TEST_CASE(constant_evaluation_scalar_values) {
  BOOST_TEST(std::abs(cy(1) - reference(pointwise::gelu_tanh, 1.0)) <= 1e-15);
  BOOST_TEST(std::abs(cy(0) - reference(pointwise::gelu_tanh, -1.0)) <= 1e-15);
}

// The gradient through gelu_tanh (the kernel's derivative, d_gelu_tanh) against central differences in double.
BOOST_AUTO_TEST_CASE(gelu_tanh_gradient_matches_finite_differences) {
  attnx::tensor<double, attnx::dyn, 5> x(3, 5);
  for (std::size_t i = 0; i < x.numel(); ++i) x.data()[i] = double(int(i) - 7) * 0.6;
  attnx::tensor<double, attnx::dyn, 5> dy(3, 5);
  for (std::size_t i = 0; i < dy.numel(); ++i) dy.data()[i] = 0.5 + 0.1 * double(i);
  const auto [dx] = attnx::backward(attnx::gelu_tanh(x), dy, attnx::wrt(x));
  for (std::size_t i = 0; i < x.numel(); ++i) {
    const double h = 1e-6, v = x.data()[i];
    const double fd = (reference(pointwise::gelu_tanh, v + h) - reference(pointwise::gelu_tanh, v - h)) / (2 * h);
    BOOST_TEST(std::abs(dx.data()[i] - dy.data()[i] * fd) <= 1e-8);
  }
}
