// attnx: configuration knobs and the version.
#pragma once

#include <cstddef>

#define ATTNX_VERSION_MAJOR 0
#define ATTNX_VERSION_MINOR 1
#define ATTNX_VERSION_PATCH 0

// Tensors (and evaluator row buffers) up to this many bytes live inside the object, so they are
// literal types usable as constexpr variables; larger ones go to the heap (still usable inside a
// constant evaluation, as C++20 allows transient allocation, but not as a constexpr variable).
#ifndef ATTNX_INLINE_BYTES
#define ATTNX_INLINE_BYTES (64 * 1024)
#endif

namespace attnx {
inline constexpr std::size_t inline_bytes = ATTNX_INLINE_BYTES;
// Heap buffers are aligned for the widest vector loads (AVX-512: 64 bytes).
inline constexpr std::size_t heap_alignment = 64;
}  // namespace attnx
