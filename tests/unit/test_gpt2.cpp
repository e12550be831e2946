#define BOOST_TEST_MODULE gpt2
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>
#include <attnx/io/safetensors.hpp>
#include <attnx/models/gpt2.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
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
// The model and PyTorch's reference: the prompt, its logits, the greedy tokens and the logits each was taken from.
struct reference {
  attnx::safetensors::file f{data};
  std::unique_ptr<model> m = attnx::models::load_gpt2<model>(f);
  attnx::tensor<std::int32_t, attnx::dyn> prompt = f.load<attnx::tensor<std::int32_t, attnx::dyn>>("ref.prompt");
  attnx::tensor<double, attnx::dyn, 512> prompt_logits = f.load<attnx::tensor<double, attnx::dyn, 512>>("ref.prompt_logits");
  attnx::tensor<std::int32_t, attnx::dyn> tokens = f.load<attnx::tensor<std::int32_t, attnx::dyn>>("ref.generated");
  attnx::tensor<double, attnx::dyn, 512> step_logits = f.load<attnx::tensor<double, attnx::dyn, 512>>("ref.step_logits");
};
}  // namespace

BOOST_AUTO_TEST_CASE(prefill_and_greedy_generation_match_pytorch) {
  const reference ref;
  const auto& m = ref.m;
  const auto &prompt = ref.prompt, &want_tokens = ref.tokens;
  const auto &want_prompt = ref.prompt_logits, &want_steps = ref.step_logits;
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
  std::optional<std::remove_const_t<decltype(want)>> got;
  const std::size_t failures = allocation_hooks::fail_each_in_turn([&] { got.emplace(m->step(next, s)); }, [&] {
    BOOST_TEST(s.length == 4u);
    for (const auto& c : s.caches) BOOST_TEST(c.length(0) == 4u);
  });
  BOOST_TEST(s.length == 6u);
  BOOST_TEST(std::equal(got->data(), got->data() + got->numel(), want.data(), want.data() + want.numel()));
  BOOST_TEST_MESSAGE("gpt2::step: " << failures << " allocations failed in turn");
  BOOST_TEST(failures >= 20u);
}

// Three sequences in slots of one batch_state, stepped together with rows per slot (continuous batching): slot 1
// the reference prompt then the reference tokens one at a time (against PyTorch's logits), slots 0 and 2 other
// sequences in chunks and single tokens, a slot with nothing in some calls (slot 0 done before the end), slot 2 reset halfway and given a new
// sequence; slots 0 and 2 against one prefill of their sequence in a state of its own. Then the rules, which
// change nothing.
BOOST_AUTO_TEST_CASE(slots_stepped_together) {
  const reference ref;
  const auto& m = ref.m;
  const auto &prompt = ref.prompt, &want_tokens = ref.tokens;
  const auto &want_prompt = ref.prompt_logits, &want_steps = ref.step_logits;
  const std::size_t np = prompt.dims()[0], ng = want_tokens.dims()[0];
  const auto sequence = [](std::size_t len, std::size_t seed) {
    std::vector<std::int32_t> v(len);
    for (std::size_t i = 0; i < len; ++i) v[i] = std::int32_t((37 * i + 11 * seed + 5) % 512);
    return v;
  };
  // each other sequence's logits from one prefill in a state of its own
  const auto prefill = [&](const std::vector<std::int32_t>& ids) {
    model::state s;
    const auto l = m->step(ids, s);
    return std::vector<float>(l.data(), l.data() + l.numel());
  };
  const std::vector<std::int32_t> a = sequence(24, 1), c = sequence(9, 2), d = sequence(20, 3);
  const std::vector<float> want_a = prefill(a), want_c = prefill(c), want_d = prefill(d);

  model::batch_state s(3);
  std::size_t at[3] = {}, t1 = 0;  // tokens given to slots 0 and 2 (of a, then c or d), and to slot 1
  bool slot2_d = false;
  double worst_ref = 0, worst_other = 0;
  for (std::size_t call = 0; t1 < np + ng - 1; ++call) {
    if (call == 12) {  // slot 2's sequence ends: a new one in its place
      s.reset(2);
      BOOST_TEST(s.caches[0].length(2) == 0u);
      at[2] = 0, slot2_d = true;
    }
    const std::vector<std::int32_t>& s2 = slot2_d ? d : c;
    std::vector<std::size_t> rows = {call == 0 ? 5u : call % 3 == 2 ? 0u : 1u, call == 0 ? np : 1u,
                                     call == 0 ? 0u : call == 1 || call == 12 ? 4u : 1u};
    rows[0] = std::min(rows[0], a.size() - at[0]);
    rows[2] = std::min(rows[2], s2.size() - at[2]);
    std::vector<std::int32_t> ids(a.begin() + long(at[0]), a.begin() + long(at[0] + rows[0]));
    for (std::size_t i = 0; i < rows[1]; ++i) ids.push_back(t1 + i < np ? prompt(t1 + i) : want_tokens(t1 + i - np));
    ids.insert(ids.end(), s2.begin() + long(at[2]), s2.begin() + long(at[2] + rows[2]));
    const auto logits = m->step(ids, rows, s);
    BOOST_TEST(logits.dims()[0] == ids.size());
    std::size_t r = 0;
    const auto other = [&](const std::vector<float>& want, std::size_t pos) {
      const std::vector<double> w(want.begin() + long(pos * 512), want.begin() + long((pos + 1) * 512));
      worst_other = std::max(worst_other, row_error(logits.data() + r * 512, w.data(), 512));
    };
    for (std::size_t i = 0; i < rows[0]; ++i, ++r) other(want_a, at[0] + i);
    for (std::size_t i = 0; i < rows[1]; ++i, ++r) {
      const std::size_t pos = t1 + i;  // the row predicting the token after position pos
      const double* want = pos < np - 1 ? want_prompt.data() + pos * 512 : want_steps.data() + (pos - (np - 1)) * 512;
      worst_ref = std::max(worst_ref, row_error(logits.data() + r * 512, want, 512));
    }
    const std::vector<float>& want2 = slot2_d ? want_d : want_c;
    for (std::size_t i = 0; i < rows[2]; ++i, ++r) other(want2, at[2] + i);
    at[0] += rows[0], t1 += rows[1], at[2] += rows[2];
    BOOST_TEST(s.lengths[0] == at[0]);
    BOOST_TEST(s.lengths[1] == t1);
    BOOST_TEST(s.lengths[2] == at[2]);
    for (const auto& cache : s.caches) BOOST_TEST(cache.length(1) == t1);
  }
  BOOST_TEST(t1 == np + ng - 1);
  BOOST_TEST(at[0] == a.size());
  BOOST_TEST(slot2_d);
  BOOST_TEST_MESSAGE("slots: worst relative logit error " << worst_ref << " (PyTorch), " << worst_other << " (one prefill)");
  BOOST_TEST(worst_ref <= tolerance);
  BOOST_TEST(worst_other <= tolerance);

  // the rules: nothing appended when one fails
  const std::vector<std::size_t> lengths = s.lengths;
  const auto unchanged = [&] {
    BOOST_TEST(s.lengths == lengths, boost::test_tools::per_element());
    for (const auto& cache : s.caches)
      for (std::size_t b = 0; b < 3; ++b) BOOST_TEST(cache.length(b) == lengths[b]);
  };
  const std::vector<std::int32_t> three{1, 2, 3}, bad_id{1, 512, 3};
  const std::vector<std::size_t> two_slots{1, 2}, sum4{1, 1, 2}, one_each{1, 1, 1};
  BOOST_CHECK_EXCEPTION(m->step(three, two_slots, s), attnx::extent_error, [](const attnx::extent_error& e) {
    const std::string w = e.what();
    return w.find("row_counts 2") != std::string::npos && w.find("slots 3") != std::string::npos;
  });
  BOOST_CHECK_EXCEPTION(m->step(three, sum4, s), attnx::extent_error, [](const attnx::extent_error& e) {
    const std::string w = e.what();
    return w.find("ids 3") != std::string::npos && w.find("rows_per_slot_sum 4") != std::string::npos;
  });
  BOOST_CHECK_THROW(m->step(bad_id, one_each, s), std::out_of_range);
  const std::vector<std::size_t> over{0, 0, 64 - lengths[2] + 1};
  const std::vector<std::int32_t> many(64 - lengths[2] + 1, 7);
  BOOST_CHECK_EXCEPTION(m->step(many, over, s), std::length_error, [](const std::length_error& e) {
    return std::string(e.what()).find("(slot 2)") != std::string::npos;
  });
  const std::vector<std::size_t> wrapping{std::size_t(-2), 4, 1};  // (a sum that wraps to 3)
  BOOST_CHECK_THROW(m->step(three, wrapping, s), std::length_error);
  unchanged();
  // each allocation of a step of three slots made to fail in turn: every slot as it was, then the step done
  const std::vector<std::int32_t> next{11, 12, 13, 14};
  const std::vector<std::size_t> spread{1, 2, 1};
  const std::size_t failures = allocation_hooks::fail_each_in_turn([&] { (void)m->step(next, spread, s); }, unchanged);
  BOOST_TEST(failures >= 20u);
  for (std::size_t b = 0; b < 3; ++b) BOOST_TEST(s.lengths[b] == lengths[b] + spread[b]);
  for (std::size_t b = 0; b < 3; ++b) s.truncate(b, lengths[b]);
  BOOST_CHECK_THROW(s.truncate(0, lengths[0] + 1), std::out_of_range);
  BOOST_CHECK_THROW(s.reset(3), std::out_of_range);
  unchanged();
  s.truncate(1, 8);
  BOOST_TEST(s.lengths[1] == 8u);
  BOOST_TEST(s.caches[3].length(1) == 8u);
}

// Beams over a batch_state: a prompt prefilled once in slot 0 and copied to slots 1 and 2 (copy_slot), each given
// another token; reorder to the surviving beams, once in place and once not; each slot's logits against a state
// of its own holding the same sequence. Bad sources change nothing.
BOOST_AUTO_TEST_CASE(beams_over_slots) {
  const reference ref;
  const auto& m = ref.m;
  const std::vector<std::int32_t> prompt{17, 301, 5, 88, 450};
  // the logits of the last position of a sequence stepped in a state of its own
  const auto alone = [&](std::vector<std::int32_t> ids) {
    model::state s;
    const auto l = m->step(ids, s);
    return std::vector<double>(l.data() + (ids.size() - 1) * 512, l.data() + ids.size() * 512);
  };
  model::batch_state s(3);
  const std::vector<std::size_t> first{prompt.size(), 0, 0};
  (void)m->step(prompt, first, s);
  s.copy_slot(0, 1);
  s.copy_slot(0, 2);
  BOOST_TEST(s.lengths[2] == prompt.size());
  BOOST_TEST(s.caches[2].length(1) == prompt.size());
  std::vector<std::vector<std::int32_t>> seq(3, prompt);
  double worst = 0;
  const std::vector<std::size_t> one_each{1, 1, 1};
  const auto step_all = [&](const std::vector<std::int32_t>& ids) {
    const auto l = m->step(ids, one_each, s);
    for (std::size_t b = 0; b < 3; ++b) {
      seq[b].push_back(ids[b]);
      worst = std::max(worst, row_error(l.data() + b * 512, alone(seq[b]).data(), 512));
    }
  };
  step_all({7, 8, 9});
  const std::vector<std::size_t> not_in_place{2, 2, 0}, in_place{1, 1, 2};
  s.reorder(not_in_place);  // (slot 2 takes slot 0's while slot 0 takes slot 2's)
  seq = {seq[2], seq[2], seq[0]};
  step_all({40, 41, 42});
  s.reorder(in_place);
  seq = {seq[1], seq[1], seq[2]};
  step_all({3, 3, 3});
  for (std::size_t b = 0; b < 3; ++b) BOOST_TEST(s.lengths[b] == prompt.size() + 3);
  BOOST_TEST_MESSAGE("beams: worst relative logit error " << worst);
  BOOST_TEST(worst <= tolerance);
  const std::vector<std::size_t> lengths = s.lengths;
  const std::vector<std::size_t> two{0, 1}, past{0, 3, 1};
  BOOST_CHECK_EXCEPTION(s.reorder(two), attnx::extent_error, [](const attnx::extent_error& e) {
    const std::string w = e.what();
    return w.find("sources 2") != std::string::npos && w.find("slots 3") != std::string::npos;
  });
  BOOST_CHECK_THROW(s.reorder(past), std::out_of_range);
  BOOST_CHECK_THROW(s.copy_slot(0, 3), std::out_of_range);
  BOOST_TEST(s.lengths == lengths, boost::test_tools::per_element());
  // each allocation of a reorder that cannot move in place made to fail in turn: the slots' lengths as they were in
  // every layer; then the reorder done and the next step's logits those of the sequences moved
  s.truncate(0, prompt.size() + 1);  // (three sequences of different lengths)
  s.truncate(1, prompt.size() + 2);
  seq[0].resize(prompt.size() + 1);
  seq[1].resize(prompt.size() + 2);
  const std::vector<std::size_t> held = s.lengths;
  const std::size_t failures = allocation_hooks::fail_each_in_turn([&] { s.reorder(not_in_place); }, [&] {
    BOOST_TEST(s.lengths == held, boost::test_tools::per_element());
    for (const auto& c : s.caches)
      for (std::size_t b = 0; b < 3; ++b) BOOST_TEST(c.length(b) == held[b]);
  });
  BOOST_TEST(failures >= 2 * model::layers);  // (each layer's keys and values)
  seq = {seq[2], seq[2], seq[0]};
  step_all({5, 6, 7});
  BOOST_TEST_MESSAGE("beams after " << failures << " failed reorders: worst relative logit error " << worst);
  BOOST_TEST(worst <= tolerance);
}

// The head count no tensor's shape shows: a model of 8 heads of 8 reads every tensor of this 4-head file without a
// shape error; the file's "attnx.heads" (scripts/gpt2_reference.py writes it) makes load_gpt2 refuse it, naming both.
BOOST_AUTO_TEST_CASE(another_head_count_is_refused) {
  using eight_heads = attnx::models::gpt2<float, 512, 64, 64, 8, 4>;
  const attnx::safetensors::file f{data};
  BOOST_TEST(f.metadata().at("attnx.heads") == "4");
  BOOST_CHECK_EXCEPTION((void)attnx::models::load_gpt2<eight_heads>(f), attnx::safetensors::shape_error,
                        [](const attnx::safetensors::shape_error& e) {
                          const std::string w = e.what();
                          return w.find("holds a module with 4 heads") != std::string::npos &&
                                 w.find("attnx.heads") != std::string::npos && w.find("but the module has 8") != std::string::npos;
                        });
}
