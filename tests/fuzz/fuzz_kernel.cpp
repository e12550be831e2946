// libFuzzer target: differential testing of the fused kernel. The input bytes drive the problem generator
// of tests/unit/differential.hpp (sizes, layouts, special values, score programs); the problem runs on
// every instruction set this CPU has and must agree with the double reference of docs/design.md's
// semantics (tests/unit/reference.hpp). A disagreement aborts with the problem's description.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../unit/differential.hpp"

namespace {
// The input as a stream of 32-bit numbers; past its end, a simple generator seeded by it (so that short
// inputs still give whole problems, and every byte still matters).
struct bytes_source : differential::source {
  const std::uint8_t* p;
  std::size_t n, at = 0;
  std::uint64_t state;
  bytes_source(const std::uint8_t* d, std::size_t s) : p(d), n(s), state(0x9E3779B97F4A7C15ull ^ s) {
    for (std::size_t i = 0; i < s; ++i) state = (state ^ d[i]) * 0x100000001B3ull;
  }
  std::uint32_t next() override {
    if (at + 4 <= n) {
      std::uint32_t v;
      std::memcpy(&v, p + at, 4);
      at += 4;
      return v;
    }
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(state >> 32);
  }
};

template <class T>
void check(bytes_source& r, unsigned threads) {
  differential::instance<T> in;
  differential::make(in, r);
  const auto ref = reference::attention<T>(in.ref);
  for (attnx::simd::isa isa : attnx::simd::supported()) {
    const std::string e = differential::run_and_compare(in, ref, isa, threads);
    if (!e.empty()) {
      std::fprintf(stderr, "fuzz_kernel: %s, %s, %u threads: %s: %s\n", sizeof(T) == 4 ? "float" : "double",
                   std::string(attnx::simd::name(isa)).c_str(), threads, in.description.c_str(), e.c_str());
      std::abort();
    }
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  bytes_source r(data + 1, size - 1);
  const unsigned threads = (data[0] & 2) ? 2 : 1;
  if (data[0] & 1) check<double>(r, threads);
  else check<float>(r, threads);
  return 0;
}
