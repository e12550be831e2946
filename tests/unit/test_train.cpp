// Training: a small GPT-2 trained by attnx equals PyTorch 1.13 step for step (tests/data/torch_train.safetensors,
// written by scripts/torch_train_reference.py, float64: the first step's gradients, 30 steps of AdamW with warmup,
// cosine decay and clipping, 10 steps of SGD with momentum), and the losses, optimizers and checkpoints against
// plain loops and finite differences.
#define BOOST_TEST_MODULE train
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>
#include <attnx/io/safetensors.hpp>
#include <attnx/models/gpt2.hpp>
#include <attnx/train/gpt2.hpp>
#include <attnx/train/loss.hpp>
#include <attnx/train/optim.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "messages.hpp"
#include "temp_dir.hpp"

using namespace attnx;
namespace st = attnx::safetensors;

namespace {
const std::filesystem::path data = std::filesystem::path(__FILE__).parent_path() / "../data/torch_train.safetensors";
using model_t = models::gpt2<double, 24, 12, 16, 4, 2>;
constexpr std::size_t B = 3, L = 12;

std::unique_ptr<model_t> load_run(const st::file& f, const std::string& run) {
  return models::load_gpt2<model_t>(f, run + ".transformer.");
}
struct batches {
  std::vector<std::int32_t> ids, targets;
  std::span<const std::int32_t> ids_of(std::size_t s) const { return std::span(ids).subspan(s * B * L, B * L); }
  std::span<const std::int32_t> targets_of(std::size_t s) const { return std::span(targets).subspan(s * B * L, B * L); }
};
batches load_batches(const st::file& f) {
  const auto ids = f.load<tensor<std::int32_t, 30, 3, 12>>("batch.ids");
  const auto tg = f.load<tensor<std::int32_t, 30, 3, 12>>("batch.targets");
  return {std::vector<std::int32_t>(ids.begin(), ids.end()), std::vector<std::int32_t>(tg.begin(), tg.end())};
}
// The largest |got - want| / (1 + |want|) over every parameter, and the name where it is. Without key_bias, the
// key biases are left out: a key bias adds q . b_k to every score of a row, which the softmax cancels, so their true
// gradient is 0 and both sides' are rounding, which AdamW's m / sqrt(v) turns into steps of the learning rate's
// size. They change no loss (the losses are compared at every step).
template <class M>
std::pair<double, std::string> worst(const M& got, const M& want, bool key_bias = true) {
  double e = 0;
  std::string at;
  train::for_each_parameter(got, want, [&](const std::string& name, const auto& g, const auto& w) {
    if (!key_bias && name.ends_with("attn.b_k")) return;
    for (std::size_t i = 0; i < g.numel(); ++i) {
      const double d = std::abs(double(g.data()[i]) - double(w.data()[i])) / (1 + std::abs(double(w.data()[i])));
      if (d > e) e = d, at = name;
    }
  });
  return {e, at};
}
template <class M>
std::unique_ptr<M> zeros_like() {
  auto g = std::make_unique<M>();
  train::zero(*g);
  return g;
}
}  // namespace

BOOST_AUTO_TEST_CASE(first_step_gradients_equal_pytorch) {
  const st::file f(data);
  const auto m = load_run(f, "init");
  const auto want = load_run(f, "grad");
  const batches b = load_batches(f);
  const auto losses = f.load<tensor<double, 30>>("adamw.loss");
  auto g = zeros_like<model_t>();
  for (const auto keep : {train::memory::recompute, train::memory::keep}) {
    BOOST_TEST_CONTEXT((keep == train::memory::keep ? "keep" : "recompute")) {
      train::zero(*g);
      context ctx;
      const double loss = train::forward_backward(*m, b.ids_of(0), b.targets_of(0), B, *g, ctx, {.activations = keep});
      BOOST_TEST(std::abs(loss - losses(0)) < 1e-13);
      BOOST_TEST(ctx.fused_runs() >= 2 * model_t::layers);  // (each block's attention: forward, then the fused backward)
      const auto [e, at] = worst(*g, *want);
      BOOST_TEST_INFO("worst at " << at);
      BOOST_TEST(e < 1e-12);
      BOOST_TEST(std::abs(g->h[1].attn.b_k(0)) < 1e-12);  // (the softmax cancels a key bias: see worst)
    }
  }
  // The same gradients accumulate: a second batch adds to them.
  auto twice = zeros_like<model_t>();
  train::forward_backward(*m, b.ids_of(0), b.targets_of(0), B, *twice);
  train::forward_backward(*m, b.ids_of(0), b.targets_of(0), B, *twice);
  double gap = 0;
  train::for_each_parameter(*twice, *g, [&](const std::string&, const auto& t, const auto& o) {
    for (std::size_t i = 0; i < t.numel(); ++i) gap = std::max(gap, std::abs(t.data()[i] - 2 * o.data()[i]));
  });
  BOOST_TEST(gap < 1e-13);
  // train::loss is the forward alone.
  BOOST_TEST(std::abs(train::loss(*m, b.ids_of(0), b.targets_of(0), B) - losses(0)) < 1e-13);
}

BOOST_AUTO_TEST_CASE(adamw_with_schedule_and_clipping_equals_pytorch_step_by_step) {
  const st::file f(data);
  auto m = load_run(f, "init");
  const batches b = load_batches(f);
  const auto losses = f.load<tensor<double, 30>>("adamw.loss");
  const auto norms = f.load<tensor<double, 30>>("adamw.norm");
  train::adamw opt({.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
  const train::warmup_cosine lr{.peak = 1e-2, .min_lr = 1e-3, .warmup = 5, .total = 30};
  auto g = std::make_unique<model_t>();
  double worst_loss = 0, worst_norm = 0;
  for (std::size_t s = 0; s < 30; ++s) {
    train::zero(*g);
    const double loss = train::forward_backward(*m, b.ids_of(s), b.targets_of(s), B, *g);
    train::check_finite(loss, s);
    const double norm = train::clip_grad_norm(*g, 1.0);
    opt.step(*m, *g, lr(s));
    m->tie_lm_head();
    worst_loss = std::max(worst_loss, std::abs(loss - losses(s)));
    worst_norm = std::max(worst_norm, std::abs(norm - norms(s)) / norms(s));
  }
  // float64 on both sides: the same operations in another order differ by rounding (1e-15 per step), which the
  // 30 steps carry along without growing past 1e-12 (the loss falls by 0.6; no step is near an instability).
  BOOST_TEST(worst_loss < 1e-11);
  BOOST_TEST(worst_norm < 1e-11);
  BOOST_TEST(losses(29) < losses(0) - 0.3);  // (it learned)
  const auto want = load_run(f, "adamw");
  const auto [e, at] = worst(*m, *want, false);
  BOOST_TEST_INFO("worst at " << at);
  BOOST_TEST(e < 1e-11);
  BOOST_TEST(opt.steps() == 30u);
}

BOOST_AUTO_TEST_CASE(sgd_with_momentum_equals_pytorch) {
  const st::file f(data);
  auto m = load_run(f, "init");
  const batches b = load_batches(f);
  const auto losses = f.load<tensor<double, 10>>("sgd.loss");
  train::sgd opt({.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01});
  auto g = std::make_unique<model_t>();
  for (std::size_t s = 0; s < 10; ++s) {
    train::zero(*g);
    const double loss = train::forward_backward(*m, b.ids_of(s), b.targets_of(s), B, *g);
    opt.step(*m, *g);
    m->tie_lm_head();
    BOOST_TEST_INFO("step " << s);
    BOOST_TEST(std::abs(loss - losses(s)) < 1e-11);
  }
  const auto want = load_run(f, "sgd");
  const auto [e, at] = worst(*m, *want, false);
  BOOST_TEST_INFO("worst at " << at);
  BOOST_TEST(e < 1e-11);
}

// Bit for bit for any thread count (float: where a different summation order would show).
BOOST_AUTO_TEST_CASE(training_is_bit_identical_for_any_thread_count) {
  using fm = models::gpt2<float, 24, 12, 16, 4, 2>;
  const st::file f(data);
  const auto md = load_run(f, "init");
  const batches b = load_batches(f);
  std::unique_ptr<fm> result[2];
  for (unsigned threads : {1u, 2u}) {
    auto m = std::make_unique<fm>();
    train::for_each_parameter(*m, *md, [](const std::string&, auto& w, const auto& d) {
      for (std::size_t i = 0; i < w.numel(); ++i) w.data()[i] = static_cast<float>(d.data()[i]);
    });
    m->tie_lm_head();
    context ctx;
    ctx.set_threads(threads);
    train::adamw opt({.lr = 1e-2});
    auto g = std::make_unique<fm>();
    for (std::size_t s = 0; s < 4; ++s) {
      train::zero(*g);
      train::forward_backward(*m, b.ids_of(s), b.targets_of(s), B, *g, ctx);
      train::clip_grad_norm(*g, 1.0);
      opt.step(*m, *g);
      m->tie_lm_head();
    }
    result[threads - 1] = std::move(m);
  }
  bool same = true;
  train::for_each_parameter(*result[0], *result[1], [&](const std::string&, const auto& a, const auto& c) {
    same = same && std::memcmp(a.data(), c.data(), a.numel() * sizeof(float)) == 0;
  });
  BOOST_TEST(same);
  BOOST_TEST(worst(*result[0], *zeros_like<fm>()).first > 0.01);  // (weights, not zeros)
}

// cross_entropy against a plain double loop, its gradient against central differences, and ignore_index.
BOOST_AUTO_TEST_CASE(cross_entropy_values_and_gradient) {
  tensor<double, 4, 5> x;
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 5; ++j) x(i, j) = std::sin(1.7 * double(i * 5 + j)) * 3;
  const std::int32_t t[4] = {2, -100, 4, 0};
  double want = 0;
  for (std::size_t i : {0u, 2u, 3u}) {
    double s = 0;
    for (std::size_t j = 0; j < 5; ++j) s += std::exp(x(i, j));
    want += std::log(s) - x(i, std::size_t(t[i]));
  }
  want /= 3;
  BOOST_TEST(std::abs(train::cross_entropy(x, t) - want) < 1e-14);
  auto g = x;
  BOOST_TEST(std::abs(train::cross_entropy_backward(g, t) - want) < 1e-14);
  double worst_fd = 0;
  for (std::size_t k = 0; k < 20; ++k) {
    auto up = x, down = x;
    const double h = 1e-5;
    up.data()[k] += h;
    down.data()[k] -= h;
    const double fd = (train::cross_entropy(up, t) - train::cross_entropy(down, t)) / (2 * h);
    worst_fd = std::max(worst_fd, std::abs(fd - g.data()[k]));
  }
  BOOST_TEST(worst_fd < 1e-9);
  for (std::size_t j = 0; j < 5; ++j) BOOST_TEST(g(1, j) == 0.0);  // the ignored row
  BOOST_TEST(std::abs(g(0, 2)) > 0.01);
  // Every row ignored: loss 0, gradients 0.
  const std::int32_t none[4] = {-1, -1, -1, -1};
  auto z = x;
  BOOST_TEST(train::cross_entropy_backward(z, none, -1) == 0.0);
  BOOST_TEST(std::all_of(z.begin(), z.end(), [](double v) { return v == 0; }));
}

BOOST_AUTO_TEST_CASE(cross_entropy_special_values_and_bad_targets) {
  const double inf = std::numeric_limits<double>::infinity();
  tensor<double, 2, 3> x{{{-inf, -inf, -inf}, {0.5, std::nan(""), 1.0}}};
  const std::int32_t first[2] = {1, -100}, second[2] = {-100, 0};
  BOOST_TEST(std::isnan(train::cross_entropy(x, first)));  // every logit -inf: NaN, as PyTorch
  BOOST_TEST(std::isnan(train::cross_entropy(x, second)));
  auto g = x;
  BOOST_TEST(std::isnan(train::cross_entropy_backward(g, second)));
  BOOST_TEST(std::isnan(g(1, 2)));
  BOOST_CHECK_EXCEPTION(train::check_finite(std::nan(""), 17), std::runtime_error,
                        test_support::is("attnx: train: the loss is nan at step 17"));
  BOOST_CHECK_EXCEPTION(train::check_finite(inf, 3), std::runtime_error,
                        test_support::is("attnx: train: the loss is +inf at step 3"));
  BOOST_CHECK_NO_THROW(train::check_finite(2.5, 3));
  const std::int32_t bad[2] = {1, 3};
  auto keep = x;
  BOOST_CHECK_EXCEPTION(train::cross_entropy_backward(keep, bad), std::out_of_range,
                        test_support::is("attnx: train::cross_entropy: target 3 of row 1 is outside [0, 3) and is "
                                               "not the ignore index -100"));
  BOOST_TEST(std::isinf(keep(0, 0)));  // (nothing written)
  const std::int32_t one[1] = {0};
  BOOST_CHECK_THROW(train::cross_entropy(x, one), attnx::extent_error);
}

BOOST_AUTO_TEST_CASE(mse_value_and_gradient) {
  tensor<double, 2, 3> y{{{1, 2, 3}, {4, 5, 6}}}, t{{{1.5, 2, 2}, {4, 7, 6}}};
  BOOST_TEST(std::abs(train::mse(y, t) - (0.25 + 1 + 4) / 6) < 1e-15);
  tensor<double, 2, 3> dy;
  train::mse_backward(y, t, dy);
  BOOST_TEST(std::abs(dy(0, 0) - 2 * (-0.5) / 6) < 1e-15);
  BOOST_TEST(std::abs(dy(1, 1) - 2 * (-2.0) / 6) < 1e-15);
}

// AdamW and SGD on a linear layer against the formulas written out, and weight decay only on the matrix.
BOOST_AUTO_TEST_CASE(optimizers_against_their_formulas) {
  nn::linear<double, 2, 2> m, g;
  m.weight = tensor<double, 2, 2>{{{0.5, -1}, {2, 0.25}}};
  m.bias = tensor<double, 2>{{0.1, -0.2}};
  g.weight = tensor<double, 2, 2>{{{0.3, -0.1}, {0.05, 2}}};
  g.bias = tensor<double, 2>{{-0.4, 0.7}};
  BOOST_TEST(train::parameter_count(m) == 6u);
  std::vector<std::string> names;
  train::for_each_parameter(m, [&](const std::string& n, const auto&) { names.push_back(n); });
  BOOST_TEST((names == std::vector<std::string>{"weight", "bias"}));
  auto a = m;
  train::adamw opt({.lr = 0.1, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-3, .weight_decay = 0.5});
  opt.step(a, g);
  opt.step(a, g);
  // Two steps with the same gradient by hand.
  const auto by_hand = [](double p, double gr, bool decay) {
    double mm = 0, vv = 0;
    for (int t = 1; t <= 2; ++t) {
      p *= 1 - 0.1 * (decay ? 0.5 : 0.0);
      mm = 0.8 * mm + 0.2 * gr;
      vv = 0.9 * vv + 0.1 * gr * gr;
      p -= 0.1 / (1 - std::pow(0.8, t)) * mm / (std::sqrt(vv) / std::sqrt(1 - std::pow(0.9, t)) + 1e-3);
    }
    return p;
  };
  BOOST_TEST(std::abs(a.weight(1, 1) - by_hand(0.25, 2, true)) < 1e-15);
  BOOST_TEST(std::abs(a.weight(0, 1) - by_hand(-1, -0.1, true)) < 1e-15);
  BOOST_TEST(std::abs(a.bias(0) - by_hand(0.1, -0.4, false)) < 1e-15);
  auto s = m;
  train::sgd sg({.lr = 0.1, .momentum = 0.5, .nesterov = true});
  sg.step(s, g);
  sg.step(s, g);  // buf = g, then 1.5 g; nesterov steps g + 0.5 buf: 1.5 g, then 1.75 g
  BOOST_TEST(std::abs(s.bias(1) - (-0.2 - 0.1 * (1.5 + 1.75) * 0.7)) < 1e-15);
  // A state made for another module is refused.
  nn::linear<double, 3, 2> other, og;
  BOOST_CHECK_EXCEPTION(opt.step(other, og), attnx::extent_error,
                        test_support::is("attnx: train::adamw: the optimizer's state is another module's: state_elements 6, parameters 8"));
  // Clipping: the norm, and the scaled gradients.
  auto c = g;
  const double norm = train::clip_grad_norm(c, 1.0);
  const double want = std::sqrt(0.09 + 0.01 + 0.0025 + 4 + 0.16 + 0.49);
  BOOST_TEST(std::abs(norm - want) < 1e-15);
  BOOST_TEST(std::abs(c.weight(1, 1) - 2 / (want + 1e-6)) < 1e-15);
  auto small = g;
  train::clip_grad_norm(small, 10.0);
  BOOST_TEST(small.weight(1, 1) == 2.0);  // (under the limit: untouched)
}

BOOST_AUTO_TEST_CASE(warmup_cosine_schedule) {
  const train::warmup_cosine s{.peak = 1.0, .min_lr = 0.1, .warmup = 4, .total = 14};
  BOOST_TEST(s(0) == 0.25);
  BOOST_TEST(s(3) == 1.0);
  BOOST_TEST(std::abs(s(4) - 1.0) < 1e-15);
  BOOST_TEST(std::abs(s(9) - 0.55) < 1e-15);  // half way down the cosine
  BOOST_TEST(s(14) == 0.1);
  BOOST_TEST(s(100) == 0.1);
}

// A checkpoint round trip with Hugging Face's names, and one of another model's shapes refused, naming the tensor.
BOOST_AUTO_TEST_CASE(checkpoints_round_trip_and_refuse_other_shapes) {
  const st::file f(data);
  const auto m = load_run(f, "adamw");
  const test_support::temp_dir dir("attnx_train_");
  const std::string path = (dir / "ckpt.safetensors").string();
  models::save_gpt2(path, *m);
  const st::file back(path);
  const auto r = models::load_gpt2<model_t>(back);
  BOOST_TEST(worst(*r, *m).first == 0.0);
  BOOST_TEST(back.metadata().at("attnx.heads") == "4");
  using wider = models::gpt2<double, 24, 12, 32, 4, 2>;
  BOOST_CHECK_EXCEPTION(models::load_gpt2<wider>(back), st::shape_error,
                        test_support::says({"transformer.wte.weight"}));
}

BOOST_AUTO_TEST_CASE(bad_batches_are_refused_before_anything_is_written) {
  const st::file f(data);
  const auto m = load_run(f, "init");
  auto g = zeros_like<model_t>();
  std::vector<std::int32_t> ids(26, 1), tg(26, 2);
  BOOST_CHECK_EXCEPTION(train::forward_backward(*m, ids, tg, 3, *g), attnx::extent_error,
                        test_support::says({"ids 26, batch 3"}));
  ids.assign(26, 1);
  tg.assign(26, 2);
  BOOST_CHECK_EXCEPTION(train::forward_backward(*m, ids, tg, 2, *g), std::length_error,
                        test_support::is("attnx: train: sequences of 13 tokens exceed the context of 12"));
  ids.assign(24, 1);
  tg.assign(24, 2);
  ids[5] = 24;
  BOOST_CHECK_EXCEPTION(train::forward_backward(*m, ids, tg, 2, *g), std::out_of_range,
                        test_support::is("attnx: train: id 24 at 5 is outside [0, 24)"));
  ids[5] = 0;
  tg[7] = -3;
  BOOST_CHECK_THROW(train::forward_backward(*m, ids, tg, 2, *g), std::out_of_range);
  tg.resize(23);
  BOOST_CHECK_THROW(train::forward_backward(*m, ids, tg, 2, *g), attnx::extent_error);
  BOOST_TEST(worst(*g, *zeros_like<model_t>()).first == 0.0);
}

// Any block's backward against central differences of its forward: a pre-norm block with grouped-query attention
// (4 query heads, 2 K/V heads) and RoPE, RoPE's other layout, and a post-norm block without biases. The loss is sum(w o y) for a fixed w.
namespace {
template <class Block>
void check_block_against_differences(train::memory keep, bool kept) {
  using X = tensor<double, dyn, dyn, Block::d_model>;
  Block b;
  std::size_t k = 0;
  train::for_each_parameter(b, [&](const std::string&, auto& p) {
    for (std::size_t i = 0; i < p.numel(); ++i, ++k) p.data()[i] += 0.3 * std::sin(0.7 * double(k) + 0.2);
  });
  X x(2, 5, Block::d_model), w(2, 5, Block::d_model);
  for (std::size_t i = 0; i < x.numel(); ++i) x.data()[i] = std::cos(1.3 * double(i)), w.data()[i] = std::sin(0.9 * double(i));
  const auto loss = [&](const Block& m, const X& in) {
    const X y = m.forward(in, causal);
    double s = 0;
    for (std::size_t i = 0; i < y.numel(); ++i) s += w.data()[i] * y.data()[i];
    return s;
  };
  train::block_activations<Block, X> a;
  const X y = train::block_forward(b, x, a, current_context(), keep);
  BOOST_TEST(a.kept == (keep == train::memory::keep && kept));
  const X y_ref = b.forward(x, causal);
  double same = 0;
  for (std::size_t i = 0; i < y.numel(); ++i) same = std::max(same, std::abs(y.data()[i] - y_ref.data()[i]));
  BOOST_TEST(same < 1e-13);  // (the training forward is the block's forward)
  Block g;
  train::zero(g);
  const X dx = train::block_backward(b, a, w, g);
  const double h = 1e-6;
  double worst_fd = 0, largest = 0;
  for (std::size_t i = 0; i < x.numel(); i += 7) {  // the input
    X up = x, down = x;
    up.data()[i] += h, down.data()[i] -= h;
    const double fd = (loss(b, up) - loss(b, down)) / (2 * h);
    worst_fd = std::max(worst_fd, std::abs(fd - dx.data()[i]));
    largest = std::max(largest, std::abs(fd));
  }
  train::for_each_parameter(b, g, [&](const std::string& name, auto& p, const auto& gp) {  // a few of each parameter
    for (std::size_t i = 0; i < p.numel(); i += 5) {
      const double keep = p.data()[i];
      p.data()[i] = keep + h;
      const double lu = loss(b, x);
      p.data()[i] = keep - h;
      const double ld = loss(b, x);
      p.data()[i] = keep;
      const double fd = (lu - ld) / (2 * h);
      BOOST_TEST_INFO(name << "[" << i << "]");
      BOOST_TEST(std::abs(fd - gp.data()[i]) < 1e-6 * (1 + std::abs(fd)));
      largest = std::max(largest, std::abs(fd));
    }
  });
  BOOST_TEST(worst_fd < 1e-6);
  BOOST_TEST(largest > 0.1);  // (live gradients)
}
}  // namespace

BOOST_AUTO_TEST_CASE(block_backward_grouped_queries_rope_and_post_norm) {
  using gqa = nn::transformer_block<double, 8, 4, 16, nn::activation::gelu_tanh, nn::norm_position::pre, mha_options{.kv_heads = 2}>;
  using no_bias = nn::transformer_block<double, 8, 2, 12, nn::activation::relu, nn::norm_position::pre, mha_options{.bias = false}>;
  for (const auto keep : {train::memory::keep, train::memory::recompute}) {
    BOOST_TEST_CONTEXT((keep == train::memory::keep ? "keep" : "recompute")) {
      check_block_against_differences<gqa>(keep, true);
      check_block_against_differences<no_bias>(keep, true);
      // RoPE, both layouts, with grouped queries (q and k kept rotated)
      check_block_against_differences<nn::transformer_block<double, 8, 4, 16, nn::activation::gelu_tanh, nn::norm_position::pre,
                                                            mha_options{.kv_heads = 2, .rope = rope_style::half}>>(keep, true);
      check_block_against_differences<nn::transformer_block<double, 8, 2, 12, nn::activation::silu, nn::norm_position::pre,
                                                            mha_options{.rope = rope_style::interleaved}>>(keep, true);
      // (this one always recomputes: a post-norm block)
      check_block_against_differences<nn::transformer_block<double, 8, 2, 12, nn::activation::silu, nn::norm_position::post,
                                                            mha_options{.bias = false}>>(keep, false);
    }
  }
}
