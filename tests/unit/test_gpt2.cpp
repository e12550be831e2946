#define BOOST_TEST_MODULE gpt2
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>
#include <attnx/io/safetensors.hpp>
#include <attnx/models/gpt2.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "allocation_hooks.hpp"  // allocation failures on demand (a_failed_step_leaves_the_state)

// A small GPT-2 (examples/data/gpt2_tiny.safetensors, written by scripts/gpt2_reference.py with PyTorch 1.13:
// random weights under Hugging Face's names, and PyTorch's logits computed in float64 from the stored float32
// weights). attnx runs it in float: the logits of the prompt (prefill) and of 32 greedy steps (the KV cache)
// against PyTorch's, and the generated tokens identical.

namespace {
using model = attnx::models::gpt2<float, 512, 64, 64, 4, 4>;
const std::filesystem::path data = std::filesystem::path(__FILE__).parent_path() / "../../examples/data/gpt2_tiny.safetensors";

// The largest |error| of a row relative to its largest |logit|. Measured (g++ 12, AVX-512): 1.0e-6 (prefill) and
// 3.5e-6 (steps); the bound leaves about 5x (float accumulation over d_model 64, 4 layers and 40 positions). The
// greedy choices win by at least 0.0245 (the script checks), far above this.
constexpr double tolerance = 2e-5;

double row_error(const float* got, const double* want, std::size_t n) {
  double scale = 0, worst = 0;
  for (std::size_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(want[i]));
  for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  return worst / scale;
}
}  // namespace

BOOST_AUTO_TEST_CASE(prefill_and_greedy_generation_match_pytorch) {
  const attnx::safetensors::file f(data);
  const auto m = attnx::models::load_gpt2<model>(f);
  const auto prompt = f.load<attnx::tensor<std::int32_t, attnx::dyn>>("ref.prompt");
  const auto want_prompt = f.load<attnx::tensor<double, attnx::dyn, 512>>("ref.prompt_logits");
  const auto want_tokens = f.load<attnx::tensor<std::int32_t, attnx::dyn>>("ref.generated");
  const auto want_steps = f.load<attnx::tensor<double, attnx::dyn, 512>>("ref.step_logits");
  const std::size_t np = prompt.dims()[0], ng = want_tokens.dims()[0];
  BOOST_TEST(np == 8u);
  BOOST_TEST(ng == 32u);

  // prefill: every position's logits
  model::state s;
  const std::span<const std::int32_t> ids(prompt.data(), np);
  const auto logits = m->step(ids, s);
  BOOST_TEST(s.length == np);
  double worst = 0;
  for (std::size_t i = 0; i < np; ++i) worst = std::max(worst, row_error(logits.data() + i * 512, want_prompt.data() + i * 512, 512));
  BOOST_TEST_MESSAGE("prefill: worst relative logit error " << worst);
  BOOST_TEST(worst <= tolerance);

  // greedy generation from a fresh state: the logits of every step and the tokens
  model::state g;
  double worst_step = 0;
  const auto tokens = m->generate(ids, ng, g, [&](std::size_t t, std::span<const float, 512> row) {
    worst_step = std::max(worst_step, row_error(row.data(), want_steps.data() + t * 512, 512));
  });
  BOOST_TEST_MESSAGE("generation: worst relative logit error " << worst_step);
  BOOST_TEST(worst_step <= tolerance);
  BOOST_TEST(std::vector<std::int32_t>(tokens.begin(), tokens.end()) ==
                 std::vector<std::int32_t>(want_tokens.data(), want_tokens.data() + ng),
             boost::test_tools::per_element());
  BOOST_TEST(g.length == np + ng - 1);  // the last token is not fed back
}

// Chunked prefill gives the same logits as one prefill; the context limit and bad ids are errors that append
// nothing.
BOOST_AUTO_TEST_CASE(chunks_and_limits) {
  const attnx::safetensors::file f(data);
  const auto m = attnx::models::load_gpt2<model>(f);
  const std::vector<std::int32_t> ids{17, 301, 5, 88, 450, 2, 129, 64, 7, 7, 300};
  model::state a, b;
  const auto whole = m->step(ids, a);
  const auto first = m->step(std::span(ids).first(4), b);
  const auto rest = m->step(std::span(ids).subspan(4), b);
  double worst = 0;
  for (std::size_t i = 0; i < ids.size(); ++i)
    worst = std::max(worst, [&] {
      const float* got = i < 4 ? first.data() + i * 512 : rest.data() + (i - 4) * 512;
      double w = 0;
      for (std::size_t j = 0; j < 512; ++j) w = std::max(w, double(std::abs(got[j] - whole.data()[i * 512 + j])));
      return w;
    }());
  BOOST_TEST(worst <= 1e-4);
  const std::vector<std::int32_t> bad{3, 512};
  BOOST_CHECK_THROW(m->step(bad, b), std::out_of_range);
  BOOST_TEST(b.length == ids.size());
  const std::vector<std::int32_t> long_ids(64 - ids.size() + 1, 1);
  BOOST_CHECK_THROW(m->step(long_ids, b), std::length_error);
  BOOST_TEST(b.length == ids.size());
  BOOST_TEST(b.caches[0].length(0) == ids.size());
  // Speculative tokens rejected: truncate(6) then the accepted tokens again give the logits of one prefill.
  const std::vector<std::int32_t> draft{9, 9, 9};
  (void)m->step(draft, b);
  BOOST_CHECK_THROW(b.truncate(ids.size() + 4), std::out_of_range);
  b.truncate(6);
  BOOST_TEST(b.length == 6u);
  BOOST_TEST(b.caches.back().length(0) == 6u);
  const auto again = m->step(std::span(ids).subspan(6), b);
  double worst_again = 0;
  for (std::size_t i = 6; i < ids.size(); ++i)
    for (std::size_t j = 0; j < 512; ++j)
      worst_again = std::max(worst_again, double(std::abs(again.data()[(i - 6) * 512 + j] - whole.data()[i * 512 + j])));
  BOOST_TEST(worst_again <= 1e-4);
}

// Each allocation of a step made to fail in turn (embedding, every layer's projections, kernel, feed-forward, the
// logits): the step throws std::bad_alloc and the state is as before (its length and every layer's cache); then the
// step succeeds with the logits of a step that never failed.
BOOST_AUTO_TEST_CASE(a_failed_step_leaves_the_state) {
  const attnx::safetensors::file f(data);
  const auto m = attnx::models::load_gpt2<model>(f);
  const std::vector<std::int32_t> prompt{17, 301, 5, 88}, next{450, 2};
  model::state s, clean;
  (void)m->step(prompt, s);
  (void)m->step(prompt, clean);
  const auto want = m->step(next, clean);
  std::size_t failures = 0;
  for (long k = 0;; ++k) {
    allocation_hooks::fail_after.store(k);
    try {
      const auto got = m->step(next, s);
      allocation_hooks::fail_after.store(-1);
      BOOST_TEST(s.length == 6u);
      BOOST_TEST(std::equal(got.data(), got.data() + got.numel(), want.data(), want.data() + want.numel()));
      break;
    } catch (const std::bad_alloc&) {
      ++failures;
      BOOST_TEST(s.length == 4u);
      for (const auto& c : s.caches) BOOST_TEST(c.length(0) == 4u);
    }
  }
  BOOST_TEST_MESSAGE("gpt2::step: " << failures << " allocations failed in turn");
  BOOST_TEST(failures >= 20u);
}
