// Sequences whose length comes from the data: attnx::dyn.
//
// Each line of input (stdin, or the sample sentences below when stdin is a terminal or empty) is a
// sequence of characters of a length nobody knows at compile time. Each character is embedded
// (a fixed table of 128 rows of d_model = 32 numbers), and the sequence, a tensor of shape
// (dyn, d_model<32>), goes through a causal multi_head_attention<float, 32, 4>: one program, one
// instantiation, any length; no padding to a compile-time bucket.
//
// The feature size stays static (d_model<32>): contracting it with anything else is still a compile
// error. The length is checked at run time, once per expression node: a memory of another batch size, or
// a mask of another length, throws attnx::extent_error naming the rule and both sizes (shown at the end).
//
// Checked as it runs: the model is causal, so the output for the first k characters of a line is the
// first k rows of the output for the whole line (every prefix length is run).
#include <attnx/attnx.hpp>

#include "support/wave.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace attnx;

constexpr std::size_t D = 32, H = 4;
using mha_t = multi_head_attention<float, D, H>;
using sequence = tensor<float, seq<dyn>, d_model<D>>;  // (L, d_model), L known at run time

// The characters of a line, one embedding row each.
sequence embed(const std::string& line, const tensor<float, 128, D>& table) {
  sequence x(line.size());
  for (std::size_t i = 0; i < line.size(); ++i) {
    const auto c = static_cast<std::size_t>(static_cast<unsigned char>(line[i]) & 127u);
    for (std::size_t j = 0; j < D; ++j) x(i, j) = table(c, j);
  }
  return x;
}

int main() {
  mha_t m;
  m.w_q = wave<mha_t::w_q_type>(0.20, 0.9, 0.2);
  m.w_k = wave<mha_t::w_k_type>(0.20, 0.5, 0.7);
  m.w_v = wave<mha_t::w_v_type>(0.25, 0.3, 0.4);
  m.w_o = wave<mha_t::w_o_type>(0.20, 0.8, 0.9);
  const auto table = wave<tensor<float, 128, D>>(0.5, 0.37, 0.1);

  std::vector<std::string> lines;
  if (!isatty(0))
    for (std::string s; std::getline(std::cin, s);)
      if (!s.empty()) lines.push_back(s);
  if (lines.empty()) lines = {"attention", "is all you need", "a", "sequences of any length, one instantiation"};

  int failures = 0;
  for (const std::string& line : lines) {
    const sequence x = embed(line, table);
    const sequence y = m(x, causal);  // (L, d_model): the module on a run-time length
    double norm = 0;
    for (float v : y) norm += double(v) * v;
    std::printf("L = %2zu  %-45s |y| = %.6f  y[L-1][0..3] = %+.5f %+.5f %+.5f\n", y.dims()[0], ("\"" + line + "\"").c_str(),
                std::sqrt(norm), y(line.size() - 1, 0), y(line.size() - 1, 1), y(line.size() - 1, 2));
    // Causality: every prefix gives the first rows of the whole line's output.
    for (std::size_t k = 1; k < line.size(); ++k) {
      const sequence yk = m(embed(line.substr(0, k), table), causal);
      for (std::size_t i = 0; i < k; ++i)
        for (std::size_t j = 0; j < D; ++j)
          if (std::abs(yk(i, j) - y(i, j)) > 1e-5f * (1 + std::abs(y(i, j)))) {
            if (failures++ < 5)
              std::printf("  prefix %zu, row %zu, column %zu: %.7f vs %.7f\n", k, i, j, double(yk(i, j)), double(y(i, j)));
          }
    }
  }

  // A rule with a run-time length: a batch of two sequences attending to a memory of three.
  tensor<float, dyn, seq<dyn>, d_model<D>> xb(2, 5), memory(3, 7);
  try {
    const tensor<float, dyn, seq<dyn>, d_model<D>> out = m(xb, memory);
    std::printf("no error?\n");
    ++failures;
  } catch (const extent_error& e) {
    std::printf("\ncross-attention with a memory of another batch size:\n  %s\n", e.what());
  }

  std::printf("%s\n", failures ? "FAILED: a prefix disagreed with the whole line" : "every prefix agrees with the whole line");
  return failures ? 1 : 0;
}
