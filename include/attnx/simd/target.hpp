// attnx: regions of code compiled for one instruction set, whatever the translation unit's flags.
//
//   ATTNX_TARGET_AVX2_BEGIN   ... functions ...   ATTNX_TARGET_END
//   ATTNX_TARGET_AVX512_BEGIN ... functions ...   ATTNX_TARGET_END
//
// Every function (and function template) defined between a BEGIN and the END is compiled for that
// instruction set (GCC: push_options + target; Clang: attribute push). The pragmas add to the
// translation unit's own target, they cannot take anything away: GCC refuses to inline its intrinsics
// into a function whose target is narrower than the translation unit's, so a region can only widen.
// A vector path may therefore only run where simd::cpu_supports says so, which is how every caller in
// attnx chooses it.
#pragma once

#include "attnx/simd/isa.hpp"

#if ATTNX_SIMD_X86
#include <immintrin.h>

#if defined(__clang__)
#define ATTNX_TARGET_AVX2_BEGIN \
  _Pragma("clang attribute push(__attribute__((target(\"avx2,fma\"))), apply_to = function)")
// (one string literal: _Pragma does not concatenate)
#define ATTNX_TARGET_AVX512_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512dq,avx512bw,avx512vl,avx2,fma\"))), apply_to = function)")
#define ATTNX_TARGET_END _Pragma("clang attribute pop")
#else
#define ATTNX_TARGET_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma\")")
#define ATTNX_TARGET_AVX512_BEGIN \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512dq,avx512bw,avx512vl,avx2,fma\")")
#define ATTNX_TARGET_END _Pragma("GCC pop_options")
#endif

#endif  // ATTNX_SIMD_X86

// Loop unrolling hints for the register-tiled kernels.
#if defined(__clang__)
#define ATTNX_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define ATTNX_UNROLL _Pragma("GCC unroll 16")
#else
#define ATTNX_UNROLL
#endif
