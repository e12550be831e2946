#define BOOST_TEST_MODULE torch_weights
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>
#include <attnx/io/safetensors.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "messages.hpp"

// torch.nn.MultiheadAttention's own state dict (the packed in_proj_weight), PyTorch's boolean masks (True =
// blocked, stored as BOOL) through blocked(m), and its default head-averaged weights, against PyTorch 1.13's outputs
// (tests/data/torch_mha.safetensors, written by scripts/torch_mha_reference.py: float32 weights, outputs in float64).
// The head-count trap: a module with 8 heads reads the same tensors and computes something else; the file's
// "attnx.heads" makes the loader refuse it.

using namespace attnx;
namespace st = attnx::safetensors;

namespace {
const std::filesystem::path data = std::filesystem::path(__FILE__).parent_path() / "../data/torch_mha.safetensors";
using M = multi_head_attention<float, 16, 4>;

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
  const auto am = f.load<tensor<bool, 5, 5>>("attn_mask");
  tensor<bool, 2, 1, 1, 5> kpm;  // (B, L_k) broadcast over heads and query rows
  f.load_into("key_padding_mask", view<bool, 2, 5>(kpm.data(), kpm.numel()));
  // The masks as torch made them: causal (True above the diagonal), item 1's last two keys padding.
  for (std::size_t i = 0; i < 5; ++i)
    for (std::size_t j = 0; j < 5; ++j) BOOST_TEST(am(i, j) == (j > i));
  for (std::size_t j = 0; j < 5; ++j) BOOST_TEST((kpm(0, 0, 0, j) == false && kpm(1, 0, 0, j) == (j >= 3)));
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

  // PyTorch's key_padding_mask as torch saved it, (B, L_k), through key_padding_mask(): the same output, and the
  // same averaged weights.
  const auto kpm2 = f.load<tensor<bool, 2, 5>>("key_padding_mask");
  const tensor<float, 2, 5, 16> y3 = m(x, blocked(am), key_padding_mask(kpm2));
  BOOST_TEST(max_err(y3, want) < 2e-6);
  BOOST_TEST(max_err(average_heads(m.weights(x, blocked(am), key_padding_mask(kpm2))), want_w) < 1e-6);
}

// nn.MultiheadAttention(16, 4) loaded as a module of 8 heads of 2: every tensor has the same shape (in_proj_weight
// (48, 16), out_proj.weight (16, 16)), so nothing but the file's head count tells them apart.
BOOST_AUTO_TEST_CASE(another_head_count_is_refused) {
  using M8 = multi_head_attention<float, 16, 8>;
  const st::file f(data);
  BOOST_TEST(f.metadata().at("attnx.heads") == "4");
  BOOST_CHECK_EXCEPTION((void)st::load_torch_multihead_attention<M8>(f), st::shape_error,
                        test_support::is("attnx: safetensors: '" + f.path() + "' holds a module with 4 heads (__metadata__ "
                                         "\"attnx.heads\"), but the module has 8: the head count is not in the weights' "
                                         "shapes (they hold heads x d_k), and another count computes another attention"));

  // What the check prevents: the same tensors, without the head count, load into the 8-head module and give another
  // output than PyTorch's.
  std::vector<st::entry> entries;
  for (const char* name : {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}) {
    const auto& t = f.info(name);
    if (t.shape.size() == 2) entries.push_back(st::make_entry(name, f.load<tensor<float, dyn, 16>>(name)));
    else entries.push_back(st::make_entry(name, f.load<tensor<float, dyn>>(name)));
  }
  const auto bare = std::filesystem::temp_directory_path() / "attnx_torch_mha_no_heads.safetensors";
  st::save(bare, entries);
  const M8 m8 = st::load_torch_multihead_attention<M8>(st::file(bare));
  std::filesystem::remove(bare);
  const auto x = f.load<tensor<float, 2, 5, 16>>("x");
  const auto am = f.load<tensor<bool, 5, 5>>("attn_mask");
  const auto want = f.load<tensor<double, 2, 5, 16>>("y");
  tensor<bool, 2, 1, 1, 5> kpm;
  f.load_into("key_padding_mask", view<bool, 2, 5>(kpm.data(), kpm.numel()));
  const tensor<float, 2, 5, 16> y8 = m8(x, blocked(am), blocked(kpm));
  const double e = max_err(y8, want);
  BOOST_TEST_MESSAGE("8 heads instead of 4: max error " << e);
  BOOST_TEST(e > 0.05);
}
