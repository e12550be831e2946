// attnx kernels: the prefill driver. Splits a problem into (batch, head, query block) work items and runs one
// instruction set's tile kernel (tiles/flash_tile.hpp) over them on the context's threads.
#pragma once

#include "attnx/kernels/impl/score_plan.hpp"

ATTNX_OPTIMIZE_BEGIN
namespace attnx::kernels::detail {

// One kernel (instruction set and block width) as run_flash sees it: its blocking and its entry point. The
// driver below is compiled once per element type, not once per kernel (it was five times per type: about
// a tenth of the compile time of a program that evaluates attention).
template <class T>
struct flash_kernel_ref {
  std::size_t mq, g;              // rows per query block, query blocks per work item at most
  std::size_t scratch, limits;    // per thread: elements of T, then indices (for this problem's dk, dv)
  void (*run_block)(const attention_problem<T>&, const score_plan<T>&, std::size_t b, std::size_t h, std::size_t i0,
                    std::size_t blocks, T* buf, std::size_t* limits);
  // bf16 / f16 K and V (T = float): rows [j0, j1) of one matrix widened into dst (row stride ld).
  void (*widen_rows)(kv_storage, const std::uint16_t* src, std::ptrdiff_t row, std::size_t j0, std::size_t j1,
                     std::size_t d, T* dst, std::size_t ld);
};
template <class Kernel, class T>
flash_kernel_ref<T> kernel_ref(const attention_problem<T>& p) {
  return {Kernel::MQ, Kernel::G, Kernel::scratch_elems(p.dk, p.dv), Kernel::limit_elems(), &Kernel::run_block,
          &Kernel::widen_rows};
}

// A work item of the prefill kernel: query blocks [i0 / MQ, i0 / MQ + blocks) of (b, h), and its cost (keys x rows).
struct flash_item {
  std::size_t cost, i0, blocks;
  std::uint32_t b, h;
};

// The problem's work items (batch, head, query blocks), the head inside the batch item and the query blocks inside
// the head, so that consecutive items read the same K and V (which stay in L2 between them); total: the work in
// keys x rows. Query blocks per item: up to kernel.g (fewer passes over K and V), but about 8 items per thread at
// least for the load balance; a last block of fewer than MQ rows is an item of its own (it may run narrower).
template <class T>
storage<flash_item, dyn> flash_items(const attention_problem<T>& p, const score_plan<T>& plan, unsigned threads,
                                     const flash_kernel_ref<T>& kernel, double& total) {
  struct span {
    std::size_t cost, qb, n;
  };
  const std::size_t MQ = kernel.mq, blocks = (p.lq + MQ - 1) / MQ, full = p.lq / MQ;
  const std::size_t group = alg::clamp<std::size_t>(p.batch * p.heads * full / (8 * std::size_t{threads}), 1, kernel.g);
  storage<span, dyn> spans(uninitialized, p.batch * blocks);  // per batch item: at most one per query block
  std::size_t ns = 0;
  total = 0;
  for (std::size_t b = 0; b < p.batch; ++b)
    for (std::size_t qb = 0; qb < blocks; qb += (qb < full ? alg::min(group, full - qb) : 1)) {
      const std::size_t n = qb < full ? alg::min(group, full - qb) : 1;
      std::size_t cost = 0;  // (limits grow with the row: the last row of each block has the most keys)
      for (std::size_t g = qb; g < qb + n; ++g) {
        const std::size_t last = alg::min(p.lq, (g + 1) * MQ) - 1;
        const std::size_t end = skip_limit(p, plan, b, last) + 1, start = skip_start(p, plan, b, g * MQ);
        cost += (end - alg::min(end - 1, start)) * (last + 1 - g * MQ);
      }
      total += double(cost) * double(p.heads);
      spans[ns++] = {cost, qb, n};
    }
  const std::size_t per_b = ns / p.batch;
  storage<flash_item, dyn> items(uninitialized, ns * p.heads);
  std::size_t n_items = 0;
  for (std::size_t b = 0; b < p.batch; ++b)
    for (std::size_t h = 0; h < p.heads; ++h)
      for (std::size_t s = b * per_b; s < (b + 1) * per_b; ++s)
        items[n_items++] = {spans[s].cost, spans[s].qb * MQ, spans[s].n, static_cast<std::uint32_t>(b),
                            static_cast<std::uint32_t>(h)};
  return items;
}

// bf16 / f16 K and V for the prefill kernel: each thread widens the keys and values its item reads, one (b, KV head)
// at a time, into a buffer of its own (kept while its next items read the same matrices), instead of a float copy of
// the whole stack. Per thread L_k rows of K then of V (rows padded to 64 bytes), and which (b, KV head) they hold.
template <class T>
struct widened_kv {
  struct held_rows {
    std::size_t b, g, rows;
  };
  const attention_problem<T>& p;
  std::size_t ldk, ldv, elems;
  scratch_block buf;
  storage<held_rows, dyn> held;
  widened_kv(const attention_problem<T>& problem, unsigned slots)
      : p(problem), ldk((problem.dk + 15) / 16 * 16), ldv((problem.dv + 15) / 16 * 16),
        elems(problem.kv != kv_storage::same ? problem.lk * (ldk + ldv) : 0), buf(elems * sizeof(T) * slots),
        held(uninitialized, problem.kv != kv_storage::same ? slots : 0) {
    for (std::size_t s = 0; s < held.size(); ++s) held[s] = {0, 0, 0};
  }
  // The problem over slot's buffer, holding at least the first keys rows of (b, KV head g) widened.
  attention_problem<T> rows_for(unsigned slot, std::size_t b, std::size_t g, std::size_t keys,
                                const flash_kernel_ref<T>& kernel) {
    T* const k = reinterpret_cast<T*>(buf.get()) + elems * slot;
    T* const v = k + p.lk * ldk;
    held_rows& w = held[slot];
    if (w.b != b || w.g != g) w = {b, g, 0};
    if (w.rows < keys) {
      kernel.widen_rows(p.kv, p.k16.matrix(b, g), p.k16.row, w.rows, keys, p.dk, k, ldk);
      kernel.widen_rows(p.kv, p.v16.matrix(b, g), p.v16.row, w.rows, keys, p.dv, v, ldv);
      w.rows = keys;
    }
    attention_problem<T> q = p;  // the same problem with K and V in the buffer, for every (b, KV head)
    q.kv = kv_storage::same;
    q.k = {k, 0, 0, static_cast<std::ptrdiff_t>(ldk)};
    q.v = {v, 0, 0, static_cast<std::ptrdiff_t>(ldv)};
    return q;
  }
};

// Splits the problem into work items (flash_items), longest first (causal blocks near the diagonal are short), and
// runs them on the context's threads. p: validated, not empty.
template <class T>
void run_flash(const attention_problem<T>& p, unsigned threads, const flash_kernel_ref<T>& kernel) {
  const score_plan<T> plan = make_plan(p);
  threads = alg::max(1u, threads);
  double total = 0;
  storage<flash_item, dyn> items = flash_items(p, plan, threads, kernel, total);
  const std::size_t ni = items.size();
  const double flops = 2.0 * total * double(p.dk + p.dv);
  const auto by_work = static_cast<std::size_t>(alg::max(1.0, flops / flash_min_flops_per_thread));
  const auto slots = static_cast<unsigned>(alg::min<std::size_t>({threads, ni, by_work}));
  // Several threads take the items in turn from a counter: the longest first balances causal problems.
  if (slots > 1)
    alg::stable_sort(items.data(), items.data() + ni, [](const flash_item& x, const flash_item& y) { return x.cost > y.cost; });
  // Per thread: the tile scratch, then the limits. Allocated here so that the workers cannot throw.
  const std::size_t tile_bytes = kernel.scratch * sizeof(T);
  const std::size_t bytes = scratch_layout::lines(tile_bytes + kernel.limits * sizeof(std::size_t));
  const scratch_block buf(bytes * slots);
  widened_kv<T> wide(p, slots);
  const std::size_t group_heads = p.heads / p.kv_heads;
  exec::parallel_for(ni, slots, [&](std::size_t n, unsigned slot) {
    std::byte* mine = buf.get() + bytes * slot;
    T* const scratch = reinterpret_cast<T*>(mine);
    std::size_t* const limits = reinterpret_cast<std::size_t*>(mine + tile_bytes);
    const flash_item& it = items[n];
    if (p.kv == kv_storage::same) return kernel.run_block(p, plan, it.b, it.h, it.i0, it.blocks, scratch, limits);
    // The keys the kernel reads: where the skip is hard, up to the item's last row's skip limit; else all.
    const std::size_t keys = plan.skip_final == -std::numeric_limits<T>::infinity()
                                 ? skip_limit(p, plan, it.b, alg::min(p.lq, it.i0 + it.blocks * kernel.mq) - 1)
                                 : p.lk;
    const attention_problem<T> q = wide.rows_for(slot, it.b, it.h / group_heads, keys, kernel);
    kernel.run_block(q, plan, it.b, it.h, it.i0, it.blocks, scratch, limits);
  });
}

// Short problems on several threads: with the wide blocks there would be fewer than about four work items
// per thread (L = 128, one head: 3 blocks of 48 rows under AVX-512), too few to balance, causal ones above
// all. Blocks of one vector of rows (16 under AVX-512) give the threads items enough, at some cost per row.
template <class T, class Wide, class Narrow>
void run_flash_sized(const attention_problem<T>& p, unsigned threads) {
  const std::size_t wide_blocks = p.batch * p.heads * ((p.lq + Wide::MQ - 1) / Wide::MQ);
  const bool narrow = threads > 1 && wide_blocks < 4 * std::size_t{threads};
  run_flash(p, threads, narrow ? kernel_ref<Narrow>(p) : kernel_ref<Wide>(p));
}

}  // namespace attnx::kernels::detail
ATTNX_OPTIMIZE_END
