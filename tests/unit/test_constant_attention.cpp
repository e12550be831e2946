// Attention in a constant evaluation (eval/constant_attention.hpp): the whole-row routine that a constant
// evaluation takes for softmax(P) * V must give exactly the row-by-row evaluators' values, which the same
// expression gets when V is wrapped in evaluated_once() (not an operand in memory, so the routine does not
// take it). Compared element for element inside the constant evaluation (static_assert), for every chain node
// the routine handles, ranks 2 to 4, float and double, row lengths that are not a multiple of the vector
// width, masks that block whole rows, finite and infinite fills, and scores whose exponentials are
// subnormal or zero. At run time the compile-time results are checked against plain double loops.
// The budget case: an attention that does not fit the compilers' default limits through the row evaluators.
#define BOOST_TEST_MODULE constant_attention
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

using namespace attnx;

namespace {

template <class A, class B>
constexpr bool same_values(const A& a, const B& b) {
  if (a.numel() != b.numel()) return false;
  for (std::size_t i = 0; i < a.numel(); ++i) {
    const auto x = a.data()[i], y = b.data()[i];
    if (!(x == y || (x != x && y != y))) return false;
  }
  return true;
}

template <class T, std::size_t... E>
constexpr tensor<T, E...> filled_with(int a, int b, int m, T scale) {
  return tensor<T, E...>::generate([=](auto... i) {
    int acc = 0, w = a;
    ((acc += int(i) * w, w += b), ...);
    return T(acc % m - m / 2) * scale;
  });
}

// The routine (att) and the row evaluators (ref) on the same expression; true when every element agrees.
template <class Out, class P, class V>
constexpr bool both(const P& p, const V& v) {
  const Out att = softmax(p) * v;
  const Out ref = softmax(p) * evaluated_once(v);
  return same_values(att, ref);
}

template <class T>
constexpr bool scaled_rank2() {  // L_q 13, L_k 37, d_k 20, d_v 12: no length a multiple of 8 or 16
  const auto q = filled_with<T, 13, 20>(3, 5, 11, T(0.25));
  const auto k = filled_with<T, 37, 20>(5, 3, 13, T(0.2));
  const auto v = filled_with<T, 37, 12>(1, 7, 9, T(0.5));
  return both<tensor<T, 13, 12>>(scale(q * transpose(k), T(0.3)), v);
}
static_assert(scaled_rank2<double>());
static_assert(scaled_rank2<float>());

template <class T>
constexpr bool every_chain_node() {  // temperature, negation, two scales, causal, key padding with a finite fill
  const auto q = filled_with<T, 19, 8>(2, 3, 7, T(0.5));
  const auto k = filled_with<T, 19, 8>(3, 1, 5, T(0.4));
  const auto v = filled_with<T, 19, 16>(1, 2, 9, T(1));
  const auto p = mask(-temperature(scale(mask(scale(q * transpose(k), T(0.5)), causal), T(-2)), T(0.7)), key_padding<11>, T(-1e9));
  return both<tensor<T, 19, 16>>(p, v);
}
static_assert(every_chain_node<double>());
static_assert(every_chain_node<float>());

template <class T>
constexpr bool bottom_right_blocks_whole_rows() {  // L_q 9 > L_k 5: the first 4 rows have every key blocked
  const auto q = filled_with<T, 9, 4>(1, 2, 7, T(0.5));
  const auto k = filled_with<T, 5, 4>(2, 3, 5, T(0.5));
  const auto v = filled_with<T, 5, 3>(1, 1, 4, T(1));
  const tensor<T, 9, 3> o = softmax(mask(q * transpose(k), causal_bottom_right)) * v;
  bool zero_rows = true;
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t c = 0; c < 3; ++c) zero_rows = zero_rows && o(i, c) == T(0);
  return zero_rows && both<tensor<T, 9, 3>>(mask(q * transpose(k), causal_bottom_right), v);
}
static_assert(bottom_right_blocks_whole_rows<double>());
static_assert(bottom_right_blocks_whole_rows<float>());

template <class T>
constexpr bool infinite_fill() {  // a +inf fill: the masked keys share the weight (softmax's limit)
  const auto q = filled_with<T, 6, 4>(1, 2, 7, T(0.5));
  const auto k = filled_with<T, 21, 4>(2, 3, 5, T(0.5));
  const auto v = filled_with<T, 21, 5>(1, 1, 4, T(1));
  return both<tensor<T, 6, 5>>(mask(q * transpose(k), key_padding<17>, std::numeric_limits<T>::infinity()), v);
}
static_assert(infinite_fill<double>());
static_assert(infinite_fill<float>());

template <class T>
constexpr bool huge_logits() {  // score spreads of up to ~1500: exponentials subnormal, and zero below the range
  const auto q = filled_with<T, 5, 8>(1, 3, 11, T(1));
  const auto k = filled_with<T, 40, 8>(3, 5, 13, T(1));
  const auto v = filled_with<T, 40, 8>(1, 2, 9, T(0.5));
  return both<tensor<T, 5, 8>>(scale(q * transpose(k), std::is_same_v<T, double> ? T(4.5) : T(0.6)), v);
}
static_assert(huge_logits<double>());
static_assert(huge_logits<float>());

template <class T>
constexpr bool batched() {  // (2, 3, 10, 8) with K and V per head; (2, 10, 8) queries over one shared K and V
  const auto q4 = filled_with<T, 2, 3, 10, 8>(1, 2, 7, T(0.3));
  const auto k4 = filled_with<T, 2, 3, 11, 8>(2, 3, 5, T(0.3));
  const auto v4 = filled_with<T, 2, 3, 11, 6>(1, 1, 4, T(1));
  const auto q3 = filled_with<T, 2, 10, 8>(1, 5, 7, T(0.3));
  const auto k2 = filled_with<T, 11, 8>(2, 1, 5, T(0.3));
  const auto v2 = filled_with<T, 11, 6>(3, 1, 4, T(1));
  return both<tensor<T, 2, 3, 10, 6>>(mask(scale(q4 * transpose(k4), T(0.35)), causal_bottom_right), v4) &&
         both<tensor<T, 2, 10, 6>>(mask(q3 * transpose(k2), causal), v2);
}
static_assert(batched<double>());
static_assert(batched<float>());

template <class T>
constexpr bool run_time_lengths() {  // key_lengths of a batch of 3 (one of them 0: a row of fills)
  const std::array<std::size_t, 3> lens{7, 0, 3};
  const auto q = filled_with<T, 3, 4, 6>(1, 2, 7, T(0.3));
  const auto k = filled_with<T, 3, 9, 6>(2, 3, 5, T(0.3));
  const auto v = filled_with<T, 3, 9, 5>(1, 1, 4, T(1));
  return both<tensor<T, 3, 4, 5>>(mask(q * transpose(k), key_lengths(lens)), v) &&
         both<tensor<T, 3, 4, 5>>(mask(q * transpose(k), key_lengths(lens), T(-30)), v);
}
static_assert(run_time_lengths<double>());
static_assert(run_time_lengths<float>());

template <class T>
constexpr bool row_evaluators_for_the_rest() {  // an infinite query element: the row evaluators take the expression
  const auto finite = filled_with<T, 4, 4>(1, 2, 7, T(0.5));
  auto q = finite;
  q(1, 2) = std::numeric_limits<T>::infinity();
  const auto k = tensor<T, 6, 4>::generate([](auto i, auto j) { return T(1 + i + j); });  // > 0: no inf - inf
  const auto v = filled_with<T, 6, 3>(1, 1, 4, T(1));
  const tensor<T, 4, 3> o = softmax(q * transpose(k)) * v;         // the row evaluators
  const tensor<T, 4, 3> routine = softmax(finite * transpose(k)) * v;  // the routine, Q finite
  for (std::size_t c = 0; c < 3; ++c) {
    // row 1's scores are all +inf: softmax's limit shares the weight equally
    T mean = 0;
    for (std::size_t j = 0; j < 6; ++j) mean += v(j, c);
    mean /= T(6);
    if (o(1, c) - mean > T(1e-12) || mean - o(1, c) > T(1e-12)) return false;
    // the rows without the infinity are the routine's, bit for bit
    if (o(0, c) != routine(0, c) || o(2, c) != routine(2, c) || o(3, c) != routine(3, c)) return false;
  }
  return true;
}
static_assert(row_evaluators_for_the_rest<double>());

// Beyond the default limits of the row evaluators (g++ 123, clang 117 for this problem), inside them now.
template <std::size_t L>
constexpr double budget() {
  using M = tensor<double, seq<L>, d_k<16>>;
  const M q = M::generate([](std::size_t i, std::size_t j) { return double((i * 7 + j * 3) % 11) / 11.0 - 0.5; });
  const M k = M::generate([](std::size_t i, std::size_t j) { return double((i * 5 + j * 2) % 13) / 13.0 - 0.5; });
  const M v = M::generate([](std::size_t i, std::size_t j) { return double((i + j) % 7); });
  const M o = softmax(scale(q * transpose(k), 0.25)) * v;
  double sum = 0;
  for (double x : o) sum += x;
  return sum;
}
constexpr double budget_160 = budget<160>();

// Plain double loops: softmax(s q k^T) v with causal masking, for the run-time checks.
std::vector<double> reference(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                              std::size_t lq, std::size_t lk, std::size_t dk, std::size_t dv, double s, bool causal_mask) {
  std::vector<double> o(lq * dv, 0.0);
  for (std::size_t i = 0; i < lq; ++i) {
    std::vector<double> w(lk);
    double m = -INFINITY;
    for (std::size_t j = 0; j < lk; ++j) {
      double acc = 0;
      for (std::size_t c = 0; c < dk; ++c) acc += q[i * dk + c] * k[j * dk + c];
      w[j] = causal_mask && j > i ? -INFINITY : acc * s;
      m = std::max(m, w[j]);
    }
    double sum = 0;
    for (double& x : w) sum += (x = std::exp(x - m));
    for (std::size_t j = 0; j < lk; ++j)
      for (std::size_t c = 0; c < dv; ++c) o[i * dv + c] += w[j] / sum * v[j * dv + c];
  }
  return o;
}

template <class T>
constexpr auto causal_scaled() {
  const auto q = filled_with<T, 13, 20>(3, 5, 11, T(0.25));
  const auto k = filled_with<T, 29, 20>(5, 3, 13, T(0.2));
  const auto v = filled_with<T, 29, 12>(1, 7, 9, T(0.5));
  const tensor<T, 13, 12> o = softmax(mask(scale(q * transpose(k), T(0.3)), causal)) * v;
  return o;
}

template <class T>
void check_against_loops(double tol) {
  constexpr auto o = causal_scaled<T>();  // computed by the compiler
  const auto q = filled_with<T, 13, 20>(3, 5, 11, T(0.25));
  const auto k = filled_with<T, 29, 20>(5, 3, 13, T(0.2));
  const auto v = filled_with<T, 29, 12>(1, 7, 9, T(0.5));
  const std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end());
  const auto want = reference(qd, kd, vd, 13, 29, 20, 12, 0.3, true);
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(double(o.data()[i]) - want[i]));
  BOOST_TEST(worst <= tol, "largest difference " << worst);
  // and the run-time evaluation of the same expression (the fused kernel) agrees too
  const tensor<T, 13, 12> run = softmax(mask(scale(q * transpose(k), T(0.3)), causal)) * v;
  for (std::size_t i = 0; i < want.size(); ++i) BOOST_TEST(std::abs(double(run.data()[i]) - want[i]) <= tol);
}

}  // namespace

BOOST_AUTO_TEST_CASE(compile_time_values_match_double_loops) {
  check_against_loops<double>(1e-13);
  check_against_loops<float>(2e-6);
}

BOOST_AUTO_TEST_CASE(budget_beyond_the_row_evaluators) {
  // The same sum at run time (the fused kernel sums in another order: a tolerance).
  BOOST_TEST(std::abs(budget<160>() - budget_160) <= 1e-9 * std::abs(budget_160));
  BOOST_TEST(budget_160 > 0.0);
}

BOOST_AUTO_TEST_CASE(exp_nonpositive_is_cexp) {
  // softmax's exponential in a constant evaluation (math::detail::exp_nonpositive_f64) against the general one,
  // bit for bit, over [-746, 0]: normal, subnormal and zero results, and the 1 + x range next to 0.
  std::size_t differ = 0, n = 0;
  for (double x = -746.0; x <= 0.0; x += 0.0137) {
    ++n;
    if (math::detail::exp_nonpositive_f64(x) != math::cexp(x)) ++differ;
  }
  for (double x : {0.0, -0.0, -0x1p-61, -0x1p-60, -0x1p-59, -708.39641853226408, -708.4, -745.1332191019411, -745.14,
                   -std::numeric_limits<double>::infinity()}) {
    ++n;
    if (math::detail::exp_nonpositive_f64(x) != math::cexp(x)) ++differ;
  }
  BOOST_TEST(differ == 0u, differ << " of " << n << " differ");
  static_assert(math::detail::exp_nonpositive_f64(-1.0) == math::cexp(-1.0));
  static_assert(math::detail::exp_nonpositive_f64(-740.0) == math::cexp(-740.0));
}
