// attnx::train optimizers: SGD with momentum and AdamW, gradient clipping by global norm, and a warmup + cosine
// learning-rate schedule, over a module's parameters (train/parameters.hpp) and gradients (a module of the same type).
//
//   train::adamw opt({.lr = 3e-4, .weight_decay = 0.1});
//   for (step ...) {
//     train::zero(grads);  T loss = train::forward_backward(model, ids, targets, batch, grads);
//     train::clip_grad_norm(grads, 1.0);
//     opt.step(model, grads, schedule(step));
//   }
//
// The updates are PyTorch 1.13's (torch.optim.SGD and AdamW, the single-tensor form), in the same order of
// operations, element by element: a run is reproducible bit for bit, for any thread count. The state (momenta) is
// one flat buffer in for_each_parameter's order, made at the first step.
#pragma once

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnx/config.hpp"
#include "attnx/train/parameters.hpp"

namespace attnx::train {

namespace detail {
// Weight decay applies to matrices (projections, embeddings) and not to vectors (biases, norm gains), as GPT-2's
// and nanoGPT's training groups them, unless the options say every parameter.
template <class P>
bool decays(const P&, bool every) {
  return every || shape_of_t<P>::rank >= 2;
}
template <class M>
void check_state(const std::vector<double>& s, const M& m, const char* who) {
  const std::size_t n = parameter_count(m);
  if (!s.empty() && s.size() != n)
    attnx::detail::throw_extent_error(std::string("train::") + who + ": the optimizer's state is another module's",
                                      "state_elements", s.size(), "parameters", n);
}
}  // namespace detail

// torch.optim.SGD: g += weight_decay p; buf = momentum buf + (1 - dampening) g (buf = g at the first step);
// g = nesterov ? g + momentum buf : buf; p -= lr g.
struct sgd_options {
  double lr = 1e-2;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;  // every parameter (PyTorch's SGD has one group here)
  bool nesterov = false;
};
class sgd {
 public:
  explicit sgd(sgd_options o = {}) : o_(o) {}
  const sgd_options& options() const noexcept { return o_; }
  // One update of m's parameters from grads (a module of m's type), at learning rate lr (default: the options').
  template <class M>
  void step(M& m, const M& grads, double lr = -1) {
    detail::check_state(buf_, m, "sgd");
    const bool first = buf_.empty();
    if (first && o_.momentum != 0) buf_.assign(parameter_count(m), 0.0);
    const double rate = lr < 0 ? o_.lr : lr;
    std::size_t at = 0;
    for_each_parameter(m, grads, [&](const std::string&, auto& p, const auto& g) {
      using T = std::remove_cvref_t<decltype(*p.data())>;
      T* w = p.data();
      const T* d = g.data();
      for (std::size_t i = 0, n = p.numel(); i < n; ++i, ++at) {
        T gi = d[i];
        if (o_.weight_decay != 0) gi = gi + static_cast<T>(o_.weight_decay) * w[i];
        if (o_.momentum != 0) {
          T b = first ? gi : static_cast<T>(o_.momentum) * static_cast<T>(buf_[at]) + static_cast<T>(1 - o_.dampening) * gi;
          buf_[at] = b;
          gi = o_.nesterov ? gi + static_cast<T>(o_.momentum) * b : b;
        }
        w[i] = w[i] - static_cast<T>(rate) * gi;
      }
    });
    ++steps_;
  }
  std::size_t steps() const noexcept { return steps_; }

 private:
  sgd_options o_;
  std::vector<double> buf_;  // (double: one buffer type for float and double models; each value is a T's)
  std::size_t steps_ = 0;
};

// torch.optim.AdamW: p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr / (1 - b1^t) m / (sqrt(v) / sqrt(1 - b2^t) + eps).
struct adamw_options {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool decay_vectors = false;  // false: biases and norm gains (rank-1 parameters) take no weight decay
};
class adamw {
 public:
  explicit adamw(adamw_options o = {}) : o_(o) {}
  const adamw_options& options() const noexcept { return o_; }
  template <class M>
  void step(M& m, const M& grads, double lr = -1) {
    detail::check_state(m_, m, "adamw");
    if (m_.empty()) {
      m_.assign(parameter_count(m), 0.0);
      v_.assign(m_.size(), 0.0);
    }
    ++steps_;
    const double rate = lr < 0 ? o_.lr : lr;
    const double bc1 = 1 - std::pow(o_.beta1, static_cast<double>(steps_));
    const double bc2_sqrt = std::sqrt(1 - std::pow(o_.beta2, static_cast<double>(steps_)));
    std::size_t at = 0;
    for_each_parameter(m, grads, [&](const std::string&, auto& p, const auto& g) {
      using T = std::remove_cvref_t<decltype(*p.data())>;
      T* w = p.data();
      const T* d = g.data();
      const T keep = static_cast<T>(1 - rate * (detail::decays(p, o_.decay_vectors) ? o_.weight_decay : 0.0));
      const T b1 = static_cast<T>(o_.beta1), b2 = static_cast<T>(o_.beta2);
      const T step_size = static_cast<T>(rate / bc1), c2 = static_cast<T>(bc2_sqrt), eps = static_cast<T>(o_.eps);
      for (std::size_t i = 0, n = p.numel(); i < n; ++i, ++at) {
        w[i] = w[i] * keep;
        const T mi = static_cast<T>(m_[at]) * b1 + d[i] * (T(1) - b1);
        const T vi = static_cast<T>(v_[at]) * b2 + d[i] * d[i] * (T(1) - b2);
        m_[at] = mi;
        v_[at] = vi;
        const T denom = std::sqrt(vi) / c2 + eps;
        w[i] = w[i] - step_size * (mi / denom);
      }
    });
  }
  std::size_t steps() const noexcept { return steps_; }

 private:
  adamw_options o_;
  std::vector<double> m_, v_;
  std::size_t steps_ = 0;
};

// torch.nn.utils.clip_grad_norm_: the global 2-norm of every gradient; when it exceeds max_norm, every gradient is
// scaled by max_norm / (norm + 1e-6). Returns the norm before clipping (NaN or inf when a gradient is).
template <class M>
double clip_grad_norm(M& grads, double max_norm) {
  double s = 0;
  for_each_parameter(grads, [&](const std::string&, const auto& g) {
    for (std::size_t i = 0, n = g.numel(); i < n; ++i) s += static_cast<double>(g.data()[i]) * static_cast<double>(g.data()[i]);
  });
  const double norm = std::sqrt(s);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1)
    for_each_parameter(grads, [&](const std::string&, auto& g) {
      using T = std::remove_cvref_t<decltype(*g.data())>;
      for (std::size_t i = 0, n = g.numel(); i < n; ++i) g.data()[i] = g.data()[i] * static_cast<T>(coef);
    });
  return norm;
}

// Linear warmup from peak / warmup to peak over the first `warmup` steps, then a cosine from peak down to
// min_lr at step `total` (and min_lr after it). Step 0 is the first.
struct warmup_cosine {
  double peak = 1e-3, min_lr = 1e-4;
  std::size_t warmup = 100, total = 1000;
  double operator()(std::size_t step) const {
    if (step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
    if (step >= total || total <= warmup) return min_lr;
    const double progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
    return min_lr + 0.5 * (peak - min_lr) * (1 + std::cos(3.14159265358979323846 * progress));
  }
};

}  // namespace attnx::train
