// Seed 002, trained: attention as a soft k-nearest-neighbour classifier whose notion of "near" is learned.
//
// Forty points in 4-D from two classes. The class shows only in features 2 and 3 (at +-0.6, noise 0.3); features 0
// and 1 are noise four times as large. Each point asks its neighbours for a vote (leave-one-out: it does not see
// itself): out_i = sum_j softmax_j(q_i . k_j / sqrt(2)) y_j, with q = x W_Q, k = x W_K (4 x 2 each) and y_j the
// one-hot labels, and the loss is the cross-entropy -sum_i log out_i[class_i]. At the start W_Q and W_K are random:
// the vote listens mostly to the noise. attnx::grad differentiates the loss expression with respect to W_Q and W_K,
// and plain gradient descent trains them until the two classes separate: the weight each point gives its own class
// goes from about half to nearly all, and forty new points are classified by a vote of the training points.
// Exits non-zero unless training raises the own-class weight above 0.9 and the held-out accuracy to 95% or more.
#include <attnx/attnx.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "support/normal.hpp"

using namespace attnx;

namespace {

constexpr std::size_t n = 40, features = 4, proj = 2, steps = 300;
constexpr double rate = 0.05;

using points = tensor<double, n, features>;
using labels = tensor<double, n, 2>;  // one-hot
using weights = tensor<double, features, proj>;

// Points of alternating classes: noise of 1.2 in features 0 and 1, the class at +-0.6 with noise 0.3 in 2 and 3.
void make_points(normal_source& rng, points& x, labels& y) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = i % 2;
    const double sign = c == 0 ? 1.0 : -1.0;
    x(i, 0) = 1.2 * rng(), x(i, 1) = 1.2 * rng();
    x(i, 2) = sign * 0.6 + 0.3 * rng(), x(i, 3) = -sign * 0.6 + 0.3 * rng();
    y(i, 0) = c == 0 ? 1.0 : 0.0, y(i, 1) = c == 1 ? 1.0 : 0.0;
  }
}

// The vote of the training points (keys kx, labels y) for queries qx; `others` blocks each query's own point.
template <class QX, class M>
auto vote(const QX& qx, const points& kx, const labels& y, const weights& wq, const weights& wk, const M& m) {
  return softmax(mask(dot_scores(qx * wq, kx * wk), m)) * y;
}

struct report {
  double loss, own_class, accuracy;
};
template <class V>
report score(const V& out, const labels& y) {
  const tensor<double, n, 2> o = out;
  report r{0, 0, 0};
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = y(i, 0) > 0.5 ? 0 : 1;
    r.loss -= std::log(o(i, c)) / n;
    r.own_class += o(i, c) / n;  // the weight on the own class (the labels are one-hot)
    r.accuracy += (o(i, c) > 0.5 ? 1.0 : 0.0) / n;
  }
  return r;
}

}  // namespace

int main() {
  normal_source rng(2002);
  points x, x_test;
  labels y, y_test;
  make_points(rng, x, y);
  make_points(rng, x_test, y_test);
  weights wq, wk;
  for (auto& w : wq) w = 0.5 * rng();
  for (auto& w : wk) w = 0.5 * rng();
  tensor<bool, n, n> others, everyone;  // leave-one-out: a point does not vote for itself
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) others(i, j) = i != j, everyone(i, j) = true;

  const report start = score(vote(x, x, y, wq, wk, allowed(others)), y);
  const report start_test = score(vote(x_test, x, y, wq, wk, allowed(everyone)), y_test);
  std::printf("soft k-NN, 40 points in 4-D, two classes visible only in features 2 and 3\n\n");
  std::printf("%5s  %8s  %15s  %15s\n", "step", "loss", "own-class weight", "train accuracy");
  for (std::size_t step = 0; step <= steps; ++step) {
    // The loss as an expression: -sum(y o log(vote)), differentiated with respect to W_Q and W_K.
    const auto loss = -hadamard(y, log(vote(x, x, y, wq, wk, allowed(others))));
    if (step % 50 == 0) {
      const report r = score(vote(x, x, y, wq, wk, allowed(others)), y);
      std::printf("%5zu  %8.4f  %15.3f  %15.3f\n", step, r.loss, r.own_class, r.accuracy);
    }
    if (step == steps) break;
    const auto [dwq, dwk] = grad(loss, wrt(wq, wk));
    for (std::size_t e = 0; e < wq.numel(); ++e) wq.data()[e] -= rate * dwq.data()[e] / n;
    for (std::size_t e = 0; e < wk.numel(); ++e) wk.data()[e] -= rate * dwk.data()[e] / n;
  }
  const report end = score(vote(x, x, y, wq, wk, allowed(others)), y);
  const report end_test = score(vote(x_test, x, y, wq, wk, allowed(everyone)), y_test);
  std::printf("\nheld-out points, classified by a vote of the training points: accuracy %.3f before, %.3f after\n",
              start_test.accuracy, end_test.accuracy);
  std::printf("W_Q after training (rows: features 0..3):\n");
  for (std::size_t f = 0; f < features; ++f) std::printf("  % .3f % .3f\n", wq(f, 0), wq(f, 1));

  const bool ok = start.own_class < 0.75 && end.own_class > 0.9 && end_test.accuracy >= 0.95 && end.loss < start.loss;
  if (!ok) std::printf("CHECK FAILED: training did not separate the classes\n");
  return ok ? 0 : 1;
}
