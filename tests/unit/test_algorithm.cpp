// util/algorithm.hpp and math/builtin_math.hpp: attnx's replacements for <algorithm> and <cmath> (compile
// time) give what the standard functions give, checked against them.
#define BOOST_TEST_MODULE algorithm
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

namespace alg = attnx::alg;
namespace rt = attnx::math::rt;

BOOST_AUTO_TEST_CASE(min_max_clamp_give_the_standard_operand) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // which operand comes back when the comparison is false (NaN) is the standard's
  BOOST_TEST(std::isnan(alg::max(nan, 1.f)) == std::isnan(std::max(nan, 1.f)));
  BOOST_TEST(std::isnan(alg::max(1.f, nan)) == std::isnan(std::max(1.f, nan)));
  BOOST_TEST(std::isnan(alg::min(nan, 1.f)) == std::isnan(std::min(nan, 1.f)));
  BOOST_TEST(std::isnan(alg::min(1.f, nan)) == std::isnan(std::min(1.f, nan)));
  const std::pair<int, int> a{1, 0}, b{1, 1};  // equal keys: the first operand, as the standard says
  const auto first = [](const std::pair<int, int>& x, const std::pair<int, int>& y) { return x.first < y.first; };
  BOOST_TEST((&std::min(a, b, first) == &a));
  BOOST_TEST((alg::min(a, b) == a));  // (pairs compare whole: a < b)
  BOOST_TEST(alg::min({3, 9, 2, 9}) == 2);
  BOOST_TEST(alg::max({3, 9, 2, 9}) == 9);
  BOOST_TEST(alg::clamp(5, 1, 3) == 3);
  BOOST_TEST(alg::clamp(0, 1, 3) == 1);
  BOOST_TEST(alg::clamp(2, 1, 3) == 2);
}

BOOST_AUTO_TEST_CASE(stable_sort_matches_std_stable_sort) {
  std::mt19937 gen(7);
  for (int n : {0, 1, 2, 3, 7, 16, 33, 1000, 4097}) {
    std::vector<std::pair<int, int>> v(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = {static_cast<int>(gen() % 10), i};
    auto want = v, got = v;
    const auto by_cost = [](const auto& x, const auto& y) { return x.first > y.first; };  // as run_flash sorts
    std::stable_sort(want.begin(), want.end(), by_cost);
    alg::stable_sort(got.begin(), got.end(), by_cost);
    BOOST_TEST((got == want), "n = " << n);
  }
}

BOOST_AUTO_TEST_CASE(copy_fill_equal_all_of) {
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  BOOST_TEST(alg::copy_n(x, 6, x + 2) == x + 8);  // overlapping, forwards: memmove semantics
  const float want[8] = {1, 2, 1, 2, 3, 4, 5, 6};
  BOOST_TEST(alg::equal(x, x + 8, want));
  const float other[8] = {1, 2, 1, 2, 3, 4, 5, 7};
  BOOST_TEST(!alg::equal(x, x + 8, other));
  BOOST_TEST(alg::copy_n(x, 0, x + 4) == x + 4);
  std::vector<double> v(5);
  BOOST_TEST((alg::fill_n(v.begin(), 3, 2.0) == v.begin() + 3));
  alg::fill(v.begin() + 3, v.end(), -1.0);
  BOOST_TEST((v == std::vector<double>{2, 2, 2, -1, -1}));
  BOOST_TEST(alg::all_of(v.begin(), v.begin() + 3, [](double d) { return d == 2; }));
  BOOST_TEST(!alg::all_of(v.begin(), v.end(), [](double d) { return d == 2; }));
  constexpr int c = [] {
    int a[4] = {};
    alg::fill_n(a, 4, 2);
    int b[4] = {};
    alg::copy_n(a, 4, b);  // constant evaluation: the loop, not memmove
    return b[3] + alg::max(1, 2);
  }();
  static_assert(c == 4);
}

BOOST_AUTO_TEST_CASE(builtin_math_equals_cmath) {
  for (double x : {-3.5, -1.0, -1e-300, 0.0, 0.25, 1.0, 2.5, 700.0}) {
    BOOST_TEST(rt::exp(x) == std::exp(x));
    BOOST_TEST(rt::exp2(x) == std::exp2(x));
    BOOST_TEST(rt::tanh(x) == std::tanh(x));
    BOOST_TEST(rt::erf(x) == std::erf(x));
    BOOST_TEST(rt::sin(x) == std::sin(x));
    BOOST_TEST(rt::cos(x) == std::cos(x));
    BOOST_TEST(rt::abs(x) == std::abs(x));
    BOOST_TEST(rt::fma(x, 3.0, -x) == std::fma(x, 3.0, -x));
    const auto f = static_cast<float>(x);
    BOOST_TEST(rt::exp(f) == std::exp(f));
    BOOST_TEST(rt::exp2(f) == std::exp2(f));
    if (x > 0) {
      BOOST_TEST(rt::log(x) == std::log(x));
      BOOST_TEST(rt::log2(f) == std::log2(f));
      BOOST_TEST(rt::sqrt(x) == std::sqrt(x));
    }
  }
  BOOST_TEST(rt::nearbyint(2.5) == std::nearbyint(2.5));
  BOOST_TEST(!rt::isfinite(std::numeric_limits<float>::infinity()));
  BOOST_TEST(!rt::isnormal(std::numeric_limits<double>::denorm_min()));
  BOOST_TEST(rt::isnormal(1.0f));
}

BOOST_AUTO_TEST_CASE(gcd_equals_std_gcd) {
  for (std::size_t a : {0u, 1u, 2u, 6u, 12u, 17u, 64u, 96u, 1000u})
    for (std::size_t b : {0u, 1u, 3u, 4u, 8u, 18u, 64u, 250u}) BOOST_TEST(alg::gcd(a, b) == std::gcd(a, b), a << ", " << b);
  static_assert(alg::gcd(12u, 18u) == 6u);
}

// util/pack.hpp: the I-th type of a pack.
static_assert(std::is_same_v<attnx::detail::type_at_t<0, int, float, char&>, int>);
static_assert(std::is_same_v<attnx::detail::type_at_t<2, int, float, char&>, char&>);
static_assert(std::is_same_v<attnx::detail::type_at_t<1, int, int, int>, int>);
