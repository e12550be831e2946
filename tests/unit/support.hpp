// Helpers shared by the unit tests that compare attnx against the double references of naive.hpp.
#pragma once

#include <attnx/attnx.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "messages.hpp"
#include "naive.hpp"

namespace test_support {

using naive::mat;

// Random values rounded to T: the double reference then sees exactly what attnx sees.
template <class T>
mat rounded(std::size_t n, unsigned seed) {
  mat m = naive::random(n, seed);
  for (auto& x : m) x = static_cast<double>(static_cast<T>(x));
  return m;
}
template <class T>
std::vector<T> as(const mat& m) {
  return std::vector<T>(m.begin(), m.end());
}

// The largest |got - want| over all elements; infinite when the counts differ or NaN is where the
// reference has none (or the other way round).
template <class Tensor>
double max_err(const Tensor& got, const mat& want) {
  if (got.numel() != want.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got.data()[i]);
    if (std::isnan(want[i]) != std::isnan(g)) return std::numeric_limits<double>::infinity();
    if (!std::isnan(want[i])) worst = std::max(worst, std::abs(g - want[i]));
  }
  return worst;
}

// out = e through the default context; true when that ran the fused kernel once.
template <class Out, class E>
bool evaluated_fused(Out& out, const E& e) {
  const auto before = attnx::default_context().fused_runs();
  out = e;
  return attnx::default_context().fused_runs() == before + 1;
}

}  // namespace test_support
