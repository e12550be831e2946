// attnx kernels: what the prefill and decode drivers and the per-ISA tiles share (step kinds, exp2
// coefficients, untyped K/V stacks, scratch blocks, the register tiles per instruction set).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "attnx/util/algorithm.hpp"
#include "attnx/math/builtin_math.hpp"
#include "attnx/exec/context.hpp"
#include "attnx/exec/memory.hpp"
#include "attnx/kernels/attention_problem.hpp"
#include "attnx/kernels/attention_state.hpp"
#include "attnx/simd/isa.hpp"
#include "attnx/simd/target.hpp"
#include "attnx/simd/vec.hpp"
#include "attnx/math/half.hpp"
#include "attnx/tensor/storage.hpp"

ATTNX_OPTIMIZE_BEGIN
namespace attnx::kernels::detail {

constexpr bool is_scale(step_kind k) { return k == step_kind::multiply || k == step_kind::divide; }
constexpr bool is_limit(step_kind k) {
  return k == step_kind::causal_top_left || k == step_kind::causal_bottom_right || k == step_kind::key_lengths ||
         k == step_kind::causal_lengths || k == step_kind::key_padding || k == step_kind::key_interval;
}
constexpr bool is_replace(step_kind k) {
  return is_limit(k) || k == step_kind::boolean_mask || k == step_kind::mask_function;
}
// Whether the program has a step compiled by the caller (tile_function): the decode kernels and the backward leave
// such problems to the prefill kernel and the rules.
template <class T>
bool has_tile_functions(const attention_problem<T>& p) {
  for (std::size_t s = 0; s < p.n_steps; ++s)
    if (p.steps[s].kind == step_kind::function || p.steps[s].kind == step_kind::mask_function) return true;
  return false;
}

// K or V of the decode kernel, whatever its element type (T, bf16 or f16): element c of row j of matrix
// (b, g) at static_cast<const KV*>(data)[b * batch + g * head + j * row + c]. (Untyped so that the decode
// driver is compiled once per T, not once per storage type and instruction set.)
struct kv_stack {
  const void* data;
  std::ptrdiff_t batch, head, row;

  template <class KV>  // matrix (b, h) as KV elements (an empty operand may have no memory at all)
  const KV* matrix(std::size_t b, std::size_t h) const noexcept {
    const KV* d = static_cast<const KV*>(data);
    return d ? d + static_cast<std::ptrdiff_t>(b) * batch + static_cast<std::ptrdiff_t>(h) * head : d;
  }
};
template <class U>
kv_stack untyped(strided<const U> s) {
  return {s.data, s.batch, s.head, s.row};
}

// 2^f on |f| <= 1/2: near-minimax (Chebyshev) fits, max abs error 2.0e-9 (float, degree 6) and
// 3.2e-18 (double, degree 11); lowest degree first.
template <class T>
inline constexpr auto exp2_coefficients = std::array<T, 0>{};
template <>
inline constexpr auto exp2_coefficients<float> = std::array<float, 7>{
    1.0f, 0.69314720670283259577f, 0.24022650922288758071f, 0.055503272266703020589f,
    0.0096180566785246380754f, 0.001340042817761583794f, 0.00015461444698569129083f};
template <>
inline constexpr auto exp2_coefficients<double> = std::array<double, 12>{
    1.0, 0.69314718055994530925, 0.24022650695910159567, 0.055504108664821627039,
    0.0096181291075872566681, 0.0013333558146406470697, 0.00015403530463724354209,
    0.000015252733841556772589, 1.3215432535912376166e-6, 1.0178057087733941105e-7,
    7.0741942972885210056e-9, 4.455817908336064493e-10};

// tanh x = x + x z (c[0] + c[1] z + ...), z = x^2, on |x| < 1/4: the Taylor series (c[k] = 2^(2n) (2^(2n) - 1)
// B_(2n) / (2n)! with n = k + 2, B the Bernoulli numbers), one term beyond the last that matters at 1/4
// (the next one is below 2^-26 of tanh (float), 2^-55 (double)).
template <class T>
inline constexpr auto tanh_coefficients = std::array<T, 0>{};
template <>
inline constexpr auto tanh_coefficients<float> = std::array<float, 5>{
    -0.33333333333333333f, 0.13333333333333333f, -0.053968253968253968f, 0.021869488536155203f, -0.0088632355299021966f};
template <>
inline constexpr auto tanh_coefficients<double> = std::array<double, 11>{
    -0.33333333333333333333, 0.13333333333333333333, -0.053968253968253968254, 0.021869488536155202822,
    -0.0088632355299021965689, 0.0035921280365724810169, -0.0014558343870513182682, 0.00059002744094558598138,
    -0.00023912911424355248149, 0.000096915379569294503256, -0.000039278323883316834053};

template <class T>
inline constexpr T log2e = T(1.442695040888963407359924681001892137L);

// Register tiles per instruction set: NI query vectors x NJ keys (scores), NI x NC value columns
// (output), BC keys per block.
template <class T, class I>
struct flash_shape;
template <class T>
struct flash_shape<T, simd::scalar_t> {
  static constexpr std::size_t NI = 4, NJ = 4, NC = 4, BC = 32;
};
template <class T>
struct flash_shape<T, simd::avx2_t> {  // 16 registers: 12 accumulators + NI loads + 1 broadcast
  static constexpr std::size_t NI = 2, NJ = 6, NC = 6, BC = 64;
};
template <class T>
struct flash_shape<T, simd::avx512_t> {  // 32 registers: 24 accumulators + NI loads
  static constexpr std::size_t NI = 3, NJ = 8, NC = 8, BC = 128;
};

// The fused backward's blocking per instruction set: register tiles of MR broadcast rows x NR vectors, BQ query rows
// (lanes of the score tiles) and BK keys per tile.
template <class T, class I>
struct backward_shape;
template <class T>
struct backward_shape<T, simd::scalar_t> {
  static constexpr std::size_t MR = 4, NR = 4, BQ = 16, BK = 16;
};
template <class T>
struct backward_shape<T, simd::avx2_t> {  // 16 registers: 12 accumulators + 2 loads + 1 broadcast
  static constexpr std::size_t MR = 6, NR = 2, BQ = 4 * (32 / sizeof(T)), BK = 48;
};
template <class T>
struct backward_shape<T, simd::avx512_t> {  // 32 registers: 24 accumulators + 4 loads + 1 broadcast
  static constexpr std::size_t MR = 6, NR = 4, BQ = 4 * (64 / sizeof(T)), BK = 48;
};

struct scratch_block {  // a block of exec::allocate_bytes, given back on destruction
  explicit scratch_block(std::size_t n) : bytes(n), p(static_cast<std::byte*>(exec::allocate_bytes(n))) {}
  scratch_block(const scratch_block&) = delete;
  scratch_block& operator=(const scratch_block&) = delete;
  ~scratch_block() { exec::release_bytes(p, bytes); }
  std::byte* get() const noexcept { return p; }
  template <class U>
  U* at(std::size_t offset) const noexcept {  // an array placed at offset by a scratch_layout
    return reinterpret_cast<U*>(p + offset);
  }
  std::size_t bytes;
  std::byte* p;
};
// Arrays of several types in one scratch_block, each at a multiple of 64 bytes: add() gives an array's offset
// before the block exists, scratch_block::at the array once it does. One allocation, not one per array.
struct scratch_layout {
  std::size_t bytes = 0;
  // b bytes rounded up to whole 64-byte lines (so that what follows starts on a line of its own).
  static constexpr std::size_t lines(std::size_t b) noexcept { return (b + 63) / 64 * 64; }
  template <class U>
  std::size_t add(std::size_t n) noexcept {
    const std::size_t offset = bytes;
    bytes += lines(n * sizeof(U));
    return offset;
  }
};

// Below this much work (flops) per thread, a second thread costs more in wake-up than it saves.
inline constexpr double flash_min_flops_per_thread = 2e6;

}  // namespace attnx::kernels::detail
ATTNX_OPTIMIZE_END
