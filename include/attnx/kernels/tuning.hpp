// attnx kernels: which CPU family the decode kernel tunes for, and the hook that lets tests and benchmarks run
// another family's tuning on this CPU.
#pragma once

#include "attnx/exec/sync.hpp"
#include "attnx/simd/isa.hpp"

namespace attnx::kernels::detail {

// The CPU the decode kernel tunes for: simd::amd_family() (0 for any CPU but AMD's), unless a test has set
// another family with decode_tuning() (-1, the default: this CPU's). The kernel chooses by it only between
// measured tunings that give the same bits (its prefetches; the loop taken by three or four fp32 rows, and by three
// or four 16-bit rows on Zen 5, where only the sign of a zero output can differ: decode_tile.inc), so that a test
// can run every tuning on any host and compare their results. Read at every call (a relaxed load); meant for tests
// and benchmarks, not for tuning.
inline exec::detail::atomic<int>& decode_tuning() noexcept {
  static exec::detail::atomic<int> family{-1};
  return family;
}
// The families the decode kernel has tunings for: any CPU but AMD's (0), AMD Zen 3 / Zen 4 (0x19), Zen 5 (0x1a).
inline constexpr int decode_families[] = {0, 0x19, 0x1a};
inline unsigned decode_family() noexcept {
  const int f = decode_tuning().load(exec::detail::memory_order_relaxed);
  return f < 0 ? simd::amd_family() : static_cast<unsigned>(f);
}

}  // namespace attnx::kernels::detail
