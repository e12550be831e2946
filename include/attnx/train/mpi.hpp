// attnx::train over MPI: data-parallel training. Each rank runs forward_backward on its share of the global batch;
// all_reduce_gradients then gives every rank the gradients of the global batch's loss, and every rank takes the same
// optimizer step.
//
//   train::broadcast_parameters(model, MPI_COMM_WORLD);     // every rank starts from rank 0's weights
//   for (std::size_t step = 0; step < steps; ++step) {
//     train::zero(grads);
//     T mine = train::forward_backward(model, my_ids, my_targets, my_batch, grads, ctx);
//     T loss = train::all_reduce_gradients(grads, mine, train::count_targets(my_targets), MPI_COMM_WORLD);
//     train::clip_grad_norm(grads, 1.0);
//     opt.step(model, grads, schedule(step));
//     model.tie_lm_head();
//   }
//
// The loss is a mean over the targets that are not ignored, so the global one is the ranks' means weighted by their
// counts n_r: loss = sum_r n_r loss_r / N and d loss = sum_r (n_r / N) d loss_r, which is what all_reduce_gradients
// computes (one MPI_Allreduce over a flat buffer of every gradient, in for_each_parameter's order). It equals one
// process's step on the whole batch up to rounding: only the order of the sums over the batch differs.
//
// MPI sums commutatively, so every rank receives the same bits and, the optimizers being element-wise, keeps the
// same weights; parameters_in_sync checks that. Included only by programs that use MPI: it includes <mpi.h> (link
// MPI::MPI_CXX; CMake's FindMPI, Debian's libopenmpi-dev). Errors from MPI become std::runtime_error naming the
// call; MPI_COMM_WORLD's default handler aborts before that.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "attnx/train/loss.hpp"
#include "attnx/train/parameters.hpp"

namespace attnx::train {

namespace detail::mpi {
inline void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(std::string("attnx: train: ") + call + " failed: " + std::string(text, static_cast<std::size_t>(len)));
}

template <class T>
MPI_Datatype type_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "attnx: train over MPI: float or double parameters");
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else return MPI_DOUBLE;
}

// Every parameter of m, one after another in for_each_parameter's order.
template <class M>
auto pack(const M& m) {
  using T = std::remove_cv_t<typename M::value_type>;
  std::vector<T> buf(parameter_count(m));
  std::size_t at = 0;
  for_each_parameter(m, [&](const std::string&, const auto& w) {
    std::memcpy(buf.data() + at, w.data(), w.numel() * sizeof(T));
    at += w.numel();
  });
  return buf;
}
template <class M, class T>
void unpack(M& m, const std::vector<T>& buf) {
  std::size_t at = 0;
  for_each_parameter(m, [&](const std::string&, auto& w) {
    std::memcpy(w.data(), buf.data() + at, w.numel() * sizeof(T));
    at += w.numel();
  });
}

// MPI counts are ints: a buffer goes in chunks of at most 2^30 elements.
template <class T, class F>
void in_chunks(std::vector<T>& buf, F&& f) {
  constexpr std::size_t chunk = std::size_t(1) << 30;
  for (std::size_t at = 0; at < buf.size(); at += chunk)
    f(buf.data() + at, static_cast<int>(buf.size() - at < chunk ? buf.size() - at : chunk));
}

// Every rank holds a module of n parameters, or std::runtime_error naming both counts (calling a collective with
// different counts on different ranks is undefined in MPI).
inline void check_same_count(std::size_t n, MPI_Comm comm, const char* what) {
  unsigned long long v[2] = {n, ~static_cast<unsigned long long>(n)};  // max of n and of ~n: the max and the min
  check(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm), "MPI_Allreduce");
  const unsigned long long lo = ~v[1];
  if (v[0] != lo)
    throw std::runtime_error(std::string("attnx: train: ") + what + ": the ranks' modules differ in size: " +
                             std::to_string(lo) + " and " + std::to_string(v[0]) + " parameters");
}
}  // namespace detail::mpi

// grads (this rank's gradients of its loss, a mean over its `counted` targets: count_targets) become the gradients of the global
// loss, the same on every rank; returns the global loss. With no target counted anywhere, gradients and loss are 0.
// Throws std::runtime_error when the ranks' modules differ in size, or when an MPI call fails.
template <class M>
typename M::value_type all_reduce_gradients(M& grads, typename M::value_type loss, std::size_t counted, MPI_Comm comm) {
  using T = std::remove_cv_t<typename M::value_type>;
  auto buf = detail::mpi::pack(grads);
  detail::mpi::check_same_count(buf.size(), comm, "all_reduce_gradients");
  double total[2] = {static_cast<double>(counted) * static_cast<double>(loss), static_cast<double>(counted)};
  detail::mpi::check(MPI_Allreduce(MPI_IN_PLACE, total, 2, MPI_DOUBLE, MPI_SUM, comm), "MPI_Allreduce");
  const T share = total[1] > 0 ? static_cast<T>(static_cast<double>(counted) / total[1]) : T(0);
  for (T& g : buf) g *= share;
  detail::mpi::in_chunks(buf, [&](T* p, int n) {
    detail::mpi::check(MPI_Allreduce(MPI_IN_PLACE, p, n, detail::mpi::type_of<T>(), MPI_SUM, comm), "MPI_Allreduce");
  });
  detail::mpi::unpack(grads, buf);
  return total[1] > 0 ? static_cast<T>(total[0] / total[1]) : T(0);
}

// Every rank's parameters become root's (a model initialised on one rank, or loaded from a checkpoint there).
// A models::gpt2 is re-tied (tie_lm_head). Throws as all_reduce_gradients.
template <class M>
void broadcast_parameters(M& m, MPI_Comm comm, int root = 0) {
  using T = std::remove_cv_t<typename M::value_type>;
  auto buf = detail::mpi::pack(m);
  detail::mpi::check_same_count(buf.size(), comm, "broadcast_parameters");
  detail::mpi::in_chunks(buf, [&](T* p, int n) {
    detail::mpi::check(MPI_Bcast(p, n, detail::mpi::type_of<T>(), root, comm), "MPI_Bcast");
  });
  detail::mpi::unpack(m, buf);
  if constexpr (requires { m.tie_lm_head(); }) m.tie_lm_head();
}

// True when every rank's parameters are the same bits (compared through a 64-bit hash of each rank's bytes).
template <class M>
bool parameters_in_sync(const M& m, MPI_Comm comm) {
  const auto buf = detail::mpi::pack(m);
  detail::mpi::check_same_count(buf.size(), comm, "parameters_in_sync");
  std::uint64_t h = 14695981039346656037ull;  // FNV-1a
  const auto* bytes = reinterpret_cast<const unsigned char*>(buf.data());
  for (std::size_t i = 0, n = buf.size() * sizeof(buf[0]); i < n; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  unsigned long long v[2] = {h, ~static_cast<unsigned long long>(h)};
  detail::mpi::check(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm), "MPI_Allreduce");
  return v[0] == ~v[1];
}

}  // namespace attnx::train
