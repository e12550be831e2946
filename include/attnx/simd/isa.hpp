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

#include "attnx/config.hpp"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define ATTNX_SIMD_X86 1
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

// "scalar", "avx2" or "avx512".
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

// Whether this CPU (and this build) can run the path. Read once per process.
bool cpu_supports(isa i) noexcept;

// The CPU family of an AMD processor (cpuid leaf 1: base family plus extended family; 0x19 Zen 3 and Zen 4,
// 0x1a Zen 5), 0 for any other vendor or where cpuid is unavailable. Read once per process. The kernels read it
// only to choose between measured tunings that leave the results unchanged (kernels/tuning.hpp).
unsigned amd_family() noexcept;

// The most capable path this CPU can run.
isa best_supported() noexcept;

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
isa_list supported() noexcept;

// "avx512, avx2, scalar": for messages.
std::string supported_list();

}  // namespace attnx::simd

#if ATTNX_HEADER_ONLY
#include "attnx/simd/impl/isa.hpp"
#endif
