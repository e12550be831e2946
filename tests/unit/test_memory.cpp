// exec/memory.hpp: the per-thread cache of large blocks that tensors and kernels allocate.
#define BOOST_TEST_MODULE memory
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace ex = attnx::exec;

BOOST_AUTO_TEST_CASE(blocks_are_aligned_and_large_ones_reused_by_the_same_thread) {
  ex::release_cached_memory();
  BOOST_TEST(ex::cached_bytes() == 0u);
  const std::size_t big = std::size_t(1) << 20;
  void* a = ex::allocate_bytes(big);
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(a) % ex::memory_alignment == 0u);
  ex::release_bytes(a, big);
  if constexpr (ex::block_cache_enabled) {
    BOOST_TEST(ex::cached_bytes() == big);
    void* b = ex::allocate_bytes(big);  // the same size: the same block back
    BOOST_TEST(b == a);
    BOOST_TEST(ex::cached_bytes() == 0u);
    void* c = ex::allocate_bytes(big + 64);  // another size: a fresh block
    BOOST_TEST(c != b);
    ex::release_bytes(b, big);
    ex::release_bytes(c, big + 64);
    BOOST_TEST(ex::cached_bytes() == 2 * big + 64);
    ex::release_cached_memory();
  }
  BOOST_TEST(ex::cached_bytes() == 0u);
}

// The VmFlags line of the mapping of this process that holds address a (/proc/self/smaps), "" if none.
static std::string vm_flags_at(const void* a) {
  std::ifstream in("/proc/self/smaps");
  const auto x = reinterpret_cast<std::uintptr_t>(a);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = lo <= x && x < hi;  // a mapping's first line: "lo-hi perms offset dev inode path"
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line + " ";
  }
  return "";
}

// Writes every page of the block at p, reads it back.
static bool fill_and_check(unsigned char* c, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 4096) c[i] = static_cast<unsigned char>(i >> 12);
  c[n - 1] = 7;
  bool kept = c[n - 1] == 7;
  for (std::size_t i = 0; i + 1 < n; i += 4096) kept = kept && c[i] == static_cast<unsigned char>(i >> 12);
  return kept;
}

BOOST_AUTO_TEST_CASE(large_blocks_are_aligned_to_2_MiB_and_advised_huge_pages_only_when_asked) {
  ex::release_cached_memory();
  const bool before = ex::huge_pages();
  const std::size_t below = ex::huge_page_min_bytes - 64, big = 3 * ex::huge_page_bytes + 100;
  const std::size_t mapped = std::size_t(40) << 20;  // above glibc's largest mmap threshold: a mapping of its own
  BOOST_TEST(ex::block_alignment(below) == ex::memory_alignment);
  BOOST_TEST(ex::block_alignment(big) == (ex::huge_pages_supported ? ex::huge_page_bytes : ex::memory_alignment));

  ex::set_huge_pages(false);  // the default (ATTNX_HUGE_PAGES unset): aligned, not advised
  BOOST_TEST(!ex::huge_pages());
  void* q = ex::allocate_bytes(mapped);
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(q) % ex::block_alignment(mapped) == 0u);
  BOOST_TEST(fill_and_check(static_cast<unsigned char*>(q), mapped));
#if defined(__linux__)
  BOOST_TEST(vm_flags_at(q).find(" hg ") == std::string::npos);
#endif
  ex::release_bytes(q, mapped);

  ex::set_huge_pages(true);
  BOOST_TEST(ex::huge_pages() == ex::huge_pages_supported);
  void* p = ex::allocate_bytes(big);
  auto* c = static_cast<unsigned char*>(p);
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(p) % ex::block_alignment(big) == 0u);
  BOOST_TEST(fill_and_check(c, big));
#if defined(__linux__)
  const std::string flags = vm_flags_at(p);
  BOOST_TEST_MESSAGE("VmFlags of the block's mapping: " << flags);
  BOOST_TEST(!flags.empty());
  // "hg": MADV_HUGEPAGE (whether the kernel then gives 2 MiB pages depends on its settings, not on attnx).
  BOOST_TEST((flags.find(" hg ") != std::string::npos) == ex::huge_pages_supported);
  // The advice stops at the block's last whole 2 MiB page: the rest of the block is not advised (its mapping,
  // if it extends past the advised range, is split there).
  BOOST_TEST(vm_flags_at(c + 3 * ex::huge_page_bytes).find(" hg ") == std::string::npos);
#endif
  ex::release_bytes(p, big);  // freed with the alignment it was allocated with (ASan checks the pairing)
  ex::set_huge_pages(before);
  ex::release_cached_memory();
  BOOST_TEST(ex::cached_bytes() == 0u);
}

// Run by ctest a second time with ATTNX_HUGE_PAGES=1 (unit.memory.huge_pages_env): the environment sets the default.
BOOST_AUTO_TEST_CASE(huge_pages_default_reads_the_environment) {
  // Unset (every other run of this program): off, the default.
  const char* want = std::getenv("ATTNX_EXPECT_HUGE_PAGES");
  BOOST_TEST(ex::huge_pages() == (want != nullptr && std::string(want) == "1" && ex::huge_pages_supported));
}

BOOST_AUTO_TEST_CASE(small_blocks_and_null_are_not_kept) {
  ex::release_cached_memory();
  void* p = ex::allocate_bytes(100);
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(p) % ex::memory_alignment == 0u);
  ex::release_bytes(p, 100);
  ex::release_bytes(nullptr, ex::cache_min_bytes);
  BOOST_TEST(ex::cached_bytes() == 0u);
}

BOOST_AUTO_TEST_CASE(the_cache_is_bounded_in_blocks_and_bytes) {
  ex::release_cached_memory();
  const std::size_t sz = ex::cache_min_bytes;
  for (std::size_t i = 0; i < ex::cache_slots + 5; ++i) ex::release_bytes(ex::allocate_bytes(sz + 64 * i), sz + 64 * i);
  if constexpr (ex::block_cache_enabled) {
    std::size_t want = 0;  // the newest cache_slots blocks are kept
    for (std::size_t i = 5; i < ex::cache_slots + 5; ++i) want += sz + 64 * i;
    BOOST_TEST(ex::cached_bytes() == want);
    const std::size_t huge = ex::cache_max_bytes / 2 + 64;
    ex::release_bytes(ex::allocate_bytes(huge), huge);
    ex::release_bytes(ex::allocate_bytes(huge + 64), huge + 64);  // both cannot stay: the older goes
    BOOST_TEST(ex::cached_bytes() <= ex::cache_max_bytes);
    BOOST_TEST(ex::cached_bytes() >= huge + 64);
  }
  ex::release_cached_memory();
  BOOST_TEST(ex::cached_bytes() == 0u);
}

BOOST_AUTO_TEST_CASE(a_block_freed_by_another_thread_goes_to_that_threads_cache) {
  ex::release_cached_memory();
  const std::size_t big = std::size_t(2) << 20;
  void* p = ex::allocate_bytes(big);
  std::size_t other_cached = 0;
  std::thread t([&] {
    ex::release_bytes(p, big);
    other_cached = ex::cached_bytes();
  });  // that thread's cache is emptied when it exits
  t.join();
  BOOST_TEST(ex::cached_bytes() == 0u);
  BOOST_TEST(other_cached == (ex::block_cache_enabled ? big : 0u));
}

BOOST_AUTO_TEST_CASE(tensors_reuse_their_storage_and_stay_correct) {
  ex::release_cached_memory();
  using big_t = attnx::tensor<float, 256, 256>;  // 256 KiB: on the heap
  static_assert(sizeof(big_t) < 1024);
  const void* first = nullptr;
  for (int round = 0; round < 3; ++round) {
    big_t a = big_t::generate([&](std::size_t i, std::size_t j) { return float(i + j + std::size_t(round)); });
    big_t b = a + a;
    BOOST_TEST(b(3, 4) == 2.0f * float(7 + round));
    if (round == 0) first = a.data();
    if (round > 0 && ex::block_cache_enabled) BOOST_TEST((a.data() == first || b.data() == first));
  }
  ex::release_cached_memory();
}
