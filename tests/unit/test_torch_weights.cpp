#define BOOST_TEST_MODULE torch_weights
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>
#include <attnx/io/safetensors.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>

// torch.nn.MultiheadAttention's own state dict (the packed in_proj_weight), PyTorch's boolean masks (True =
// blocked) through blocked(m), and its default head-averaged weights, against PyTorch 1.13's outputs
// (tests/data/torch_mha.safetensors, written by scripts/torch_mha_reference.py: float32 weights, outputs in float64).

using namespace attnx;
namespace st = attnx::safetensors;

namespace {
const std::filesystem::path data = std::filesystem::path(__FILE__).parent_path() / "../data/torch_mha.safetensors";
using M = multi_head_attention<float, 16, 4>;

template <class B, class I>
B as_bool(const I& ints) {
  B b;
  for (std::size_t i = 0; i < b.numel(); ++i) b.data()[i] = ints.data()[i] != 0;
  return b;
}
template <class G, class W>
double max_err(const G& got, const W& want) {
  double e = 0;
  for (std::size_t i = 0; i < want.numel(); ++i) e = std::max(e, std::abs(double(got.data()[i]) - want.data()[i]));
  return e;
}
}  // namespace

BOOST_AUTO_TEST_CASE(nn_multihead_attention_with_pytorch_masks) {
  const st::file f(data);
  const M m = st::load_torch_multihead_attention<M>(f);
  const auto x = f.load<tensor<float, 2, 5, 16>>("x");
  const auto am = as_bool<tensor<bool, 5, 5>>(f.load<tensor<std::int32_t, 5, 5>>("attn_mask"));
  const auto kpm = as_bool<tensor<bool, 2, 1, 1, 5>>(f.load<tensor<std::int32_t, 2, 5>>("key_padding_mask"));
  const auto want = f.load<tensor<double, 2, 5, 16>>("y");
  const auto want_w = f.load<tensor<double, 2, 5, 5>>("weights");

  const tensor<float, 2, 5, 16> y = m(x, blocked(am), blocked(kpm));
  const double e = max_err(y, want);
  BOOST_TEST_MESSAGE("output: max error " << e);
  BOOST_TEST(e < 2e-6);  // measured 2.0e-7 (float against PyTorch's float64 of the same weights)

  const auto w = average_heads(m.weights(x, blocked(am), blocked(kpm)));
  static_assert(decltype(w)::rank == 3);
  const double ew = max_err(w, want_w);
  BOOST_TEST_MESSAGE("averaged weights: max error " << ew);
  BOOST_TEST(ew < 1e-6);

  // The same masks in attnx's polarity (allowed) are the negations: the same output.
  tensor<bool, 5, 5> am_allowed;
  for (std::size_t i = 0; i < 5; ++i)
    for (std::size_t j = 0; j < 5; ++j) am_allowed(i, j) = !am(i, j);
  const tensor<float, 2, 5, 16> y2 = m(x, allowed(am_allowed), blocked(kpm));
  BOOST_TEST(max_err(y2, want) < 2e-6);
  // PyTorch's mask said to be in the other polarity: a different result. Passed unwrapped, a bool mask is a compile
  // error (compile_fail mask_needs_polarity), so the polarity is always written where the mask is used.
  const tensor<float, 2, 5, 16> wrong = m(x, allowed(am), blocked(kpm));
  BOOST_TEST(max_err(wrong, want) > 1e-2);
}
