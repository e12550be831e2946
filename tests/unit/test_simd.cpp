// simd/vec*.hpp: the vector operations the kernels are written in, on every instruction set this CPU runs,
// against plain loops over the lanes. The kernels reach some forms on one instruction set only (any_above and
// any_abs_above from AVX-512 decode paths, for instance); these tests exercise each form on each set.
#define BOOST_TEST_MODULE simd
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>
#include <attnx/simd/vec.hpp>  // (the SIMD layer itself: the kernels' headers are the library's)

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace sd = attnx::simd;

namespace {

// What a check found: the number of mismatches and the first one described.
struct findings {
  int bad = 0;
  std::string first;
  void fail(const std::string& what) {
    if (bad++ == 0) first = what;
  }
};

}  // namespace

namespace scalar_checks {
#include "simd_checks.inc"
}  // namespace scalar_checks

#if ATTNX_SIMD_X86
ATTNX_TARGET_AVX2_BEGIN
namespace avx2_checks {
#include "simd_checks.inc"
}  // namespace avx2_checks
ATTNX_TARGET_END
ATTNX_TARGET_AVX512_BEGIN
namespace avx512_checks {
#include "simd_checks.inc"
}  // namespace avx512_checks
ATTNX_TARGET_END
#endif

namespace {
// The checks of one instruction set (Checks: that set's checks template), float and double.
template <template <class, class> class Checks, class I>
void run(const char* isa) {
  if (!sd::cpu_supports(I::id)) {
    BOOST_TEST_MESSAGE(isa << ": not on this CPU, skipped");
    return;
  }
  const findings f = Checks<float, I>::all(), d = Checks<double, I>::all();
  BOOST_TEST(f.bad == 0, isa << " float: " << f.bad << " mismatches, the first " << f.first);
  BOOST_TEST(d.bad == 0, isa << " double: " << d.bad << " mismatches, the first " << d.first);
}
}  // namespace

BOOST_AUTO_TEST_CASE(scalar_lanes) { run<scalar_checks::checks, sd::scalar_t>("scalar"); }
#if ATTNX_SIMD_X86
BOOST_AUTO_TEST_CASE(avx2_lanes) { run<avx2_checks::checks, sd::avx2_t>("avx2"); }
BOOST_AUTO_TEST_CASE(avx512_lanes) { run<avx512_checks::checks, sd::avx512_t>("avx512"); }
#endif

// simd::amd_family (the decode kernel picks its prefetches by it) against the kernel's own report in
// /proc/cpuinfo: the family number for an AMD CPU ("AuthenticAMD"), 0 for any other vendor.
BOOST_AUTO_TEST_CASE(amd_family_matches_proc_cpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, vendor;
  long family = -1;
  while (std::getline(in, line) && (vendor.empty() || family < 0)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_first_of(" \t"));
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : std::string{};
    if (key == "vendor_id" && vendor.empty()) vendor = value;
    if (line.rfind("cpu family", 0) == 0 && family < 0) family = std::stol(value);
  }
  if (vendor.empty() || family < 0) {
    BOOST_TEST_MESSAGE("no vendor_id / cpu family in /proc/cpuinfo: nothing to compare");
    return;
  }
  BOOST_TEST_MESSAGE("vendor " << vendor << ", family " << family << ", amd_family " << sd::amd_family());
  BOOST_TEST(sd::amd_family() == (vendor == "AuthenticAMD" ? static_cast<unsigned>(family) : 0u));
}
