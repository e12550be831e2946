// attnx: configuration knobs and the version.
#pragma once

#include <cstddef>

// Exceptions: attnx reports bad input at run time (sizes, offsets, files) by throwing, naming the rule and the values.
// Built with -fno-exceptions the same reports end the program instead: the message on stderr, then std::abort (a
// report from the compiled library, which has exceptions, reaches std::terminate with its message).
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
#define ATTNX_EXCEPTIONS 1
#define ATTNX_THROW(...) throw __VA_ARGS__
#else
#define ATTNX_EXCEPTIONS 0
#include <cstdio>
#include <cstdlib>
#include <exception>
namespace attnx::detail {
[[noreturn]] inline void fail(const std::exception& e) noexcept {
  std::fprintf(stderr, "%s\n", e.what());
  std::abort();
}
}  // namespace attnx::detail
#define ATTNX_THROW(...) ::attnx::detail::fail(__VA_ARGS__)
#endif

#define ATTNX_VERSION_MAJOR 0
#define ATTNX_VERSION_MINOR 1
#define ATTNX_VERSION_PATCH 0

// How the run-time kernels (attention, decode, GEMM) reach a program:
//   0 (default)  compiled once, in the attnx library (CMake target attnx::attnx): a translation unit sees their
//                declarations only and compiles none of them;
//   1            header-only (target attnx::header_only, or -DATTNX_HEADER_ONLY=1): every translation unit that runs
//                attention or a product instantiates them (every instruction-set path: about a minute of g++ -O2
//                per such file; README, "Using it from CMake"). For constexpr-only use and single-file
//                experiments without the library.
// Every translation unit of a program must agree (the two are the same code; the library just compiles it once).
#ifndef ATTNX_HEADER_ONLY
#define ATTNX_HEADER_ONLY 0
#endif

// -ffast-math lets the compiler assume no NaN or infinity, which the kernels' rules on special values (NaN rows, +inf
// scores, rows with every key masked) rely on: the compiled library's kernels are built without it, so a program
// built with -ffast-math links them and keeps those rules for attention (its own element-wise code is its own
// choice); header-only, they would be compiled with it.
#if ATTNX_HEADER_ONLY && defined(__FAST_MATH__)
#error "attnx: ATTNX_HEADER_ONLY with -ffast-math: the kernels' NaN, inf and masked-row rules need IEEE arithmetic; link the compiled library (attnx::attnx), built without -ffast-math, or drop -ffast-math"
#endif

// The library's non-template functions (file formats, the thread pool, messages) are declared in the headers and
// defined in <header dir>/impl/*.hpp: out of line in the library's sources (src/), inline where ATTNX_HEADER_ONLY
// has the headers include those definitions.
#if ATTNX_HEADER_ONLY
#define ATTNX_LIB_INLINE inline
#else
#define ATTNX_LIB_INLINE
#endif

// Tensors (and evaluator row buffers) up to this many bytes live inside the object, so they are
// literal types usable as constexpr variables; larger ones go to the heap (still usable inside a
// constant evaluation, as C++20 allows transient allocation, but not as a constexpr variable).
#ifndef ATTNX_INLINE_BYTES
#define ATTNX_INLINE_BYTES (64 * 1024)
#endif

namespace attnx {
// Tensors of at most this many bytes keep their elements inline; larger ones on the heap (ATTNX_INLINE_BYTES).
inline constexpr std::size_t inline_bytes = ATTNX_INLINE_BYTES;
// Heap buffers are aligned for the widest vector loads (AVX-512: 64 bytes).
inline constexpr std::size_t heap_alignment = 64;
}  // namespace attnx
