// attnx fused attention: a small persistent thread pool (or OpenMP when compiled with it).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace attnx::kernels::detail {

// Runs job(t) for t in [0, n) concurrently, t = 0 on the calling thread, and returns when all
// are done. Jobs are expected to share their work through an atomic counter, so running only
// job(0) must also complete the work: that is what happens when the pool is already busy (a
// concurrent or nested call), instead of waiting for it.
class thread_pool {
 public:
  static thread_pool& instance() {
    static thread_pool pool;
    return pool;
  }

  void run(unsigned n, const std::function<void(unsigned)>& job) {
    if (n <= 1) {
      job(0);
      return;
    }
    std::unique_lock<std::mutex> busy(run_mutex_, std::try_to_lock);
    if (!busy.owns_lock()) {
      job(0);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (workers_.size() + 1 < n) {
        const unsigned index = static_cast<unsigned>(workers_.size()) + 1;
        workers_.emplace_back([this, index] { work(index); });
      }
      job_ = &job;
      wanted_ = n;
      pending_ = n - 1;
      ++generation_;
    }
    wake_.notify_all();
    job(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
  }

  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  ~thread_pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

 private:
  thread_pool() = default;

  void work(unsigned index) {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= wanted_) continue;
      const auto* job = job_;
      lock.unlock();
      (*job)(index);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex run_mutex_;  // one parallel run at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(unsigned)>* job_ = nullptr;
  std::uint64_t generation_ = 0;
  unsigned wanted_ = 0, pending_ = 0;
  bool stop_ = false;
};

inline void parallel_run(unsigned n, const std::function<void(unsigned)>& job) {
#ifdef _OPENMP
  if (n > 1 && !omp_in_parallel()) {
#pragma omp parallel num_threads(static_cast<int>(n))
    job(static_cast<unsigned>(omp_get_thread_num()));
    return;
  }
  job(0);
#else
  thread_pool::instance().run(n, job);
#endif
}

}  // namespace attnx::kernels::detail
