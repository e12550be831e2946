// Sequence-parallel attention across processes: each MPI rank holds a shard of the keys and values,
// computes the attention state of the queries over its shard (attnx::partial_attention: the output and
// the log-sum-exp per query row), and rank 0 merges the states (attnx::merge). The result equals
// attention over all the keys in one process, up to rounding; this program checks that and exits 1 if not.
//
//   mpirun -np 2 ./mpi_attention         (as root: add --allow-run-as-root; more ranks than cores: --oversubscribe)
//
// Built when CMake finds MPI (Debian: libopenmpi-dev openmpi-bin); ctest runs it on 2 ranks.
#include <mpi.h>

#include <attnx/attnx.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

namespace {

constexpr std::size_t heads = 4, Lq = 8, Lk = 1000, d = 32;
using attnx::dyn;
// Queries (heads, Lq, d); keys and values (heads, rows, d) with a run-time row count (each rank's shard).
using queries = attnx::tensor<float, heads, Lq, d>;
using shard = attnx::tensor<float, heads, dyn, d>;
using state = attnx::attention_state<float, attnx::make_shape<heads, Lq, d>>;

// Deterministic numbers in [-1, 1] (no randomness: every rank computes the same problem).
float pseudo(std::size_t n, float f) { return float(std::sin(double(n) * 0.7 * double(f) + double(f))); }

// The whole problem, the same on every rank (a real program would load only its shard).
float key_at(std::size_t h, std::size_t j, std::size_t c) { return pseudo(h * 7919 + j * 31 + c, 0.37f); }
float value_at(std::size_t h, std::size_t j, std::size_t c) { return pseudo(h * 104729 + j * 17 + c, 0.91f); }

shard rows(std::size_t j0, std::size_t j1, float (*at)(std::size_t, std::size_t, std::size_t)) {
  shard s(j1 - j0);
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t j = j0; j < j1; ++j)
      for (std::size_t c = 0; c < d; ++c) s(h, j - j0, c) = at(h, j, c);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);

  queries q;
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < Lq; ++i)
      for (std::size_t c = 0; c < d; ++c) q(h, i, c) = pseudo(h * 131 + i * 13 + c, 0.53f);

  // This rank's shard of the keys: rows [j0, j1).
  const std::size_t j0 = Lk * std::size_t(rank) / std::size_t(ranks), j1 = Lk * std::size_t(rank + 1) / std::size_t(ranks);
  const shard k = rows(j0, j1, key_at), v = rows(j0, j1, value_at);
  const state mine = attnx::partial_attention(attnx::attention(q, k, v));

  // The states to rank 0: heads * Lq * d outputs and heads * Lq log-sum-exps per rank.
  const int n_out = int(mine.out.numel()), n_lse = int(mine.lse.numel());
  std::vector<float> outs(rank == 0 ? std::size_t(n_out) * std::size_t(ranks) : 0);
  std::vector<float> lses(rank == 0 ? std::size_t(n_lse) * std::size_t(ranks) : 0);
  MPI_Gather(mine.out.data(), n_out, MPI_FLOAT, outs.data(), n_out, MPI_FLOAT, 0, MPI_COMM_WORLD);
  MPI_Gather(mine.lse.data(), n_lse, MPI_FLOAT, lses.data(), n_lse, MPI_FLOAT, 0, MPI_COMM_WORLD);

  int status = 0;
  if (rank == 0) {
    std::vector<state> states(static_cast<std::size_t>(ranks));
    for (std::size_t r = 0; r < states.size(); ++r) {
      std::copy_n(outs.data() + r * std::size_t(n_out), n_out, states[r].out.data());
      std::copy_n(lses.data() + r * std::size_t(n_lse), n_lse, states[r].lse.data());
    }
    const state merged = attnx::merge(states);

    // One process, all keys.
    const shard K = rows(0, Lk, key_at), V = rows(0, Lk, value_at);
    const attnx::tensor<float, heads, Lq, d> whole = attnx::attention(q, K, V);
    const state whole_state = attnx::partial_attention(attnx::attention(q, K, V));
    // The larger error; a NaN on either side counts as an infinite one (std::max would keep the error before it).
    const auto worse = [](float e, float a, float b) {
      if (a == b) return e;  // infinities included
      const float diff = std::abs(a - b);
      return std::isnan(diff) ? std::numeric_limits<float>::infinity() : std::max(e, diff);
    };
    float err = 0, lse_err = 0;
    for (std::size_t x = 0; x < whole.numel(); ++x) err = worse(err, merged.out.data()[x], whole.data()[x]);
    for (std::size_t x = 0; x < whole_state.lse.numel(); ++x)
      lse_err = worse(lse_err, merged.lse.data()[x], whole_state.lse.data()[x]);
    std::printf("%d ranks, %zu keys each (about), %zu heads x %zu queries x d %zu\n", ranks, Lk / std::size_t(ranks), heads, Lq, d);
    std::printf("merged states vs one process: max |output error| %.3g, max |lse error| %.3g\n", double(err),
                double(lse_err));
    status = err <= 1e-5f && lse_err <= 1e-4f ? 0 : 1;
    std::printf(status == 0 ? "equal up to rounding\n" : "MISMATCH\n");
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}
