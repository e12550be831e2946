// A small GPT-2 generating text token by token with a KV cache.
//
// examples/data/gpt2_tiny.safetensors (scripts/gpt2_reference.py, PyTorch 1.13) holds the weights of a 4-layer
// GPT-2 (d_model 64, 4 heads, vocabulary 512, context 64; random weights under Hugging Face's tensor names)
// and PyTorch's greedy continuation of a prompt. This program loads the model, runs the prompt (prefill: all of
// its tokens through each layer at once), then generates 32 tokens one at a time (each step attends over the
// cache of the layers' keys and values), checks them against PyTorch's and prints the speed of both phases.
//
//   gpt2_generate [FILE]
#include <attnx/attnx.hpp>
#include <attnx/io/safetensors.hpp>
#include <attnx/models/gpt2.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <vector>

namespace fs = std::filesystem;
using model = attnx::models::gpt2<float, 512, 64, 64, 4, 4>;

int main(int argc, char** argv) {
  const fs::path path = argc > 1 ? fs::path(argv[1]) : fs::path(__FILE__).parent_path() / "data" / "gpt2_tiny.safetensors";
  const attnx::safetensors::file f(path);
  const auto m = attnx::models::load_gpt2<model>(f);
  const auto prompt = f.load<attnx::tensor<std::int32_t, attnx::dyn>>("ref.prompt");
  const auto expected = f.load<attnx::tensor<std::int32_t, attnx::dyn>>("ref.generated");
  const std::span<const std::int32_t> ids(prompt.data(), prompt.dims()[0]);
  const std::size_t count = expected.dims()[0];

  using clock = std::chrono::steady_clock;
  model::state s;
  const auto t0 = clock::now();
  auto logits = m->step(ids, s);  // prefill
  const auto t1 = clock::now();
  std::vector<std::int32_t> out;
  for (std::size_t t = 0; t < count; ++t) {
    const float* row = logits.data() + (logits.dims()[0] - 1) * model::vocab;
    out.push_back(static_cast<std::int32_t>(std::max_element(row, row + model::vocab) - row));
    if (t + 1 < count) logits = m->step(std::span<const std::int32_t>(&out.back(), 1), s);  // one decoding step
  }
  const auto t2 = clock::now();

  std::printf("prompt:    ");
  for (auto id : ids) std::printf(" %d", id);
  std::printf("\ngenerated: ");
  std::size_t same = 0;
  for (std::size_t t = 0; t < count; ++t) {
    std::printf(" %d", out[t]);
    same += out[t] == expected.data()[t];
  }
  const double prefill = std::chrono::duration<double>(t1 - t0).count(), decode = std::chrono::duration<double>(t2 - t1).count();
  std::printf("\nPyTorch's tokens: %zu of %zu identical\n", same, count);
  std::printf("prefill: %zu tokens in %.2f ms (%.0f tokens/s); decode: %zu tokens in %.2f ms (%.0f tokens/s); %u thread(s)\n",
              ids.size(), prefill * 1e3, double(ids.size()) / prefill, count - 1, decode * 1e3, double(count - 1) / decode,
              attnx::current_context().threads());
  return same == count ? 0 : 1;
}
