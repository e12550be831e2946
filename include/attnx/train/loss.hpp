// attnx::train losses: cross-entropy over logits with integer targets, and the mean squared error, each with the
// gradient of the loss with respect to its input.
//
//   T loss = train::cross_entropy(logits, targets);              // the mean over rows of -log softmax(row)[target]
//   T loss = train::cross_entropy_backward(logits, targets);     // the same loss; logits now hold d loss / d logits
//   T loss = train::mse(y, target);  train::mse_backward(y, target, dy);
//
// logits: any tensor whose last axis holds the classes, each row of it one prediction; targets: one class index
// per row, in [0, classes), or ignore_index (that row adds nothing and counts for nothing; PyTorch's -100 by
// default). The mean is over the rows that are not ignored (none: the loss is 0). Fused: each row's log-sum-exp is
// computed once, and cross_entropy_backward writes softmax(row) - onehot(target), divided by the row count, over
// the row itself, so the softmax is never stored beside the logits. Sums are in double.
//
// Non-finite values propagate as in PyTorch: a row with a NaN, a +inf logit (inf - inf) or only -inf logits (a fully
// masked row: -inf - -inf) gives a NaN loss and NaN gradients in that row. train::check_finite stops a training loop
// there, naming the step.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "attnx/config.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/tensor/tensor.hpp"

namespace attnx::train {

// The target that marks a row to leave out (PyTorch's default ignore_index).
inline constexpr std::int32_t default_ignore_index = -100;

// The targets a loss counts, those that are not ignore_index: the loss is their mean (what data-parallel training
// weights a rank by, train/mpi.hpp).
inline std::size_t count_targets(std::span<const std::int32_t> targets, std::int32_t ignore_index = default_ignore_index) {
  std::size_t n = 0;
  for (const std::int32_t t : targets) n += t != ignore_index;
  return n;
}

namespace detail {
inline void check_targets(std::size_t rows, std::size_t classes, std::span<const std::int32_t> targets,
                          std::int32_t ignore) {
  if (targets.size() != rows)
    attnx::detail::throw_extent_error("train::cross_entropy: one target per row of logits", "targets", targets.size(),
                                      "logit_rows", rows);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int32_t t = targets[r];
    if (t != ignore && (t < 0 || static_cast<std::size_t>(t) >= classes))
      ATTNX_THROW(std::out_of_range("attnx: train::cross_entropy: target " + std::to_string(t) + " of row " +
                                    std::to_string(r) + " is outside [0, " + std::to_string(classes) +
                                    ") and is not the ignore index " + std::to_string(ignore)));
  }
}

// The loss, and with Backward each row replaced by its gradient.
template <bool Backward, class T>
T cross_entropy(T* x, std::size_t rows, std::size_t classes, std::span<const std::int32_t> targets, std::int32_t ignore) {
  check_targets(rows, classes, targets, ignore);
  const std::size_t counted = count_targets(targets, ignore);
  const T scale = counted ? T(1) / T(counted) : T(0);
  double total = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    T* row = x + r * classes;
    if (targets[r] == ignore) {
      if constexpr (Backward)
        for (std::size_t j = 0; j < classes; ++j) row[j] = T(0);
      continue;
    }
    T m = row[0];
    for (std::size_t j = 1; j < classes; ++j) m = row[j] > m || row[j] != row[j] ? row[j] : m;
    const T shift = m;
    double s = 0;
    for (std::size_t j = 0; j < classes; ++j) s += std::exp(static_cast<double>(row[j] - shift));
    const double lse = static_cast<double>(shift) + std::log(s);
    total += lse - static_cast<double>(row[targets[r]]);
    if constexpr (Backward) {
      for (std::size_t j = 0; j < classes; ++j) row[j] = static_cast<T>(std::exp(static_cast<double>(row[j]) - lse)) * scale;
      row[targets[r]] -= scale;
    }
  }
  return counted ? static_cast<T>(total / static_cast<double>(counted)) : T(0);
}

template <class T, class S>
std::size_t rows_of(const basic_tensor<T, S>& t) {
  const auto d = t.dims();
  std::size_t n = 1;
  for (std::size_t i = 0; i + 1 < S::rank; ++i) n *= d[i];
  return n;
}
}  // namespace detail

// The mean cross-entropy of the rows of logits (the last axis: classes) against targets (one per row).
// attnx::extent_error when the target count is not the row count; std::out_of_range for a target outside
// [0, classes) that is not ignore_index.
template <class T, class S>
T cross_entropy(const basic_tensor<T, S>& logits, std::span<const std::int32_t> targets,
                std::int32_t ignore_index = default_ignore_index) {
  basic_tensor<T, S> copy = logits;  // (the row loop is shared with the backward, which overwrites its input)
  return detail::cross_entropy<false>(copy.data(), detail::rows_of(logits), logits.dims()[S::rank - 1], targets,
                                      ignore_index);
}
// The same loss; logits are replaced by its gradient (rows of ignored targets by zeros). Throws before writing.
template <class T, class S>
T cross_entropy_backward(basic_tensor<T, S>& logits, std::span<const std::int32_t> targets,
                         std::int32_t ignore_index = default_ignore_index) {
  return detail::cross_entropy<true>(logits.data(), detail::rows_of(logits), logits.dims()[S::rank - 1], targets,
                                     ignore_index);
}

// The mean of (y - target)^2 over every element; mse_backward writes its gradient 2 (y - target) / n into dy.
// Extents must agree (attnx::extent_error otherwise; static ones are checked by the types).
template <class T, class S>
T mse(const basic_tensor<T, S>& y, const basic_tensor<T, S>& target) {
  if (y.dims() != target.dims())
    attnx::detail::throw_extent_error("train::mse: y and target of the same extents", "y_elements", y.numel(),
                                      "target_elements", target.numel());
  double s = 0;
  for (std::size_t i = 0, n = y.numel(); i < n; ++i) {
    const double e = static_cast<double>(y.data()[i]) - static_cast<double>(target.data()[i]);
    s += e * e;
  }
  return y.numel() ? static_cast<T>(s / static_cast<double>(y.numel())) : T(0);
}
template <class T, class S>
void mse_backward(const basic_tensor<T, S>& y, const basic_tensor<T, S>& target, basic_tensor<T, S>& dy) {
  if (y.dims() != target.dims())
    attnx::detail::throw_extent_error("train::mse: y and target of the same extents", "y_elements", y.numel(),
                                      "target_elements", target.numel());
  dy = basic_tensor<T, S>(y);
  const T k = y.numel() ? T(2) / static_cast<T>(y.numel()) : T(0);
  for (std::size_t i = 0, n = y.numel(); i < n; ++i) dy.data()[i] = k * (y.data()[i] - target.data()[i]);
}

// Throws std::runtime_error naming the step when the loss is NaN or infinite (a diverged run stops where it
// diverged, before its parameters take the step).
template <class T>
void check_finite(T loss, std::size_t step) {
  if (!std::isfinite(static_cast<double>(loss)))
    ATTNX_THROW(std::runtime_error("attnx: train: the loss is " + std::string(loss != loss ? "nan" : loss > 0 ? "+inf" : "-inf") +
                                   " at step " + std::to_string(step)));
}

}  // namespace attnx::train
