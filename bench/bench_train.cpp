// Training a small GPT (examples/train_char_gpt.cpp's: vocabulary 256, context 128, d_model 128, 4 heads, 4 layers,
// float32), batch 16 x 128 tokens, on 1 and 2 threads, tokens per second; scripts/bench_train_torch.py runs
// PyTorch 1.13 on the same model. The parts of a step are timed on their own, so that a step's time can be broken
// down (the rest: the embedding, the layer norms and element-wise work, the loss):
//   BM_train_step/threads:T        forward, backward, clipping, AdamW (what a training loop runs)
//   BM_train_forward/threads:T     train::loss: the forward alone
//   BM_train_attention/threads:T   the model's attention alone, forward with lse and the fused backward, every layer:
//                                  (16, 4, 128, 32) Q, K, V, causal
//   BM_train_gemm/threads:T        the model's matrix products alone: for each layer the four projections, the two
//                                  MLP products and their backward products (dX = dY W^T, dW = X^T dY), and the
//                                  LM head's three, as the step runs them
//   BM_train_optimizer             clip_grad_norm and AdamW over every parameter
//   BM_fma_peak                    this core's FMA peak, for the FLOPS counters
// Counter PEAK_RSS_MB: the process's peak resident memory after the benchmark (model, gradients, moments and the
// step's activations).
#include <attnx/attnx.hpp>
#include <attnx/io/safetensors.hpp>
#include <attnx/train/gpt2.hpp>
#include <attnx/train/optim.hpp>
#include <benchmark/benchmark.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fma_peak.hpp"

namespace {
using model_t = attnx::models::gpt2<float, 256, 128, 128, 4, 4>;
constexpr std::size_t batch = 16, len = 128, D = 128;

model_t& the_model() {
  static const std::unique_ptr<model_t> m = [] {
    auto p = std::make_unique<model_t>();
    std::mt19937 g(1);
    std::normal_distribution<float> n(0, 0.02f);
    attnx::train::for_each_parameter(*p, [&](const std::string& name, auto& w) {
      if (name.find("ln_") != std::string::npos) return;
      for (std::size_t i = 0; i < w.numel(); ++i) w.data()[i] = n(g);
    });
    p->tie_lm_head();
    return p;
  }();
  return *m;
}
struct batch_data {
  std::vector<std::int32_t> ids, targets;
  batch_data() : ids(batch * len), targets(batch * len) {
    std::mt19937 g(2);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t(g() % 256), targets[i] = std::int32_t(g() % 256);
  }
};
double peak_rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}
attnx::context ctx_of(benchmark::State& state) {
  attnx::context c;
  c.set_threads(unsigned(state.range(0)));
  return c;
}
void tokens(benchmark::State& state) {
  state.counters["tokens_per_second"] = benchmark::Counter(double(batch * len), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["PEAK_RSS_MB"] = peak_rss_mb();
}

void BM_fma_peak(benchmark::State& state) { bench::fma_peak_benchmark(state); }

void BM_train_step(benchmark::State& state) {
  auto m = std::make_unique<model_t>(the_model());
  auto g = std::make_unique<model_t>();
  const batch_data b;
  const attnx::context ctx = ctx_of(state);
  attnx::train::adamw opt({.lr = 1e-4});
  for (auto _ : state) {
    attnx::train::zero(*g);
    benchmark::DoNotOptimize(attnx::train::forward_backward(*m, b.ids, b.targets, batch, *g, ctx));
    attnx::train::clip_grad_norm(*g, 1.0);
    opt.step(*m, *g);
    m->tie_lm_head();
  }
  tokens(state);
}

void BM_train_forward(benchmark::State& state) {
  const batch_data b;
  const attnx::context ctx = ctx_of(state);
  for (auto _ : state) benchmark::DoNotOptimize(attnx::train::loss(the_model(), b.ids, b.targets, batch, ctx));
  tokens(state);
}

// The attention of every layer: O and lse (the forward the backward recomputes), then the fused backward.
void BM_train_attention(benchmark::State& state) {
  using q_t = attnx::tensor<float, attnx::dyn, 4, attnx::dyn, 32>;
  q_t q(batch, 4, len, 32), k(batch, 4, len, 32), v(batch, 4, len, 32), dout(batch, 4, len, 32);
  std::mt19937 g(3);
  std::normal_distribution<float> n(0, 1);
  for (q_t* t : {&q, &k, &v, &dout})
    for (std::size_t i = 0; i < t->numel(); ++i) t->data()[i] = n(g);
  const attnx::context ctx = ctx_of(state);
  const attnx::context_scope use(ctx);
  for (auto _ : state)
    for (std::size_t l = 0; l < model_t::layers; ++l) {
      auto r = attnx::backward(attnx::attention(q, k, v, attnx::causal), dout, attnx::wrt(q, k, v));
      benchmark::DoNotOptimize(std::get<0>(r).data());
    }
  // 4 L^2 d per head for the forward (half: causal), 2.5 times that for the backward, twice the forward in all
  // (the step's forward and the backward's recomputation).
  const double per_layer = double(batch * 4) * (2 + 2.5) * 4.0 * double(len * len) * 32 * 0.5;
  state.counters["FLOPS"] = benchmark::Counter(per_layer * model_t::layers, benchmark::Counter::kIsIterationInvariantRate);
}

// The matrix products of a step, forward and backward, through the same expressions (x * W, dY * W^T, X^T * dY).
void BM_train_gemm(benchmark::State& state) {
  using attnx::dyn;
  constexpr std::size_t N = batch * len;
  attnx::tensor<float, dyn, D> x(N, D), dy(N, D);
  attnx::tensor<float, dyn, 4 * D> hx(N, 4 * D), dh(N, 4 * D);
  attnx::tensor<float, dyn, 256> dl(N, 256);
  std::mt19937 g(4);
  std::normal_distribution<float> n(0, 1);
  for (auto* p : {x.data(), dy.data()})
    for (std::size_t i = 0; i < N * D; ++i) p[i] = n(g);
  for (std::size_t i = 0; i < N * 4 * D; ++i) hx.data()[i] = n(g), dh.data()[i] = n(g);
  for (std::size_t i = 0; i < N * 256; ++i) dl.data()[i] = n(g);
  const model_t& m = the_model();
  const auto& b = m.h[0];
  const attnx::context ctx = ctx_of(state);
  for (auto _ : state) {
    for (std::size_t l = 0; l < model_t::layers; ++l) {
      const auto square = [&](const auto& w) {  // (D, D): y, dX, dW
        benchmark::DoNotOptimize(attnx::evaluate(x * w, ctx).data());
        benchmark::DoNotOptimize(attnx::evaluate(dy * attnx::transpose(w), ctx).data());
        benchmark::DoNotOptimize(attnx::evaluate(attnx::transpose(x) * dy, ctx).data());
      };
      square(b.attn.w_q), square(b.attn.w_k), square(b.attn.w_v), square(b.attn.w_o);
      benchmark::DoNotOptimize(attnx::evaluate(x * b.mlp.up.weight, ctx).data());  // (D, 4D)
      benchmark::DoNotOptimize(attnx::evaluate(dh * attnx::transpose(b.mlp.up.weight), ctx).data());
      benchmark::DoNotOptimize(attnx::evaluate(attnx::transpose(x) * dh, ctx).data());
      benchmark::DoNotOptimize(attnx::evaluate(hx * b.mlp.down.weight, ctx).data());  // (4D, D)
      benchmark::DoNotOptimize(attnx::evaluate(dy * attnx::transpose(b.mlp.down.weight), ctx).data());
      benchmark::DoNotOptimize(attnx::evaluate(attnx::transpose(hx) * dy, ctx).data());
    }
    benchmark::DoNotOptimize(attnx::evaluate(x * m.lm_head, ctx).data());  // (D, 256)
    benchmark::DoNotOptimize(attnx::evaluate(dl * attnx::transpose(m.lm_head), ctx).data());
    benchmark::DoNotOptimize(attnx::evaluate(attnx::transpose(x) * dl, ctx).data());
  }
  const double flops = 2.0 * double(N) * 3 * (model_t::layers * (4.0 * D * D + 8.0 * D * D) + D * 256.0);
  state.counters["FLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_train_optimizer(benchmark::State& state) {
  auto m = std::make_unique<model_t>(the_model());
  auto g = std::make_unique<model_t>(the_model());
  attnx::train::adamw opt({.lr = 1e-6});
  for (auto _ : state) {
    attnx::train::clip_grad_norm(*g, 1e9);
    opt.step(*m, *g);
  }
}
}  // namespace

BENCHMARK(BM_fma_peak)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_train_step)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_train_forward)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_train_attention)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_train_gemm)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_train_optimizer)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
