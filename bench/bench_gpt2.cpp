// GPT-2 (models::gpt2) tokens per second, prefill and decode, on 1 and 2 threads: the configuration of issue 12
// (4 layers, d_model 256, 8 heads, vocabulary 4096, context 256; random weights). PyTorch 1.13 runs the same model
// in scripts/bench_gpt2_torch.py; docs/benchmarks.md puts the two side by side.
//   BM_gpt2_prefill/threads:T   a 128-token prompt through the whole model (logits of every position)
//   BM_gpt2_decode/threads:T    one token at a time with the KV caches holding 128 to 191 tokens
#include <attnx/attnx.hpp>
#include <attnx/models/gpt2.hpp>
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

namespace {
using model = attnx::models::gpt2<float, 4096, 256, 256, 8, 4>;
constexpr std::size_t prompt_length = 128, decode_span = 64;

template <class Tn>
void fill(Tn& t, std::mt19937& g, float scale, float offset = 0) {
  std::normal_distribution<float> d(0, scale);
  for (std::size_t i = 0; i < t.numel(); ++i) t.data()[i] = offset + d(g);
}

const model& the_model() {
  static const std::unique_ptr<model> m = [] {
    auto p = std::make_unique<model>();
    std::mt19937 g(1);
    fill(p->wte.weight, g, 0.3f);
    fill(p->wpe, g, 0.3f);
    for (auto& b : p->h) {
      fill(b.ln_1.weight, g, 0.1f, 1), fill(b.ln_1.bias, g, 0.1f), fill(b.ln_2.weight, g, 0.1f, 1), fill(b.ln_2.bias, g, 0.1f);
      fill(b.attn.w_q, g, 0.06f), fill(b.attn.w_k, g, 0.06f), fill(b.attn.w_v, g, 0.06f), fill(b.attn.w_o, g, 0.06f);
      fill(b.attn.b_q, g, 0.02f), fill(b.attn.b_k, g, 0.02f), fill(b.attn.b_v, g, 0.02f), fill(b.attn.b_o, g, 0.02f);
      fill(b.mlp.up.weight, g, 0.06f), fill(b.mlp.up.bias, g, 0.02f), fill(b.mlp.down.weight, g, 0.03f), fill(b.mlp.down.bias, g, 0.02f);
    }
    fill(p->ln_f.weight, g, 0.1f, 1), fill(p->ln_f.bias, g, 0.1f);
    p->tie_lm_head();
    return p;
  }();
  return *m;
}

std::vector<std::int32_t> prompt() {
  std::vector<std::int32_t> ids(prompt_length);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t((i * 2654435761u) % model::vocab);
  return ids;
}

void BM_gpt2_prefill(benchmark::State& state) {
  attnx::context ctx;
  ctx.set_threads(unsigned(state.range(0)));
  const model& m = the_model();
  const auto ids = prompt();
  model::state s;
  for (auto _ : state) {
    s.reset();
    auto logits = m.step(ids, s, ctx);
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(double(prompt_length), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = double(state.range(0));
}

void BM_gpt2_decode(benchmark::State& state) {
  attnx::context ctx;
  ctx.set_threads(unsigned(state.range(0)));
  const model& m = the_model();
  const auto ids = prompt();
  model::state s;
  (void)m.step(ids, s, ctx);
  std::int32_t next = 7;
  for (auto _ : state) {
    if (s.length == prompt_length + decode_span) {  // back to the prompt: the caches hold 128 to 191 tokens
      state.PauseTiming();
      for (auto& c : s.caches) c.truncate(0, prompt_length);
      s.length = prompt_length;
      state.ResumeTiming();
    }
    auto logits = m.step(std::span<const std::int32_t>(&next, 1), s, ctx);
    next = std::int32_t(std::size_t(next) * 31 % model::vocab);
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = double(state.range(0));
}
}  // namespace

BENCHMARK(BM_gpt2_prefill)->Arg(1)->Arg(2)->ArgName("threads")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gpt2_decode)->Arg(1)->Arg(2)->ArgName("threads")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
