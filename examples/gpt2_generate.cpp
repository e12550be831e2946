// A small GPT-2 generating text token by token with a KV cache.
//
// examples/data/gpt2_tiny.safetensors (scripts/gpt2_reference.py, PyTorch 1.13) holds the weights of a 4-layer
// GPT-2 (d_model 64, 4 heads, vocabulary 512, context 64; random weights under Hugging Face's tensor names)
// and PyTorch's greedy continuation of a prompt. This program loads the model, runs the prompt (prefill: all of
// its tokens through each layer at once), then generates 32 tokens one at a time (each step attends over the
// cache of the layers' keys and values), checks them against PyTorch's and prints the speed of both phases.
// Then continuous batching: four sequences in the slots of one batch_state, each started at another step (a slot
// prefilling its prompt while the others decode), all stepped together; each must generate what it generates
// alone (the first slot PyTorch's tokens again).
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

  // Continuous batching: slot b's prompt is the reference prompt with its first b tokens changed, started at step 3 b.
  constexpr std::size_t slots = 4;
  std::vector<std::vector<std::int32_t>> prompts(slots, std::vector<std::int32_t>(ids.begin(), ids.end())), alone(slots);
  for (std::size_t b = 1; b < slots; ++b)
    for (std::size_t i = 0; i < b; ++i) prompts[b][i] = static_cast<std::int32_t>((static_cast<std::size_t>(prompts[b][i]) + 97 * (b + i)) % model::vocab);
  float margin = 1e30f;  // the smallest lead of a chosen token's logit over the next (the choices are not near ties)
  for (std::size_t b = 0; b < slots; ++b) {
    model::state one;
    alone[b] = m->generate(prompts[b], count, one, [&](std::size_t, std::span<const float, model::vocab> row) {
      float first = row[0], second = -1e30f;
      for (std::size_t i = 1; i < row.size(); ++i) {
        if (row[i] > first) second = first, first = row[i];
        else if (row[i] > second) second = row[i];
      }
      margin = std::min(margin, first - second);
    });
  }
  model::batch_state batch(slots);
  std::vector<std::vector<std::int32_t>> got(slots);
  std::size_t rows_done = 0;
  const auto t3 = clock::now();
  std::vector<std::int32_t> next(slots);  // each decoding slot's token for this step
  for (std::size_t step = 0;; ++step) {
    std::vector<std::int32_t> step_ids;
    std::vector<std::size_t> rows(slots, 0);
    for (std::size_t b = 0; b < slots; ++b) {
      if (step == 3 * b) {  // the slot's prompt
        step_ids.insert(step_ids.end(), prompts[b].begin(), prompts[b].end());
        rows[b] = prompts[b].size();
      } else if (step > 3 * b && got[b].size() < count) {
        step_ids.push_back(next[b]);
        rows[b] = 1;
      }
    }
    if (step_ids.empty()) break;
    const auto l = m->step(step_ids, rows, batch);
    rows_done += step_ids.size();
    for (std::size_t b = 0, at = 0; b < slots; at += rows[b], ++b) {
      if (rows[b] == 0) continue;
      const float* row = l.data() + (at + rows[b] - 1) * model::vocab;  // the slot's last new position
      next[b] = static_cast<std::int32_t>(std::max_element(row, row + model::vocab) - row);
      got[b].push_back(next[b]);
    }
  }
  const double batched = std::chrono::duration<double>(clock::now() - t3).count();
  std::size_t slots_same = 0;
  for (std::size_t b = 0; b < slots; ++b) slots_same += got[b] == alone[b];
  std::printf("continuous batching: %zu slots started at steps 0, 3, 6, 9; %zu tokens in %.2f ms (%.0f tokens/s); "
              "%zu of %zu slots generate what they generate alone (the closest choice by %.3g)\n",
              slots, rows_done, batched * 1e3, double(rows_done) / batched, slots_same, slots, double(margin));
  return same == count && slots_same == slots && alone[0] == out ? 0 : 1;
}
