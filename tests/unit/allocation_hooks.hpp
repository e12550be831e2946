// Every global operator new/delete replaced by malloc/free, with two hooks for the tests: the largest allocation
// while `tracking` is set (test_gemm: the memory promise), and a failure on demand (test_kv_cache: with fail_after
// >= 0, the allocation that count reaches throws std::bad_alloc, once). Include it in one translation unit of a
// test program. (g++ cannot see that the replacements pair up: -Wmismatched-new-delete is off.)
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace allocation_hooks {
inline std::atomic<bool> tracking{false};
inline std::atomic<std::size_t> largest_allocation{0};
inline std::atomic<long> fail_after{-1};

inline void note(std::size_t n) {
  if (fail_after.load(std::memory_order_relaxed) >= 0 && fail_after.fetch_sub(1, std::memory_order_relaxed) == 0) {
    fail_after.store(-1, std::memory_order_relaxed);
    throw std::bad_alloc();
  }
  if (!tracking.load(std::memory_order_relaxed)) return;
  std::size_t cur = largest_allocation.load(std::memory_order_relaxed);
  while (n > cur && !largest_allocation.compare_exchange_weak(cur, n, std::memory_order_relaxed)) {
  }
}
// attempt() with its first, second, ... allocation made to fail in turn (after_failure() after each
// std::bad_alloc) until it succeeds; returns the failures.
template <class Attempt, class AfterFailure>
std::size_t fail_each_in_turn(const Attempt& attempt, const AfterFailure& after_failure) {
  for (long k = 0;; ++k) {
    fail_after.store(k);
    try {
      attempt();
      fail_after.store(-1);
      return static_cast<std::size_t>(k);
    } catch (const std::bad_alloc&) {
      fail_after.store(-1);
      after_failure();
    }
  }
}
inline void* checked(void* p) {
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace allocation_hooks

void* operator new(std::size_t n) {
  allocation_hooks::note(n);
  return allocation_hooks::checked(std::malloc(n ? n : 1));
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, std::align_val_t al) {
  allocation_hooks::note(n);
  const std::size_t a = static_cast<std::size_t>(al);
  return allocation_hooks::checked(std::aligned_alloc(a, (std::max<std::size_t>(n, 1) + a - 1) / a * a));
}
void* operator new[](std::size_t n, std::align_val_t al) { return ::operator new(n, al); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
