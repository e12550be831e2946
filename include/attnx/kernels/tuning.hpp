// attnx kernels: the decode kernel's choices that depend on the CPU, as data. One row per CPU family, chosen once per
// call from cpuid (simd::amd_family()); the loops read the row and never ask which CPU they run on. Every choice here
// is between loops or prefetches that give the same bits (but for the sign of a zero output, see four_rows), so that
// a test can run every row on any CPU and compare: decode_tuning() sets the family a process tunes for.
// How the values were found: bench/NOTES.md; the figures they give: docs/benchmarks-decode.md.
#pragma once

#include <cstddef>

#include "attnx/exec/atomic.hpp"
#include "attnx/simd/isa.hpp"

namespace attnx::kernels::detail {

// few_rows' prefetch of the K and V rows it will read: none, into L1 a few keys on, or into L2 further on.
enum class row_prefetch : unsigned char { none, l1_near, l2_far };

struct decode_cpu_tuning {
  unsigned family;  // the CPU family of this row: 0 any CPU but AMD's, 0x19 AMD Zen 3 / Zen 4, 0x1a AMD Zen 5
  // Three or four fp32 rows at d_k = d_v = 128: four keys a step (four_rows), which reads faster where the hardware
  // prefetcher follows its interleaved reads (Intel), or one key a step with rows read whole (few_rows, AMD).
  bool fp32_four_keys;
  row_prefetch fp32_four_rows_prefetch;  // few_rows' prefetch for four fp32 rows (three rows take none)
  // Three or four 16-bit rows at d 128: few_rows with an L1 prefetch (Zen 5, where four_rows' reads fall behind)
  // instead of four_rows.
  bool kv16_few_rows;
  // One 16-bit row: the K and V rows prefetched into L1 a few keys on and into L2 further on (Intel; on AMD a loss).
  bool kv16_one_row_prefetch;
  // Five to eight rows at d 128: the prefetch of the first pass over each block (rows 0-3, from memory).
  row_prefetch passes_prefetch;
};

inline constexpr decode_cpu_tuning decode_tunings[] = {
    {0, true, row_prefetch::l2_far, false, true, row_prefetch::l2_far},
    {0x19, false, row_prefetch::l2_far, false, false, row_prefetch::l2_far},
    {0x1a, false, row_prefetch::l1_near, true, false, row_prefetch::l1_near},
};

// The families that have a row of their own: any CPU but AMD's (0), AMD Zen 3 / Zen 4 (0x19), Zen 5 (0x1a).
inline constexpr int decode_families[] = {0, 0x19, 0x1a};

// The family the decode kernel tunes for: this CPU's (simd::amd_family()) unless a test or benchmark has stored
// another with decode_tuning().store(family) (-1, the default: this CPU's). Read at every call (a relaxed load).
inline exec::detail::atomic<int>& decode_tuning() noexcept {
  static exec::detail::atomic<int> family{-1};
  return family;
}
inline unsigned decode_family() noexcept {
  const int f = decode_tuning().load(exec::detail::memory_order_relaxed);
  return f < 0 ? simd::amd_family() : static_cast<unsigned>(f);
}
// The row for a family: its own, or, for an AMD family without one, Zen 3 / Zen 4's.
constexpr const decode_cpu_tuning& decode_tuning_for(unsigned family) noexcept {
  for (const decode_cpu_tuning& t : decode_tunings)
    if (t.family == family) return t;
  return decode_tuning_for(0x19);
}

}  // namespace attnx::kernels::detail
