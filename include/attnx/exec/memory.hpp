// attnx: the run-time memory of tensors and kernels: 64-byte aligned blocks, the large ones kept for reuse.
//
// A forward pass allocates the same temporaries every time it runs (projections, packed weights, the
// attention's output before the output projection: megabytes each). Returned to the system and mapped
// again on every call, each page of them costs a page fault, and with several threads the unmapping
// costs TLB shootdowns across the cores (a tenth of an MHA forward pass's time). So a block of at least
// cache_min_bytes is kept, when freed, in a small cache of the freeing thread (at most cache_slots
// blocks and cache_max_bytes in all, the oldest given back first), and an allocation of the same size
// on that thread takes it back. Nothing is shared between threads (no lock); a block may be freed by
// another thread than the one that allocated it. release_cached_memory() gives the calling thread's
// blocks back to the system; a thread's cache is emptied when the thread exits.
//
// Under AddressSanitizer (or with ATTNX_NO_BLOCK_CACHE defined) nothing is kept, so that a use after
// free is still reported.
//
// On Linux a block of at least huge_page_min_bytes is aligned to huge_page_bytes (2 MiB), and, when huge
// pages are asked for (set_huge_pages(true), or ATTNX_HUGE_PAGES=1 in the environment when the first
// large block is allocated), its whole 2 MiB pages are advised MADV_HUGEPAGE, so that where transparent
// huge pages are "always" or "madvise" (/sys/kernel/mm/transparent_hugepage/enabled) they are backed by
// 2 MiB pages. Off by default: huge pages raise a core's read bandwidth, but the decode kernel's times did not
// follow consistently, faster in some cells and slower in others (bench/NOTES.md). The advice covers only the
// whole 2 MiB pages inside a block, so it never backs memory outside it; the cost is that touching one byte
// of a 2 MiB page backs all of it, and a fault there may compact memory first.
#pragma once

#include <cstddef>

#include "attnx/config.hpp"

#if defined(__linux__)
#define ATTNX_HUGE_PAGES_SUPPORTED 1  // (MADV_HUGEPAGE: Linux 2.6.38 and later)
#else
#define ATTNX_HUGE_PAGES_SUPPORTED 0
#endif

#if !defined(ATTNX_NO_BLOCK_CACHE)
#if defined(__SANITIZE_ADDRESS__)
#define ATTNX_NO_BLOCK_CACHE 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNX_NO_BLOCK_CACHE 1
#endif
#endif
#endif

namespace attnx::exec {

// The memory layer's settings: alignment, the per-thread cache of large blocks (on unless ATTNX_NO_BLOCK_CACHE: blocks from cache_min_bytes to cache_max_bytes, cache_slots of them), and huge pages for blocks of huge_page_min_bytes or more.
inline constexpr std::size_t memory_alignment = 64;
#if defined(ATTNX_NO_BLOCK_CACHE)
inline constexpr bool block_cache_enabled = false;
#else
inline constexpr bool block_cache_enabled = true;
#endif
inline constexpr std::size_t cache_min_bytes = std::size_t(64) << 10;   // 64 KiB
inline constexpr std::size_t cache_max_bytes = std::size_t(256) << 20;  // 256 MiB per thread
inline constexpr std::size_t cache_slots = 64;  // (a training step frees its activations, tens of blocks, at once)
inline constexpr bool huge_pages_supported = ATTNX_HUGE_PAGES_SUPPORTED;
inline constexpr std::size_t huge_page_bytes = std::size_t(2) << 20;      // 2 MiB (x86-64, AArch64 with 4 KiB pages)
inline constexpr std::size_t huge_page_min_bytes = std::size_t(4) << 20;  // 4 MiB: two huge pages or more

// The alignment of a block of `bytes` bytes from allocate_bytes (a function of the size alone, so that
// release_bytes and the block cache free it with the alignment it was allocated with).
constexpr std::size_t block_alignment(std::size_t bytes) noexcept {
  return huge_pages_supported && bytes >= huge_page_min_bytes ? huge_page_bytes : memory_alignment;
}

// Whether blocks of huge_page_min_bytes and more allocated from now on are advised MADV_HUGEPAGE (see above;
// blocks already allocated keep their pages). Any thread, any time; huge_pages() stays false where
// huge_pages_supported is false.
void set_huge_pages(bool on) noexcept;
bool huge_pages() noexcept;

// A block of `bytes` bytes (at least one), aligned to block_alignment(bytes) (at least memory_alignment), its
// whole 2 MiB pages advised MADV_HUGEPAGE if huge_pages() (see above); throws std::bad_alloc.
void* allocate_bytes(std::size_t bytes);

// Gives back a block of allocate_bytes(bytes) (the same bytes); nullptr is ignored.
void release_bytes(void* p, std::size_t bytes) noexcept;

// Returns the blocks the calling thread keeps for reuse to the system.
void release_cached_memory() noexcept;

// The bytes the calling thread keeps for reuse.
std::size_t cached_bytes() noexcept;

}  // namespace attnx::exec

#if ATTNX_HEADER_ONLY
#include "attnx/exec/impl/memory.hpp"
#endif
