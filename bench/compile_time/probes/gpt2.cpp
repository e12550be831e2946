// Probe (d): GPT-2 in its 124M configuration, loaded from a safetensors file, generating greedily.
#include <attnx/attnx.hpp>
#include <attnx/io/safetensors.hpp>
#include <attnx/models/gpt2.hpp>
#include <cstdint>
#include <vector>
using model = attnx::models::gpt2<float, 50257, 1024, 768, 12, 12>;
int main(int argc, char** argv) {
  if (argc < 2) return 0;
  const attnx::safetensors::file f(argv[1]);
  const auto m = attnx::models::load_gpt2<model>(f);
  model::state s;
  const std::vector<std::int32_t> prompt{464, 3290, 318};
  const auto out = m->generate(prompt, 16, s);
  return out.size() == 16 ? 0 : 1;
}
