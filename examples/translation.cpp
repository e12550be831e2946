// Seed 003: attention in translation. A decoder producing target token i asks the encoder's memory
// "which source tokens matter now?": cross-attention, queries from the decoder (L_q = 4 target tokens),
// keys and values from the encoder (L_k = 6 source positions). Sentences in a batch have different
// lengths, so the shorter source is padded and a key-padding mask blocks the padding (seed 003 fills
// blocked scores with -1e9 before the softmax). Two scoring functions:
//   dot product  s_ij = q_i . k_j / sqrt(d)                       (Transformer, seed 003 section 4.1)
//   additive     s_ij = w^T tanh(W1^T q_i + W2^T k_j + b)          (Bahdanau, seed 003 section 3.2)
// Prints the alignment (attention weight) matrices; checks that every row sums to 1, that padded
// keys get weight exactly 0, and that each target word attends most to the source word it translates.
//
// The model is a toy with hand-set weights, so that the alignments can be read:
//  * encoder states are fixed random vectors of norm sqrt(d) per source word (d = 8);
//  * the decoder state for a target word is its aligned source word's vector plus noise (a decoder
//    that has learned the dictionary);
//  * the additive scorer has 16 hidden units, two per feature: unit a computes tanh(q_a - k_a + 1),
//    unit a + 8 computes tanh(q_a - k_a - 1), and w = [+1 ... | -1 ...] subtracts them, so each pair
//    is a bump of q_a - k_a that is largest at 0: a similarity a trained scorer could have learned.
#include <attnx/attnx.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <random>
#include <string_view>

using namespace attnx;

namespace {

constexpr std::size_t B = 2, Lq = 4, Lk = 6, D = 8, H = 2 * D;

// Source and target sentences; alignment[b][i] = the source position target word i translates.
constexpr const char* source[B][Lk] = {{"le", "chat", "noir", "dort", "<pad>", "<pad>"},
                                       {"je", "ne", "le", "sais", "pas", "."}};
constexpr const char* target[B][Lq] = {{"the", "black", "cat", "sleeps"}, {"I", "do", "not", "know"}};
constexpr std::size_t alignment[B][Lq] = {{0, 2, 1, 3}, {0, 1, 4, 3}};
constexpr std::array<std::size_t, B> source_lengths{4, 6};

using memory_t = tensor<double, batch<B>, seq_k<Lk>, d_model<D>>;
using decoder_t = tensor<double, batch<B>, seq_q<Lq>, d_model<D>>;
using weights_t = tensor<double, batch<B>, seq_q<Lq>, seq_k<Lk>>;

int failures = 0;
void expect(bool ok, const char* what, std::size_t b = 0, std::size_t i = 0) {
  if (!ok) {
    std::printf("  CHECK FAILED: %s (sentence %zu, row %zu)\n", what, b, i);
    ++failures;
  }
}

void print_alignment(const char* title, const weights_t& A) {
  std::printf("\n%s\n", title);
  for (std::size_t b = 0; b < B; ++b) {
    std::printf("  %-8s", "");
    for (std::size_t j = 0; j < Lk; ++j) std::printf("%7s", source[b][j]);
    std::printf("\n");
    for (std::size_t i = 0; i < Lq; ++i) {
      std::printf("  %-8s", target[b][i]);
      double sum = 0;
      for (std::size_t j = 0; j < Lk; ++j) {
        std::printf("%7.3f", A(b, i, j));
        sum += A(b, i, j);
      }
      std::printf("   sum %.3f\n", sum);
    }
  }
}

// Rows sum to 1, padding gets exactly 0, the aligned source word gets the largest weight.
void check_alignment(const char* name, const weights_t& A) {
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < Lq; ++i) {
      double sum = 0;
      std::size_t best = 0;
      for (std::size_t j = 0; j < Lk; ++j) {
        sum += A(b, i, j);
        if (A(b, i, j) > A(b, i, best)) best = j;
        if (j >= source_lengths[b]) expect(A(b, i, j) == 0.0, name, b, i);
      }
      expect(std::abs(sum - 1) <= 1e-12, name, b, i);
      expect(best == alignment[b][i], name, b, i);
    }
}

}  // namespace

int main() {
  // Encoder memory: one random vector per source word (the same word, the same vector), 0 for padding.
  std::mt19937 gen(3);
  std::normal_distribution<double> normal(0.0, 1.0);
  // Like the output of a layer norm, every state has norm sqrt(d).
  const auto random_state = [&] {
    std::array<double, D> v{};
    double n = 0;
    for (auto& x : v) x = normal(gen), n += x * x;
    for (auto& x : v) x *= std::sqrt(D / n);
    return v;
  };
  memory_t memory;
  const std::array<double, D> le = random_state();
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t j = 0; j < Lk; ++j) {
      const bool pad = j >= source_lengths[b];
      const std::array<double, D> v = std::string_view(source[b][j]) == "le" ? le : random_state();
      for (std::size_t p = 0; p < D; ++p) memory(b, j, p) = pad ? 0.0 : v[p];
    }
  // Decoder states: the aligned source vector plus noise.
  decoder_t decoder;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < Lq; ++i)
      for (std::size_t p = 0; p < D; ++p) decoder(b, i, p) = memory(b, alignment[b][i], p) + 0.3 * normal(gen);
  // Values: a projection of the memory (what each source position contributes to the context).
  const auto W_V = tensor<double, d_model<D>, d_v<4>>::generate([](auto p, auto c) { return (p + c) % 3 == 0 ? 0.5 : -0.25; });

  // ---- dot-product scores, key padding by run-time lengths, filled with -1e9 as in seed 003 ----
  const weights_t A_dot = softmax(mask(dot_scores(decoder, memory), key_lengths(source_lengths), -1e9));
  // the context vectors, the same expression followed by the values (the score matrix is never stored)
  const tensor<double, batch<B>, seq_q<Lq>, d_v<4>> context =
      softmax(mask(dot_scores(decoder, memory), key_lengths(source_lengths), -1e9)) * (memory * W_V);
  print_alignment("Dot-product alignment, softmax(mask(q . k / sqrt(8), key lengths {4, 6}, -1e9)):", A_dot);
  check_alignment("dot-product alignment", A_dot);

  // ---- additive (Bahdanau) scores: a bump of q_a - k_a per feature, built from tanh units ----
  const auto W1 = tensor<double, d_model<D>, ax<struct hidden, H>>::generate([](auto p, auto a) { return p == a % D ? 1.0 : 0.0; });
  const auto W2 = tensor<double, d_model<D>, ax<struct hidden, H>>::generate([](auto p, auto a) { return p == a % D ? -1.0 : 0.0; });
  const auto w = tensor<double, ax<struct hidden, H>>::generate([](auto a) { return a < D ? 1.0 : -1.0; });
  const auto bias = tensor<double, ax<struct hidden, H>>::generate([](auto a) { return a < D ? 1.0 : -1.0; });
  const weights_t A_add =
      softmax(mask(additive_scores(decoder, memory, W1, W2, w, bias), key_lengths(source_lengths), -1e9));
  print_alignment("Additive (Bahdanau) alignment, softmax(mask(w^T tanh(W1 q + W2 k + b), key lengths, -1e9)):", A_add);
  check_alignment("additive alignment", A_add);

  // ---- the first sentence alone, with a compile-time padding length: the same weights ----
  const auto decoder0 = tensor<double, seq_q<Lq>, d_model<D>>::generate([&](auto i, auto p) { return decoder(0, i, p); });
  const auto memory0 = tensor<double, seq_k<Lk>, d_model<D>>::generate([&](auto j, auto p) { return memory(0, j, p); });
  const tensor<double, seq_q<Lq>, seq_k<Lk>> A0 = softmax(mask(dot_scores(decoder0, memory0), key_padding<4>, -1e9));
  double diff = 0;
  for (std::size_t i = 0; i < Lq; ++i)
    for (std::size_t j = 0; j < Lk; ++j) diff = std::max(diff, std::abs(A0(i, j) - A_dot(0, i, j)));
  std::printf("\nSentence 0 alone with key_padding<4>: max difference from the batched weights %.1e\n", diff);
  expect(diff == 0.0, "key_padding<4> on sentence 0 must give the batched weights");

  std::printf("\nContext vectors (weights x values), sentence 0, 'the black cat sleeps':\n");
  for (std::size_t i = 0; i < Lq; ++i)
    std::printf("  %-8s [% .3f % .3f % .3f % .3f]\n", target[0][i], context(0, i, 0), context(0, i, 1), context(0, i, 2),
                context(0, i, 3));

  std::printf("\n%s\n", failures ? "FAILED" : "all checks passed: rows sum to 1, padded keys get weight 0, "
                                               "each target word attends most to its source word");
  return failures ? 1 : 0;
}
