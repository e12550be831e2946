// attnx benchmarks: wall-clock speed-up of the fused kernel from 1 to 2 threads, measured as
// the best of many alternating runs (1 thread, 2 threads, 1 thread, ...), so that a moment when
// both cores are free is caught even on a machine shared with other work.
// Usage: attnx_scaling_probe L d causal rounds   -> one JSON object per line
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "bench_common.hpp"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s L d causal rounds\n", argv[0]);
    return 2;
  }
  const std::size_t L = std::strtoul(argv[1], nullptr, 10), d = std::strtoul(argv[2], nullptr, 10);
  const bool causal = std::atoi(argv[3]) != 0;
  const int rounds = std::atoi(argv[4]);
  bench::qkv x(L, d);
  double best[3] = {1e300, 1e300, 1e300};
  for (int r = 0; r < rounds; ++r)
    for (unsigned t = 1; t <= 2; ++t) {
      const auto p = bench::problem(x, causal);
      const auto t0 = std::chrono::steady_clock::now();
      attnx::kernels::flash_attention(p, attnx::default_context().isa(), t);
      best[t] = std::min(best[t], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  std::printf("{\"L\": %zu, \"d\": %zu, \"causal\": %d, \"rounds\": %d, \"best_1t_s\": %.6g, \"best_2t_s\": %.6g, "
              "\"speedup\": %.3f}\n",
              L, d, int(causal), rounds, best[1], best[2], best[1] / best[2]);
}
