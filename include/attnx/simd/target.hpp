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

// GCC, optimised build: what follows is compiled at -O3 whatever the translation unit's level: at -O2 the
// register-tiled kernels lose noticeably on small products and short sequences (docs/benchmarks.md compares the
// two builds in one run); with this a user who builds with plain -O2 gets the same code. Clang's -O2 already does what these kernels need; unoptimised
// builds stay unoptimised. It costs compile time: docs/design.md, "Compile time".
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__) && !defined(__OPTIMIZE_SIZE__)
#define ATTNX_GCC_O3 _Pragma("GCC optimize(\"O3\")")
#else
#define ATTNX_GCC_O3
#endif

#if ATTNX_SIMD_X86
#if defined(__GNUC__) && !defined(__clang__) && !defined(_IMMINTRIN_H_INCLUDED) && !defined(ATTNX_FULL_IMMINTRIN)
// GCC: only the parts of <immintrin.h> that attnx uses (SSE2, AVX, AVX2, FMA, F16C, AVX-512 F and DQ). The whole
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
#include <f16cintrin.h>
#undef _IMMINTRIN_H_INCLUDED
#elif defined(__clang__) && !defined(__IMMINTRIN_H) && !defined(ATTNX_FULL_IMMINTRIN)
// Clang: the same parts, the same way (its guard is __IMMINTRIN_H).
#include <smmintrin.h>
#define __IMMINTRIN_H
#include <avxintrin.h>
#include <avx2intrin.h>
#include <f16cintrin.h>
#include <fmaintrin.h>
#include <avx512fintrin.h>
#include <avx512dqintrin.h>
#undef __IMMINTRIN_H
#else
#include <immintrin.h>
#endif

#if defined(__clang__)
#define ATTNX_TARGET_AVX2_BEGIN \
  _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c\"))), apply_to = function)")
// (one string literal: _Pragma does not concatenate)
#define ATTNX_TARGET_AVX512_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c\"))), apply_to = function)")
#define ATTNX_TARGET_END _Pragma("clang attribute pop")
#else
// ATTNX_GCC_O3 in every region, so that the vec<> helpers (in regions of their own) are compiled like the
// kernels that inline them.
#define ATTNX_TARGET_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c\")") ATTNX_GCC_O3
#define ATTNX_TARGET_AVX512_BEGIN                                                                       \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c\")") \
      ATTNX_GCC_O3
#define ATTNX_TARGET_END _Pragma("GCC pop_options")
#endif

#endif  // ATTNX_SIMD_X86

// The kernels' drivers (planning, work items, row bookkeeping) around the regions: ATTNX_GCC_O3 too
// (small problems spend a visible share of their time there).
#if defined(__GNUC__) && !defined(__clang__)
#define ATTNX_OPTIMIZE_BEGIN _Pragma("GCC push_options") ATTNX_GCC_O3
#define ATTNX_OPTIMIZE_END _Pragma("GCC pop_options")
#else
#define ATTNX_OPTIMIZE_BEGIN
#define ATTNX_OPTIMIZE_END
#endif

// Loop unrolling hints for the register-tiled kernels; ATTNX_NOUNROLL keeps a loop rolled (see tiles/decode_one_row.hpp:
// a load instruction run once per row of a stream is what the hardware prefetcher follows).
#if defined(__clang__)
#define ATTNX_UNROLL _Pragma("unroll")
#define ATTNX_NOUNROLL _Pragma("nounroll")
#elif defined(__GNUC__)
#define ATTNX_UNROLL _Pragma("GCC unroll 16")
#define ATTNX_NOUNROLL _Pragma("GCC unroll 1")
#else
#define ATTNX_UNROLL
#define ATTNX_NOUNROLL
#endif
// A lambda of a kernel loop that must be inlined, written after its parameter list: clang 14 left few_rows'
// helpers out of line at -O2, and with them the output registers in memory (tiles/decode_few_rows.hpp).
#if defined(__GNUC__)  // (clang too)
#define ATTNX_INLINE_LAMBDA __attribute__((always_inline))
#else
#define ATTNX_INLINE_LAMBDA
#endif
// The same for a function (written before its return type): few_rows' weigh_quick.
#if defined(__GNUC__)
#define ATTNX_FORCE_INLINE __attribute__((always_inline)) inline
#else
#define ATTNX_FORCE_INLINE inline
#endif
