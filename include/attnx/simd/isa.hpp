// attnx: instruction sets, and which ones this CPU can run.
//
// Every build contains every path (the vector ones are compiled under fixed target pragmas, see
// simd/target.hpp); which one runs is decided at run time from cpuid, never from the compiler's
// -march. Nothing in attnx tests __AVX2__, __AVX512F__ or similar macros, so translation units built
// with different flags see the same definitions (the one-definition rule holds) and agree on the path.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define ATTNX_SIMD_X86 1
#include <cpuid.h>
#else
#define ATTNX_SIMD_X86 0
#endif

namespace attnx::simd {

// Ordered from least to most capable.
enum class isa : unsigned char { scalar, avx2, avx512 };
inline constexpr std::array<isa, 3> all_isas{isa::scalar, isa::avx2, isa::avx512};

// The instruction sets as types, for code templated on its vector path (simd::vec<T, I>).
struct scalar_t {
  static constexpr isa id = isa::scalar;
};
struct avx2_t {
  static constexpr isa id = isa::avx2;
};
struct avx512_t {
  static constexpr isa id = isa::avx512;
};

constexpr std::string_view name(isa i) noexcept {
  return i == isa::avx512 ? "avx512" : i == isa::avx2 ? "avx2" : "scalar";
}

// "scalar", "avx2", "avx512" (as ATTNX_ISA takes them); nullopt for anything else.
constexpr std::optional<isa> parse(std::string_view s) noexcept {
  for (isa i : all_isas)
    if (s == name(i)) return i;
  return std::nullopt;
}

// Whether this build has the path at all: the vector paths exist on x86 (GCC or Clang) only.
constexpr bool compiled(isa i) noexcept { return i == isa::scalar || ATTNX_SIMD_X86; }

namespace detail {
struct cpu_features {
  bool avx2 = false, avx512 = false;
};
inline cpu_features read_cpu() noexcept {
  cpu_features f;
#if ATTNX_SIMD_X86
  __builtin_cpu_init();  // may run before libgcc's own initialiser (static initialisation)
  // __builtin_cpu_supports also checks that the OS saves the vector registers (XGETBV).
  // F16C (half-precision conversions, for f16 keys and values) has no name in clang 14's builtin: cpuid
  // leaf 1, ECX bit 29. Every AVX2 CPU has it; the AVX2 path requires it.
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#endif
  return f;
}
}  // namespace detail

// Whether this CPU (and this build) can run the path. Read once per process.
inline bool cpu_supports(isa i) noexcept {
  static const detail::cpu_features f = detail::read_cpu();
  switch (i) {
    case isa::scalar: return true;
    case isa::avx2: return f.avx2;
    case isa::avx512: return f.avx512;
  }
  return false;
}

// The CPU family of an AMD processor (cpuid leaf 1: base family plus extended family; 0x19 Zen 3 and Zen 4,
// 0x1a Zen 5), 0 for any other vendor or where cpuid is unavailable. Read once per process. The kernels read it
// only to choose between measured tunings that leave the results unchanged (the decode kernel's prefetches, and
// the loop three or four fp32 rows, or 16-bit ones, take: kernels::detail::decode_family).
inline unsigned amd_family() noexcept {
  static const unsigned f = [] {
#if ATTNX_SIMD_X86
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0u;
    if (b != 0x68747541u || d != 0x69746e65u || c != 0x444d4163u) return 0u;  // "AuthenticAMD"
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0u;
    const unsigned base = (a >> 8) & 0xfu;
    return base == 0xfu ? base + ((a >> 20) & 0xffu) : base;
#else
    return 0u;
#endif
  }();
  return f;
}

// The most capable path this CPU can run.
inline isa best_supported() noexcept {
  return cpu_supports(isa::avx512) ? isa::avx512 : cpu_supports(isa::avx2) ? isa::avx2 : isa::scalar;
}

// A set of paths, least capable first: a range of isa (begin/end, size, operator[]). Built by supported().
class isa_list {
 public:
  constexpr const isa* begin() const noexcept { return items_.data(); }
  constexpr const isa* end() const noexcept { return items_.data() + n_; }
  constexpr std::size_t size() const noexcept { return n_; }
  constexpr bool empty() const noexcept { return n_ == 0; }
  constexpr isa operator[](std::size_t k) const noexcept { return items_[k]; }
  constexpr bool contains(isa i) const noexcept {
    for (isa x : *this)
      if (x == i) return true;
    return false;
  }

 private:
  friend isa_list supported() noexcept;
  constexpr void push_back(isa i) noexcept { items_[n_++] = i; }  // (each path at most once: fits)

  std::array<isa, all_isas.size()> items_{};
  std::size_t n_ = 0;
};

// Every path this CPU can run, least capable first (what the tests iterate over):
//   for (attnx::simd::isa i : attnx::simd::supported()) ...
inline isa_list supported() noexcept {
  isa_list out;
  for (isa i : all_isas)
    if (cpu_supports(i)) out.push_back(i);
  return out;
}

// "avx512, avx2, scalar": for messages.
inline std::string supported_list() {
  std::string out;
  for (auto it = all_isas.rbegin(); it != all_isas.rend(); ++it)
    if (cpu_supports(*it)) {
      if (!out.empty()) out += ", ";
      out += name(*it);
    }
  return out;
}

}  // namespace attnx::simd
