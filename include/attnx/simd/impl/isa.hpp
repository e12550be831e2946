// attnx: which instruction sets this CPU runs (the library's, or inline with ATTNX_HEADER_ONLY).
#pragma once

#include <string>

#include "attnx/simd/isa.hpp"

#if ATTNX_SIMD_X86
#include <cpuid.h>
#endif

namespace attnx::simd {

namespace detail {
struct cpu_features {
  bool avx2 = false, avx512 = false;
};
ATTNX_LIB_INLINE cpu_features read_cpu() noexcept {
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

ATTNX_LIB_INLINE bool cpu_supports(isa i) noexcept {
  static const detail::cpu_features f = detail::read_cpu();
  switch (i) {
    case isa::scalar: return true;
    case isa::avx2: return f.avx2;
    case isa::avx512: return f.avx512;
  }
  return false;
}

ATTNX_LIB_INLINE unsigned amd_family() noexcept {
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

ATTNX_LIB_INLINE isa best_supported() noexcept {
  return cpu_supports(isa::avx512) ? isa::avx512 : cpu_supports(isa::avx2) ? isa::avx2 : isa::scalar;
}

ATTNX_LIB_INLINE isa_list supported() noexcept {
  isa_list out;
  for (isa i : all_isas)
    if (cpu_supports(i)) out.push_back(i);
  return out;
}

ATTNX_LIB_INLINE std::string supported_list() {
  std::string out;
  for (auto it = all_isas.rbegin(); it != all_isas.rend(); ++it)
    if (cpu_supports(*it)) {
      if (!out.empty()) out += ", ";
      out += name(*it);
    }
  return out;
}

}  // namespace attnx::simd
