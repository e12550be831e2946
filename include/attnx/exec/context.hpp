// attnx: the execution context. Everything that decides HOW an expression is computed at run time,
// and nothing about WHAT is computed:
//
//   threads       threads per evaluation: the caller plus up to threads - 1 pool workers
//                 (0: every CPU this process may use; above exec::max_threads(): clamped to it)
//   isa           the instruction set of the kernels (default: the best this CPU has; a set the CPU
//                 lacks is refused with std::invalid_argument)
//   fused         whether attention expressions go to the fused kernel (off: row by row, for comparisons)
//   blocked_gemm  whether products use the blocked GEMM (off: the row-by-row axpy loop)
//
//   attnx::context fast;  fast.set_threads(2);
//   attnx::tensor<float, L, D> o = attnx::evaluate(attention(Q, K, V), fast);   // or
//   attnx::assign(o, attention(Q, K, V), fast);                                // or, for a whole block:
//   { attnx::context_scope use(fast); o = attention(Q, K, V); y = mha.forward(x); }
//
// An evaluation without a context uses the current thread's scope, else default_context(): the
// process-wide default, whose ISA and thread count can also be set from the environment (ATTNX_ISA =
// scalar | avx2 | avx512, ATTNX_THREADS = n) and whose settings attnx::set_threads etc. change.
// Contexts are cheap objects; settings are atomics, so one context may be changed while other threads
// evaluate with it (they see the old or the new value, per evaluation). Each context also counts what its
// evaluations did (fused_runs, gemm_blocks), for tests and benchmarks.
#pragma once

#include <cstddef>
#include <string_view>
#include <type_traits>

#include "attnx/config.hpp"
#include "attnx/util/algorithm.hpp"
#include "attnx/exec/atomic.hpp"
#include "attnx/exec/thread_pool.hpp"
#include "attnx/simd/isa.hpp"

namespace attnx {

// How expressions are computed at run time: threads, instruction set, fused kernel, blocked GEMM (above).
class context {
  using enum exec::detail::memory_order;  // every setting and counter is relaxed: memory_order_relaxed

 public:
  // All CPUs, the best instruction set, fused kernel and blocked GEMM on.
  context() noexcept : isa_(simd::best_supported()) {}
  // Copies the settings; the counters start at 0.
  context(const context& o) noexcept
      : threads_(o.threads_.load(memory_order_relaxed)),
        isa_(o.isa_.load(memory_order_relaxed)),
        fused_(o.fused_.load(memory_order_relaxed)),
        gemm_(o.gemm_.load(memory_order_relaxed)) {}
  context& operator=(const context& o) noexcept {
    threads_.store(o.threads_.load(memory_order_relaxed), memory_order_relaxed);
    isa_.store(o.isa_.load(memory_order_relaxed), memory_order_relaxed);
    fused_.store(o.fused_.load(memory_order_relaxed), memory_order_relaxed);
    gemm_.store(o.gemm_.load(memory_order_relaxed), memory_order_relaxed);
    return *this;
  }

  // The default context's settings as the environment gives them: ATTNX_ISA (refused with
  // std::invalid_argument when unknown or when the CPU lacks it) and ATTNX_THREADS (a count >= 0).
  static context from_environment();

  // "scalar", "avx2" or "avx512", and only one this CPU has.
  static simd::isa parse_isa(std::string_view s, std::string_view what = "isa");

  // Threads per evaluation, as it will run: 1 .. exec::max_threads().
  unsigned threads() const noexcept {
    const unsigned n = threads_.load(memory_order_relaxed);
    const unsigned m = exec::max_threads();
    return n == 0 ? m : alg::min(n, m);
  }
  // 0: all; more than exec::max_threads(): clamped to it (threads() tells).
  context& set_threads(unsigned n) noexcept {
    threads_.store(n, memory_order_relaxed);
    return *this;
  }

  simd::isa isa() const noexcept { return isa_.load(memory_order_relaxed); }
  context& set_isa(simd::isa i) {
    check_isa(i, "set_isa");
    isa_.store(i, memory_order_relaxed);
    return *this;
  }

  bool fused() const noexcept { return fused_.load(memory_order_relaxed); }
  context& set_fused(bool on) noexcept {
    fused_.store(on, memory_order_relaxed);
    return *this;
  }

  bool blocked_gemm() const noexcept { return gemm_.load(memory_order_relaxed); }
  context& set_blocked_gemm(bool on) noexcept {
    gemm_.store(on, memory_order_relaxed);
    return *this;
  }

  // What evaluations with this context did: fused kernel runs, and row blocks of the blocked GEMM.
  std::size_t fused_runs() const noexcept { return fused_runs_.load(memory_order_relaxed); }
  std::size_t gemm_blocks() const noexcept { return gemm_blocks_.load(memory_order_relaxed); }
  void count_fused_run() const noexcept { fused_runs_.fetch_add(1, memory_order_relaxed); }
  void count_gemm_blocks(std::size_t n) const noexcept { gemm_blocks_.fetch_add(n, memory_order_relaxed); }

 private:
  static void check_isa(simd::isa i, std::string_view what);

  exec::detail::atomic<unsigned> threads_{0};
  exec::detail::atomic<simd::isa> isa_;
  exec::detail::atomic<bool> fused_{true};
  exec::detail::atomic<bool> gemm_{true};
  mutable exec::detail::atomic<std::size_t> fused_runs_{0};
  mutable exec::detail::atomic<std::size_t> gemm_blocks_{0};
};

// The process-wide default, read from the environment on first use (an invalid ATTNX_ISA or
// ATTNX_THREADS throws std::invalid_argument from here, i.e. from the first evaluation, every time).
context& default_context();

// Settings of the default context.
void set_threads(unsigned n);

// The context of evaluations on this thread: the innermost context_scope, else the default.
const context& current_context();

// Evaluations on this thread use ctx until the scope ends (scopes nest). The context must outlive it.
class context_scope {
 public:
  explicit context_scope(const context& ctx) noexcept;
  ~context_scope();
  context_scope(const context_scope&) = delete;
  context_scope& operator=(const context_scope&) = delete;

 private:
  const context* previous_;
};

namespace exec {

// Element loops shorter than this stay on the calling thread (handing work to another costs more than the work).
inline constexpr std::size_t parallel_min_elements = std::size_t(1) << 16;

// body(i, slot) for every i in [0, count), on up to `slots` threads (the caller is slot 0; each slot is
// one thread, so per-slot scratch indexed by slot needs no locking). Items are handed out in order
// from a shared counter: put the longest first for balance. Returns the number of slots that ran.
template <class Body>
unsigned parallel_for(std::size_t count, unsigned slots, Body&& body) {
  slots = static_cast<unsigned>(alg::min<std::size_t>(alg::max(1u, slots), count));
  if (slots <= 1) {
    for (std::size_t i = 0; i < count; ++i) body(i, 0u);
    return 1;
  }
  struct state {
    exec::detail::atomic<std::size_t> next{0};
    std::size_t count;
    std::remove_reference_t<Body>* body;
  } s{{}, count, &body};
  return thread_pool::instance().run(
      slots,
      [](void* arg, unsigned slot) {
        auto& st = *static_cast<state*>(arg);
        for (std::size_t i; (i = st.next.fetch_add(1, detail::memory_order_relaxed)) < st.count;) (*st.body)(i, slot);
      },
      &s);
}

}  // namespace exec
}  // namespace attnx

#if ATTNX_HEADER_ONLY
#include "attnx/exec/impl/context.hpp"
#endif
