// A character-level GPT trained on CPU: 4 pre-norm blocks of d_model 128 and 4 heads over a context of 128 bytes,
// trained with AdamW (warmup, cosine decay, clipping) on a text, evaluated on held-out text, saved as a
// safetensors checkpoint with Hugging Face GPT-2 names, and sampled from.
//
//   train_char_gpt [--text FILE] [--steps N] [--batch B] [--threads T] [--checkpoint PATH] [--log CSV]
//
// The text is read as bytes (vocabulary 256: any file works); by default the licence texts every Debian system
// ships in /usr/share/common-licenses (package base-files), about 260 kB of English. The last tenth is held out.
// Batches are windows at random offsets from a fixed seed: a run is the same on every run of one machine and
// thread count. Exits non-zero unless the held-out loss ends at least 1.5 below its start (ln 256 = 5.55).
#include <attnx/attnx.hpp>
#include <attnx/io/safetensors.hpp>
#include <attnx/models/gpt2.hpp>
#include <attnx/train/gpt2.hpp>
#include <attnx/train/optim.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

using namespace attnx;

namespace {
using model_t = models::gpt2<float, 256, 128, 128, 4, 4>;
constexpr std::size_t context_len = model_t::context_length;

struct options {
  std::string text, checkpoint = "train_char_gpt.safetensors", log;
  std::size_t steps = 600, batch = 16;
  unsigned threads = 0;
};

std::vector<unsigned char> read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("train_char_gpt: cannot read " + p.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
// The default corpus: every regular file of /usr/share/common-licenses, in name order.
std::vector<unsigned char> default_corpus() {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator("/usr/share/common-licenses"))
    if (e.is_regular_file() && !e.is_symlink()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<unsigned char> all;
  for (const auto& f : files) {
    const auto b = read_bytes(f);
    all.insert(all.end(), b.begin(), b.end());
  }
  return all;
}

// batch windows of context_len + 1 bytes at random offsets of text: ids the first context_len, targets the next ones.
void draw(std::span<const unsigned char> text, std::size_t batch, std::mt19937_64& rng, std::vector<std::int32_t>& ids,
          std::vector<std::int32_t>& targets) {
  ids.resize(batch * context_len);
  targets.resize(batch * context_len);
  std::uniform_int_distribution<std::size_t> at(0, text.size() - context_len - 1);
  for (std::size_t b = 0; b < batch; ++b) {
    const std::size_t o = at(rng);
    for (std::size_t t = 0; t < context_len; ++t) {
      ids[b * context_len + t] = text[o + t];
      targets[b * context_len + t] = text[o + t + 1];
    }
  }
}

// The mean loss over 8 fixed batches of held-out text.
float held_out_loss(const model_t& m, std::span<const unsigned char> text, std::size_t batch, const context& ctx) {
  std::mt19937_64 rng(7);
  std::vector<std::int32_t> ids, targets;
  double s = 0;
  for (int i = 0; i < 8; ++i) {
    draw(text, batch, rng, ids, targets);
    s += train::loss(m, ids, targets, batch, ctx);
  }
  return static_cast<float>(s / 8);
}

// n bytes sampled from the model after a prompt, at temperature 0.8, over a KV cache.
std::string sample(const model_t& m, const std::string& prompt, std::size_t n, const context& ctx) {
  std::mt19937_64 rng(11);
  model_t::state s;
  std::vector<std::int32_t> ids(prompt.begin(), prompt.end());
  std::string out = prompt;
  auto logits = m.step(ids, s, ctx);
  for (std::size_t i = 0; i < n && s.length < context_len; ++i) {
    const float* row = logits.data() + (logits.dims()[0] - 1) * 256;
    const float top = *std::max_element(row, row + 256);
    std::vector<double> w(256);
    for (std::size_t v = 0; v < 256; ++v) w[v] = std::exp((row[v] - top) / 0.8);
    const auto id = static_cast<std::int32_t>(std::discrete_distribution<int>(w.begin(), w.end())(rng));
    out.push_back(static_cast<char>(id));
    logits = m.step(std::span<const std::int32_t>(&id, 1), s, ctx);
  }
  for (char& c : out)
    if ((c < 32 || c > 126) && c != '\n') c = '?';
  return out;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("train_char_gpt: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--text") o.text = value();
    else if (a == "--steps") o.steps = std::stoul(value());
    else if (a == "--batch") o.batch = std::stoul(value());
    else if (a == "--threads") o.threads = static_cast<unsigned>(std::stoul(value()));
    else if (a == "--checkpoint") o.checkpoint = value();
    else if (a == "--log") o.log = value();
    else throw std::runtime_error("train_char_gpt: unknown argument " + a);
  }
  return o;
}
}  // namespace

int main(int argc, char** argv) try {
  const options o = parse(argc, argv);
  const std::vector<unsigned char> text = o.text.empty() ? default_corpus() : read_bytes(o.text);
  if (text.size() < 20 * (context_len + 1))
    throw std::runtime_error("train_char_gpt: the text has " + std::to_string(text.size()) + " bytes; it needs at least " +
                             std::to_string(20 * (context_len + 1)));
  const std::size_t split = text.size() - text.size() / 10;
  const std::span<const unsigned char> train_text(text.data(), split), test_text(text.data() + split, text.size() - split);
  context ctx;
  if (o.threads) ctx.set_threads(o.threads);

  // GPT-2's initialisation: normal(0, 0.02) weights, the residual projections scaled by 1/sqrt(2 layers).
  auto m = std::make_unique<model_t>();
  std::mt19937_64 init(1234);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  train::for_each_parameter(*m, [&](const std::string& name, auto& w) {
    if (name.find("ln_") != std::string::npos) return;  // (gains 1, biases 0: as constructed)
    const bool residual = name.ends_with("attn.w_o") || name.ends_with("mlp.down.weight");
    const bool bias = name.ends_with("bias") || name.find(".b_") != std::string::npos;
    for (std::size_t i = 0; i < w.numel(); ++i)
      w.data()[i] = bias ? 0.0f : normal(init) * (residual ? 1.0f / std::sqrt(2.0f * model_t::layers) : 1.0f);
  });
  m->tie_lm_head();
  auto grads = std::make_unique<model_t>();
  std::printf("train_char_gpt: %zu parameters, %zu bytes of text (%zu held out), batch %zu x %zu, %u thread(s)\n",
              train::parameter_count(*m), text.size(), test_text.size(), o.batch, context_len, ctx.threads());

  train::adamw opt({.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
  const train::warmup_cosine lr{.peak = 2e-3, .min_lr = 2e-4, .warmup = std::max<std::size_t>(o.steps / 20, 1), .total = o.steps};
  std::ofstream log;
  if (!o.log.empty()) {
    log.open(o.log);
    log << "step,train_loss,held_out_loss\n";
  }
  const float start = held_out_loss(*m, test_text, o.batch, ctx);
  std::printf("held-out loss at the start: %.3f\n", start);
  std::mt19937_64 rng(42);
  std::vector<std::int32_t> ids, targets;
  const auto t0 = std::chrono::steady_clock::now();
  float last = start;
  for (std::size_t step = 0; step < o.steps; ++step) {
    draw(train_text, o.batch, rng, ids, targets);
    train::zero(*grads);
    const float loss = train::forward_backward(*m, ids, targets, o.batch, *grads, ctx);
    train::check_finite(loss, step);
    train::clip_grad_norm(*grads, 1.0);
    opt.step(*m, *grads, lr(step));
    m->tie_lm_head();
    const bool report = (step + 1) % 50 == 0 || step + 1 == o.steps;
    float held = -1;
    if (report) held = last = held_out_loss(*m, test_text, o.batch, ctx);
    if (log.is_open()) {
      log << step << ',' << loss << ',';
      if (held >= 0) log << held;
      log << '\n';
    }
    if (report || step % 10 == 0) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("step %4zu/%zu  loss %.3f  lr %.2e  %.0f tokens/s", step + 1, o.steps, loss, lr(step),
                  static_cast<double>((step + 1) * o.batch * context_len) / s);
      if (held >= 0) std::printf("  held-out %.3f", held);
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  models::save_gpt2(o.checkpoint, *m);
  const auto back = models::load_gpt2<model_t>(safetensors::file(o.checkpoint));
  std::printf("checkpoint: %s (read back: held-out loss %.3f)\n", o.checkpoint.c_str(), held_out_loss(*back, test_text, o.batch, ctx));
  std::printf("sample:\n%s\n", sample(*m, "This License", 100, ctx).c_str());
  if (!(last < start - 1.5f)) {
    std::printf("train_char_gpt: the held-out loss went from %.3f to %.3f only\n", start, last);
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
