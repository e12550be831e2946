// GPT-2 (models::gpt2) tokens per second, prefill and decode, on 1 and 2 threads, in two configurations with random
// weights: the small one of issue 12 (4 layers, d_model 256, 8 heads, vocabulary 4096, context 256) and GPT-2's
// 124M one (12 layers, d_model 768, 12 heads, vocabulary 50257, context 1024). PyTorch 1.13 runs the same models in
// scripts/bench_gpt2_torch.py; docs/benchmarks.md puts them side by side.
//   BM_gpt2_prefill/threads:T        small: a 128-token prompt through the whole model (logits of every position)
//   BM_gpt2_decode/threads:T         small: one token at a time with the KV caches holding 128 to 191 tokens
//   BM_gpt2_124m_prefill/prompt:P/threads:T   124M: a P-token prompt (128, 512)
//   BM_gpt2_124m_decode/threads:T    124M: one token at a time, the caches holding 128 to 191 tokens
//   BM_gpt2_124m_slots/slots:S/threads:T  124M: S sequences stepped together, one token each (continuous batching)
//   BM_read/threads:T                the read bandwidth (bytes per second) on T threads; the 124M decode's floor is its
//                                    weight bytes (counter WEIGHT_BYTES: every weight is read once per token) at it
#include <attnx/attnx.hpp>
#include <attnx/models/gpt2.hpp>
#include <benchmark/benchmark.h>

#include "read_floor.hpp"

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

namespace {
using small_model = attnx::models::gpt2<float, 4096, 256, 256, 8, 4>;
using model_124m = attnx::models::gpt2<float, 50257, 1024, 768, 12, 12>;
constexpr std::size_t prompt_length = 128, decode_span = 64;

template <class Tn>
void fill(Tn& t, std::mt19937& g, float scale, float offset = 0) {
  std::normal_distribution<float> d(0, scale);
  for (std::size_t i = 0; i < t.numel(); ++i) t.data()[i] = offset + d(g);
}

// The bytes a decoding step reads: every weight once (the LM head, tied to wte, as a matrix of its own), one row of
// wte and of wpe.
template <class M>
double weight_bytes(const M& m) {
  double n = double(m.lm_head.numel() + m.ln_f.weight.numel() + m.ln_f.bias.numel());
  for (const auto& b : m.h)
    n += double(b.ln_1.weight.numel() + b.ln_1.bias.numel() + b.ln_2.weight.numel() + b.ln_2.bias.numel() +
                b.attn.w_q.numel() + b.attn.w_k.numel() + b.attn.w_v.numel() + b.attn.w_o.numel() +
                b.attn.b_q.numel() + b.attn.b_k.numel() + b.attn.b_v.numel() + b.attn.b_o.numel() +
                b.mlp.up.weight.numel() + b.mlp.up.bias.numel() + b.mlp.down.weight.numel() + b.mlp.down.bias.numel());
  return n * sizeof(float);
}

template <class M>
const M& the_model() {
  static const std::unique_ptr<M> m = [] {
    auto p = std::make_unique<M>();
    std::mt19937 g(1);
    const float s = M::d_model >= 768 ? 0.02f : 0.06f;  // (GPT-2's initialisation scale at 124M)
    fill(p->wte.weight, g, 0.3f);
    fill(p->wpe, g, 0.3f);
    for (auto& b : p->h) {
      fill(b.ln_1.weight, g, 0.1f, 1), fill(b.ln_1.bias, g, 0.1f), fill(b.ln_2.weight, g, 0.1f, 1), fill(b.ln_2.bias, g, 0.1f);
      fill(b.attn.w_q, g, s), fill(b.attn.w_k, g, s), fill(b.attn.w_v, g, s), fill(b.attn.w_o, g, s);
      fill(b.attn.b_q, g, 0.02f), fill(b.attn.b_k, g, 0.02f), fill(b.attn.b_v, g, 0.02f), fill(b.attn.b_o, g, 0.02f);
      fill(b.mlp.up.weight, g, s), fill(b.mlp.up.bias, g, 0.02f), fill(b.mlp.down.weight, g, s / 2), fill(b.mlp.down.bias, g, 0.02f);
    }
    fill(p->ln_f.weight, g, 0.1f, 1), fill(p->ln_f.bias, g, 0.1f);
    p->tie_lm_head();
    return p;
  }();
  return *m;
}

template <class M>
std::vector<std::int32_t> prompt(std::size_t n) {
  std::vector<std::int32_t> ids(n);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t((i * 2654435761u) % M::vocab);
  return ids;
}

template <class M>
void prefill(benchmark::State& state, std::size_t length, unsigned threads) {
  attnx::context ctx;
  ctx.set_threads(threads);
  const M& m = the_model<M>();
  const auto ids = prompt<M>(length);
  typename M::state s;
  for (auto _ : state) {
    s.reset();
    auto logits = m.step(ids, s, ctx);
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(double(length), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = double(threads);
  state.counters["prompt"] = double(length);
}

template <class M>
void decode(benchmark::State& state, unsigned threads) {
  attnx::context ctx;
  ctx.set_threads(threads);
  const M& m = the_model<M>();
  const auto ids = prompt<M>(prompt_length);
  typename M::state s;
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
    next = std::int32_t(std::size_t(next) * 31 % M::vocab);
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = double(threads);
  state.counters["WEIGHT_BYTES"] = weight_bytes(m);
}

void BM_gpt2_prefill(benchmark::State& state) { prefill<small_model>(state, prompt_length, unsigned(state.range(0))); }
void BM_gpt2_decode(benchmark::State& state) { decode<small_model>(state, unsigned(state.range(0))); }
void BM_gpt2_124m_prefill(benchmark::State& state) {
  prefill<model_124m>(state, std::size_t(state.range(0)), unsigned(state.range(1)));
}
void BM_gpt2_124m_decode(benchmark::State& state) { decode<model_124m>(state, unsigned(state.range(0))); }

// Continuous batching: `slots` sequences stepped together, one token each per step, each slot's cache holding 128 to
// 191 tokens; the time per step (the weights are read once per step, whatever the slots).
void BM_gpt2_124m_slots(benchmark::State& state) {
  const auto slots = std::size_t(state.range(0));
  attnx::context ctx;
  ctx.set_threads(unsigned(state.range(1)));
  const model_124m& m = the_model<model_124m>();
  const auto ids = prompt<model_124m>(prompt_length);
  model_124m::batch_state s(slots);
  std::vector<std::int32_t> all;
  for (std::size_t b = 0; b < slots; ++b) all.insert(all.end(), ids.begin(), ids.end());
  (void)m.step(all, std::vector<std::size_t>(slots, prompt_length), s, ctx);
  std::vector<std::int32_t> next(slots, 7);
  const std::vector<std::size_t> one(slots, 1);
  for (auto _ : state) {
    if (s.lengths[0] == prompt_length + decode_span) {
      state.PauseTiming();
      for (std::size_t b = 0; b < slots; ++b) s.truncate(b, prompt_length);
      state.ResumeTiming();
    }
    auto logits = m.step(next, one, s, ctx);
    for (std::size_t b = 0; b < slots; ++b) next[b] = std::int32_t((std::size_t(next[b]) * 31 + b) % model_124m::vocab);
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["slots"] = double(slots);
  state.counters["threads"] = double(state.range(1));
  state.counters["tokens/s"] = benchmark::Counter(double(slots), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_read(benchmark::State& state) {
  const auto threads = unsigned(state.range(0));
  const auto& buf = bench::read_buffer();
  for (auto _ : state) benchmark::DoNotOptimize(bench::read_pass(buf.data(), buf.size(), threads));
  state.counters["BYTES"] = benchmark::Counter(double(buf.size() * sizeof(float)), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}
}  // namespace

BENCHMARK(BM_gpt2_prefill)->Arg(1)->Arg(2)->ArgName("threads")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gpt2_decode)->Arg(1)->Arg(2)->ArgName("threads")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_read)->Arg(1)->Arg(2)->ArgName("threads")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gpt2_124m_prefill)
    ->ArgsProduct({{128, 512}, {1, 2}})
    ->ArgNames({"prompt", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_gpt2_124m_decode)->Arg(1)->Arg(2)->ArgName("threads")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gpt2_124m_slots)
    ->ArgsProduct({{1, 4, 8}, {1, 2}})
    ->ArgNames({"slots", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_MAIN();
