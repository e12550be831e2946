// attnx: the few threading primitives the pool and the contexts need (atomics, a mutex, a lock, a
// condition variable, a detached thread), on the compiler's atomic builtins and POSIX threads directly.
//
// Why not <atomic>, <thread>, <mutex> and <condition_variable>: with libstdc++ they bring <ostream>,
// <stop_token> and much machinery, a large part of the cost of compiling an empty program that includes
// <attnx/attnx.hpp> (g++ 12, counted in instructions: docs/design.md, "Compile time"). std::atomic and
// std::mutex are these same builtins and pthread objects underneath, so ThreadSanitizer sees the same
// thing. Without POSIX threads the standard mutex, condition variable and thread are used.
#pragma once

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#define ATTNX_EXEC_PTHREAD 1
#else
#include <condition_variable>
#include <mutex>
#include <thread>
#define ATTNX_EXEC_PTHREAD 0
#endif

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

#if ATTNX_EXEC_PTHREAD

class mutex {
 public:
  mutex() = default;
  mutex(const mutex&) = delete;
  mutex& operator=(const mutex&) = delete;
  ~mutex() { pthread_mutex_destroy(&m_); }
  void lock() noexcept { pthread_mutex_lock(&m_); }
  void unlock() noexcept { pthread_mutex_unlock(&m_); }
  pthread_mutex_t* native() noexcept { return &m_; }

 private:
  pthread_mutex_t m_ = PTHREAD_MUTEX_INITIALIZER;
};

// Locked from construction to destruction, except between unlock() and lock().
class unique_lock {
 public:
  explicit unique_lock(mutex& m) noexcept : m_(m) { m_.lock(); }
  unique_lock(const unique_lock&) = delete;
  unique_lock& operator=(const unique_lock&) = delete;
  ~unique_lock() {
    if (owns_) m_.unlock();
  }
  void lock() noexcept {
    m_.lock();
    owns_ = true;
  }
  void unlock() noexcept {
    m_.unlock();
    owns_ = false;
  }
  mutex& owned() noexcept { return m_; }

 private:
  mutex& m_;
  bool owns_ = true;
};

class condition_variable {
 public:
  condition_variable() = default;
  condition_variable(const condition_variable&) = delete;
  condition_variable& operator=(const condition_variable&) = delete;
  ~condition_variable() { pthread_cond_destroy(&c_); }
  void notify_one() noexcept { pthread_cond_signal(&c_); }
  void notify_all() noexcept { pthread_cond_broadcast(&c_); }
  // Sleeps (the lock released meanwhile) until ready() holds.
  template <class Ready>
  void wait(unique_lock& lock, Ready ready) {
    while (!ready()) pthread_cond_wait(&c_, lock.owned().native());
  }

 private:
  pthread_cond_t c_ = PTHREAD_COND_INITIALIZER;
};

// Starts a detached thread running fn(arg); false when the system refuses one.
inline bool start_detached(void* (*fn)(void*), void* arg) noexcept {
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return false;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  const bool ok = pthread_create(&t, &attr, fn, arg) == 0;
  pthread_attr_destroy(&attr);
  return ok;
}

// The CPUs online, at least 1 (for when the affinity mask cannot be read).
inline unsigned cpus_online() noexcept {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<unsigned>(n) : 1u;
}

inline void yield_cpu() noexcept { sched_yield(); }

#else

using mutex = std::mutex;
class unique_lock : public std::unique_lock<std::mutex> {
 public:
  explicit unique_lock(std::mutex& m) : std::unique_lock<std::mutex>(m) {}
};
using condition_variable = std::condition_variable;

inline bool start_detached(void* (*fn)(void*), void* arg) noexcept {
  try {
    std::thread([fn, arg] { fn(arg); }).detach();
    return true;
  } catch (...) {
    return false;
  }
}

inline unsigned cpus_online() noexcept {
  const unsigned n = std::thread::hardware_concurrency();
  return n ? n : 1u;
}

inline void yield_cpu() noexcept { std::this_thread::yield(); }

#endif

}  // namespace attnx::exec::detail
