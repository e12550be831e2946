// attnx benchmarks: decoding, a few query rows against a long cache of keys and values (docs/benchmarks.md).
//   BM_read/threads:T                 the memory-bandwidth floor: a vectorised read of a buffer several
//                                     times the last-level cache, on T threads (bytes per second)
//   BM_decode/<fp32|bf16|f16>/H/Lq/Lk/threads   kernels::flash_attention on one batch item, H heads (= KV
//                                     heads), d = 128, the decode kernel (Lq <= 16); K and V rotated over
//                                     enough copies that each iteration reads them from memory
//   BM_unfused/H/Lq/Lk/threads        the same with OpenBLAS: S = Q K^T (sgemm), row softmax, S V (sgemm)
//   BM_pair_<bf16|f16>/H/Lq/Lk/threads/min_time:1.000  fp32 and 16-bit K/V on the same cell in alternation (L_k
//                                     >= 16384): the 16-bit speed-up measured under the same conditions (see pair
//                                     and pair_args below)
//   BM_gqa_<fp32|bf16>/H/G/Lq/Lk/threads   the same with H query heads over G KV heads (GQA: H / G query heads
//                                     a KV head, so L_q 1 and 2 give 4 and 8 rows a KV head at H 32, G 8); bytes
//                                     2 G Lk d, no target of issue 11 (reported beside them)
//   BM_fma/threads:T                  the arithmetic ceiling: register-resident FMA chains on T threads
//                                     (FLOPS_PEAK, floating-point operations per second; fma_now)
// Counters: BYTES = bytes of K and V read per second (the bandwidth-floor comparison), FLOPS = 4 H Lq Lk d
// per second, FLOOR (decode cells) = the read bandwidth measured on the same threads just before and after
// the cell (bytes per second; the floor docs/benchmarks.md uses), FMA_PEAK (decode cells) = the FMA rate
// measured the same way (operations per second); FP32_MS, HALF_MS, X_FP32 (pair cells). Wall
// time (UseRealTime) throughout.
// ATTNX_BENCH_DECODE_TUNING=<family> (0, 0x19 or 0x1a: any CPU but AMD's, AMD Zen 4, Zen 5) runs the decode kernel
// tuned for that CPU family instead of this one (kernels::detail::decode_tuning: the same bits, other loops and
// prefetches), so that the tunings can be compared on one host.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <cblas.h>
#include <unistd.h>

#include "attnx/attnx.hpp"
#include "attnx/kernels/tuning.hpp"
#include "bench_common.hpp"
#include "fma_peak.hpp"
#include "read_floor.hpp"

namespace {

using bench::llc_bytes;
using bench::read_buffer;
constexpr std::size_t d = 128;
void read_pass(const float* buf, std::size_t n, unsigned threads) {
  benchmark::DoNotOptimize(bench::read_pass(buf, n, threads));
}

const bool tuning_from_environment = [] {
  const char* f = std::getenv("ATTNX_BENCH_DECODE_TUNING");
  if (f && *f) {
    char* end = nullptr;
    const long family = std::strtol(f, &end, 0);
    const auto& known = attnx::kernels::detail::decode_families;
    if (*end != '\0' || std::find(std::begin(known), std::end(known), family) == std::end(known)) {
      std::fprintf(stderr, "ATTNX_BENCH_DECODE_TUNING=%s: expected 0, 0x19 or 0x1a (kernels::detail::decode_families)\n", f);
      std::exit(2);
    }
    attnx::kernels::detail::decode_tuning().store(static_cast<int>(family));
  }
  benchmark::AddCustomContext("decode_tuning", f && *f ? f : "this CPU's");
  return f && *f;
}();

void BM_read(benchmark::State& state) {
  const auto threads = unsigned(state.range(0));
  const auto& buf = read_buffer();
  for (auto _ : state) read_pass(buf.data(), buf.size(), threads);
  state.counters["BYTES"] = benchmark::Counter(double(buf.size() * sizeof(float)), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}

// The read bandwidth (bytes per second) on `threads` threads just before or after a decode measurement: this
// machine's bandwidth moves by up to 2x within minutes (a shared VM), so each decode cell carries its own
// floor (counter FLOOR, the mean of one read before and one after its timed loop) besides BM_read's.
double floor_now(unsigned threads) {
  const auto& buf = read_buffer();
  const auto t0 = std::chrono::steady_clock::now();
  read_pass(buf.data(), buf.size(), threads);
  return double(buf.size() * sizeof(float)) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- the arithmetic floor ----------------------------------------------------------------------------
// The FMA rate (floating-point operations per second) on `threads` threads, register-resident (bench/fma_peak.hpp):
// the best of three short passes (2^17 x 16 FMAs each, 0.4 ms on one core of the twenty-first session's Xeon at 177
// GFLOP/s), taken in the same seconds as the cell. Beside the read bandwidth, the other limit of a decode cell
// (counter FMA_PEAK, measured like FLOOR just before and after each cell). The kernel does 4 d floating-point operations per
// query row and key (2 d for the dot, 2 d for the values: counter FLOPS), so four rows of 16-bit K and V ask 4
// operations per byte read, four rows of fp32 2, one row 1 (16-bit) or 0.5 (fp32): which limit binds depends on the
// rows and on the machine's FMA rate per byte of read bandwidth.
double fma_now(unsigned threads) {
  const bool wide = attnx::simd::cpu_supports(attnx::simd::isa::avx512);
  constexpr long inner = 1 << 17;
  std::vector<double> sink(threads), flops(threads);  // each thread its own
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    attnx::exec::parallel_for(threads, threads, [&](std::size_t t, unsigned) { flops[t] = bench::fma_pass(wide, inner, sink[t]); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, std::accumulate(flops.begin(), flops.end(), 0.0) / s);
  }
  benchmark::DoNotOptimize(sink.data());
  return best;
}

void BM_fma(benchmark::State& state) {
  const auto threads = unsigned(state.range(0));
  double rate = 0;
  for (auto _ : state) rate = fma_now(threads);
  state.counters["FLOPS_PEAK"] = rate;
  state.counters["threads"] = threads;
}

// ---- the decode kernel -------------------------------------------------------------------------------
// K and V copies are slices of one pool per element size, filled once per process (uniform in [-1, 1),
// 16-bit values as f16 bits, which are finite as bf16 too): 3x the last-level cache and at least two copies
// of the largest problem, so that consecutive iterations read memory, not cache. The pool is 64-byte aligned
// like attnx's KV cache, and every copy, K and V start at a multiple of 64 bytes (rows of d = 128 elements):
// with rows off by 16 bytes (std::vector's alignment) one fp32 row read at 85-86% of the floor instead of 94%
// and four rows at 54-62% instead of 64-65% (harness, alternated rounds, 2026-11-25).
constexpr std::size_t largest = 2 * 32 * 65536 * d;  // elements of K and V at H 32, L_k 65536
template <class KV>
const attnx::storage<KV, attnx::dyn>& pool() {
  static const attnx::storage<KV, attnx::dyn> p = [] {
    const std::size_t n = std::max(3 * llc_bytes() / sizeof(KV), 2 * largest);
    attnx::storage<KV, attnx::dyn> v(attnx::uninitialized, n);
    std::uint32_t g = 7;
    for (std::size_t i = 0; i < n; ++i) {
      KV& x = v[i];
      g ^= g << 13;
      g ^= g >> 17;
      g ^= g << 5;
      const float f = float(g >> 8) * (2.0f / 16777216.0f) - 1.0f;
      if constexpr (std::is_same_v<KV, float>) {
        x = f;
      } else {
        x = KV::from_bits(attnx::f16(f).bits);
      }
    }
    return v;
  }();
  return p;
}
// The memory every cell reads, allocated (and filled) once per process in a fixed order before the first cell:
// first a settling block of 1.5 GiB that nothing reads, then the floor's buffer and the three pools: the first
// gigabyte or so a process allocates can read 10-20% slower than the rest, and a pool made by whichever cell came
// first in the interleaved order would read slower for the whole run. The cost: 10.5 GiB resident and some tens of
// seconds before main, for every invocation (filtered runs and --benchmark_list_tests too).
const bool memory_ready = [] {
  static const attnx::storage<float, attnx::dyn> settling = [] {
    attnx::storage<float, attnx::dyn> s(attnx::uninitialized, (std::size_t(3) << 29) / sizeof(float));
    std::fill_n(s.data(), s.size(), 1.0f);
    return s;
  }();
  benchmark::DoNotOptimize(settling.data());
  read_buffer();
  pool<float>();
  pool<attnx::bf16>();
  pool<attnx::f16>();
  benchmark::AddCustomContext("memory", "settled");
  return true;
}();

template <class KV>
struct cache_copies {
  std::size_t per, n;  // elements per copy (K then V), copies
  const KV* base;
  cache_copies(std::size_t h, std::size_t lk)
      : per(2 * h * lk * d), n(std::max<std::size_t>(2, pool<KV>().size() / per)), base(pool<KV>().data()) {}
  const KV* k(std::size_t c) const { return base + (c % n) * per; }
  const KV* v(std::size_t c) const { return k(c) + per / 2; }
};

const char* storage_name(attnx::kernels::kv_storage s) {
  return s == attnx::kernels::kv_storage::same ? "fp32" : s == attnx::kernels::kv_storage::bf16 ? "bf16" : "f16";
}

// One evaluation of the decode problem (H query heads over G KV heads, G = H but for the GQA cells; Lq rows, Lk
// keys) on copy r of c.
template <class KV>
void run_once(const cache_copies<KV>& c, std::size_t r, std::vector<float>& q, std::vector<float>& o, std::size_t H,
              std::size_t Lq, std::size_t Lk, unsigned threads, attnx::kernels::kv_storage storage, attnx::simd::isa isa,
              std::size_t G = 0) {
  const auto p = bench::decode_problem(q.data(), o.data(), c.k(r), c.v(r), H, Lq, Lk, d, storage, G);
  attnx::kernels::flash_attention(p, isa, threads);
  benchmark::DoNotOptimize(o.data());
  benchmark::ClobberMemory();
}

template <class KV>
void decode_cell(benchmark::State& state, attnx::kernels::kv_storage storage, std::size_t H, std::size_t G, std::size_t Lq,
                 std::size_t Lk, unsigned threads) {
  const cache_copies<KV> c(G, Lk);
  std::vector<float> q(H * Lq * d, 0.05f), o(H * Lq * d);
  const attnx::simd::isa isa = attnx::default_context().isa();
  std::size_t it = 0;
  const double before = floor_now(threads), fma_before = fma_now(threads);
  for (auto _ : state) run_once(c, it++ % c.n, q, o, H, Lq, Lk, threads, storage, isa, G);
  state.counters["BYTES"] = benchmark::Counter(double(2 * G * Lk * d * sizeof(KV)), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["FLOPS"] = benchmark::Counter(4.0 * double(H * Lq * Lk * d), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["copies"] = double(c.n);
  state.counters["FLOOR"] = (before + floor_now(threads)) / 2;
  state.counters["FMA_PEAK"] = (fma_before + fma_now(threads)) / 2;
  state.SetLabel(std::string(storage_name(storage)) + " " + std::string(attnx::simd::name(isa)));
}
template <class KV>
void decode(benchmark::State& state, attnx::kernels::kv_storage storage) {
  const auto H = std::size_t(state.range(0));
  decode_cell<KV>(state, storage, H, H, std::size_t(state.range(1)), std::size_t(state.range(2)), unsigned(state.range(3)));
}
template <class KV>
void gqa(benchmark::State& state, attnx::kernels::kv_storage storage) {
  decode_cell<KV>(state, storage, std::size_t(state.range(0)), std::size_t(state.range(1)), std::size_t(state.range(2)),
                  std::size_t(state.range(3)), unsigned(state.range(4)));
}

// The 16-bit targets compare two speeds. This host's bandwidth moves by up to 2x from minute to minute, so two
// cells timed minutes apart can differ more by the host than by the storage (a two-thread fp32 cell timed at 72
// GB/s against its neighbours' 45 read as 1.15x, 2026-11-25). BM_pair_<bf16|f16> times the fp32 and the 16-bit
// kernel on the same cell in alternation, one evaluation of each in turn (which goes first alternates), and
// reports the mean time of each (FP32_MS, HALF_MS) and X_FP32 = the fp32 time / the 16-bit time.
template <class KV>
void pair(benchmark::State& state, attnx::kernels::kv_storage storage) {
  const auto H = std::size_t(state.range(0)), Lq = std::size_t(state.range(1)), Lk = std::size_t(state.range(2));
  const auto threads = unsigned(state.range(3));
  const cache_copies<float> cf(H, Lk);
  const cache_copies<KV> ch(H, Lk);
  std::vector<float> q(H * Lq * d, 0.05f), o(H * Lq * d);
  const attnx::simd::isa isa = attnx::default_context().isa();
  using clock = std::chrono::steady_clock;
  double tf = 0, th = 0;
  std::size_t it = 0;
  for (auto _ : state) {
    const auto full = [&] {
      const auto t0 = clock::now();
      run_once(cf, it % cf.n, q, o, H, Lq, Lk, threads, attnx::kernels::kv_storage::same, isa);
      tf += std::chrono::duration<double>(clock::now() - t0).count();
    };
    const auto half = [&] {
      const auto t0 = clock::now();
      run_once(ch, it % ch.n, q, o, H, Lq, Lk, threads, storage, isa);
      th += std::chrono::duration<double>(clock::now() - t0).count();
    };
    if (it % 2 == 0) {
      full();
      half();
    } else {
      half();
      full();
    }
    ++it;
  }
  state.counters["FP32_MS"] = tf / double(it) * 1e3;
  state.counters["HALF_MS"] = th / double(it) * 1e3;
  state.counters["X_FP32"] = tf / th;
  state.SetLabel(std::string(storage_name(storage)) + " vs fp32, in alternation, " + std::string(attnx::simd::name(isa)));
}
void BM_decode_fp32(benchmark::State& s) { decode<float>(s, attnx::kernels::kv_storage::same); }
void BM_decode_bf16(benchmark::State& s) { decode<attnx::bf16>(s, attnx::kernels::kv_storage::bf16); }
void BM_decode_f16(benchmark::State& s) { decode<attnx::f16>(s, attnx::kernels::kv_storage::f16); }
void BM_gqa_fp32(benchmark::State& s) { gqa<float>(s, attnx::kernels::kv_storage::same); }
void BM_gqa_bf16(benchmark::State& s) { gqa<attnx::bf16>(s, attnx::kernels::kv_storage::bf16); }
void BM_pair_bf16(benchmark::State& s) { pair<attnx::bf16>(s, attnx::kernels::kv_storage::bf16); }
void BM_pair_f16(benchmark::State& s) { pair<attnx::f16>(s, attnx::kernels::kv_storage::f16); }

// ---- unfused: OpenBLAS ----------------------------------------------------------------------------------
void BM_unfused(benchmark::State& state) {
  const auto H = std::size_t(state.range(0)), Lq = std::size_t(state.range(1)), Lk = std::size_t(state.range(2));
  const auto threads = unsigned(state.range(3));
  const cache_copies<float> c(H, Lk);
  std::vector<float> q(H * Lq * d, 0.05f), o(H * Lq * d), S(Lq * Lk);
  openblas_set_num_threads(int(threads));
  const float scale = 1.0f / std::sqrt(float(d));
  std::size_t it = 0;
  for (auto _ : state) {
    const std::size_t r = it++ % c.n;
    for (std::size_t h = 0; h < H; ++h) {
      const float* k = c.k(r) + h * Lk * d;
      const float* v = c.v(r) + h * Lk * d;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(Lq), int(Lk), int(d), scale, q.data() + h * Lq * d, int(d), k,
                  int(d), 0.0f, S.data(), int(Lk));
      // bottom-right causal: row i sees keys j <= i + Lk - Lq
      for (std::size_t i = 0; i < Lq; ++i) bench::softmax_rows(S.data() + i * Lk, 1, Lk, Lk, true, i + Lk - Lq);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(Lq), int(d), int(Lk), 1.0f, S.data(), int(Lk), v, int(d),
                  0.0f, o.data() + h * Lq * d, int(d));
    }
    benchmark::ClobberMemory();
  }
  state.counters["BYTES"] = benchmark::Counter(double(2 * H * Lk * d * sizeof(float)), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["FLOPS"] = benchmark::Counter(4.0 * double(H * Lq * Lk * d), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(openblas_get_corename());
}

void decode_args(benchmark::internal::Benchmark* b) {
  for (long t : {1, 2})
    for (long H : {8, 32})
      for (long Lq : {1, 4})
        for (long Lk : {1024, 4096, 16384, 65536}) b->Args({H, Lq, Lk, t});
  b->ArgNames({"H", "Lq", "Lk", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

// The 16-bit targets' cells (L_k >= 16384), each repetition at least a second whatever --benchmark_min_time says:
// one pair (an fp32 and a 16-bit evaluation) takes 7-270 ms there, so at the 0.2 s of the documented command a
// repetition held one to four pairs at L_k 65536, and one cell's five repetitions spanned 1.66-1.98x (bf16, H 8,
// L_q 4, one thread, Intel Xeon, 2026-11-29: its median fell either side of 1.8x from run to run); at a second, 6
// to 208 pairs a repetition (the run of 2026-11-29 06:44).
void pair_args(benchmark::internal::Benchmark* b) {
  for (long t : {1, 2})
    for (long H : {8, 32})
      for (long Lq : {1, 4})
        for (long Lk : {16384, 65536}) b->Args({H, Lq, Lk, t});
  b->ArgNames({"H", "Lq", "Lk", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
}

// GQA as Llama-style models have it: 32 query heads over 8 KV heads; L_q 1 (a decoding step: 4 rows a KV head) and 2
// (two draft tokens: 8 rows a KV head, the eight-row loop for fp32).
void gqa_args(benchmark::internal::Benchmark* b) {
  for (long t : {1, 2})
    for (long Lq : {1, 2})
      for (long Lk : {4096, 16384, 65536}) b->Args({32, 8, Lq, Lk, t});
  b->ArgNames({"H", "G", "Lq", "Lk", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_read)->Arg(1)->Arg(2)->ArgName("threads")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_fma)->Arg(1)->Arg(2)->ArgName("threads")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_decode_fp32)->Apply(decode_args);
BENCHMARK(BM_decode_bf16)->Apply(decode_args);
BENCHMARK(BM_decode_f16)->Apply(decode_args);
BENCHMARK(BM_unfused)->Apply(decode_args);
BENCHMARK(BM_gqa_fp32)->Apply(gqa_args);
BENCHMARK(BM_gqa_bf16)->Apply(gqa_args);
BENCHMARK(BM_pair_bf16)->Apply(pair_args);
BENCHMARK(BM_pair_f16)->Apply(pair_args);

}  // namespace

BENCHMARK_MAIN();
