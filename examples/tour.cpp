// The README's tour, compiled and run by the test suite so that the README stays true.
#include <attnx/attnx.hpp>

#include <cmath>
#include <iostream>

using namespace attnx;

constexpr tensor<double, seq<3>, d_model<4>> X{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}};
constexpr tensor<double, d_model<4>, d_k<2>> W_Q{{1, 0}, {1, 0}, {0, 1}, {0, 1}};
constexpr tensor<double, d_model<4>, d_k<2>> W_K{{0, 1}, {0, 1}, {1, 0}, {1, 0}};
constexpr tensor<double, d_model<4>, d_v<2>> W_V{{1, 0}, {0, 1}, {1, 0}, {0, 1}};

constexpr tensor<double, seq<3>, d_k<2>> Q = X * W_Q;
constexpr tensor<double, seq<3>, d_k<2>> K = X * W_K;
constexpr tensor<double, seq<3>, seq<3>> QKt = Q * transpose(K);
static_assert(QKt(1, 2) == 410);

int main() {
  auto e = softmax(scale(Q * transpose(K), 1 / std::sqrt(2.0))) * (X * W_V);
  tensor<double, seq<3>, d_v<2>> O = e;
  static_assert(is_fused_v<decltype(e)>);  // at run time: the fused kernel
  context two;
  two.set_threads(2);
  tensor<double, seq<3>, d_v<2>> O3 = evaluate(e, two);
  tensor<double, seq<3>, d_v<2>> O2 = attention(X * W_Q, X * W_K, X * W_V, causal);
  tensor<double, seq<3>, seq<3>> A = attention_weights(Q, K, causal);
  std::cout << O << "\n" << O2 << "\n" << A << "\n";
  // Row 0 of the causal attention sees only token A: its output is V's first row [2, 4].
  return O(2, 1) == 20.0 && O3 == O && two.fused_runs() == 1 && O2(0, 0) == 2.0 && O2(0, 1) == 4.0 && A(0, 1) == 0.0 ? 0 : 1;
}
