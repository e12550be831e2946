// attnx benchmarks: how much of a decode loop's arithmetic this core hides under its K/V read stream.
//
// Synthetic loops read K and V rows of 128 floats (512 B each) key by key, as the decode kernel does, and add the
// kernel's work one part at a time; the attnx decode kernel itself (kernels::flash_attention, L_q 1 and 4) runs in
// the same alternation. Each figure is % of the read floor measured just before it (one vectorised stream over
// 512 MiB, as bench_decode's), median over the rounds, and ns per key; "L2" is the same loop over 256 keys that
// stay in L2 (best of 300), i.e. its time when memory costs nothing. H 8, L_k 16384, K and V rotated over
// 8 copies (512 MiB). One thread. bench/NOTES.md says what such probes are for.
//
// Usage: attnx_overlap_probe [rounds]   (AVX-512 machines only; prints a line per loop)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "attnx/attnx.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "bench_common.hpp"
#include "read_floor.hpp"

namespace {
using clk = std::chrono::steady_clock;
constexpr std::size_t d = 128, H = 8, Lk = 16384, copies = 8;
constexpr std::size_t per = 2 * H * Lk * d;  // floats of K and V per copy
volatile float sink;

alignas(64) float qbuf[4 * d];
alignas(64) float obuf[d];

// One head: keys rows of K (k) and V (v).
//   FMA: 64 FMAs per key (four rows' dots and values at d 128), else only the loads;
//   KERNEL: the four-row kernel's form: q of four rows read from L1 by the dots, the fourth row's outputs loaded
//     and stored in L1 at every key, K read 16 keys ahead of V, and every 16 keys a burst of 320 FMAs (8 chains,
//     about the instructions of the group's weighing);
//   PF: the kernel's prefetch: the K and V rows 16 keys on into L2, a line of each per turn of a rolled loop.
template <bool FMA, bool KERNEL, bool PF>
__attribute__((target("avx512f,fma"), noinline)) float synthetic(const float* k, const float* v, std::size_t keys) {
  __m512 o[24];
#pragma GCC unroll 24
  for (int i = 0; i < 24; ++i) o[i] = _mm512_setzero_ps();
  __m512 acc = _mm512_setzero_ps(), s = acc, s2 = acc;  // s, s2: the loads-only sums (K, V)
  const __m512 w0 = _mm512_set1_ps(0.001f), w1 = _mm512_set1_ps(0.002f), w2 = _mm512_set1_ps(0.003f),
               w3 = _mm512_set1_ps(0.004f);
  const std::size_t lag = KERNEL ? 16 : 0;
  for (std::size_t j = 0; j + lag < keys; ++j) {
    const float* kj = k + (j + lag) * d;
    const float* vj = v + j * d;
    const float* q = qbuf;
    __asm__("" : "+r"(q));
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      __m512 kv = _mm512_load_ps(kj + 16 * c);
      __asm__("" : "+v"(kv));
      if (!FMA) {
        s = _mm512_add_ps(s, kv);
      } else if (KERNEL) {
        a0 = _mm512_fmadd_ps(_mm512_load_ps(q + 16 * c), kv, a0);
        a1 = _mm512_fmadd_ps(_mm512_load_ps(q + d + 16 * c), kv, a1);
        a2 = _mm512_fmadd_ps(_mm512_load_ps(q + 2 * d + 16 * c), kv, a2);
        a3 = _mm512_fmadd_ps(_mm512_load_ps(q + 3 * d + 16 * c), kv, a3);
      } else {
        a0 = _mm512_fmadd_ps(w0, kv, a0);
        a1 = _mm512_fmadd_ps(w1, kv, a1);
        a2 = _mm512_fmadd_ps(w2, kv, a2);
        a3 = _mm512_fmadd_ps(w3, kv, a3);
      }
    }
    if (PF && j + lag + 16 < keys) {
      const char* kp = reinterpret_cast<const char*>(kj + 16 * d);
      const char* vp = reinterpret_cast<const char*>(vj + 16 * d);
      int n = 8;
      __asm__("" : "+r"(n));
      for (int l = 0; l < n; ++l, kp += 64, vp += 64) {
        __builtin_prefetch(kp, 0, 2);
        __builtin_prefetch(vp, 0, 2);
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      __m512 vv = _mm512_load_ps(vj + 16 * c);
      __asm__("" : "+v"(vv));
      if (!FMA) {
        s2 = _mm512_add_ps(s2, vv);
        continue;
      }
      o[c] = _mm512_fmadd_ps(w0, vv, o[c]);
      o[8 + c] = _mm512_fmadd_ps(w1, vv, o[8 + c]);
      o[16 + c] = _mm512_fmadd_ps(w2, vv, o[16 + c]);
      if (KERNEL)
        _mm512_store_ps(obuf + 16 * c, _mm512_fmadd_ps(w3, vv, _mm512_load_ps(obuf + 16 * c)));
      else
        o[c] = _mm512_fmadd_ps(w3, vv, o[c]);
    }
    acc = _mm512_add_ps(acc, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    if (KERNEL && (j & 15) == 15) {
      __m512 b[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) b[i] = _mm512_add_ps(acc, _mm512_set1_ps(float(i)));
#pragma GCC unroll 40
      for (int t = 0; t < 40; ++t) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) b[i] = _mm512_fmadd_ps(b[i], w0, w1);
      }
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) acc = _mm512_add_ps(acc, b[i]);
    }
  }
#pragma GCC unroll 24
  for (int i = 1; i < 24; ++i) o[0] = _mm512_add_ps(o[0], o[i]);
  float t[16];
  _mm512_storeu_ps(t, _mm512_add_ps(_mm512_add_ps(acc, _mm512_add_ps(s, s2)), o[0]));
  return t[0];
}

// The attnx decode kernel: L_q rows per head against keys keys of K and V at k and v (H heads), bottom-right causal.
std::vector<float> qs(H * 4 * d, 0.01f), os(H * 4 * d);
void kernel(const float* k, const float* v, std::size_t heads, std::size_t lq, std::size_t keys) {
  // (K and V rows of a head L_k apart, as the probe lays them out, whatever keys it reads)
  auto p = bench::decode_problem(qs.data(), os.data(), k, v, heads, lq, Lk, d);
  p.lk = keys;
  attnx::kernels::flash_attention(p, attnx::default_context().isa(), 1);
}

struct loop {
  const char* name;
  void (*run)(const float* k, const float* v, std::size_t heads, std::size_t keys);
};
template <bool FMA, bool KERNEL, bool PF>
void run_synthetic(const float* k, const float* v, std::size_t heads, std::size_t keys) {
  for (std::size_t h = 0; h < heads; ++h) sink = synthetic<FMA, KERNEL, PF>(k + h * Lk * d, v + h * Lk * d, keys);
}
template <std::size_t LQ>
void run_kernel(const float* k, const float* v, std::size_t heads, std::size_t keys) {
  kernel(k, v, heads, LQ, keys);
}
}  // namespace

int main(int argc, char** argv) {
  if (!__builtin_cpu_supports("avx512f")) {
    std::puts("attnx_overlap_probe: needs AVX-512 (the synthetic loops are written with it)");
    return 0;
  }
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 9;
  float* pool = static_cast<float*>(std::aligned_alloc(64, per * copies * sizeof(float)));
  for (std::size_t i = 0; i < per * copies; ++i) pool[i] = 0.001f * float(i % 97);
  const std::size_t rn = (std::size_t{512} << 20) / sizeof(float);
  float* rb = static_cast<float*>(std::aligned_alloc(64, rn * sizeof(float)));
  std::fill_n(rb, rn, 1.0f);
  const loop loops[] = {
      {"two streams, loads only", run_synthetic<false, false, false>},
      {"+ 64 register FMAs per key", run_synthetic<true, false, false>},
      {"+ the kernel's form, no prefetch", run_synthetic<true, true, false>},
      {"+ the kernel's form and prefetch", run_synthetic<true, true, true>},
      {"attnx kernel, L_q 1", run_kernel<1>},
      {"attnx kernel, L_q 4", run_kernel<4>},
  };
  constexpr std::size_t n = sizeof(loops) / sizeof(loops[0]);
  std::printf("%-36s %8s %16s %10s %10s\n", "loop", "% floor", "(range)", "ns/key", "L2 ns/key");
  std::vector<std::vector<double>> pct(n), nsk(n);
  std::size_t c = 0;
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t i = 0; i < n; ++i) {
      const auto t0 = clk::now();
      sink = bench::read512(rb, rn);
      const double bw = double(rn * sizeof(float)) / std::chrono::duration<double>(clk::now() - t0).count();
      double t = 0;
      for (int it = 0; it < 3; ++it, ++c) {
        const float* base = pool + (c % copies) * per;
        const auto t1 = clk::now();
        loops[i].run(base, base + per / 2, H, Lk);
        t += std::chrono::duration<double>(clk::now() - t1).count();
      }
      t /= 3;
      pct[i].push_back(double(per * sizeof(float)) / bw / t * 100);
      nsk[i].push_back(t / double(H * Lk) * 1e9);
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    double best = 1e9;
    for (int it = 0; it < 300; ++it) {
      const auto t1 = clk::now();
      loops[i].run(pool, pool + 256 * d, 1, 256);
      best = std::min(best, std::chrono::duration<double>(clk::now() - t1).count());
    }
    std::sort(pct[i].begin(), pct[i].end());
    std::sort(nsk[i].begin(), nsk[i].end());
    std::printf("%-36s %7.1f%% %7.1f-%6.1f%% %10.2f %10.2f\n", loops[i].name, pct[i][pct[i].size() / 2], pct[i].front(),
                pct[i].back(), nsk[i][nsk[i].size() / 2], best / 256 * 1e9);
  }
  std::free(rb);
  std::free(pool);
  return 0;
}
#else
int main() {
  std::puts("attnx_overlap_probe: x86-64 only");
  return 0;
}
#endif
