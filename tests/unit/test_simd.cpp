// simd/vec*.hpp: the vector operations the kernels are written in, on every instruction set this CPU runs,
// against plain loops over the lanes. The kernels reach some forms on one instruction set only (any_above and
// any_abs_above from AVX-512 decode paths, for instance); these tests exercise each form on each set.
#define BOOST_TEST_MODULE simd
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
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
