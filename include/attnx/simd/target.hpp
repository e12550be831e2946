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
#if defined(__GNUC__) && !defined(__clang__) && !defined(_IMMINTRIN_H_INCLUDED) && !defined(ATTNX_FULL_IMMINTRIN)
// GCC: only the parts of <immintrin.h> that attnx uses (SSE2, AVX, AVX2, FMA, AVX-512 F and DQ). The whole
// header is about 55,000 lines and was a third of the time to compile an empty program that includes
// <attnx/attnx.hpp>. The parts check that they come through <immintrin.h> by its include guard, which is
// set only around them: a later #include <immintrin.h> still reads the rest (each part has its own guard).
// Define ATTNX_FULL_IMMINTRIN to include the whole header instead.
#include <smmintrin.h>  // SSE to SSE4.1 (includable directly)
#define _IMMINTRIN_H_INCLUDED
#include <avxintrin.h>
#include <avx2intrin.h>
#include <fmaintrin.h>
#include <avx512fintrin.h>
#include <avx512dqintrin.h>
#undef _IMMINTRIN_H_INCLUDED
#else
#include <immintrin.h>
#endif

#if defined(__clang__)
#define ATTNX_TARGET_AVX2_BEGIN \
  _Pragma("clang attribute push(__attribute__((target(\"avx2,fma\"))), apply_to = function)")
// (one string literal: _Pragma does not concatenate)
#define ATTNX_TARGET_AVX512_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512dq,avx512bw,avx512vl,avx2,fma\"))), apply_to = function)")
#define ATTNX_TARGET_END _Pragma("clang attribute pop")
#else
// In an optimised build, GCC compiles the regions at -O3 whatever the level of the translation unit:
// at -O2 the register-tiled kernels lose 5-20% (measured in docs/benchmarks.md: the default-flags
// build against the -march=native one), so that a user who builds with plain -O2 gets the same code
// as with -O3. (Clang's -O2 already does what these kernels need.) Unoptimised builds stay unoptimised.
#if defined(__OPTIMIZE__) && !defined(__OPTIMIZE_SIZE__)
#define ATTNX_TARGET_OPTIMIZE _Pragma("GCC optimize(\"O3\")")
#else
#define ATTNX_TARGET_OPTIMIZE
#endif
#define ATTNX_TARGET_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma\")") ATTNX_TARGET_OPTIMIZE
#define ATTNX_TARGET_AVX512_BEGIN                                                                       \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512dq,avx512bw,avx512vl,avx2,fma\")") \
      ATTNX_TARGET_OPTIMIZE
#define ATTNX_TARGET_END _Pragma("GCC pop_options")
#endif

#endif  // ATTNX_SIMD_X86

// The kernels' drivers (planning, work items, row bookkeeping) around the regions: also -O3 under GCC
// in an optimised build, for the same reason (small problems spend a visible share of their time there).
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__) && !defined(__OPTIMIZE_SIZE__)
#define ATTNX_OPTIMIZE_BEGIN _Pragma("GCC push_options") _Pragma("GCC optimize(\"O3\")")
#define ATTNX_OPTIMIZE_END _Pragma("GCC pop_options")
#else
#define ATTNX_OPTIMIZE_BEGIN
#define ATTNX_OPTIMIZE_END
#endif

// Loop unrolling hints for the register-tiled kernels.
#if defined(__clang__)
#define ATTNX_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define ATTNX_UNROLL _Pragma("GCC unroll 16")
#else
#define ATTNX_UNROLL
#endif
