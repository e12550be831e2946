// attnx benchmarks: attention variants as a user writes them, against plain causal attention in the same run.
//   BM_variant/<name>/L     attention(Q, K, V, mask...) of one head, d = 64, float, one thread, assigned to a tensor
//     causal                 causal
//     window                 sliding_window(256)                           (the kernel skips the tiles outside)
//     window_bool            causal, allowed(M), M the same window as an L x L bool tensor (every tile computed)
//     documents              causal, documents(5 equal documents)          (packed sequences)
//     documents_bidir        documents(5 equal documents)
//     prefix_lm              prefix_lm(L / 4)
//     chunked                causal, chunked(1024)
//     block_sparse           allowed(M), M blocks of 256 x 256 keys, a quarter of them open (the diagonal ones
//                            among them): 75% of the tiles blocked, skipped from the mask's tile summary
//     softcap                softcap(30), causal                         (Gemma 2: c tanh(S / c) in the kernel)
//     alibi                  causal, alibi()                             (BLOOM, MPT: the linear bias in the kernel)
//   and the same kinds written as functions of the position (tile_function steps, compiled here):
//     rel_bias               causal, S + index_select(rel, k_pos - q_pos + 255), a table of 511 (T5's relative bias)
//     alibi_fn               causal, S - 1/16 (q_pos - k_pos)            (ALiBi written out)
//     window_fn              mask_fn(q_pos >= k_pos && q_pos - k_pos < 256)
//     softcap_fn             score_mod(30 tanh(s / 30)) with std::tanh, causal
//     block_sparse_fn        mask_fn(open[i / 256][j / 256]): block_sparse's pattern as a function
//     block_sparse_summary   allowed(block_mask(M)), block_sparse's M with its summary made once, outside the loop
//     sinks                  causal, sinks(t)                              (gpt-oss: a logit in every row's softmax)
//   BM_decode_variant/<name>/L  one new token over a cache of L keys: full, or sliding_window(256)
//   BM_fma_peak              this core's FMA peak, for the ratio
// Counter "rel" is not set here: scripts/bench_report.py divides each time by causal's of the same L.
#include <array>
#include <cmath>
#include <memory>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "attnx/attnx.hpp"
#include "fma_peak.hpp"

namespace {

using attnx::dyn;
constexpr std::size_t d = 64;
using mat = attnx::tensor<float, dyn, d>;

void fill(mat& t, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd;
  for (auto& v : t) v = nd(g);
}

enum class variant {
  causal, window, window_bool, documents, documents_bidir, prefix_lm, chunked, block_sparse, softcap, alibi,
  rel_bias, alibi_fn, window_fn, softcap_fn, block_sparse_fn, block_sparse_summary, sinks
};
constexpr std::array names{"causal",  "window",       "window_bool", "documents", "documents_bidir", "prefix_lm",
                           "chunked", "block_sparse", "softcap",     "alibi",     "rel_bias",        "alibi_fn",
                           "window_fn", "softcap_fn", "block_sparse_fn", "block_sparse_summary", "sinks"};

void BM_fma_peak(benchmark::State& state) { bench::fma_peak_benchmark(state); }

// The timed loop: e assigned to o on one thread; an error when the fused kernel did not run.
template <class E>
void time_into(benchmark::State& state, mat& o, const E& e) {
  attnx::context ctx;
  ctx.set_threads(1);
  for (auto _ : state) {
    attnx::assign(o, e, ctx);
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
  if (ctx.fused_runs() == 0) state.SkipWithError("the fused path was not taken");
}

void BM_variant(benchmark::State& state) {
  const auto v = static_cast<variant>(state.range(0));
  const auto L = static_cast<std::size_t>(state.range(1));
  mat q(L), k(L), val(L), o(L);
  fill(q, 1), fill(k, 2), fill(val, 3);
  std::vector<std::size_t> offs;
  for (std::size_t i = 0; i <= 5; ++i) offs.push_back(L * i / 5);
  attnx::tensor<bool, dyn, dyn> m(L, L);
  const std::size_t nb = L / 256;  // block_sparse: the diagonal blocks and others up to a quarter of all
  std::vector<bool> open(nb * nb);
  for (std::size_t n = 0, opened = 0; n < nb * nb; ++n)
    open[n] = n / nb == n % nb || (opened < nb * nb / 4 - nb && (n * 7919) % 3 == 0 && ++opened);
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t j = 0; j < L; ++j)
      m(i, j) = v == variant::block_sparse || v == variant::block_sparse_summary ? bool(open[(i / 256) * nb + j / 256])
                                                                                 : j <= i && j + 256 > i;
  std::unique_ptr<bool[]> open_blocks(new bool[nb * nb]);
  for (std::size_t n = 0; n < nb * nb; ++n) open_blocks[n] = open[n];
  attnx::tensor<float, 511> rel;
  for (std::size_t n = 0; n < 511; ++n) rel(n) = 0.5f * std::sin(0.05f * float(n));
  const auto run = [&](const auto& e) { time_into(state, o, e); };
  switch (v) {
    case variant::causal: run(attnx::attention(q, k, val, attnx::causal)); break;
    case variant::window: run(attnx::attention(q, k, val, attnx::sliding_window(256))); break;
    case variant::window_bool: run(attnx::attention(q, k, val, attnx::causal, attnx::allowed(m))); break;
    case variant::documents: run(attnx::attention(q, k, val, attnx::causal, attnx::documents(offs))); break;
    case variant::documents_bidir: run(attnx::attention(q, k, val, attnx::documents(offs))); break;
    case variant::prefix_lm: run(attnx::attention(q, k, val, attnx::prefix_lm(L / 4))); break;
    case variant::chunked: run(attnx::attention(q, k, val, attnx::causal, attnx::chunked(1024))); break;
    case variant::block_sparse: run(attnx::attention(q, k, val, attnx::allowed(m))); break;
    case variant::softcap: run(attnx::attention(q, k, val, attnx::softcap(30.f), attnx::causal)); break;
    case variant::alibi: run(attnx::attention(q, k, val, attnx::causal, attnx::alibi())); break;
    case variant::rel_bias:
      run(attnx::softmax(attnx::mask(attnx::scaled_scores(q, k) + attnx::index_select(rel, attnx::k_pos - attnx::q_pos + 255),
                                     attnx::causal)) * val);
      break;
    case variant::alibi_fn:
      run(attnx::softmax(attnx::mask(attnx::scaled_scores(q, k) - 0.0625f * (attnx::q_pos - attnx::k_pos), attnx::causal)) * val);
      break;
    case variant::window_fn:
      run(attnx::attention(q, k, val, attnx::mask_fn(attnx::q_pos >= attnx::k_pos && attnx::q_pos - attnx::k_pos < 256)));
      break;
    case variant::softcap_fn:
      run(attnx::attention(q, k, val, attnx::score_mod([](float s, auto, auto, auto, auto) { return 30.f * std::tanh(s / 30.f); }),
                           attnx::causal));
      break;
    case variant::block_sparse_summary: {
      const attnx::block_mask bm(m);
      run(attnx::attention(q, k, val, attnx::allowed(bm)));
      break;
    }
    case variant::sinks: {
      attnx::tensor<float, 1> t;
      t(0) = 1.5f;
      run(attnx::attention(q, k, val, attnx::causal, attnx::sinks(t)));
      break;
    }
    case variant::block_sparse_fn: {
      const bool* blocks = open_blocks.get();
      run(attnx::attention(q, k, val, attnx::mask_fn([blocks, nb](std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t i, std::ptrdiff_t j) {
        return blocks[std::size_t(i / 256) * nb + std::size_t(j / 256)];
      })));
      break;
    }
  }
  state.counters["L"] = double(L);
  state.SetLabel(names[static_cast<std::size_t>(v)]);
}

void BM_decode_variant(benchmark::State& state) {
  const bool window = state.range(0) != 0;
  const auto L = static_cast<std::size_t>(state.range(1));
  mat q(1), k(L), val(L), o(1);
  fill(q, 1), fill(k, 2), fill(val, 3);
  const auto run = [&](const auto& e) { time_into(state, o, e); };
  if (window) run(attnx::attention(q, k, val, attnx::sliding_window(256)));
  else run(attnx::attention(q, k, val));
  state.counters["L"] = double(L);
  state.SetLabel(window ? "window" : "full");
}

}  // namespace

BENCHMARK(BM_fma_peak)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_variant)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1024, 4096}})
    ->ArgNames({"variant", "L"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_decode_variant)->ArgsProduct({{0, 1}, {4096, 32768}})->ArgNames({"window", "L"})->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
