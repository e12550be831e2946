// attnx: 16-bit storage types for keys and values (KV caches), converted to float where they are used.
//
//   attnx::bf16   bfloat16: float's sign and 8-bit exponent, 7 stored mantissa bits (range of float)
//   attnx::f16    IEEE binary16: 5-bit exponent, 10 mantissa bits (max 65504, subnormals below 6.1e-5)
//
// Both are storage types, not arithmetic ones: they convert to float exactly (every value of either is a
// float) and from float with rounding to nearest, ties to even; NaN stays NaN, +-inf stays +-inf, and a
// float beyond f16's range becomes +-inf. Both conversions are constexpr. Expressions do not compute in
// them (mixed element types are a compile error): the attention kernels read them in registers
// (kernels/attention_problem.hpp, kv_storage) and accumulate in float.
#pragma once

#include <bit>
#include <cstdint>

namespace attnx {

// bfloat16: the upper 16 bits of a float (8-bit exponent, 7-bit mantissa), stored as 16 bits; converts to and from float, rounding to nearest even.
struct bf16 {
  std::uint16_t bits = 0;

  constexpr bf16() = default;
  constexpr bf16(float x) noexcept : bits(from_float(x)) {}  // NOLINT: implicit, as a narrowing float would be
  static constexpr bf16 from_bits(std::uint16_t b) noexcept {
    bf16 r;
    r.bits = b;
    return r;
  }
  constexpr operator float() const noexcept { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

  static constexpr std::uint16_t from_float(float x) noexcept {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
    const std::uint32_t round = 0x7fffu + ((u >> 16) & 1u);                                     // to nearest even
    return static_cast<std::uint16_t>((u + round) >> 16);
  }
};

// IEEE-754 binary16 (5-bit exponent, 10-bit mantissa), stored as 16 bits; converts to and from float, rounding to nearest even.
struct f16 {
  std::uint16_t bits = 0;

  constexpr f16() = default;
  constexpr f16(float x) noexcept : bits(from_float(x)) {}  // NOLINT
  static constexpr f16 from_bits(std::uint16_t b) noexcept {
    f16 r;
    r.bits = b;
    return r;
  }
  constexpr operator float() const noexcept { return to_float(bits); }

  static constexpr float to_float(std::uint16_t h) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));  // inf, NaN (payload kept)
    if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
    // zero or subnormal: man * 2^-24, exact in float
    const float v = static_cast<float>(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  static constexpr std::uint16_t from_float(float x) noexcept {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
    const std::uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
    if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
    if (a >= 0x38800000u) {  // normal in f16 (>= 2^-14)
      const std::uint32_t round = 0xfffu + ((a >> 13) & 1u);
      return static_cast<std::uint16_t>(sign | ((a - (112u << 23) + round) >> 13));
    }
    if (a < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25): +-0
    // subnormal: the mantissa with its implicit bit, shifted to units of 2^-24, rounded to nearest even
    const std::uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // 14..24
    const std::uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    const std::uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | r);
  }
};

}  // namespace attnx
