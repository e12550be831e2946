// attnx pointwise kernels: the activations and their derivatives over a run of values, in vectors of the run-time
// instruction set. The row evaluator of an activation (eval/evaluator.hpp) calls them at run time for float and
// double, a row at a time; a constant evaluation keeps the scalar functions of expr/elementwise.hpp.
//
// Each is computed in T from one exponential, 2^x by the kernels' polynomial (the attention tiles' own exp2), with
// no cancellation: gelu_tanh(x) = x s, d gelu_tanh = s + 2 c x (1 + 3 k x^2) s (e s) with e = exp(-2u), s = 1 / (1 + e),
// u = c (x + k x^3), c = sqrt(2/pi), k = 0.044715 (1 - tanh^2 u = 4 s (e s), 1 + tanh u = 2 s); sigmoid = 1 / (1 + e)
// with e = exp(-x); silu = x s, d silu = s (1 + x e s); tanh as the score program's. Results agree with the scalar
// functions to a few units in the last place, not bit for bit; the special values are theirs: NaN stays NaN,
// gelu_tanh gives x for x >= 10 and -0 for x <= -10 (its derivative 1 and 0), silu and its derivative 0 at -inf.
//
// Declared here, defined in kernels/impl/pointwise.hpp (compiled into the library, or included with
// ATTNX_HEADER_ONLY).
#pragma once

#include <cstddef>

#include "attnx/config.hpp"
#include "attnx/simd/isa.hpp"

namespace attnx::kernels {

// The functions pointwise_map computes: the activations of expr/elementwise.hpp and the derivatives the backward
// rules of silu and gelu_tanh read.
enum class pointwise { tanh, sigmoid, silu, d_silu, gelu_tanh, d_gelu_tanh };

// y[i] = f(x[i]) for i < n (y == x allowed), with instruction set i (one this CPU has). T: float or double.
template <class T>
void pointwise_map(pointwise f, const T* x, T* y, std::size_t n, simd::isa i);
#if !ATTNX_HEADER_ONLY
extern template void pointwise_map<float>(pointwise, const float*, float*, std::size_t, simd::isa);
extern template void pointwise_map<double>(pointwise, const double*, double*, std::size_t, simd::isa);
#endif

}  // namespace attnx::kernels

#if ATTNX_HEADER_ONLY
#include "attnx/kernels/impl/pointwise.hpp"
#endif
