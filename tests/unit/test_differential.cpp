// The fused kernel against the double reference of docs/design.md's semantics (reference.hpp) over many
// random problems (differential.hpp): odd sizes, head groupings, layouts, special values and score
// programs of every kind, on every instruction set this CPU has (one per problem, in turn; all of them on
// every seventh problem, with two threads). A fixed seed, so a failure is reproducible: the message names
// the problem's index and description.
// ATTNX_DIFF_PROBLEMS sets the count (default 100000; the sanitizer configurations run fewer);
// ATTNX_DIFF_ONLY=n replays problem n alone.
#define BOOST_TEST_MODULE differential
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdlib>
#include <random>

#include "differential.hpp"

namespace {
struct seeded : differential::source {
  std::mt19937 g;
  explicit seeded(unsigned s) : g(s) {}
  std::uint32_t next() override { return g(); }
};

template <class T>
std::size_t run_one(seeded& r, std::size_t index, std::size_t& compared, long only) {
  differential::instance<T> in;
  differential::make(in, r);
  if (only >= 0 && index != std::size_t(only)) return 0;
  const auto ref = reference::attention<T>(in.ref);
  std::size_t failures = 0;
  // One instruction set per problem, in turn (all of them on every seventh, with two threads).
  const auto isas = attnx::simd::supported();
  for (std::size_t k = 0; k < isas.size(); ++k) {
    if (index % 7 != 0 && k != index % isas.size()) continue;
    const attnx::simd::isa isa = isas[k];
    const unsigned threads = index % 7 == 0 ? 2 : 1;
    const std::string e = differential::run_and_compare(in, ref, isa, threads);
    ++compared;
    if (!e.empty()) {
      ++failures;
      BOOST_ERROR("problem " << index << " (" << (sizeof(T) == 4 ? "float" : "double") << ", " << attnx::simd::name(isa)
                             << ", " << threads << " threads): " << in.description << ": " << e);
    }
  }
  return failures;
}
}  // namespace

BOOST_AUTO_TEST_CASE(random_problems_against_the_reference) {
  const char* env = std::getenv("ATTNX_DIFF_PROBLEMS");
  const std::size_t problems = env ? std::strtoul(env, nullptr, 10) : 100000;
  const char* only_env = std::getenv("ATTNX_DIFF_ONLY");  // replay one problem (its index in the message)
  const long only = only_env ? std::strtol(only_env, nullptr, 10) : -1;
  seeded r(20261122);
  std::size_t failures = 0, compared = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t n = 0; n < problems && failures < 10; ++n)
    failures += n % 2 ? run_one<double>(r, n, compared, only) : run_one<float>(r, n, compared, only);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST_MESSAGE(problems << " problems, " << compared << " kernel runs compared, " << failures << " failures, " << s
                              << " s");
  BOOST_TEST(failures == 0u);
}
