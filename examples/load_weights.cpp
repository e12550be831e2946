// Weights from a file: a multi-head attention (d_model 16, 4 query heads sharing 2 key/value heads,
// biases) loaded from a safetensors checkpoint in PyTorch's layout, run on an input stored beside it,
// and checked against the output that scripts/make_safetensors.py computed with plain double loops.
//
//   load_weights [DATA_DIR]      (default: examples/data next to this file)
//
// The files are examples/data/mha_small.safetensors (weights, F32, "attn.q_proj.weight" (out, in), ...)
// and mha_small.expected.safetensors (x, F32; y, F64; the mask in the metadata). The weights' file states its head
// counts in its metadata ("attnx.heads", "attnx.kv_heads"), which load_mha checks. Regenerate them with
// `python3 scripts/make_safetensors.py`. This example needs nlohmann/json (attnx/io/safetensors.hpp).
#include <attnx/attnx.hpp>
#include <attnx/io/safetensors.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace st = attnx::safetensors;

constexpr std::size_t B = 2, L = 5, D = 16;
using mha_t = attnx::multi_head_attention<float, D, 4, attnx::mha_options{.kv_heads = 2}>;

int main(int argc, char** argv) {
  const fs::path dir = argc > 1 ? fs::path(argv[1]) : fs::path(__FILE__).parent_path() / "data";
  try {
    const st::file weights(dir / "mha_small.safetensors");
    std::cout << "weights: " << fs::path(weights.path()).filename().string() << ", " << weights.tensors().size() << " tensors\n";
    for (const auto& [name, t] : weights.tensors())
      std::cout << "  " << name << "  " << t.dtype << " " << st::shape_text(t.shape) << "\n";

    // PyTorch names and layout: weight (out, in) is read transposed into attnx's (in, out). The shapes are checked
    // against the module's, and the head counts against the file's "attnx.heads" and "attnx.kv_heads".
    const mha_t mha = st::load_mha<mha_t>(weights, st::mha_names::hugging_face("attn."), st::weight_layout::out_in);
    std::cout << "module: d_model " << mha_t::d_model << ", heads " << mha_t::heads << ", kv_heads " << mha_t::kv_heads
              << ", d_k " << mha_t::d_k << ", d_v " << mha_t::d_v << ", " << mha_t::parameter_count << " parameters\n";

    const st::file expected(dir / "mha_small.expected.safetensors");
    const auto x = expected.load<attnx::tensor<float, B, L, D>>("x");
    const auto want = expected.load<attnx::tensor<double, B, L, D>>("y");
    std::vector<std::size_t> lens;
    std::istringstream in(expected.metadata().at("key_lengths"));
    for (std::string item; std::getline(in, item, ',');) lens.push_back(std::stoul(item));

    const auto runs = attnx::default_context().fused_runs();
    const attnx::tensor<float, B, L, D> y = mha(x, attnx::causal, attnx::key_lengths(lens));
    double worst = 0;
    for (std::size_t i = 0; i < y.size; ++i) worst = std::max(worst, std::abs(double(y.data()[i]) - want.data()[i]));
    std::cout << "y = mha(x, causal, key_lengths{" << lens[0] << ", " << lens[1] << "}): shape (" << B << ", " << L << ", " << D
              << "), fused kernel runs: " << attnx::default_context().fused_runs() - runs << "\n";
    std::printf("y[1][2][0..3] = %.7f %.7f %.7f %.7f (expected %.7f %.7f %.7f %.7f)\n", y(1, 2, 0), y(1, 2, 1), y(1, 2, 2),
                y(1, 2, 3), want(1, 2, 0), want(1, 2, 1), want(1, 2, 2), want(1, 2, 3));
    std::printf("max |y - expected| = %.3g (float32 model vs double reference)\n", worst);
    if (!(worst <= 2e-6)) {
      std::cerr << "FAILED: the loaded model does not reproduce the expected output\n";
      return 1;
    }

    // A module of other sizes is refused: here by the file's key/value head count, which is checked first (without
    // it, the shape error would name k_proj.weight and both shapes).
    try {
      (void)st::load_mha<attnx::multi_head_attention<float, D, 4>>(weights, st::mha_names::hugging_face("attn."),
                                                                    st::weight_layout::out_in);
      std::cerr << "FAILED: a module with 4 key/value heads loaded weights made for 2\n";
      return 1;
    } catch (const st::shape_error& e) {
      std::cout << "loading into a module with 4 key/value heads: " << e.what() << "\n";
    }
    // 8 heads of 2 sharing 4 key/value heads has every weight of the same shape (16 x 16, 16 x 8): only the file's
    // head counts tell the two modules apart.
    try {
      (void)st::load_mha<attnx::multi_head_attention<float, D, 8, attnx::mha_options{.kv_heads = 4}>>(
          weights, st::mha_names::hugging_face("attn."), st::weight_layout::out_in);
      std::cerr << "FAILED: a module with 8 heads loaded weights made for 4\n";
      return 1;
    } catch (const st::shape_error& e) {
      std::cout << "loading into a module with 8 heads: " << e.what() << "\n";
    }
    std::cout << "OK\n";
    return 0;
  } catch (const st::error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
