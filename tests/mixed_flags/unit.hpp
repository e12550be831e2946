// One computation compiled in several translation units, each with other target flags (see
// tests/CMakeLists.txt): attention with a causal mask, and a projection, on the default context.
#pragma once

#include <string>
#include <vector>

struct mixed_result {
  std::string flags;         // the TU's flags, as built
  std::string isa;           // the default context's instruction set, seen from that TU
  std::size_t fused_runs;    // fused kernel runs of the attention (1)
  std::vector<float> attn;   // (2, 4, 70, 24)
  std::vector<float> proj;   // (140, 40)
};

mixed_result run_default_flags();
mixed_result run_avx2_flags();
mixed_result run_native_flags();
