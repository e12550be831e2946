// Data-parallel training across processes: each MPI rank trains the same small GPT on its share of every global
// batch and the ranks average their gradients (attnx/train/mpi.hpp, one MPI_Allreduce per step). Rank 0 also
// trains a copy of the model in one process on the whole batch, and this program checks, step by step, that the
// two runs agree: the losses to 5e-6 (ten units in the last place of a loss near 4), the final weights to 2e-5
// (key biases aside, see max_difference). In float the runs differ only in the order of the sums over the batch,
// a few units in the last place per step, which 40 AdamW steps do not grow beyond that. It also checks
// that every rank holds the same weights bit for bit, that the model learned, and that modules of different
// sizes on different ranks are an error. Exits 1 if not.
//
//   mpirun -np 2 ./mpi_train [steps]      (as root: add --allow-run-as-root; more ranks than cores: --oversubscribe)
//
// The global batch of 8 sequences is split evenly (the rank count must divide 8). Some targets of the last
// sequences are ignore_index, so the ranks count different numbers of targets and the weighted mean is exercised.
// Built when CMake finds MPI (Debian: libopenmpi-dev openmpi-bin); ctest runs it on 2 ranks.
#include <mpi.h>

#include <attnx/attnx.hpp>
#include <attnx/models/gpt2.hpp>
#include <attnx/train/gpt2.hpp>
#include <attnx/train/mpi.hpp>
#include <attnx/train/optim.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace attnx;

namespace {
using model_t = models::gpt2<float, 64, 32, 32, 2, 2>;  // vocabulary 64, context 32, d_model 32, 2 heads, 2 layers
constexpr std::size_t global_batch = 8, len = model_t::context_length;

// A learnable stream: each token is the previous one times 5 plus 3 (mod 64), one in eight replaced by noise.
void draw(std::mt19937_64& rng, std::vector<std::int32_t>& ids, std::vector<std::int32_t>& targets) {
  ids.resize(global_batch * len);
  targets.resize(global_batch * len);
  std::uniform_int_distribution<int> token(0, 63), noise(0, 7);
  for (std::size_t b = 0; b < global_batch; ++b) {
    int t = token(rng);
    for (std::size_t i = 0; i <= len; ++i) {
      if (i < len) ids[b * len + i] = t;
      if (i > 0) targets[b * len + i - 1] = t;
      t = noise(rng) == 0 ? token(rng) : (t * 5 + 3) % 64;
    }
  }
  for (std::size_t b = global_batch - 2; b < global_batch; ++b)  // the last 12 targets of the last 2 sequences
    for (std::size_t i = len - 12; i < len; ++i) targets[b * len + i] = train::default_ignore_index;
}

void init(model_t& m) {
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  train::for_each_parameter(m, [&](const std::string& name, auto& w) {
    if (name.find("ln_") != std::string::npos) return;
    const bool bias = name.ends_with("bias") || name.find(".b_") != std::string::npos;
    for (std::size_t i = 0; i < w.numel(); ++i) w.data()[i] = bias ? 0.0f : normal(rng);
  });
  m.tie_lm_head();
}

// One optimizer step of m from gradients g (clipped as a real run would be).
void step(model_t& m, model_t& g, train::adamw& opt) {
  train::clip_grad_norm(g, 1.0);
  opt.step(m, g, 3e-3);
  m.tie_lm_head();
}

// The largest difference of two models' weights, key biases left out: their gradient is 0 in exact arithmetic (a key
// bias adds q.b_k to every score of a row, which the softmax removes), so both runs move them by rounding alone,
// which AdamW's normalisation scales up to the learning rate.
float max_difference(const model_t& a, const model_t& b) {
  float d = 0;
  train::for_each_parameter(a, b, [&](const std::string& name, const auto& x, const auto& y) {
    if (name.ends_with("attn.b_k")) return;
    for (std::size_t i = 0; i < x.numel(); ++i) d = std::max(d, std::abs(x.data()[i] - y.data()[i]));
  });
  return d;
}

// Modules of different sizes on different ranks: every rank gets an error naming both sizes (MPI itself would
// have undefined behaviour), and nothing else is reduced.
bool mismatch_reported(int rank) {
  nn::linear<float, 4, 4> a;  // 20 parameters
  nn::linear<float, 4, 3> b;  // 15
  try {
    if (rank == 0) train::all_reduce_gradients(a, 0.0f, 1, MPI_COMM_WORLD);
    else train::all_reduce_gradients(b, 0.0f, 1, MPI_COMM_WORLD);
  } catch (const std::runtime_error& e) {
    return std::string(e.what()).find("the ranks' modules differ in size: 15 and 20 parameters") != std::string::npos;
  }
  return false;
}

int run(int rank, int ranks, std::size_t steps) {
  if (global_batch % static_cast<std::size_t>(ranks) != 0) {
    if (rank == 0) std::fprintf(stderr, "mpi_train: %d ranks do not divide the batch of %zu\n", ranks, global_batch);
    return 2;
  }
  const std::size_t share = global_batch / static_cast<std::size_t>(ranks), first = static_cast<std::size_t>(rank) * share;
  context ctx;
  ctx.set_threads(1);

  auto m = std::make_unique<model_t>(), g = std::make_unique<model_t>();
  if (rank == 0) init(*m);
  train::broadcast_parameters(*m, MPI_COMM_WORLD);
  std::unique_ptr<model_t> solo, solo_g;  // rank 0: the same run in one process
  if (rank == 0) {
    solo = std::make_unique<model_t>(*m);
    solo_g = std::make_unique<model_t>();
  }
  const train::adamw_options o{.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  train::adamw opt(o), solo_opt(o);

  std::mt19937_64 rng(42);  // every rank draws the same global batches and takes its share
  std::vector<std::int32_t> ids, targets;
  float worst = 0, first_loss = 0, last_loss = 0;
  for (std::size_t s = 0; s < steps; ++s) {
    draw(rng, ids, targets);
    const std::span<const std::int32_t> my_ids(ids.data() + first * len, share * len),
        my_targets(targets.data() + first * len, share * len);
    train::zero(*g);
    const float mine = train::forward_backward(*m, my_ids, my_targets, share, *g, ctx);
    const float loss = train::all_reduce_gradients(*g, mine, train::count_targets(my_targets), MPI_COMM_WORLD);
    step(*m, *g, opt);
    if (rank == 0) {
      train::zero(*solo_g);
      const float one = train::forward_backward(*solo, ids, targets, global_batch, *solo_g, ctx);
      step(*solo, *solo_g, solo_opt);
      worst = std::max(worst, std::abs(loss - one));
      if (s % 10 == 0 || s + 1 == steps)
        std::printf("step %3zu  loss on %d ranks %.6f  in one process %.6f\n", s, ranks, double(loss), double(one));
      if (s == 0) first_loss = loss;
      last_loss = loss;
    }
  }
  const bool in_sync = train::parameters_in_sync(*m, MPI_COMM_WORLD);
  const bool mismatch = ranks < 2 || mismatch_reported(rank);
  if (rank != 0) return in_sync && mismatch ? 0 : 1;
  const float weights = max_difference(*m, *solo);
  std::printf("largest loss difference %.2e (at most 5e-6), largest weight difference %.2e (at most 2e-5), "
              "ranks in sync: %s, size mismatch reported: %s, loss %.3f -> %.3f\n",
              double(worst), double(weights), in_sync ? "yes" : "no", mismatch ? "yes" : "no", double(first_loss), double(last_loss));
  const bool ok = worst <= 5e-6f && weights <= 2e-5f && in_sync && mismatch && last_loss < first_loss - 1.0f;
  if (!ok) std::printf("mpi_train: FAILED\n");
  return ok ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int rc = 0;
  try {
    rc = run(rank, ranks, argc > 1 ? std::stoul(argv[1]) : 40);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_train (rank %d): %s\n", rank, e.what());
    rc = 2;
  }
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
