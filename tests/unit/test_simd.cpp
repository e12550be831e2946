// simd/vec*.hpp: the vector operations the kernels are written in, on every instruction set this CPU runs,
// against plain loops over the lanes. The kernels reach some forms on one instruction set only (any_above and
// any_abs_above from AVX-512 decode paths, for instance); these tests exercise each form on each set.
#define BOOST_TEST_MODULE simd
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <cstring>
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

namespace {
findings run_scalar_float() { return scalar_checks::checks<float, sd::scalar_t>::all(); }
findings run_scalar_double() { return scalar_checks::checks<double, sd::scalar_t>::all(); }

}  // namespace

#if ATTNX_SIMD_X86
ATTNX_TARGET_AVX2_BEGIN
namespace avx2_checks {
#include "simd_checks.inc"
}  // namespace avx2_checks
namespace {
findings run_avx2_float() { return avx2_checks::checks<float, sd::avx2_t>::all(); }
findings run_avx2_double() { return avx2_checks::checks<double, sd::avx2_t>::all(); }
}  // namespace
ATTNX_TARGET_END
ATTNX_TARGET_AVX512_BEGIN
namespace avx512_checks {
#include "simd_checks.inc"
}  // namespace avx512_checks
namespace {
findings run_avx512_float() { return avx512_checks::checks<float, sd::avx512_t>::all(); }
findings run_avx512_double() { return avx512_checks::checks<double, sd::avx512_t>::all(); }
}  // namespace
ATTNX_TARGET_END
#endif

namespace {
void report(const char* what, const findings& f) {
  BOOST_TEST(f.bad == 0, what << ": " << f.bad << " mismatches, the first " << f.first);
}
}  // namespace

BOOST_AUTO_TEST_CASE(scalar_lanes) {
  report("scalar float", run_scalar_float());
  report("scalar double", run_scalar_double());
}

#if ATTNX_SIMD_X86
BOOST_AUTO_TEST_CASE(avx2_lanes) {
  if (!sd::cpu_supports(sd::isa::avx2)) {
    BOOST_TEST_MESSAGE("no AVX2 on this CPU: skipped");
    return;
  }
  report("avx2 float", run_avx2_float());
  report("avx2 double", run_avx2_double());
}

BOOST_AUTO_TEST_CASE(avx512_lanes) {
  if (!sd::cpu_supports(sd::isa::avx512)) {
    BOOST_TEST_MESSAGE("no AVX-512 on this CPU: skipped");
    return;
  }
  report("avx512 float", run_avx512_float());
  report("avx512 double", run_avx512_double());
}
#endif
