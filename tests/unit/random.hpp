// Random test data, fast in every build. std::mt19937 with std::normal_distribution took most of the time of
// the decode tests under the sanitizers: at -O0, libstdc++'s generate_canonical computes a long double
// logarithm at every draw (clang ASan: about 40% of unit.decode.few_rows_16bit_special's time went to drawing
// its data, TSan about 20%). This is SplitMix64 (Steele, Lea and Flood, 2014: a 64-bit counter through a
// mixing function) and Box-Muller for the normal values. Needs no attnx header.
#pragma once

#include <cmath>
#include <cstdint>

// TEST_UNINSTRUMENTED: a function of single-threaded test setup (data, references) that ThreadSanitizer need not
// watch. Only raw pointers inside: GCC does not inline an instrumented function (std::vector's operator[], say)
// into one without the instrumentation. The generator below is one: its state's reads and writes dominated the
// TSan build's time in tests that draw millions of values.
#if defined(__SANITIZE_THREAD__)
#define TEST_UNINSTRUMENTED __attribute__((no_sanitize("thread")))
#else
#define TEST_UNINSTRUMENTED
#endif

namespace test_random {

class rng {
 public:
  explicit rng(std::uint64_t seed) : state_(seed) {}
  TEST_UNINSTRUMENTED std::uint64_t bits() {
    std::uint64_t z = state_ += 0x9e3779b97f4a7c15u;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
  }
  TEST_UNINSTRUMENTED double uniform() { return double(bits() >> 11) * 0x1p-53; }  // [0, 1), 53 random bits
  TEST_UNINSTRUMENTED double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  TEST_UNINSTRUMENTED bool chance(double p) { return uniform() < p; }
  TEST_UNINSTRUMENTED std::uint64_t below(std::uint64_t n) { return bits() % n; }  // [0, n); the bias is 2^-64 n at most
  TEST_UNINSTRUMENTED double normal() {  // N(0, 1); Box-Muller, the second value of each pair kept for the next call
    if (spare_) {
      spare_ = false;
      return second_;
    }
    const double u = 1.0 - uniform(), v = uniform();  // u in (0, 1]
    const double r = std::sqrt(-2.0 * std::log(u)), a = 6.283185307179586 * v;
    second_ = r * std::sin(a);
    spare_ = true;
    return r * std::cos(a);
  }
  // Mean 0, variance 1, in [-2 sqrt 3, 2 sqrt 3]: the sum of four uniform values (Irwin-Hall), centred and scaled.
  // For bulk data whose tails do not matter (the decode tests' millions of K and V elements): no logarithm, sine or
  // cosine per value.
  TEST_UNINSTRUMENTED double bell() {
    const double sum = double((bits() >> 40) + (bits() >> 40) + (bits() >> 40) + (bits() >> 40)) * 0x1p-24;
    return (sum - 2.0) * 1.7320508075688772;
  }

 private:
  std::uint64_t state_;
  double second_ = 0;
  bool spare_ = false;
};

}  // namespace test_random
