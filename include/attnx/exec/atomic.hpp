// attnx: atomics on the compiler's builtins (the part of std::atomic attnx uses), for the contexts' settings and
// counters and the kernels' work counters. Not <atomic>: with libstdc++ it is a large share of what an empty program
// that includes <attnx/attnx.hpp> would parse; std::atomic is these same builtins underneath, so ThreadSanitizer
// sees the same thing.
#pragma once

namespace attnx::exec::detail {

// The memory orders of std::atomic, as the builtins spell them.
enum memory_order : int {
  memory_order_relaxed = __ATOMIC_RELAXED,
  memory_order_acquire = __ATOMIC_ACQUIRE,
  memory_order_release = __ATOMIC_RELEASE,
  memory_order_acq_rel = __ATOMIC_ACQ_REL,
  memory_order_seq_cst = __ATOMIC_SEQ_CST,
};

// The part of std::atomic<T> attnx uses, for a trivially copyable T of 1, 2, 4 or 8 bytes (integers,
// bool, enums, pointers). fetch_add / fetch_sub: integers only.
template <class T>
class atomic {
 public:
  constexpr atomic() noexcept : v_{} {}
  constexpr atomic(T v) noexcept : v_(v) {}  // NOLINT: like std::atomic, converts
  atomic(const atomic&) = delete;
  atomic& operator=(const atomic&) = delete;

  T load(memory_order o = memory_order_seq_cst) const noexcept {
    T r;
    __atomic_load(&v_, &r, o);
    return r;
  }
  void store(T v, memory_order o = memory_order_seq_cst) noexcept { __atomic_store(&v_, &v, o); }
  T exchange(T v, memory_order o = memory_order_seq_cst) noexcept {
    T r;
    __atomic_exchange(&v_, &v, &r, o);
    return r;
  }
  // As std::atomic: on failure `expected` receives the current value.
  bool compare_exchange_strong(T& expected, T desired, memory_order o = memory_order_seq_cst) noexcept {
    const memory_order fail = o == memory_order_acq_rel ? memory_order_acquire
                              : o == memory_order_release ? memory_order_relaxed
                                                          : o;
    return __atomic_compare_exchange(&v_, &expected, &desired, false, o, fail);
  }
  T fetch_add(T n, memory_order o = memory_order_seq_cst) noexcept { return __atomic_fetch_add(&v_, n, o); }
  T fetch_sub(T n, memory_order o = memory_order_seq_cst) noexcept { return __atomic_fetch_sub(&v_, n, o); }

 private:
  alignas(sizeof(T)) T v_;
};
}  // namespace attnx::exec::detail
