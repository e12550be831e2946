// attnx: the few threading primitives the thread pool needs (a mutex, a lock, a condition variable, a detached
// thread) on POSIX threads directly, and the atomics of exec/atomic.hpp. Only the pool's definitions include it
// (exec/impl/thread_pool.hpp).
//
// Why not <atomic>, <thread>, <mutex> and <condition_variable>: with libstdc++ they bring <ostream>,
// <stop_token> and much machinery, a large part of the cost of compiling an empty program that includes
// <attnx/attnx.hpp> (g++ 12, counted in instructions: docs/design.md, "Compile time"). std::atomic and
// std::mutex are these same builtins and pthread objects underneath, so ThreadSanitizer sees the same
// thing. Without POSIX threads the standard mutex, condition variable and thread are used.
#pragma once

#include "attnx/config.hpp"
#include "attnx/exec/atomic.hpp"

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
#if ATTNX_EXCEPTIONS
  try {
    std::thread([fn, arg] { fn(arg); }).detach();
    return true;
  } catch (...) {
    return false;
  }
#else
  std::thread([fn, arg] { fn(arg); }).detach();
  return true;
#endif
}

inline unsigned cpus_online() noexcept {
  const unsigned n = std::thread::hardware_concurrency();
  return n ? n : 1u;
}

inline void yield_cpu() noexcept { std::this_thread::yield(); }

#endif

}  // namespace attnx::exec::detail
