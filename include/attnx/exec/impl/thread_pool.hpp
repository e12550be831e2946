// attnx: the thread pool's definitions (the library's, or inline with ATTNX_HEADER_ONLY).
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

#include "attnx/util/algorithm.hpp"
#include "attnx/exec/sync.hpp"  // mutex, condition variable and threads on pthreads (not <thread>: cost)
#include "attnx/exec/thread_pool.hpp"

namespace attnx::exec {

ATTNX_LIB_INLINE unsigned hardware_threads() noexcept {
  static const unsigned n = [] {
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
      const int c = CPU_COUNT(&set);
      if (c > 0) return static_cast<unsigned>(c);
    }
#endif
    return detail::cpus_online();
  }();
  return n;
}

namespace detail {
// 0: hardware_threads()
ATTNX_LIB_INLINE detail::atomic<unsigned>& max_threads_setting() noexcept {
  static detail::atomic<unsigned> n{0};
  return n;
}
}  // namespace detail

ATTNX_LIB_INLINE unsigned max_threads() noexcept {
  const unsigned n = detail::max_threads_setting().load(detail::memory_order_relaxed);
  return n ? n : hardware_threads();
}

ATTNX_LIB_INLINE void set_max_threads(unsigned n) {
  if (n > max_threads_limit)
    ATTNX_THROW(std::invalid_argument("attnx: set_max_threads: " + std::to_string(n) + " threads requested, at most " +
                                std::to_string(max_threads_limit) + " allowed"));
  detail::max_threads_setting().store(n, detail::memory_order_relaxed);
}

struct thread_pool::state {


  // Runs fn(arg, slot) for slot 0 here and slots 1 .. slots-1 on free workers (see the top of this file);
  // returns the number of slots that ran. An exception from any slot is rethrown here once every slot
  // that started has finished (the first one wins).
  unsigned run(unsigned slots, thread_pool::job_fn fn, void* arg) {
    if (slots <= 1) {
      fn(arg, 0);
      return 1;
    }
    task t;
    t.fn = fn;
    t.arg = arg;
    t.slots = slots;
    {
      detail::unique_lock lock(mutex_);
      push(&t);
      grow(busy_ + unclaimed_);  // a worker for every slot running or waiting, if the bound allows
    }
    for (unsigned i = 1; i < slots; ++i) work_.notify_one();
    std::exception_ptr error;
#if ATTNX_EXCEPTIONS
    try {
      fn(arg, 0);
    } catch (...) {
      error = std::current_exception();
    }
#else
    fn(arg, 0);
#endif
    detail::unique_lock lock(mutex_);
    if (t.open) remove(&t);
    // The workers' slots usually end shortly after this one: watch before sleeping (spin_while).
    spin_while(lock, [&] { return t.running.load(detail::memory_order_relaxed) != 0; });
    done_.wait(lock, [&] { return t.running.load(detail::memory_order_relaxed) == 0; });
    const unsigned ran = t.next;
    if (!error) error = t.error;
    lock.unlock();
#if ATTNX_EXCEPTIONS
    if (error) std::rethrow_exception(error);
#endif
    return ran;
  }

  // Workers started so far.
  unsigned workers() const {
    detail::unique_lock lock(mutex_);
    return workers_;
  }

  struct task {
    thread_pool::job_fn fn = nullptr;
    void* arg = nullptr;
    unsigned slots = 0;
    unsigned next = 1;     // the next slot to give out (slot 0 is the caller's)
    detail::atomic<unsigned> running{0};  // slots running on workers (changed under the lock; read without it)
    bool open = true;      // in the queue: still has slots to give
    std::exception_ptr error;
    task* link = nullptr;
  };


  static detail::atomic<thread_pool*>& current() {
    static detail::atomic<thread_pool*> p{nullptr};
    return p;
  }
  // Pools left behind by fork(): kept reachable (leak checkers stay quiet), never touched again.
  static detail::atomic<thread_pool*>& abandoned() {
    static detail::atomic<thread_pool*> p{nullptr};
    return p;
  }
  static void abandon_in_child() {
    thread_pool* p = current().exchange(nullptr, detail::memory_order_acq_rel);
    if (p) {
      p->s_->previous_ = abandoned().load(detail::memory_order_relaxed);
      abandoned().store(p, detail::memory_order_relaxed);
    }
  }

  // Starts workers until there are n (bounded by max_threads() - 1); a thread that cannot be started
  // leaves the pool smaller, which only means fewer helpers.
  void grow(unsigned n) {
    n = alg::min(n, max_threads() - 1);
    while (workers_ < n && detail::start_detached(&worker_main, this)) ++workers_;
  }
  void push(task* t) {
    if (tail_) tail_->link = t;
    else head_ = t;
    tail_ = t;
    unclaimed_ += t->slots - t->next;
    pending_.store(unclaimed_, detail::memory_order_relaxed);
  }
  void remove(task* t) {
    task** pp = &head_;
    task* prev = nullptr;
    while (*pp && *pp != t) {
      prev = *pp;
      pp = &(*pp)->link;
    }
    if (*pp) {
      *pp = t->link;
      if (tail_ == t) tail_ = prev;
      unclaimed_ -= t->slots - t->next;
      pending_.store(unclaimed_, detail::memory_order_relaxed);
    }
    t->link = nullptr;
    t->open = false;
  }
  // Kernels run one parallel run after another (a GEMM, the attention, the next GEMM), and a run's slots
  // end close together: a thread that would sleep on a condition variable first watches, without the lock,
  // for up to spin_rounds pauses (some tens of microseconds) while busy() holds: a worker woken from sleep starts
  // its slot tens of microseconds late, often after the caller's slot has ended, a spinning one within a
  // microsecond; the caller's watch likewise shortens the time past its own slot.
  template <class Busy>
  static void spin_while(detail::unique_lock& lock, Busy&& busy) {
    if (!busy()) return;
    lock.unlock();
    for (int spin = 0; spin < spin_rounds && busy(); ++spin) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#else
      detail::yield_cpu();
#endif
    }
    lock.lock();
  }

  static void* worker_main(void* pool) {
    static_cast<state*>(pool)->work();  // never returns
    return nullptr;
  }
  [[noreturn]] void work() {
    detail::unique_lock lock(mutex_);
    for (;;) {
      // A worker that has just finished watches for the next run before it sleeps (spin_while).
      if (head_ == nullptr) spin_while(lock, [this] { return pending_.load(detail::memory_order_relaxed) == 0; });
      work_.wait(lock, [this] { return head_ != nullptr; });
      task* t = head_;
      const unsigned slot = t->next++;
      pending_.store(--unclaimed_, detail::memory_order_relaxed);
      if (t->next == t->slots) remove(t);
      t->running.fetch_add(1, detail::memory_order_relaxed);
      ++busy_;
      lock.unlock();
      std::exception_ptr error;
#if ATTNX_EXCEPTIONS
      try {
        t->fn(t->arg, slot);
      } catch (...) {
        error = std::current_exception();
      }
#else
      t->fn(t->arg, slot);
#endif
      lock.lock();
      if (error && !t->error) t->error = error;
      --busy_;
      // t may be gone once the lock is released (the caller takes the lock before it returns)
      if (t->running.fetch_sub(1, detail::memory_order_relaxed) == 1) done_.notify_all();
    }
  }

  mutable detail::mutex mutex_;
  detail::condition_variable work_, done_;
  unsigned workers_ = 0;              // started, detached: the pool lives as long as the process
  task* head_ = nullptr;              // runs with slots to give, oldest first
  task* tail_ = nullptr;
  unsigned busy_ = 0;                 // workers running a slot
  unsigned unclaimed_ = 0;            // slots of open runs that no worker has taken yet
  detail::atomic<unsigned> pending_{0};  // unclaimed_, readable without the lock (the workers' spin)
  static constexpr int spin_rounds = 4000;  // pause instructions: some tens of microseconds
  thread_pool* previous_ = nullptr;   // the chain of pools abandoned by fork()
};

ATTNX_LIB_INLINE thread_pool& thread_pool::instance() {
  thread_pool* p = state::current().load(detail::memory_order_acquire);
  if (p) return *p;
#if ATTNX_EXEC_PTHREAD
  static pthread_once_t registered = PTHREAD_ONCE_INIT;
  pthread_once(&registered, [] { pthread_atfork(nullptr, nullptr, &state::abandon_in_child); });
#endif
  auto* fresh = new thread_pool(new state);
  if (state::current().compare_exchange_strong(p, fresh, detail::memory_order_acq_rel)) return *fresh;
  delete fresh->s_;  // another thread was first (no worker started yet)
  delete fresh;
  return *p;
}

ATTNX_LIB_INLINE unsigned thread_pool::run(unsigned slots, job_fn fn, void* arg) { return s_->run(slots, fn, arg); }

ATTNX_LIB_INLINE unsigned thread_pool::workers() const { return s_->workers(); }

}  // namespace attnx::exec
