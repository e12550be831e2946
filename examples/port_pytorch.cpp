// Porting a PyTorch module: torch.nn.MultiheadAttention(16, 4, batch_first=True) with its state dict, a causal
// attn_mask and a key_padding_mask, as PyTorch had them, run in attnx and compared with PyTorch's own output.
//
//   port_pytorch [FILE]     (default: tests/data/torch_mha.safetensors, written by scripts/torch_mha_reference.py)
//
// The PyTorch side (scripts/torch_mha_reference.py does exactly this and saves everything in one safetensors file):
//
//   m = torch.nn.MultiheadAttention(16, 4, batch_first=True)
//   attn_mask = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)        # True = blocked (causal)
//   key_padding_mask = torch.zeros(2, 5, dtype=torch.bool); key_padding_mask[1, 3:] = True   # True = padding
//   y, w = m(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask)   # w averaged over the heads
//
// The attnx side, step by step below: the module type says d_model 16 and 4 heads (the file's metadata says the head
// count too, and the loader checks it); the state dict's names and its packed in_proj_weight load as they are; the
// masks keep PyTorch's polarity (blocked(m): true = masked out) and PyTorch's shapes (key_padding_mask(m): (B, L_k)).
// This example needs nlohmann/json (attnx/io/safetensors.hpp).
#include <attnx/attnx.hpp>
#include <attnx/io/safetensors.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

namespace st = attnx::safetensors;

constexpr std::size_t B = 2, L = 5, D = 16;
using mha_t = attnx::multi_head_attention<float, D, 4>;  // nn.MultiheadAttention(16, 4): biases on, d_k = 16 / 4

template <class G, class W>
double max_error(const G& got, const W& want) {
  double e = 0;
  for (std::size_t i = 0; i < got.numel(); ++i) e = std::max(e, std::abs(double(got.data()[i]) - double(want.data()[i])));
  return e;
}

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const fs::path file = argc > 1 ? fs::path(argv[1]) : fs::path(__FILE__).parent_path() / "../tests/data/torch_mha.safetensors";
  try {
    const st::file f(file);
    // 1. The module, from the state dict (in_proj_weight (48, 16) split into W_Q, W_K, W_V; out_proj).
    const mha_t mha = st::load_torch_multihead_attention<mha_t>(f);
    // 2. The input and PyTorch's masks as torch saved them (bool tensors: BOOL entries).
    const auto x = f.load<attnx::tensor<float, B, L, D>>("x");
    const auto attn_mask = f.load<attnx::tensor<bool, L, L>>("attn_mask");
    const auto padding = f.load<attnx::tensor<bool, B, L>>("key_padding_mask");
    // 3. The forward pass and the head-averaged weights, as m(x, x, x, attn_mask=..., key_padding_mask=...) gives them.
    const attnx::tensor<float, B, L, D> y = mha(x, attnx::blocked(attn_mask), attnx::key_padding_mask(padding));
    const attnx::tensor<float, B, L, L> w = attnx::average_heads(mha.weights(x, attnx::blocked(attn_mask), attnx::key_padding_mask(padding)));
    // 4. PyTorch's results (computed in float64 from the same float32 weights).
    const auto y_torch = f.load<attnx::tensor<double, B, L, D>>("y");
    const auto w_torch = f.load<attnx::tensor<double, B, L, L>>("weights");
    const double ey = max_error(y, y_torch), ew = max_error(w, w_torch);
    std::cout << "nn.MultiheadAttention(16, 4) from " << file.filename().string() << ": " << mha_t::parameter_count
              << " parameters, " << mha_t::heads << " heads (the file says " << f.metadata().at("attnx.heads") << ")\n";
    std::printf("y[1][2][0..3]       = %.7f %.7f %.7f %.7f\n", y(1, 2, 0), y(1, 2, 1), y(1, 2, 2), y(1, 2, 3));
    std::printf("PyTorch's y[1][2]   = %.7f %.7f %.7f %.7f\n", y_torch(1, 2, 0), y_torch(1, 2, 1), y_torch(1, 2, 2),
                y_torch(1, 2, 3));
    std::printf("max |y - PyTorch| = %.3g, max |weights - PyTorch| = %.3g (float32 against float64)\n", ey, ew);
    std::cout << "item 1 attends to its keys 3 and 4 (padding) with weight " << w(1, 4, 3) << " and " << w(1, 4, 4) << "\n";
    if (!(ey < 2e-6 && ew < 1e-6 && w(1, 4, 3) == 0.0f && w(1, 4, 4) == 0.0f)) {
      std::cerr << "FAILED: the port does not reproduce PyTorch's output\n";
      return 1;
    }
    std::cout << "the port reproduces PyTorch's output\n";
  } catch (const std::exception& e) {
    std::cerr << "port_pytorch: " << e.what() << "\n";
    return 1;
  }
}
