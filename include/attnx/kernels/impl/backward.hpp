// attnx kernels: flash_attention_backward's definition. Packs Q and dO per query block, splits the keys into work
// items, runs one instruction set's tiles (tiles/backward_tile.hpp) over them on the context's threads and sums the
// items' dQ in a fixed order. Included by the compiled library's sources (src/) and, with ATTNX_HEADER_ONLY, by
// kernels/flash_attention_backward.hpp itself.
#pragma once

#include "attnx/kernels/flash_attention_backward.hpp"
#include "attnx/kernels/impl/score_plan.hpp"
#include "attnx/kernels/impl/tiles.hpp"

ATTNX_OPTIMIZE_BEGIN
namespace attnx::kernels::detail {

// A work item: keys [j_begin, j_end) of K/V head g of batch item b.
struct backward_item {
  std::size_t cost, index, j_begin, j_end;
  std::uint32_t b, g;
};

// What every work item reads: the problem, the packed query blocks, and where the items write.
template <class T>
struct backward_job {
  const attention_problem<T>* p;
  const score_plan<T>* plan;
  T expo;                    // the factor of the scores in the exponent: the folded one on the fast path, else 1
  T scale;                   // d score / d dot where no step blocked it: the product of the program's factors
  bool general;              // not the fast path: the tile runs the whole program on the dots
  bool masks;                // a boolean mask step
  std::size_t bq, dkp, dvp;  // rows per query block; dk, dv padded to whole vectors
  std::size_t nqb, lqp;      // query blocks, and their rows (lq padded)
  std::size_t group;         // query heads per K/V head
  std::size_t block_elems;   // one packed query block
  T* packed;                 // per (b, h, query block): Q^T, Q, dO^T, dO, -lse log2 e, D, key limits (as T)
  std::size_t* lim_range;    // per (b, query block): the smallest and largest key limit of its rows, the smallest start
  T* dq_acc;                 // per item: group x lqp x dkp
  unsigned char* dq_written; // per item: group x nqb, whether the item wrote that query block's dQ
  T* dk_buf;                 // per (b, K/V head): lk x dkp
  T* dv_buf;                 // per (b, K/V head): lk x dvp

  T* block(std::size_t b, std::size_t h, std::size_t qb) const {
    return packed + ((b * p->heads + h) * nqb + qb) * block_elems;
  }
  T* dq_item(std::size_t index) const { return dq_acc + index * group * lqp * dkp; }
  unsigned char* written(std::size_t index) const { return dq_written + index * group * nqb; }
  T* dk_kv(std::size_t b, std::size_t g) const { return dk_buf + (b * p->kv_heads + g) * p->lk * dkp; }
  T* dv_kv(std::size_t b, std::size_t g) const { return dv_buf + (b * p->kv_heads + g) * p->lk * dvp; }
};

}  // namespace attnx::kernels::detail
ATTNX_OPTIMIZE_END

#define ATTNX_PER_ISA_FRAGMENT "attnx/kernels/tiles/backward_tile.hpp"
#include "attnx/kernels/impl/per_isa.hpp"

ATTNX_OPTIMIZE_BEGIN
namespace attnx::kernels::detail {

// Work items per problem the split aims at, whatever the thread count (the split decides the summation order).
inline constexpr std::size_t backward_target_items = 8;

// Query block qb of (b, h) packed: bq rows (padding rows: zeros, lse -inf, limit 0).
template <class T>
void pack_block(const backward_job<T>& J, const attention_gradients<T>& g, std::size_t b, std::size_t h, std::size_t qb) {
  const attention_problem<T>& p = *J.p;
  const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
  const std::size_t bq = J.bq, dkp = J.dkp, dvp = J.dvp;
  constexpr T inf = std::numeric_limits<T>::infinity();
  // (Soft skipping leaves keys of tiny but nonzero weight to the forward; the backward reads them all.)
  const bool hard = J.plan->skip_final == -inf;
  T* qt = J.block(b, h, qb);
  T* qp = qt + p.dk * bq;
  T* dot = qp + bq * dkp;
  T* dop = dot + p.dv * bq;
  T* nlse = dop + bq * dvp;
  T* dd = nlse + bq;
  T* lim = dd + bq;
  std::size_t lo = p.lk, hi = 0, start = p.lk;
  const std::size_t rows = alg::min(bq, p.lq - qb * bq);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t i = qb * bq + r;
    const T* q = p.q.matrix(b, h) + sz(i) * p.q.row;
    const T* o = g.o.matrix(b, h) + sz(i) * g.o.row;
    const T* d_o = g.d_o.matrix(b, h) + sz(i) * g.d_o.row;
    alg::copy_n(q, p.dk, qp + r * dkp);
    alg::fill_n(qp + r * dkp + p.dk, dkp - p.dk, T(0));
    for (std::size_t c = 0; c < p.dk; ++c) qt[c * bq + r] = q[c];
    alg::copy_n(d_o, p.dv, dop + r * dvp);
    alg::fill_n(dop + r * dvp + p.dv, dvp - p.dv, T(0));
    T d = 0;
    for (std::size_t c = 0; c < p.dv; ++c) dot[c * bq + r] = d_o[c], d += d_o[c] * o[c];
    dd[r] = d;
    const T l = g.lse.matrix(b, h)[sz(i) * g.lse.row];
    nlse[r] = l == -inf ? -inf : -(l * log2e<T>);
    const std::size_t limit = hard ? skip_limit(p, *J.plan, b, i) : p.lk;
    lim[r] = static_cast<T>(limit);
    if (l != -inf) lo = alg::min(lo, limit), hi = alg::max(hi, limit), start = alg::min(start, skip_start(p, *J.plan, b, i));
  }
  for (std::size_t r = rows; r < bq; ++r) {
    alg::fill_n(qp + r * dkp, dkp, T(0));
    alg::fill_n(dop + r * dvp, dvp, T(0));
    for (std::size_t c = 0; c < p.dk; ++c) qt[c * bq + r] = T(0);
    for (std::size_t c = 0; c < p.dv; ++c) dot[c * bq + r] = T(0);
    dd[r] = T(0), nlse[r] = -inf, lim[r] = T(0);
  }
  if (h == 0) {
    J.lim_range[(b * J.nqb + qb) * 3] = lo;
    J.lim_range[(b * J.nqb + qb) * 3 + 1] = hi;
    J.lim_range[(b * J.nqb + qb) * 3 + 2] = start;
  }
}

// The backward with one instruction set's tiles (Kernel = <isa>::backward_kernel<T>).
template <class T, class Kernel>
bool run_backward(const attention_problem<T>& p, const attention_gradients<T>& g, unsigned threads) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "flash_attention_backward: float or double");
  validate(p);
  const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
  constexpr T inf = std::numeric_limits<T>::infinity();
  if (p.kv != kv_storage::same) return false;
  for (std::size_t s = 0; s < p.n_steps; ++s)  // (tanh: dS would need its derivative per score; the rules do it)
    if (p.steps[s].kind == step_kind::tanh) return false;
  if (has_tile_functions(p)) return false;  // (the caller's functions: the rules differentiate their expressions)
  const score_plan<T> plan = make_plan(p);
  for (std::size_t b = 0; b < p.batch; ++b)
    for (std::size_t h = 0; h < p.heads; ++h)
      for (std::size_t i = 0; i < p.lq; ++i) {
        const T l = g.lse.matrix(b, h)[sz(i) * g.lse.row];
        if (l != l || l == inf) return false;
      }
  const std::size_t W = Kernel::W, BQ = Kernel::BQ, BK = Kernel::BK;
  const std::size_t group = p.heads / p.kv_heads;
  // Outputs that no tile reaches: no rows or no keys at all.
  if (p.lq == 0 || p.lk == 0) {
    for (std::size_t b = 0; b < p.batch; ++b) {
      for (std::size_t h = 0; h < p.heads; ++h)
        for (std::size_t i = 0; i < p.lq; ++i) alg::fill_n(g.dq.matrix(b, h) + sz(i) * g.dq.row, p.dk, T(0));
      for (std::size_t kh = 0; kh < p.kv_heads; ++kh)
        for (std::size_t j = 0; j < p.lk; ++j) {
          alg::fill_n(g.dk.matrix(b, kh) + sz(j) * g.dk.row, p.dk, T(0));
          alg::fill_n(g.dv.matrix(b, kh) + sz(j) * g.dv.row, p.dv, T(0));
        }
    }
    return true;
  }
  backward_job<T> J{};
  J.p = &p;
  J.plan = &plan;
  J.general = !plan.fast || plan.ranged;  // (a key interval's start: the program tests it)
  J.expo = J.general ? T(1) : plan.folded;
  J.scale = T(1);
  for (std::size_t s = 0; s < plan.n; ++s) {
    if (plan.steps[s].kind == step_kind::multiply) J.scale *= plan.steps[s].value;
    if (plan.steps[s].kind == step_kind::divide) J.scale /= plan.steps[s].value;
  }
  J.masks = false;
  for (std::size_t s = 0; s < plan.n; ++s) J.masks = J.masks || plan.steps[s].kind == step_kind::boolean_mask;
  J.bq = BQ;
  J.dkp = (p.dk + W - 1) / W * W;
  J.dvp = (p.dv + W - 1) / W * W;
  J.nqb = (p.lq + BQ - 1) / BQ;
  J.lqp = J.nqb * BQ;
  J.group = group;
  J.block_elems = (p.dk + p.dv + 3) * BQ + BQ * (J.dkp + J.dvp);
  // The split: key chunks of whole key blocks, as many per (b, K/V head) as make about backward_target_items items.
  const std::size_t nkb = (p.lk + BK - 1) / BK, heads_kv = p.batch * p.kv_heads;
  const std::size_t want = alg::clamp<std::size_t>((backward_target_items + heads_kv - 1) / heads_kv, 1, nkb);
  const std::size_t chunk_blocks = (nkb + want - 1) / want, chunks = (nkb + chunk_blocks - 1) / chunk_blocks;
  const std::size_t n_items = heads_kv * chunks;

  scratch_layout lay;
  const std::size_t off_packed = lay.add<T>(p.batch * p.heads * J.nqb * J.block_elems);
  const std::size_t off_range = lay.add<std::size_t>(p.batch * J.nqb * 3);
  const std::size_t off_dq = lay.add<T>(n_items * group * J.lqp * J.dkp);
  const std::size_t off_written = lay.add<unsigned char>(n_items * group * J.nqb);
  const std::size_t off_dk = lay.add<T>(heads_kv * p.lk * J.dkp);
  const std::size_t off_dv = lay.add<T>(heads_kv * p.lk * J.dvp);
  const scratch_block mem(lay.bytes);
  J.packed = mem.at<T>(off_packed);
  J.lim_range = mem.at<std::size_t>(off_range);
  J.dq_acc = mem.at<T>(off_dq);
  J.dq_written = mem.at<unsigned char>(off_written);
  J.dk_buf = mem.at<T>(off_dk);
  J.dv_buf = mem.at<T>(off_dv);

  threads = alg::max(1u, threads);
  // The serial parts parallel too, by query or key block: packing, the dQ sums, dK and dV out.
  const std::size_t n_blocks = p.batch * p.heads * J.nqb;
  const unsigned block_slots = static_cast<unsigned>(alg::min<std::size_t>(threads, n_blocks));
  exec::parallel_for(n_blocks, block_slots, [&](std::size_t n, unsigned) {
    pack_block(J, g, n / J.nqb / p.heads, n / J.nqb % p.heads, n % J.nqb);
  });

  storage<backward_item, dyn> items(uninitialized, n_items);
  double total = 0;
  for (std::size_t b = 0; b < p.batch; ++b)
    for (std::size_t kh = 0; kh < p.kv_heads; ++kh)
      for (std::size_t c = 0; c < chunks; ++c) {
        const std::size_t index = (b * p.kv_heads + kh) * chunks + c;
        backward_item& it = items[index];
        it.index = index;
        it.b = static_cast<std::uint32_t>(b);
        it.g = static_cast<std::uint32_t>(kh);
        it.j_begin = c * chunk_blocks * BK;
        it.j_end = alg::min(p.lk, (c + 1) * chunk_blocks * BK);
        it.cost = 0;
        for (std::size_t j0 = it.j_begin; j0 < it.j_end; j0 += BK)
          for (std::size_t qb = 0; qb < J.nqb; ++qb)
            if (J.lim_range[(b * J.nqb + qb) * 3 + 1] > j0 && J.lim_range[(b * J.nqb + qb) * 3 + 2] < j0 + BK) it.cost += alg::min(BK, it.j_end - j0) * BQ * group;
        total += double(it.cost);
      }
  const double flops = 10.0 * total * double(p.dk + p.dv) / 2;
  const auto by_work = static_cast<std::size_t>(alg::max(1.0, flops / flash_min_flops_per_thread));
  const auto slots = static_cast<unsigned>(alg::min<std::size_t>({threads, n_items, by_work}));
  if (slots > 1)
    alg::stable_sort(items.data(), items.data() + n_items,
                     [](const backward_item& x, const backward_item& y) { return x.cost > y.cost; });
  const std::size_t per_slot = scratch_layout::lines(Kernel::scratch_elems(J.dkp, J.dvp) * sizeof(T));
  const scratch_block scratch(per_slot * slots);
  exec::parallel_for(n_items, slots, [&](std::size_t n, unsigned slot) {
    Kernel::run_item(J, items[n], reinterpret_cast<T*>(scratch.get() + per_slot * slot));
  });

  // dQ: the parts of the chunks that wrote a row's query block, summed in chunk order (0 where none did).
  exec::parallel_for(n_blocks, block_slots, [&](std::size_t n, unsigned) {
    const std::size_t b = n / J.nqb / p.heads, h = n / J.nqb % p.heads, kh = h / group, hh = h % group;
    const std::size_t qb = n % J.nqb;
    for (std::size_t i = qb * BQ; i < alg::min(p.lq, (qb + 1) * BQ); ++i) {
      T* out = g.dq.matrix(b, h) + sz(i) * g.dq.row;
      bool any = false;
      for (std::size_t c = 0; c < chunks; ++c) {
        const std::size_t item = (b * p.kv_heads + kh) * chunks + c;
        if (!J.written(item)[hh * J.nqb + i / BQ]) continue;
        const T* part = J.dq_item(item) + (hh * J.lqp + i) * J.dkp;
        if (!any) alg::copy_n(part, p.dk, out);
        else
          for (std::size_t d = 0; d < p.dk; ++d) out[d] += part[d];
        any = true;
      }
      if (!any) alg::fill_n(out, p.dk, T(0));
    }
  });
  // dK and dV: copied out, or summed in (b, K/V head) order where K or V is shared by the batch items or heads (a
  // stride of 0).
  const auto write_kv = [&](strided<T> out, std::size_t d, std::size_t dp, const T* buf, std::size_t j0) {
    const bool sum_b = out.batch == 0, sum_h = out.head == 0;
    for (std::size_t b = 0; b < p.batch; ++b)
      for (std::size_t kh = 0; kh < p.kv_heads; ++kh) {
        const bool first = (!sum_b || b == 0) && (!sum_h || kh == 0);
        for (std::size_t j = j0; j < alg::min(p.lk, j0 + BK); ++j) {
          T* o = out.matrix(b, kh) + sz(j) * out.row;
          const T* x = buf + ((b * p.kv_heads + kh) * p.lk + j) * dp;
          if (first) alg::copy_n(x, d, o);
          else
            for (std::size_t c = 0; c < d; ++c) o[c] += x[c];
        }
      }
  };
  exec::parallel_for(nkb, static_cast<unsigned>(alg::min<std::size_t>(threads, nkb)), [&](std::size_t n, unsigned) {
    write_kv(g.dk, p.dk, J.dkp, J.dk_buf, n * BK);
    write_kv(g.dv, p.dv, J.dvp, J.dv_buf, n * BK);
  });
  return true;
}

}  // namespace attnx::kernels::detail

namespace attnx::kernels {

template <class T>
bool flash_attention_backward(const attention_problem<T>& p, const attention_gradients<T>& g, simd::isa i,
                              unsigned threads) {
  if (!simd::cpu_supports(i))
    ATTNX_THROW(std::invalid_argument("attnx::kernels::flash_attention_backward: this CPU cannot run the " +
                                      std::string(simd::name(i)) + " path"));
#if ATTNX_SIMD_X86
  if (i == simd::isa::avx512) return detail::run_backward<T, detail::avx512::backward_kernel<T>>(p, g, threads);
  if (i == simd::isa::avx2) return detail::run_backward<T, detail::avx2::backward_kernel<T>>(p, g, threads);
#endif
  return detail::run_backward<T, detail::scalar::backward_kernel<T>>(p, g, threads);
}

}  // namespace attnx::kernels
ATTNX_OPTIMIZE_END
