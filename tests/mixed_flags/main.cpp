// Translation units compiled with different -march flags, linked into one program: attnx's inline
// definitions do not depend on the flags (the vector paths are compiled under fixed target regions and
// chosen at run time), so every TU picks the same path from cpuid and computes the same numbers.
#define BOOST_TEST_MODULE mixed_flags
#include <boost/test/unit_test.hpp>

#include <attnx/simd/isa.hpp>

#include <cmath>

#include "unit.hpp"

BOOST_AUTO_TEST_CASE(same_path_same_numbers) {
  const mixed_result r[] = {run_default_flags(), run_avx2_flags(), run_native_flags()};
  for (const auto& x : r) {
    BOOST_TEST_MESSAGE(x.flags << ": " << x.isa);
    BOOST_TEST(x.isa == std::string(attnx::simd::name(attnx::simd::best_supported())), x.flags);
    BOOST_TEST(x.fused_runs == 1u, x.flags);
    BOOST_TEST(x.attn.size() == r[0].attn.size());
    BOOST_TEST(x.proj.size() == r[0].proj.size());
    // The same kernels ran, on the same data: only the code around them (element-wise loops, in each
    // TU's own flags, e.g. with FMA contraction) may round differently.
    for (std::size_t i = 0; i < x.attn.size(); ++i)
      if (!(std::abs(x.attn[i] - r[0].attn[i]) <= 1e-5f)) {
        BOOST_ERROR(x.flags << ": attention element " << i << " " << x.attn[i] << " vs " << r[0].attn[i]);
        break;
      }
    for (std::size_t i = 0; i < x.proj.size(); ++i)
      if (!(std::abs(x.proj[i] - r[0].proj[i]) <= 1e-4f * (1 + std::abs(r[0].proj[i])))) {
        BOOST_ERROR(x.flags << ": projection element " << i << " " << x.proj[i] << " vs " << r[0].proj[i]);
        break;
      }
  }
}
