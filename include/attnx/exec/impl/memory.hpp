// attnx: the run-time memory's definitions (the library's, or inline with ATTNX_HEADER_ONLY).
#pragma once

#include <array>
#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "attnx/exec/atomic.hpp"
#include "attnx/exec/memory.hpp"

namespace attnx::exec {

namespace detail {
ATTNX_LIB_INLINE detail::atomic<bool>& huge_pages_flag() noexcept {
  static detail::atomic<bool> on{[] {
    const char* e = std::getenv("ATTNX_HUGE_PAGES");
    return e != nullptr && e[0] == '1' && e[1] == 0;
  }()};
  return on;
}
}  // namespace detail

ATTNX_LIB_INLINE void set_huge_pages(bool on) noexcept { detail::huge_pages_flag().store(on && huge_pages_supported, detail::memory_order_relaxed); }
ATTNX_LIB_INLINE bool huge_pages() noexcept { return huge_pages_supported && detail::huge_pages_flag().load(detail::memory_order_relaxed); }

namespace detail {
struct block_cache {
  struct entry {
    void* p = nullptr;
    std::size_t bytes = 0;
  };
  std::array<entry, cache_slots> blocks{};  // blocks[0, count): oldest first
  std::size_t count = 0;
  std::size_t total = 0;

  block_cache() = default;
  block_cache(const block_cache&) = delete;
  block_cache& operator=(const block_cache&) = delete;
  ~block_cache() { clear(); }

  void* take(std::size_t bytes) noexcept {
    for (std::size_t i = count; i-- > 0;) {  // the newest first: the most likely to be in cache
      if (blocks[i].bytes == bytes) {
        void* p = blocks[i].p;
        for (std::size_t j = i + 1; j < count; ++j) blocks[j - 1] = blocks[j];
        --count;
        total -= bytes;
        return p;
      }
    }
    return nullptr;
  }
  void put(void* p, std::size_t bytes) noexcept {
    while (count > 0 && (count == cache_slots || total + bytes > cache_max_bytes)) drop_oldest();
    blocks[count++] = {p, bytes};
    total += bytes;
  }
  void drop_oldest() noexcept {
    ::operator delete(blocks[0].p, std::align_val_t{block_alignment(blocks[0].bytes)});
    total -= blocks[0].bytes;
    for (std::size_t j = 1; j < count; ++j) blocks[j - 1] = blocks[j];
    --count;
  }
  void clear() noexcept {
    while (count > 0) drop_oldest();
  }
};

ATTNX_LIB_INLINE block_cache& thread_block_cache() noexcept {
  thread_local block_cache cache;
  return cache;
}
}  // namespace detail

ATTNX_LIB_INLINE void* allocate_bytes(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (block_cache_enabled && bytes >= cache_min_bytes && bytes <= cache_max_bytes) {
    if (void* p = detail::thread_block_cache().take(bytes)) return p;
  }
  const std::size_t align = block_alignment(bytes);
  void* p = ::operator new(bytes, std::align_val_t{align});
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Advice, not a requirement: where it fails (transparent huge pages "never", an old kernel) the block
  // keeps 4 KiB pages.
  if (align == huge_page_bytes && huge_pages()) (void)::madvise(p, bytes / huge_page_bytes * huge_page_bytes, MADV_HUGEPAGE);
#endif
  return p;
}

ATTNX_LIB_INLINE void release_bytes(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes == 0) bytes = 1;
  if (block_cache_enabled && bytes >= cache_min_bytes && bytes <= cache_max_bytes) {
    detail::thread_block_cache().put(p, bytes);
    return;
  }
  ::operator delete(p, std::align_val_t{block_alignment(bytes)});
}

ATTNX_LIB_INLINE void release_cached_memory() noexcept { detail::thread_block_cache().clear(); }

ATTNX_LIB_INLINE std::size_t cached_bytes() noexcept { return detail::thread_block_cache().total; }

}  // namespace attnx::exec
