// attnx::models::gpt2: a GPT-2 decoder (the architecture of Hugging Face's GPT2LMHeadModel) built from the nn
// layers, with prefill and token-by-token generation over per-layer KV caches, and its loader from a
// safetensors file with Hugging Face's tensor names.
//
//   h = wte[ids] + wpe[positions]
//   Layers pre-norm blocks: h = h + attn(ln_1(h)) (causal, c_attn's q | k | v, c_proj); h = h + mlp(ln_2(h))
//   (c_fc, gelu_tanh, c_proj)
//   logits = ln_f(h) wte^T (the LM head tied to the token embedding)
//
// A state holds one sequence's caches and its length; a batch_state several sequences (slots), each with its own
// length, stepped together with rows per slot (continuous batching: slots prefilling and slots decoding in one call).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnx/eval/assign.hpp"
#include "attnx/exec/context.hpp"
#include "attnx/expr/slice.hpp"
#include "attnx/io/safetensors.hpp"
#include "attnx/modules/kv_cache.hpp"
#include "attnx/modules/layers.hpp"
#include "attnx/modules/transformer_block.hpp"

namespace attnx::models {

// GPT-2 (token and position embeddings, Layers pre-norm blocks with GELU (tanh), final layer norm, LM head tied to
// the token embedding): forward over a prompt, decoding over KV caches, greedy generation.
template <class T, std::size_t Vocab, std::size_t Context, std::size_t D, std::size_t Heads, std::size_t Layers>
struct gpt2 {
  static_assert(D % Heads == 0, "attnx: gpt2: d_model must be divisible by the number of heads");
  static constexpr std::size_t vocab = Vocab, context_length = Context, d_model = D, heads = Heads, layers = Layers;
  static constexpr std::size_t d_head = D / Heads;
  using block_type = nn::transformer_block<T, D, Heads, 4 * D, nn::activation::gelu_tanh>;
  using cache_type = kv_cache<T, Heads, d_head>;
  using value_type = T;

  nn::embedding<T, Vocab, D> wte{};
  tensor<T, Context, D> wpe{};
  std::array<block_type, Layers> h{};
  nn::layer_norm<T, D> ln_f{};
  tensor<T, D, Vocab> lm_head{};  // wte^T, kept once (the head is tied to the embedding: set by tie_lm_head)

  void tie_lm_head() { lm_head = transpose(wte.weight); }

  // The caches of one sequence (batch 1, capacity Context) and its length.
  struct state {
    std::vector<cache_type> caches;
    std::size_t length = 0;
    state() {
      caches.reserve(Layers);
      for (std::size_t i = 0; i < Layers; ++i) caches.emplace_back(1, Context);
    }
    void reset() {
      for (auto& c : caches) c.reset(0);
      length = 0;
    }
    // Keeps the first n tokens (n <= length): drops rejected speculative tokens, say.
    void truncate(std::size_t n) {
      if (n > length)
        ATTNX_THROW(std::out_of_range("attnx: gpt2::state: truncate to " + std::to_string(n) + " tokens, but it holds " +
                                std::to_string(length)));
      for (auto& c : caches) c.truncate(0, n);
      length = n;
    }
  };

  // The caches of `batch` sequences (slots; each layer's cache (batch, Context)) and each slot's length. A slot
  // whose sequence ended is emptied with reset(b) and takes a new one.
  struct batch_state {
    std::vector<cache_type> caches;
    std::vector<std::size_t> lengths;
    explicit batch_state(std::size_t batch) : lengths(batch, 0) {
      caches.reserve(Layers);
      for (std::size_t i = 0; i < Layers; ++i) caches.emplace_back(batch, Context);
    }
    std::size_t batch() const noexcept { return lengths.size(); }
    void reset(std::size_t b) {
      check_slot(b);
      for (auto& c : caches) c.reset(b);
      lengths[b] = 0;
    }
    // Keeps slot b's first n tokens (n <= its length).
    void truncate(std::size_t b, std::size_t n) {
      check_slot(b);
      if (n > lengths[b])
        ATTNX_THROW(std::out_of_range("attnx: gpt2::batch_state: truncate slot " + std::to_string(b) + " to " + std::to_string(n) +
                                " tokens, but it holds " + std::to_string(lengths[b])));
      for (auto& c : caches) c.truncate(b, n);
      lengths[b] = n;
    }

    // Slot dst takes slot src's sequence (a prompt prefilled once and shared by several sequences: parallel
    // sampling, beams forked from it).
    void copy_slot(std::size_t src, std::size_t dst) {
      check_slot(src);
      check_slot(dst);
      for (auto& c : caches) c.copy_item(src, dst);
      lengths[dst] = lengths[src];
    }
    // Slot b takes what slot from[b] holds, for every b at once (beam search: the surviving beams). from has one
    // entry per slot. Nothing changes when it throws (a bad entry, or an allocation: when the slots cannot be
    // moved in place, every layer's reordered cache is built before any is replaced).
    void reorder(std::span<const std::size_t> from) {
      if (from.size() != lengths.size())
        attnx::detail::throw_extent_error("gpt2::batch_state: reorder: one source slot per slot", "sources", from.size(),
                                          "slots", lengths.size());
      for (const std::size_t b : from) check_slot(b);
      std::vector<std::size_t> moved(from.size());
      for (std::size_t b = 0; b < from.size(); ++b) moved[b] = lengths[from[b]];
      if (caches.empty() || caches.front().reorders_in_place(from)) {  // (no allocation)
        for (auto& c : caches) c.reorder(from);
      } else {
        std::vector<cache_type> out;
        out.reserve(caches.size());
        for (const auto& c : caches) out.push_back(c.reordered(from));
        caches.swap(out);
      }
      lengths.swap(moved);
    }

   private:
    void check_slot(std::size_t b) const {
      if (b >= lengths.size())
        ATTNX_THROW(std::out_of_range("attnx: gpt2::batch_state: slot " + std::to_string(b) + " of " + std::to_string(lengths.size())));
    }
  };

  // Appends ids to the sequence (a prompt: prefill; one token: a decoding step) and returns the logits of every
  // new position, (ids.size(), Vocab). The sequence may not grow past Context (std::length_error; nothing is
  // appended then); an id outside [0, Vocab) throws std::out_of_range. Whatever throws later (an allocation), every
  // layer's cache is cut back to the sequence's length: s is as before the call.
  tensor<T, dyn, Vocab> step(std::span<const std::int32_t> ids, state& s, const context& ctx = current_context()) const {
    const std::size_t n = ids.size();
    return step_slots(ids, std::span<const std::size_t>(&n, 1), s.caches, std::span<std::size_t>(&s.length, 1), ctx);
  }
  // Several sequences at once: ids holds rows[b] new tokens of slot b, the slots' tokens one after another (a slot
  // with 0 has nothing this call; rows has one count per slot). Returns the logits of every new position in the
  // same order, (ids.size(), Vocab). The rules (one count per slot, their sum ids.size(), each slot within Context,
  // every id in [0, Vocab)) are checked before anything is appended; whatever throws later leaves s as it was.
  tensor<T, dyn, Vocab> step(std::span<const std::int32_t> ids, std::span<const std::size_t> rows, batch_state& s,
                             const context& ctx = current_context()) const {
    if (rows.size() != s.batch())
      attnx::detail::throw_extent_error("gpt2::step: one row count per slot of the batch state", "row_counts", rows.size(),
                                        "slots", s.batch());
    return step_slots(ids, rows, s.caches, s.lengths, ctx);
  }

  // Greedy generation: the prompt, then `count` tokens, each the argmax of the previous logits (the first
  // maximum). on_logits(step, logits row) sees the row each token was taken from.
  template <class F>
  std::vector<std::int32_t> generate(std::span<const std::int32_t> prompt, std::size_t count, state& s, F&& on_logits,
                                     const context& ctx = current_context()) const {
    std::vector<std::int32_t> out;
    tensor<T, dyn, Vocab> logits = step(prompt, s, ctx);
    for (std::size_t t = 0; t < count; ++t) {
      const T* row = logits.data() + (logits.dims()[0] - 1) * Vocab;
      on_logits(t, std::span<const T, Vocab>(row, Vocab));
      const auto id = static_cast<std::int32_t>(std::max_element(row, row + Vocab) - row);
      out.push_back(id);
      if (t + 1 < count) logits = step(std::span<const std::int32_t>(&out.back(), 1), s, ctx);
    }
    return out;
  }
  std::vector<std::int32_t> generate(std::span<const std::int32_t> prompt, std::size_t count, state& s,
                                     const context& ctx = current_context()) const {
    return generate(prompt, count, s, [](std::size_t, std::span<const T, Vocab>) {}, ctx);
  }

 private:
  // rows[b] tokens of slot b (ids, one slot after another) through every layer (caches: one per layer, a slot per
  // item), at positions lengths[b] on; lengths advanced on success, every cache cut back to them on failure.
  tensor<T, dyn, Vocab> step_slots(std::span<const std::int32_t> ids, std::span<const std::size_t> rows,
                                   std::vector<cache_type>& caches, std::span<std::size_t> lengths, const context& ctx) const {
    const std::size_t n = ids.size();
    if (n == 0) ATTNX_THROW(std::invalid_argument("attnx: gpt2::step: no tokens"));
    std::size_t total = 0;
    for (std::size_t b = 0; b < rows.size(); ++b) {
      if (rows[b] > Context - lengths[b])  // (lengths[b] <= Context: no wrap)
        ATTNX_THROW(std::length_error("attnx: gpt2::step: " + std::to_string(lengths[b]) + " tokens and " +
                                std::to_string(rows[b]) + " new ones exceed the context of " + std::to_string(Context) +
                                (rows.size() > 1 ? " (slot " + std::to_string(b) + ")" : std::string())));
      total += rows[b];  // (each at most Context: no wrap)
    }
    if (total != n)
      attnx::detail::throw_extent_error("gpt2::step: ids must hold the slots' tokens, one slot after another", "ids", n,
                                        "rows_per_slot_sum", total);
    const context_scope use(ctx);
    const auto run = [&] {
      tensor<T, dyn, D> x = wte(ids);
      for (std::size_t b = 0, at = 0; b < rows.size(); at += rows[b], ++b)  // each slot's positions
        for (std::size_t t = 0; t < rows[b]; ++t)
          for (std::size_t j = 0; j < D; ++j) x(at + t, j) += wpe(lengths[b] + t, j);
      for (std::size_t i = 0; i < Layers; ++i) x = h[i].step(x, caches[i], rows, ctx);
      tensor<T, dyn, Vocab> logits = ln_f(x) * lm_head;
      for (std::size_t b = 0; b < rows.size(); ++b) lengths[b] += rows[b];
      return logits;
    };
#if ATTNX_EXCEPTIONS
    try {
      return run();
    } catch (...) {
      for (auto& c : caches)
        for (std::size_t b = 0; b < rows.size(); ++b)
          if (c.length(b) > lengths[b]) c.truncate(b, lengths[b]);
      throw;
    }
#else
    return run();  // (a failure ends the program: nothing to undo)
#endif
  }
};

// The model from a safetensors file with Hugging Face GPT-2 names (<prefix>wte.weight, <prefix>h.0.attn.c_attn.weight,
// ...). GPT-2's projections are Conv1D layers, stored (in, out): the layout attnx multiplies with, read as stored.
// c_attn (D, 3D) holds q | k | v side by side. Every tensor's dtype and shape are checked (safetensors errors name
// the tensor and both shapes). The head count, which no shape shows, is checked against the file's "attnx.heads" when
// it states one (safetensors::check_heads; Hugging Face's files keep it in config.json instead). Returned on the
// heap: the weights of a real model do not belong on the stack.
template <class Model>
std::unique_ptr<Model> load_gpt2(const safetensors::file& f, const std::string& prefix = "transformer.") {
  using T = typename Model::value_type;
  constexpr std::size_t D = Model::d_model;
  safetensors::check_heads(f, Model::heads, Model::heads);
  auto m = std::make_unique<Model>();
  m->wte.weight = f.load<decltype(m->wte.weight)>(prefix + "wte.weight");
  m->wpe = f.load<decltype(m->wpe)>(prefix + "wpe.weight");
  const auto norm = [&](auto& ln, const std::string& name) {
    ln.weight = f.load<tensor<T, D>>(name + ".weight");
    ln.bias = f.load<tensor<T, D>>(name + ".bias");
  };
  for (std::size_t i = 0; i < Model::layers; ++i) {
    const std::string p = prefix + "h." + std::to_string(i) + ".";
    auto& b = m->h[i];
    norm(b.ln_1, p + "ln_1");
    norm(b.ln_2, p + "ln_2");
    const auto qkv = f.load<tensor<T, D, 3 * D>>(p + "attn.c_attn.weight");
    const auto qkv_b = f.load<tensor<T, 3 * D>>(p + "attn.c_attn.bias");
    b.attn.w_q = slice<1, 0, D>(qkv);
    b.attn.w_k = slice<1, D, D>(qkv);
    b.attn.w_v = slice<1, 2 * D, D>(qkv);
    b.attn.b_q = slice<0, 0, D>(qkv_b);
    b.attn.b_k = slice<0, D, D>(qkv_b);
    b.attn.b_v = slice<0, 2 * D, D>(qkv_b);
    b.attn.w_o = f.load<tensor<T, D, D>>(p + "attn.c_proj.weight");
    b.attn.b_o = f.load<tensor<T, D>>(p + "attn.c_proj.bias");
    b.mlp.up.weight = f.load<tensor<T, D, 4 * D>>(p + "mlp.c_fc.weight");
    b.mlp.up.bias = f.load<tensor<T, 4 * D>>(p + "mlp.c_fc.bias");
    b.mlp.down.weight = f.load<tensor<T, 4 * D, D>>(p + "mlp.c_proj.weight");
    b.mlp.down.bias = f.load<tensor<T, D>>(p + "mlp.c_proj.bias");
  }
  norm(m->ln_f, prefix + "ln_f");
  m->tie_lm_head();
  return m;
}

// The model as a safetensors file with Hugging Face GPT-2 names, the layout load_gpt2 reads (and
// transformers.GPT2LMHeadModel: c_attn's q | k | v side by side, Conv1D weights (in, out)); the LM head is tied and not
// stored. The metadata states the head count (load_gpt2 checks it). Throws what safetensors::save throws.
template <class Model>
void save_gpt2(const std::string& path, const Model& m, const std::string& prefix = "transformer.") {
  using T = typename Model::value_type;
  constexpr std::size_t D = Model::d_model;
  namespace st = safetensors;
  std::vector<st::entry> e;
  e.push_back(st::make_entry(prefix + "wte.weight", m.wte.weight));
  e.push_back(st::make_entry(prefix + "wpe.weight", m.wpe));
  const auto norm = [&](const auto& ln, const std::string& name) {
    e.push_back(st::make_entry(name + ".weight", ln.weight));
    e.push_back(st::make_entry(name + ".bias", ln.bias));
  };
  for (std::size_t i = 0; i < Model::layers; ++i) {
    const std::string p = prefix + "h." + std::to_string(i) + ".";
    const auto& b = m.h[i];
    norm(b.ln_1, p + "ln_1");
    const auto qkv_heap = std::make_unique<tensor<T, D, 3 * D>>();  // (a real model's does not fit the stack)
    auto& qkv = *qkv_heap;
    tensor<T, 3 * D> qkv_b;
    for (std::size_t r = 0; r < D; ++r)
      for (std::size_t c = 0; c < D; ++c) {
        qkv(r, c) = b.attn.w_q(r, c);
        qkv(r, D + c) = b.attn.w_k(r, c);
        qkv(r, 2 * D + c) = b.attn.w_v(r, c);
      }
    for (std::size_t c = 0; c < D; ++c) {
      qkv_b(c) = b.attn.b_q(c);
      qkv_b(D + c) = b.attn.b_k(c);
      qkv_b(2 * D + c) = b.attn.b_v(c);
    }
    e.push_back(st::make_entry(p + "attn.c_attn.weight", qkv));
    e.push_back(st::make_entry(p + "attn.c_attn.bias", qkv_b));
    e.push_back(st::make_entry(p + "attn.c_proj.weight", b.attn.w_o));
    e.push_back(st::make_entry(p + "attn.c_proj.bias", b.attn.b_o));
    norm(b.ln_2, p + "ln_2");
    e.push_back(st::make_entry(p + "mlp.c_fc.weight", b.mlp.up.weight));
    e.push_back(st::make_entry(p + "mlp.c_fc.bias", b.mlp.up.bias));
    e.push_back(st::make_entry(p + "mlp.c_proj.weight", b.mlp.down.weight));
    e.push_back(st::make_entry(p + "mlp.c_proj.bias", b.mlp.down.bias));
  }
  norm(m.ln_f, prefix + "ln_f");
  st::save(path, e, {{std::string(st::heads_key), std::to_string(Model::heads)}});
}

}  // namespace attnx::models
