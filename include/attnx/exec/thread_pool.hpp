// attnx: the process's worker threads, shared by every context, every kernel and every caller.
//
// A parallel run asks for `slots` threads: slot 0 runs on the calling thread, slots 1 .. slots-1 on
// pool workers that are free at that moment or become free while the run lasts. A slot that no worker
// has taken by the time slot 0 finishes is never run, so a job must share its work through a counter
// that any subset of its slots drains (exec::parallel_for does). Consequences:
//   - concurrent callers never wait for each other: each always works on its own run, and free
//     workers help whichever runs still have slots to give (oldest first);
//   - nested runs (a job that starts a run) cannot deadlock: nobody waits for a slot that has not started;
//   - the pool holds at most max_threads() - 1 workers (the CPUs this process may use, by default), so
//     no setting can make it start more.
// The pool is created on first use and never destroyed: its workers sleep on a condition variable and
// end with the process (no static destructor runs at exit while another thread may be computing).
// After fork() the child abandons the parent's pool (its workers do not exist there) and builds a new
// one on first use, so a child can evaluate with threads and exit normally.
#pragma once

#include "attnx/config.hpp"

namespace attnx::exec {

// The CPUs this process may run on (its affinity mask on Linux), else the CPUs online, and at least 1. Read once.
unsigned hardware_threads() noexcept;

// A bound on the threads any run may use, workers and caller together (context::set_threads clamps to
// it). Requests above it are not an error: they get max_threads().
inline constexpr unsigned max_threads_limit = 1024;
unsigned max_threads() noexcept;
// Raise or lower the bound (deliberate oversubscription, or a process that must stay on fewer CPUs).
// Workers already started stay; no new ones start beyond the bound. 0 restores the default.
void set_max_threads(unsigned n);

// The pool of worker threads that parallel_for runs on (one per process, started on first use).
class thread_pool {
 public:
  using job_fn = void (*)(void* arg, unsigned slot);

  // The process's pool.
  static thread_pool& instance();

  // Runs fn(arg, slot) for slot 0 here and slots 1 .. slots-1 on free workers (see the top of this file);
  // returns the number of slots that ran. An exception from any slot is rethrown here once every slot
  // that started has finished (the first one wins).
  unsigned run(unsigned slots, job_fn fn, void* arg);

  // Workers started so far.
  unsigned workers() const;

  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

 private:
  struct state;  // the queue, its lock and the workers (exec/impl/thread_pool.hpp)
  explicit thread_pool(state* s) noexcept : s_(s) {}
  state* s_;
};

}  // namespace attnx::exec

#if ATTNX_HEADER_ONLY
#include "attnx/exec/impl/thread_pool.hpp"
#endif
