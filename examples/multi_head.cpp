// Seed 004: a bias-free multi-head self-attention (PyTorch's MultiHeadedSelfAttention of the seed:
// four nn.Linear(d_model, d_model, bias=False), d_head = d_model / num_heads), written with attnx,
// printing the shape of every step as docs/maths.md section 5 lists them:
//
//   x (B, L, d_model) -> q, k, v (B, h, L, d_k) -> attention per (batch, head) -> (B, L, h*d_v) -> W_O -> (B, L, d_model)
//
// The same computation then runs as the attnx::multi_head_attention module (one expression, the
// attention in the fused kernel), and both are checked against plain loops that follow the seed's
// code line by line (view, transpose(1, 2), matmul, softmax, transpose back, view).
#include <attnx/attnx.hpp>

#include "support/wave.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

using namespace attnx;

constexpr std::size_t B = 2, L = 5, d_model_ = 12, h = 3, d_head = d_model_ / h;  // seed 004: assert d_model % num_heads == 0

template <class E>
std::string shape_of(const E&) {
  return shape_string<shape_of_t<E>>();
}

int main() {
  const auto x = wave<tensor<double, B, L, d_model_>>(0.5, 0.7, 0.1);
  // nn.Linear(d_model, d_model, bias=False): y = x W^T. attnx multiplies x W, so W here is weight^T.
  const auto W_Q = wave<tensor<double, d_model_, d_model_>>(0.3, 0.9, 0.2);
  const auto W_K = wave<tensor<double, d_model_, d_model_>>(0.3, 1.1, 0.4);
  const auto W_V = wave<tensor<double, d_model_, d_model_>>(0.3, 1.3, 0.6);
  const auto W_O = wave<tensor<double, d_model_, d_model_>>(0.3, 1.7, 0.8);

  // ---- step by step, as the seed writes it ------------------------------------------------------------
  std::printf("seed 004: multi-head self-attention, d_model = %zu, num_heads = %zu, d_head = %zu, no biases\n", d_model_, h,
              d_head);
  std::cout << "x                                  (B, L, d_model)      " << shape_of(x) << "\n";
  auto q = split_heads<h>(x * W_Q);  // q_proj(x).view(B, -1, h, d_head).transpose(1, 2)
  auto k = split_heads<h>(x * W_K);
  auto v = split_heads<h>(x * W_V);
  std::cout << "q = split_heads<h>(x W_Q)          (B, h, L, d_k)       " << shape_of(q) << "\n";
  std::cout << "k = split_heads<h>(x W_K)          (B, h, L, d_k)       " << shape_of(k) << "\n";
  std::cout << "v = split_heads<h>(x W_V)          (B, h, L, d_v)       " << shape_of(v) << "\n";
  auto scores = scaled_scores(q, k);  // matmul(q, k.transpose(-2, -1)) / sqrt(d_k)
  std::cout << "scores = q k^T / sqrt(d_k)         (B, h, L, L)         " << shape_of(scores) << "\n";
  auto weights = softmax(scores);
  std::cout << "attn_weights = softmax(scores)     (B, h, L, L)         " << shape_of(weights) << "\n";
  auto context = weights * v;
  std::cout << "context = attn_weights v           (B, h, L, d_v)       " << shape_of(context) << "\n";
  auto concatenated = merge_heads(context);  // transpose(1, 2).contiguous().view(B, -1, h * d_head)
  std::cout << "concat = merge_heads(context)      (B, L, h*d_v)        " << shape_of(concatenated) << "\n";
  auto out = concatenated * W_O;  // final_linear_layer
  std::cout << "y = concat W_O                     (B, L, d_model)      " << shape_of(out) << "\n";
  const tensor<double, B, L, d_model_> y_steps = out;

  // ---- the module: one expression, the attention in the fused kernel --------------------------------
  using mha_t = multi_head_attention<double, d_model_, h, mha_options{.bias = false}>;
  const mha_t mha(W_Q, W_K, W_V, W_O);
  const auto runs = default_context().fused_runs();
  const tensor<double, B, L, d_model_> y = mha(x);
  std::cout << "module: multi_head_attention<double, " << d_model_ << ", " << h << ", {.bias = false}>, d_k = " << mha_t::d_k
            << ", " << mha_t::parameter_count << " parameters, fused kernel runs: " << default_context().fused_runs() - runs << "\n";
  const tensor<double, B, h, L, L> A = mha.weights(x);  // the seed's attn_weights, computed only when asked

  // ---- plain loops, following the seed's code ----------------------------------------------------------
  std::vector<double> ref(B * L * d_model_), attn_ref(B * h * L * L);
  for (std::size_t b = 0; b < B; ++b) {
    std::vector<double> Q(L * d_model_), K(L * d_model_), V(L * d_model_), concat(L * d_model_);
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t o = 0; o < d_model_; ++o)
        for (std::size_t f = 0; f < d_model_; ++f) {
          Q[i * d_model_ + o] += x(b, i, f) * W_Q(f, o);
          K[i * d_model_ + o] += x(b, i, f) * W_K(f, o);
          V[i * d_model_ + o] += x(b, i, f) * W_V(f, o);
        }
    for (std::size_t hh = 0; hh < h; ++hh)  // head hh: columns [hh*d_head, (hh+1)*d_head)
      for (std::size_t i = 0; i < L; ++i) {
        std::vector<double> s(L);
        double mx = -1e300, sum = 0;
        for (std::size_t j = 0; j < L; ++j) {
          for (std::size_t t = 0; t < d_head; ++t) s[j] += Q[i * d_model_ + hh * d_head + t] * K[j * d_model_ + hh * d_head + t];
          s[j] /= std::sqrt(double(d_head));
          mx = std::max(mx, s[j]);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (std::size_t j = 0; j < L; ++j) {
          attn_ref[((b * h + hh) * L + i) * L + j] = s[j] / sum;
          for (std::size_t t = 0; t < d_head; ++t) concat[i * d_model_ + hh * d_head + t] += s[j] / sum * V[j * d_model_ + hh * d_head + t];
        }
      }
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t o = 0; o < d_model_; ++o)
        for (std::size_t f = 0; f < d_model_; ++f) ref[(b * L + i) * d_model_ + o] += concat[i * d_model_ + f] * W_O(f, o);
  }

  double err_steps = 0, err_module = 0, err_weights = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    err_steps = std::max(err_steps, std::abs(y_steps.data()[i] - ref[i]));
    err_module = std::max(err_module, std::abs(y.data()[i] - ref[i]));
  }
  for (std::size_t i = 0; i < attn_ref.size(); ++i) err_weights = std::max(err_weights, std::abs(A.data()[i] - attn_ref[i]));

  std::cout << "attn_weights[0][0] (batch 0, head 0):\n";
  for (std::size_t i = 0; i < L; ++i) {
    std::printf("  ");
    for (std::size_t j = 0; j < L; ++j) std::printf(" %.6f", A(0, 0, i, j));
    std::printf("\n");
  }
  std::cout << "y[0] =\n";
  for (std::size_t i = 0; i < L; ++i) {
    std::printf("  ");
    for (std::size_t o = 0; o < d_model_; ++o) std::printf(" %+.4f", y(0, i, o));
    std::printf("\n");
  }
  std::printf("max |error| vs plain loops: step by step %.2g, module %.2g, weights %.2g\n", err_steps, err_module, err_weights);
  const bool ok = err_steps <= 1e-12 && err_module <= 1e-12 && err_weights <= 1e-12;
  std::cout << (ok ? "OK" : "FAILED") << "\n";
  return ok ? 0 : 1;
}
