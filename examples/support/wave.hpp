// Deterministic tensors for the examples: no randomness, so the printed numbers never change.
// Element (i, j, ...) = sum over axes k of a * sin(b * index_k * (1 + 1.3 k) + c).
#pragma once

#include <cmath>

template <class Tensor>
Tensor wave(double a, double b, double c) {
  return Tensor::generate([&](auto... i) {
    double s = 0, k = 1;
    ((s += a * std::sin(b * double(i) * k + c), k += 1.3), ...);
    return s;
  });
}
