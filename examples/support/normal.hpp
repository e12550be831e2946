// Standard normal numbers from a fixed seed, the same on every platform (std::normal_distribution is not specified
// exactly): splitmix64 for uniforms, Marsaglia's polar method for the normals.
#pragma once

#include <cmath>
#include <cstdint>

class normal_source {
 public:
  explicit normal_source(std::uint64_t seed) : s_(seed) {}
  double operator()() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    double u, v, s;
    do {  // a point uniform in the unit disc
      u = 2 * uniform_open() - 1;
      v = 2 * uniform_open() - 1;
      s = u * u + v * v;
    } while (s >= 1 || s == 0);
    const double f = std::sqrt(-2 * std::log(s) / s);
    spare_ = v * f;
    have_spare_ = true;
    return u * f;
  }

 private:
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform_open() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }  // in (0, 1)
  std::uint64_t s_;
  double spare_ = 0;
  bool have_spare_ = false;
};
