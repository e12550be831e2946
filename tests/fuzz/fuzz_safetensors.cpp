// libFuzzer target: the safetensors loader on arbitrary bytes (attnx::safetensors::file::from_memory).
// Any input must either be refused with an attnx::safetensors::error or give a header whose every entry
// is consistent (offsets inside the data, shape x dtype size equal to the byte span, no overlaps), and
// loading any entry into a tensor of any shape must succeed or throw a safetensors::error. Anything else
// (another exception, a crash, a sanitizer report) is a finding.
#include <attnx/attnx.hpp>
#include <attnx/io/safetensors.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <vector>

namespace st = attnx::safetensors;

namespace {
[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_safetensors: %s\n", what);
  std::abort();
}
template <class Tensor>
void try_load(const st::file& f, const std::string& name) {
  try {
    const Tensor t = f.load<Tensor>(name);
    (void)t;
  } catch (const st::error&) {
  }
  try {
    if constexpr (Tensor::rank == 2) {
      const Tensor t = f.load_transposed<Tensor>(name);
      (void)t;
    }
  } catch (const st::error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<unsigned char> bytes(data, data + size);
  try {
    const st::file f = st::file::from_memory(std::move(bytes), "fuzz input");
    const std::size_t data_bytes = size - 8 - std::size_t(data[0] | data[1] << 8 | data[2] << 16 | std::size_t(data[3]) << 24 |
                                                          std::size_t(data[4]) << 32 | std::size_t(data[5]) << 40 |
                                                          std::size_t(data[6]) << 48 | std::size_t(data[7]) << 56);
    std::vector<std::pair<std::size_t, std::size_t>> spans;
    for (const auto& [name, t] : f.tensors()) {
      if (t.begin > t.end || t.end > data_bytes) finding("accepted offsets outside the data");
      const std::size_t es = st::dtype_size(t.dtype);
      if (es == 0) finding("accepted an unknown dtype");
      if (t.elements() * es != t.end - t.begin) finding("accepted a size that is not shape x dtype size");
      // the element count must not have wrapped: recount with checks
      unsigned __int128 n = 1;
      for (auto e : t.shape) n *= e;
      if (n * es != t.end - t.begin) finding("the element count wrapped around");
      if (t.end > t.begin) spans.emplace_back(t.begin, t.end);
      try_load<attnx::tensor<float, 2, 3>>(f, name);
      try_load<attnx::tensor<double, 4>>(f, name);
      try_load<attnx::tensor<float, 1>>(f, name);
      try_load<attnx::tensor<bool, 2, 2>>(f, name);  // (BOOL and U8: every byte checked to be 0 or 1)
    }
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i)
      if (spans[i].first < spans[i - 1].second) finding("accepted overlapping tensors");
  } catch (const st::error&) {
  }
  return 0;
}
