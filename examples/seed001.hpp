// The worked example of seed 001 (docs/maths.md section 2): three 4-dimensional tokens A, B, C,
// projected to 2-dimensional queries, keys and values. Shared by the demo, the tests and the
// compile-fail test that rejects the article's arithmetic slip.
#pragma once

#include <attnx/attnx.hpp>

namespace seed001 {
using namespace attnx;

// The axes carry names: a product that contracts the wrong pair is a compile error.
using X_t = tensor<double, seq<3>, d_model<4>>;
using Wqk_t = tensor<double, d_model<4>, d_k<2>>;
using Wv_t = tensor<double, d_model<4>, d_v<2>>;

inline constexpr X_t X{{0, 1, 2, 3},     // A
                       {4, 5, 6, 7},     // B
                       {8, 9, 10, 11}};  // C
inline constexpr Wqk_t W_Q{{1, 0}, {1, 0}, {0, 1}, {0, 1}};
inline constexpr Wqk_t W_K{{0, 1}, {0, 1}, {1, 0}, {1, 0}};
inline constexpr Wv_t W_V{{1, 0}, {0, 1}, {1, 0}, {0, 1}};

// Each step, evaluated at compile time.
inline constexpr tensor<double, seq<3>, d_k<2>> Q = X * W_Q;
inline constexpr tensor<double, seq<3>, d_k<2>> K = X * W_K;
inline constexpr tensor<double, seq<3>, d_v<2>> V = X * W_V;
inline constexpr tensor<double, seq<3>, seq<3>> QKt = Q * transpose(K);
inline constexpr tensor<double, seq<3>, seq<3>> scores = scaled_scores(Q, K);
inline constexpr tensor<double, seq<3>, seq<3>> weights = softmax(scaled_scores(Q, K));
inline constexpr tensor<double, seq<3>, d_v<2>> output = attention(Q, K, V);

}  // namespace seed001
