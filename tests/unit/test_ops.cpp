#define BOOST_TEST_MODULE ops
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "messages.hpp"

// The element-wise operations (activations, maximum / minimum, map, comparisons, where), the row-wise ones
// (layer_norm, rms_norm, log_softmax) and compound assignment, against plain double loops written here;
// special values; each at compile time (static_assert) as well.

using namespace attnx;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double qnan = std::numeric_limits<double>::quiet_NaN();

// The reference formulas, in double (PyTorch's definitions; the limits at -inf where the formula gives NaN).
double ref_relu(double x) { return std::isnan(x) ? x : x < 0 ? 0.0 : x; }
double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double ref_silu(double x) { return x == -inf ? 0.0 : x * ref_sigmoid(x); }
double ref_gelu(double x) { return x == -inf ? 0.0 : 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double ref_gelu_tanh(double x) {
  if (x == -inf) return 0.0;
  if (std::isinf(x)) return x;
  const double k = std::sqrt(2.0 / std::acos(-1.0));
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// |got - want| <= tol * max(1, |want|); NaN where the reference has NaN; infinities exact.
bool close(double got, double want, double tol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= tol * std::max(1.0, std::abs(want));
}

template <class T>
constexpr double tol = sizeof(T) == 4 ? 2e-6 : 1e-14;

// Inputs: a sweep over [-12, 12], large values, and the special ones.
template <class T>
std::vector<T> inputs() {
  std::vector<T> v;
  for (int i = -1200; i <= 1200; ++i) v.push_back(T(i) / T(100));
  for (T x : {T(1e-30), T(-1e-30), T(30), T(-30), T(1e30), T(-1e30), std::numeric_limits<T>::max(),
              std::numeric_limits<T>::lowest(), std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity(),
              std::numeric_limits<T>::quiet_NaN(), T(0), -T(0)})
    v.push_back(x);
  return v;
}

// Each unary operation over inputs(), through a dyn tensor (the run-time evaluator), against ref.
template <class T, class Op>
void unary_against(const char* name, Op op, double (*ref)(double)) {
  const std::vector<T> in = inputs<T>();
  tensor<T, dyn> x(in.size());
  std::copy(in.begin(), in.end(), x.data());
  const tensor<T, dyn> y = op(x);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const double want = ref(double(in[i]));
    // float: the reference from the float input, then rounded (so overflow to inf is the float one)
    const double want_t = std::isnan(want) ? want : double(T(want));
    if (!close(double(y(i)), want_t, tol<T>) && bad++ < 5)
      BOOST_ERROR(name << "(" << in[i] << "): got " << y(i) << ", want " << want_t);
  }
  BOOST_TEST(bad == 0u, name);
}

}  // namespace

BOOST_AUTO_TEST_CASE(activations_float_and_double) {
  const auto run = [](auto t) {
    using T = decltype(t);
    unary_against<T>("relu", [](const auto& x) { return relu(x); }, ref_relu);
    unary_against<T>("sigmoid", [](const auto& x) { return sigmoid(x); }, ref_sigmoid);
    unary_against<T>("silu", [](const auto& x) { return silu(x); }, ref_silu);
    unary_against<T>("gelu", [](const auto& x) { return gelu(x); }, ref_gelu);
    unary_against<T>("gelu_tanh", [](const auto& x) { return gelu_tanh(x); }, ref_gelu_tanh);
  };
  run(0.0f);
  run(0.0);
}

// A few values worked out by hand: gelu(1) = Phi(1) = 0.8413447460685429; gelu_tanh(1) = 0.8411919906082768;
// silu(1) = 1 / (1 + e^-1) = 0.7310585786300049.
BOOST_AUTO_TEST_CASE(activations_known_values) {
  tensor<double, 4> x{1.0, -1.0, 0.0, 2.0};
  const tensor<double, 4> g = gelu(x), gt = gelu_tanh(x), s = silu(x);
  BOOST_TEST(std::abs(g(0) - 0.8413447460685429) < 1e-15);
  BOOST_TEST(std::abs(g(1) - (-1.0 + 0.8413447460685429)) < 1e-15);  // gelu(-x) = gelu(x) - x
  BOOST_TEST(std::abs(gt(0) - 0.8411919906082768) < 1e-15);
  BOOST_TEST(std::abs(s(0) - 0.7310585786300049) < 1e-15);
  BOOST_TEST(g(2) == 0.0);
}

// At compile time: the same values as at run time (the constexpr erf, tanh and exp), float and double.
constexpr double constexpr_activations() {
  tensor<double, 5> x{-3.0, -0.5, 0.0, 0.7, 4.0};
  const tensor<double, 5> y = gelu(x) + gelu_tanh(x) + silu(x) + sigmoid(x) + relu(x);
  double s = 0;
  for (std::size_t i = 0; i < 5; ++i) s += y(i) * double(i + 1);
  return s;
}
constexpr float constexpr_activations_float() {
  tensor<float, 3> x{-2.0f, 0.25f, 3.0f};
  const tensor<float, 3> y = gelu(x) - gelu_tanh(x) + silu(x);
  return y(0) + 2 * y(1) + 3 * y(2);
}
BOOST_AUTO_TEST_CASE(activations_at_compile_time) {
  constexpr double c = constexpr_activations();
  double r = 0;
  const double xs[] = {-3.0, -0.5, 0.0, 0.7, 4.0};
  for (int i = 0; i < 5; ++i) {
    const double x = xs[i];
    r += (ref_gelu(x) + ref_gelu_tanh(x) + ref_silu(x) + ref_sigmoid(x) + ref_relu(x)) * (i + 1);
  }
  BOOST_TEST(std::abs(c - r) < 1e-13);
  constexpr float cf = constexpr_activations_float();
  const float xf[] = {-2.0f, 0.25f, 3.0f};
  double rf = 0;
  for (int i = 0; i < 3; ++i) rf += (ref_gelu(xf[i]) - ref_gelu_tanh(xf[i]) + ref_silu(xf[i])) * (i + 1);
  BOOST_TEST(std::abs(double(cf) - rf) < 1e-5);
}

// maximum / minimum: broadcasting, numbers, NaN from either side.
BOOST_AUTO_TEST_CASE(maximum_and_minimum) {
  tensor<float, 2, 3> a{{1, -2, 3}, {float(qnan), 5, -6}};
  tensor<float, 3> b{0, float(qnan), 2};
  const tensor<float, 2, 3> mx = maximum(a, b), mn = minimum(a, b), r = maximum(a, 0.f), l = minimum(2.f, a);
  const float wmx[6] = {1, float(qnan), 3, float(qnan), float(qnan), 2};
  const float wmn[6] = {0, float(qnan), 2, float(qnan), float(qnan), -6};
  for (std::size_t i = 0; i < 6; ++i) {
    BOOST_TEST(close(mx.data()[i], wmx[i], 0), "maximum " << i);
    BOOST_TEST(close(mn.data()[i], wmn[i], 0), "minimum " << i);
  }
  BOOST_TEST(r(0, 1) == 0.f);
  BOOST_TEST(r(1, 2) == 0.f);
  BOOST_TEST(std::isnan(r(1, 0)));
  BOOST_TEST(l(0, 2) == 2.f);
  BOOST_TEST(l(0, 1) == -2.f);
  static_assert([] {
    tensor<double, 3> x{-1, 0.5, 4};
    const tensor<double, 3> y = minimum(maximum(x, 0.0), 1.0);  // clamp
    return y(0) == 0 && y(1) == 0.5 && y(2) == 1;
  }());
}

// map: any callable, each element read once (the operand's evaluation counts its reads), captured state,
// a bool result, at compile time.
BOOST_AUTO_TEST_CASE(map_calls_f_once_per_element) {
  tensor<double, 3, 4> x;
  for (std::size_t i = 0; i < 12; ++i) x.data()[i] = double(i) - 5.5;
  int reads = 0;
  const auto counted = map([&reads](double v) { ++reads; return v; }, x);
  const double shift = 0.25;
  const tensor<double, 3, 4> y = map([shift](double v) { return v * v + shift; }, counted);
  BOOST_TEST(reads == 12);
  for (std::size_t i = 0; i < 12; ++i) BOOST_TEST(y.data()[i] == x.data()[i] * x.data()[i] + 0.25);
  const tensor<bool, 3, 4> odd = map([](double v) { return int(v + 5.5) % 2 == 1; }, x);
  double (*negate_fn)(double) = [](double v) { return -v; };
  const tensor<double, 3, 4> neg = map(negate_fn, x);  // a function pointer (a function decays to one)
  BOOST_TEST(neg(2, 3) == -x(2, 3));
  for (std::size_t i = 0; i < 12; ++i) BOOST_TEST(odd.data()[i] == (i % 2 == 1));
  // a user's activation on a product: fused into the product's rows
  tensor<double, 2, 3> a{{1, 2, 3}, {4, 5, 6}};
  tensor<double, 3, 2> w{{1, 0}, {0, 1}, {1, 1}};
  const tensor<double, 2, 2> h = map([](double v) { return v > 5 ? 5.0 : v; }, a * w);
  BOOST_TEST(h(0, 0) == 4.0);
  BOOST_TEST(h(1, 1) == 5.0);  // 11 -> 5
  static_assert([] {
    tensor<int, 4> v{1, 2, 3, 4};
    const tensor<int, 4> sq = map([](int e) { return e * e; }, v);
    return sq(3) == 16;
  }());
}

// Comparisons: bool expressions with broadcasting and numbers; NaN compares false (not_equal: true); usable as
// a mask of attention scores and in where.
BOOST_AUTO_TEST_CASE(comparisons_and_where) {
  tensor<float, 2, 3> a{{1, 2, 3}, {4, float(qnan), 6}};
  tensor<float, 3> b{2, 2, 2};
  const tensor<bool, 2, 3> lt = a < b, le = a <= b, gt = a > 2.f, ge = 2.f >= a, eq = equal(a, b), ne = not_equal(a, b);
  const bool wlt[6] = {1, 0, 0, 0, 0, 0}, wle[6] = {1, 1, 0, 0, 0, 0}, wgt[6] = {0, 0, 1, 1, 0, 1};
  const bool wge[6] = {1, 1, 0, 0, 0, 0}, weq[6] = {0, 1, 0, 0, 0, 0}, wne[6] = {1, 0, 1, 1, 1, 1};
  for (std::size_t i = 0; i < 6; ++i) {
    BOOST_TEST(lt.data()[i] == wlt[i], "< " << i);
    BOOST_TEST(le.data()[i] == wle[i], "<= " << i);
    BOOST_TEST(gt.data()[i] == wgt[i], "> " << i);
    BOOST_TEST(ge.data()[i] == wge[i], ">= " << i);
    BOOST_TEST(eq.data()[i] == weq[i], "equal " << i);
    BOOST_TEST(ne.data()[i] == wne[i], "not_equal " << i);
  }
  // where: a (2, 3) condition, an expression and a number; the broadcast of a row
  const tensor<float, 2, 3> w = where(a > 2.f, a * 10.f, -1.f);
  const float ww[6] = {-1, -1, 30, 40, -1, 60};
  for (std::size_t i = 0; i < 6; ++i) BOOST_TEST(w.data()[i] == ww[i]);
  const tensor<float, 2, 3> w2 = where(lt, b, a);
  BOOST_TEST(w2(0, 0) == 2.f);
  BOOST_TEST(w2(1, 0) == 4.f);
  // a comparison as an attention mask: keys whose score is below 0 are blocked (vs the same mask as a tensor,
  // and vs the opposite comparison said as blocked)
  tensor<double, 3, 4> s{{1, -1, 2, 0.5}, {-3, -2, 1, 1}, {0.5, 0.25, -0.5, 3}};
  const tensor<double, 3, 4> p1 = softmax(mask(s, allowed(s >= 0.0)));
  const tensor<bool, 3, 4> m = s >= 0.0;
  const tensor<double, 3, 4> p2 = softmax(mask(s, allowed(m)));
  const tensor<double, 3, 4> p3 = softmax(mask(s, blocked(s < 0.0)));
  for (std::size_t i = 0; i < 12; ++i) BOOST_TEST(p1.data()[i] == p2.data()[i]);
  for (std::size_t i = 0; i < 12; ++i) BOOST_TEST(p1.data()[i] == p3.data()[i]);
  BOOST_TEST(p1(0, 1) == 0.0);
  double row = 0;
  for (std::size_t j = 0; j < 4; ++j) row += p1(1, j);
  BOOST_TEST(std::abs(row - 1.0) < 1e-15);
  static_assert([] {
    tensor<double, 4> x{-2, -1, 1, 2};
    const tensor<double, 4> y = where(x < 0.0, -x, x * 3.0);
    return y(0) == 2 && y(3) == 6;
  }());
}

namespace {
// layer_norm / rms_norm in double: per row, the mean and the biased variance (two passes).
std::vector<double> ref_norm(const std::vector<double>& x, std::size_t rows, std::size_t n, const std::vector<double>& w,
                             const std::vector<double>& b, double eps, bool rms) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < rows; ++r) {
    const double* xr = &x[r * n];
    double mean = 0, var = 0;
    if (!rms) {
      for (std::size_t j = 0; j < n; ++j) mean += xr[j];
      mean /= double(n);
    }
    for (std::size_t j = 0; j < n; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= double(n);
    for (std::size_t j = 0; j < n; ++j)
      y[r * n + j] = (xr[j] - mean) / std::sqrt(var + eps) * (w.empty() ? 1.0 : w[j]) + (b.empty() ? 0.0 : b[j]);
  }
  return y;
}
template <class T, class Tensor>
void check_against(const Tensor& got, const std::vector<double>& want, double tl, const char* what) {
  std::size_t bad = 0;
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double e = std::abs(double(got.data()[i]) - want[i]) / std::max(1.0, std::abs(want[i]));
    worst = std::max(worst, e);
    if (!close(double(got.data()[i]), want[i], tl) && bad++ < 5)
      BOOST_ERROR(what << " [" << i << "]: got " << got.data()[i] << ", want " << want[i]);
  }
  BOOST_TEST(bad == 0u, what);
  BOOST_TEST_MESSAGE(what << ": worst error " << worst);
}
}  // namespace

template <class T>
void norms() {
  constexpr std::size_t N = 96;
  const std::size_t rows = 7;
  std::mt19937 g(11);
  std::normal_distribution<double> nd;
  std::vector<double> xs(rows * N), ws(N), bs(N);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = double(T(3.0 + 2.0 * nd(g)));  // a mean far from 0
  for (auto& v : ws) v = double(T(1 + 0.5 * nd(g)));
  for (auto& v : bs) v = double(T(nd(g)));
  tensor<T, dyn, N> x(rows);
  tensor<T, N> w, b;
  for (std::size_t i = 0; i < xs.size(); ++i) x.data()[i] = T(xs[i]);
  for (std::size_t j = 0; j < N; ++j) w(j) = T(ws[j]), b(j) = T(bs[j]);
  const double tl = sizeof(T) == 4 ? 3e-6 : 1e-13;
  check_against<T>(tensor<T, dyn, N>(layer_norm(x, w, b)), ref_norm(xs, rows, N, ws, bs, 1e-5, false), tl, "layer_norm");
  check_against<T>(tensor<T, dyn, N>(layer_norm(x, T(0.1))), ref_norm(xs, rows, N, {}, {}, double(T(0.1)), false), tl,
                   "layer_norm, no affine, eps 0.1");
  check_against<T>(tensor<T, dyn, N>(rms_norm(x, w)), ref_norm(xs, rows, N, ws, {}, double(T(1e-6)), true), tl, "rms_norm");
  check_against<T>(tensor<T, dyn, N>(rms_norm(x, T(1e-3))), ref_norm(xs, rows, N, {}, {}, double(T(1e-3)), true), tl,
                   "rms_norm, no weight");
  // a constant row: variance 0, the output is the bias (x - mean = 0 exactly)
  tensor<T, 2, 4> c{{5, 5, 5, 5}, {1, 2, 3, 4}};
  tensor<T, 4> cb{1, 2, 3, 4}, cw{1, 1, 1, 1};
  const tensor<T, 2, 4> cn = layer_norm(c, cw, cb);
  BOOST_TEST(cn(0, 0) == T(1));
  BOOST_TEST(cn(0, 3) == T(4));
  // the weight's run-time extent is checked against the features
  tensor<T, dyn> wd(N - 1);
  BOOST_CHECK_EXCEPTION((void)layer_norm(x, wd, b), extent_error,
                        test_support::says({"weight_extent " + std::to_string(N - 1) + ", features " + std::to_string(N)}));
}
BOOST_AUTO_TEST_CASE(layer_norm_and_rms_norm_float) { norms<float>(); }
BOOST_AUTO_TEST_CASE(layer_norm_and_rms_norm_double) { norms<double>(); }

// At compile time: layer_norm of a 2 x 4 against values worked out by hand. Row {1, 2, 3, 4}: mean 2.5,
// variance 1.25, so (x - 2.5) / sqrt(1.25 + eps); with eps = 0: +-0.4472135954999579, +-1.3416407864998738.
static_assert([] {
  tensor<double, 2, 4> x{{1, 2, 3, 4}, {2, 2, 2, 6}};
  tensor<double, 4> w{1, 1, 1, 2}, b{0, 0, 0, 1};
  const tensor<double, 2, 4> y = layer_norm(x, w, b, 0.0);
  const auto near = [](double a, double e) { return (a - e < 0 ? e - a : a - e) < 1e-15; };
  // row 2: mean 3, variance 3: (2 - 3) / sqrt 3 = -0.5773502691896258, (6 - 3) / sqrt 3 * 2 + 1 = 4.464101615137754
  return near(y(0, 0), -1.3416407864998738) && near(y(0, 1), -0.4472135954999579) && near(y(0, 3), 2 * 1.3416407864998738 + 1) &&
         near(y(1, 0), -0.5773502691896258) && near(y(1, 3), 4.464101615137754);
}());
static_assert([] {
  tensor<float, 1, 2> x{{3, 4}};
  const tensor<float, 1, 2> y = rms_norm(x, 0.0f);  // rms = sqrt((9 + 16) / 2)
  return y(0, 0) == 3 / 3.5355339f && y(0, 1) == 4 / 3.5355339f;
}());

namespace {
std::vector<double> ref_log_softmax(const std::vector<double>& x, std::size_t rows, std::size_t n) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < rows; ++r) {
    const double* xr = &x[r * n];
    double m = -inf;
    bool nan = false;
    for (std::size_t j = 0; j < n; ++j) nan = nan || std::isnan(xr[j]), m = std::isnan(xr[j]) ? m : std::max(m, xr[j]);
    for (std::size_t j = 0; j < n; ++j) {
      double& o = y[r * n + j];
      if (nan) {
        o = qnan;
      } else if (m == -inf) {
        o = -inf;
      } else if (m == inf) {
        double count = 0;
        for (std::size_t k = 0; k < n; ++k) count += xr[k] == inf;
        o = xr[j] == inf ? -std::log(count) : -inf;
      } else {
        double s = 0;
        for (std::size_t k = 0; k < n; ++k) s += std::exp(xr[k] - m);
        o = xr[j] - m - std::log(s);
      }
    }
  }
  return y;
}
}  // namespace

template <class T>
void log_softmaxes() {
  constexpr std::size_t N = 10;
  const std::size_t rows = 8;
  std::mt19937 g(5);
  std::normal_distribution<double> nd;
  std::vector<double> xs(rows * N);
  for (auto& v : xs) v = double(T(4 * nd(g)));
  const double big = double(std::numeric_limits<T>::max()) / 2;
  xs[1 * N + 3] = big, xs[1 * N + 4] = -big;           // huge logits
  for (std::size_t j = 0; j < N; ++j) xs[2 * N + j] = -inf;  // fully masked
  xs[3 * N + 2] = qnan;                                 // NaN
  xs[4 * N + 1] = inf, xs[4 * N + 7] = inf;            // two +inf
  xs[5 * N + 0] = -inf;                                 // one blocked
  tensor<T, dyn, N> x(rows);
  for (std::size_t i = 0; i < xs.size(); ++i) x.data()[i] = T(xs[i]);
  check_against<T>(tensor<T, dyn, N>(log_softmax(x)), ref_log_softmax(xs, rows, N), sizeof(T) == 4 ? 2e-6 : 1e-14,
                   "log_softmax");
  // exp(log_softmax) = softmax
  const tensor<T, dyn, N> a = exp(log_softmax(x)), b = softmax(x);
  for (std::size_t i = 0; i < xs.size(); ++i)
    BOOST_TEST(close(double(a.data()[i]), double(b.data()[i]), sizeof(T) == 4 ? 1e-6 : 1e-15), "exp(log_softmax) " << i);
}
BOOST_AUTO_TEST_CASE(log_softmax_float) {
  log_softmaxes<float>();
  // equal huge logits: log(1/2) each (m + log(sum) would round the log away next to 1e8)
  tensor<float, 1, 2> big{{1e8f, 1e8f}};
  const tensor<float, 1, 2> l = log_softmax(big);
  BOOST_TEST(std::abs(l(0, 1) + 0.6931472f) < 1e-6f);
}
BOOST_AUTO_TEST_CASE(log_softmax_double) { log_softmaxes<double>(); }
// {0, ln 3}: log_softmax = {-ln 4, ln 3 - ln 4}
static_assert([] {
  tensor<double, 1, 2> x{{0.0, 1.0986122886681098}};
  const tensor<double, 1, 2> y = log_softmax(x);
  const auto near = [](double a, double e) { return (a - e < 0 ? e - a : a - e) < 1e-15; };
  return near(y(0, 0), -1.3862943611198906) && near(y(0, 1), -0.2876820724517809);
}());

// y += e, y -= e, y *= s, y /= s on tensors and views: broadcasting, in place, and aliasing (e reads y at other
// positions: a fresh buffer, as `=`), at compile time too.
BOOST_AUTO_TEST_CASE(compound_assignment) {
  tensor<double, 3, 3> y{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}};
  const tensor<double, 3, 3> y0 = y;
  tensor<double, 3> r{10, 20, 30};
  y += r;
  y -= 1.0;
  y *= 2.0;
  y /= 4.0;
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 3; ++j) BOOST_TEST(y(i, j) == (y0(i, j) + r(j) - 1) * 2 / 4);
  tensor<double, 3, 3> z = y0;
  z += transpose(z);  // reads z(j, i) while z(i, j) is written: must see the old values
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 3; ++j) BOOST_TEST(z(i, j) == y0(i, j) + y0(j, i));
  tensor<double, 3, 3> p = y0;
  p -= p * y0;  // a product over p itself
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 3; ++j) {
      double s = 0;
      for (std::size_t k = 0; k < 3; ++k) s += y0(i, k) * y0(k, j);
      BOOST_TEST(p(i, j) == y0(i, j) - s);
    }
  std::vector<double> buf(y0.data(), y0.data() + 9);
  view<double, 3, 3> v(buf.data(), buf.size());
  v += gelu(v);
  v *= 3;
  for (std::size_t i = 0; i < 9; ++i) BOOST_TEST(std::abs(buf[i] - 3 * (y0.data()[i] + ref_gelu(y0.data()[i]))) < 1e-12);
  tensor<float, dyn, 2> d(4);
  d += tensor<float, 2>{1, 2};
  BOOST_TEST(d(3, 1) == 2.f);
  static_assert([] {
    tensor<int, 2, 2> a{{1, 2}, {3, 4}};
    a += transpose(a);
    a *= 2;
    return a(0, 1) == 10 && a(1, 0) == 10 && a(1, 1) == 16;
  }());
}

// A sub-expression used twice is computed twice (docs/design.md); evaluate(e) computes it once, into a tensor.
BOOST_AUTO_TEST_CASE(evaluate_computes_a_shared_operand_once) {
  tensor<double, 2, 3> x{{1, 2, 3}, {4, 5, 6}};
  int calls = 0;
  const auto h = map([&calls](double v) { ++calls; return v * 2; }, x);
  const tensor<double, 2, 3> twice = h + h * 0.5;
  BOOST_TEST(calls == 12);
  calls = 0;
  const auto once = evaluate(h);
  const tensor<double, 2, 3> shared = once + once * 0.5;
  BOOST_TEST(calls == 6);
  for (std::size_t i = 0; i < 6; ++i) BOOST_TEST(twice.data()[i] == shared.data()[i]);
}

// slice (static and run-time ranges, every axis), concat (every axis), index_select, reshape: against index
// arithmetic on the flat buffers; a slice and a concatenation of expressions (no copy: an element-wise chain over
// them is one loop); the run-time rules.
BOOST_AUTO_TEST_CASE(slice_concat_index_select_reshape) {
  constexpr std::size_t B = 2, L = 5, D = 6;
  tensor<double, B, L, D> x;
  for (std::size_t i = 0; i < B * L * D; ++i) x.data()[i] = double(i) * 0.5 - 7;
  const auto at = [&](std::size_t b, std::size_t l, std::size_t d) { return x.data()[(b * L + l) * D + d]; };
  // static slices of each axis
  const tensor<double, 1, L, D> s0 = slice<0, 1, 1>(x);
  const tensor<double, B, 3, D> s1 = slice<1, 2, 3>(x);
  const tensor<double, B, L, 2> s2 = slice<2, 4, 2>(x);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t l = 0; l < L; ++l)
      for (std::size_t d = 0; d < D; ++d) {
        if (b == 0) BOOST_TEST(s0(0, l, d) == at(1, l, d));
        if (l < 3) BOOST_TEST(s1(b, l, d) == at(b, l + 2, d));
        if (d < 2) BOOST_TEST(s2(b, l, d) == at(b, l, d + 4));
      }
  // a run-time slice of an expression: the last token of each item, through an element-wise chain
  const tensor<double, B, dyn, D> last = slice<1>(x * 2.0 + 1.0, L - 1, 1);
  BOOST_TEST(last.dims()[1] == 1u);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t d = 0; d < D; ++d) BOOST_TEST(last(b, 0, d) == at(b, L - 1, d) * 2 + 1);
  // concat on each axis, of a tensor and a slice
  const tensor<double, B, L + 3, D> c1 = concat<1>(x, slice<1, 2, 3>(x));
  const tensor<double, B, L, D + 2> c2 = concat<2>(x, s2);
  const tensor<double, B + 1, L, D> c0 = concat<0>(x, s0);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t l = 0; l < L + 3; ++l)
      for (std::size_t d = 0; d < D + 2; ++d) {
        if (d < D) BOOST_TEST(c1(b, l, d) == (l < L ? at(b, l, d) : at(b, l - L + 2, d)));
        if (l < L) BOOST_TEST(c2(b, l, d) == (d < D ? at(b, l, d) : at(b, l, d - D + 4)));
        if (l < L && d < D) BOOST_TEST(c0(b, l, d) == at(b, l, d));
      }
  for (std::size_t l = 0; l < L; ++l) BOOST_TEST(c0(2, l, 3) == at(1, l, 3));
  // index_select: rows of a table, repeated and in any order; of an expression (materialised once)
  const tensor<double, 4, D> table = slice<0, 3, 4>(reshape<B * L, D>(x));
  const std::vector<int> ids{3, 0, 3, 1};
  const tensor<double, dyn, D> e = index_select(table, ids);
  BOOST_TEST(e.dims()[0] == 4u);
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t d = 0; d < D; ++d) BOOST_TEST(e(i, d) == table(std::size_t(ids[i]), d));
  const std::vector<long> bad{0, 4};
  BOOST_CHECK_EXCEPTION((void)index_select(table, bad), std::out_of_range,
                        test_support::says({"id 4 at position 1 is outside the table's 4 rows"}));
  // reshape: a view of the same memory
  const auto r = reshape<B * L, D>(x);
  BOOST_TEST(r.data() == x.data());
  BOOST_TEST(r(7, 5) == at(1, 2, 5));
  const auto rd = reshape<dyn, 3>(x, B * L * 2);
  BOOST_TEST(rd(19, 2) == x.data()[59]);
  BOOST_CHECK_THROW(((void)reshape<dyn, 7>(x, 8)), std::length_error);
  // run-time ranges are checked
  BOOST_CHECK_EXCEPTION((void)slice<1>(x, 4, 2), extent_error, test_support::says({"slice_end 6, extent 5"}));
  tensor<double, dyn, D> y(3);
  BOOST_CHECK_EXCEPTION((void)concat<1>(y, tensor<double, dyn, D>(4)), extent_error,
                        test_support::says({"lhs_extent 3, rhs_extent 4"}));
  // a run-time tensor seen with a static shape: the element counts must agree when it is taken
  BOOST_CHECK_EXCEPTION(((void)reshape<4, 5>(y)), std::length_error,
                        test_support::is("attnx: reshape: 18 elements cannot be seen as [4, 5] (20 elements)"));
  const auto ys = reshape<9, 2>(y);
  BOOST_TEST(ys.data() == y.data());
  static_assert([] {
    tensor<int, 2, 3> a{{1, 2, 3}, {4, 5, 6}};
    const tensor<int, 2, 2> b = slice<1, 1, 2>(a);
    const tensor<int, 3, 3> c = concat<0>(a, slice<0, 0, 1>(a));
    const int ids2[2] = {1, 1};
    const tensor<int, dyn, 3> e2 = index_select(a, ids2);
    return b(1, 1) == 6 && c(2, 2) == 3 && e2(1, 0) == 4;
  }());
}
