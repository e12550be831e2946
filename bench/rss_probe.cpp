// attnx benchmarks: peak resident memory of one attention evaluation, fused or unfused, in a
// process of its own. Usage: attnx_rss_probe fused|unfused L d [threads]
// Prints one JSON object: the peak RSS after the inputs and output are allocated and touched,
// the peak RSS after the evaluation, and their difference (the evaluation's extra memory).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cblas.h>

#include "bench_common.hpp"

namespace {
long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;  // KiB on Linux
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || (std::strcmp(argv[1], "fused") != 0 && std::strcmp(argv[1], "unfused") != 0)) {
    std::fprintf(stderr, "usage: %s fused|unfused L d [threads]\n", argv[0]);
    return 2;
  }
  const bool fused = std::strcmp(argv[1], "fused") == 0;
  const std::size_t L = std::strtoul(argv[2], nullptr, 10), d = std::strtoul(argv[3], nullptr, 10);
  const unsigned threads = argc > 4 ? unsigned(std::strtoul(argv[4], nullptr, 10)) : 1;
  bench::qkv x(L, d);  // inputs and output, written, so resident
  const long before = peak_rss_kib();
  const auto t0 = std::chrono::steady_clock::now();
  if (fused) {
    attnx::kernels::flash_attention(bench::problem(x, false), attnx::default_context().isa(), threads);
  } else {
    openblas_set_num_threads(int(threads));
    std::vector<float> S(L * L);
    const int n = int(L), dd = int(d);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, dd, x.scale(), x.q.data(), dd, x.k.data(), dd, 0.0f,
                S.data(), n);
    bench::softmax_rows(S.data(), L, L, L, false);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dd, n, 1.0f, S.data(), n, x.v.data(), dd, 0.0f,
                x.o.data(), dd);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long after = peak_rss_kib();
  double checksum = 0;
  for (float v : x.o) checksum += v;
  std::printf(
      "{\"impl\": \"%s\", \"L\": %zu, \"d\": %zu, \"threads\": %u, \"rss_with_inputs_kib\": %ld, "
      "\"rss_peak_kib\": %ld, \"extra_kib\": %ld, \"inputs_outputs_kib\": %zu, \"seconds\": %.3f, \"checksum\": %.6g}\n",
      argv[1], L, d, threads, before, after, after - before, 4 * L * d * sizeof(float) / 1024, seconds, checksum);
}
