// attnx kernels: the decode driver. Few query rows against many keys: split-K chunks of fixed size per (batch
// item, KV head), one instruction set's decode kernel (tiles/decode_kernel.hpp) over runs of them, then the merge.
#pragma once

#include "attnx/kernels/impl/score_plan.hpp"
#include "attnx/kernels/impl/tiles.hpp"

ATTNX_OPTIMIZE_BEGIN
namespace attnx::kernels::detail {

// Problems with at most this many query rows take the decode kernel.
inline constexpr std::size_t decode_max_rows = 16;
// Keys per split-K chunk: each chunk of each (batch item, KV head) leaves one partial state, and the states
// are merged in key order. Fixed, so that the results do not depend on the number of threads; a thread's work
// item is a run of consecutive chunks, gone through in one pass (see run_decode).
inline constexpr std::size_t decode_chunk = 512;

// One decode kernel (instruction set and storage type) as run_decode sees it.
template <class T>
struct decode_kernel_ref {
  std::size_t (*scratch_elems)(std::size_t rows, std::size_t dk, std::size_t dv);
  void (*run)(const attention_problem<T>&, const score_plan<T>&, kv_stack k, kv_stack v, std::size_t b, std::size_t g,
              std::size_t k0, std::size_t k1, std::size_t chunk, T* buf, const std::size_t* limits,
              const std::size_t* ends, T* state);
};
template <class Kernel, class T>
decode_kernel_ref<T> decode_ref() {
  return {&Kernel::scratch_elems, &Kernel::run};
}
#ifdef ATTNX_KERNELS_KV16_ELSEWHERE
// The compiled library's float kernels: the decode kernels over bf16 and over f16 K and V are instantiated in
// translation units of their own (src/kernels_float_bf16.cpp, src/kernels_float_f16.cpp), compiled in parallel.
extern template decode_kernel_ref<float> decode_ref<scalar::decode_kernel<float, bf16>, float>();
extern template decode_kernel_ref<float> decode_ref<scalar::decode_kernel<float, f16>, float>();
#if ATTNX_SIMD_X86
extern template decode_kernel_ref<float> decode_ref<avx2::decode_kernel<float, bf16>, float>();
extern template decode_kernel_ref<float> decode_ref<avx2::decode_kernel<float, f16>, float>();
extern template decode_kernel_ref<float> decode_ref<avx512::decode_kernel<float, bf16>, float>();
extern template decode_kernel_ref<float> decode_ref<avx512::decode_kernel<float, f16>, float>();
#endif
#endif

// Chunks of decode_chunk keys per (batch item, KV head), each a partial state per row; then the merge.
// A work item is a run of consecutive chunks of one (b, g), as long as the number of threads allows (at
// least two items per thread when there are enough chunks): the kernel goes through it in one pass and
// leaves a state at every chunk boundary, so that the memory streams of K and V do not restart every
// decode_chunk keys (each restart costs read bandwidth: bench/NOTES.md). The states, and so the results, are
// the same for any number of threads. Compiled once per T (the kernel comes
// as decode_kernel_ref). p: validated, not empty.
// The call's bookkeeping, in one allocation (a short decoding call is short enough for allocations to show): per
// batch item and row the limit of each limit step, then its start (limits) and the end of the keys read (ends); the
// work items, at most max(1, ceil(L_k / decode_chunk)) chunks per (b, g); first: the chunks (states) of (b, g) are
// [first[bg], first[bg + 1]); kbegins, kends: the keys read per batch item, from a chunk boundary (the chunks below
// a key interval's start for every row are left out: whole chunks, so that the states are those of the full pass).
template <class T>
struct decode_book {
  struct item {
    std::uint32_t b, g;
    std::size_t k0, k1, state;  // keys [k0, k1): chunks state, state + 1, ...
  };
  std::size_t rows, nl, ni = 0, nc = 0;  // rows per (b, g), limit steps, items, chunks
  double work = 0;                       // keys read, over every (b, row)

 private:
  std::size_t at_[6]{};  // the arrays' offsets in block (before it: layout() sets them while block is built)

 public:
  scratch_block block;
  std::size_t* limits;
  std::size_t* ends;
  item* items;
  std::size_t* first;
  std::size_t* kends;
  std::size_t* kbegins;

  decode_book(const attention_problem<T>& p, const score_plan<T>& plan, std::size_t rows_)
      : rows(rows_), nl(plan.n_limits), block(layout(p)) {
    limits = block.at<std::size_t>(at_[0]);
    ends = block.at<std::size_t>(at_[1]);
    items = block.at<item>(at_[2]);
    first = block.at<std::size_t>(at_[3]);
    kends = block.at<std::size_t>(at_[4]);
    kbegins = block.at<std::size_t>(at_[5]);
    fill(p, plan);
  }

 private:
  std::size_t layout(const attention_problem<T>& p) {
    const std::size_t most_chunks = alg::max<std::size_t>(1, (p.lk + decode_chunk - 1) / decode_chunk);
    scratch_layout l;
    at_[0] = l.add<std::size_t>(p.batch * 2 * alg::max<std::size_t>(nl, 1) * rows);
    at_[1] = l.add<std::size_t>(p.batch * rows);
    at_[2] = l.add<item>(p.batch * p.kv_heads * most_chunks);
    at_[3] = l.add<std::size_t>(p.batch * p.kv_heads + 1);
    at_[4] = l.add<std::size_t>(p.batch);
    at_[5] = l.add<std::size_t>(p.batch);
    return l.bytes;
  }
  // The keys item b holds: Lk, or fewer by its key lengths or padding (a ragged cache), for every row alike.
  static std::size_t item_keys(const attention_problem<T>& p, const score_plan<T>& plan, std::size_t b) {
    std::size_t n = p.lk;
    for (std::size_t li = 0; li < plan.n_limits; ++li) {
      const score_step<T>& step = plan.steps[plan.limits[li]];
      if (step.kind == step_kind::key_lengths || step.kind == step_kind::causal_lengths) n = alg::min(n, step.lengths[b]);
      if (step.kind == step_kind::key_padding) n = alg::min(n, step.length);
    }
    return n;
  }
  // The limits and ends of every row, and the chunks of every (b, g).
  void fill(const attention_problem<T>& p, const score_plan<T>& plan) {
    const bool skip = plan.skip_final == -std::numeric_limits<T>::infinity() && plan.poison < 0 && plan.any_skippable;
    for (std::size_t b = 0; b < p.batch; ++b) {
      std::size_t kend = 0, kbegin = p.lk;
      const std::size_t own = item_keys(p, plan, b);
      for (std::size_t r = 0; r < rows; ++r) {
        std::size_t e = p.lk, st = 0;
        for (std::size_t li = 0; li < nl; ++li) {
          const score_step<T>& step = plan.steps[plan.limits[li]];
          const std::size_t lim = step_limit(step, p, b, r % p.lq), from = step_start(step, p, b, r % p.lq);
          limits[(b * 2 * nl + li) * rows + r] = lim;
          limits[(b * 2 * nl + nl + li) * rows + r] = from;
          if (skip && plan.skippable[li]) e = alg::min(e, lim), st = alg::max(st, from);
        }
        // (a skip point inside the item's keys rounds up to a chunk boundary: the chunks, and the loops' tails within
        // them, are then those of the run that computes every key, so skipping changes no bit; the keys between are
        // masked by the limits as any computed key)
        if (e < own) e = alg::min(own, (e + decode_chunk - 1) / decode_chunk * decode_chunk);
        ends[b * rows + r] = e;
        kend = alg::max(kend, e);
        kbegin = alg::min(kbegin, plan.skip_starts ? alg::min(st, e) : std::size_t{0});
        work += double(e - alg::min(e, st));
      }
      kends[b] = kend;
      kbegins[b] = alg::min(kbegin, kend) / decode_chunk * decode_chunk;
      const std::size_t span = kend - kbegins[b];
      const std::size_t chunks = alg::max<std::size_t>(1, (span + decode_chunk - 1) / decode_chunk);
      for (std::size_t g = 0; g < p.kv_heads; ++g) {
        first[b * p.kv_heads + g] = nc;
        nc += chunks;
      }
    }
    first[p.batch * p.kv_heads] = nc;
  }

 public:
  // The work items, span chunks each (the last of a (b, g) may have fewer).
  void cut(const attention_problem<T>& p, std::size_t span) {
    for (std::size_t b = 0; b < p.batch; ++b)
      for (std::size_t g = 0; g < p.kv_heads; ++g) {
        const std::size_t c0 = first[b * p.kv_heads + g], c1 = first[b * p.kv_heads + g + 1];
        for (std::size_t c = c0; c < c1; c += span)
          items[ni++] = {static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(g), kbegins[b] + (c - c0) * decode_chunk,
                         alg::min(kends[b], kbegins[b] + (alg::min(c + span, c1) - c0) * decode_chunk), c};
      }
  }
};

// The chunks' states of each (b, g) merged, row by row, into the output (and the log-sum-exp).
template <class T>
void merge_chunks(const attention_problem<T>& p, const decode_book<T>& book, const T* st) {
  const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
  const std::size_t group = p.heads / p.kv_heads, per_state = book.rows * (p.dv + 2);
  for (std::size_t b = 0; b < p.batch; ++b)
    for (std::size_t g = 0; g < p.kv_heads; ++g) {
      const std::size_t i0 = book.first[b * p.kv_heads + g], n = book.first[b * p.kv_heads + g + 1] - i0;
      for (std::size_t r = 0; r < book.rows; ++r) {
        const std::size_t h = g * group + r / p.lq, i = r % p.lq;
        T* o = p.o.matrix(b, h) + sz(i) * p.o.row;
        const merged_row<T> m = merge_partials(n, st + i0 * per_state + r * (p.dv + 2), sz(per_state), p.dv, o);
        const T lse = finish_row(m, o, p.dv);
        if (p.lse.data) p.lse.matrix(b, h)[sz(i) * p.lse.row] = lse;
      }
    }
}

template <class T>
void run_decode(const attention_problem<T>& p, kv_stack k, kv_stack v, unsigned threads, const decode_kernel_ref<T>& kernel) {
  const score_plan<T> plan = make_plan(p);
  const std::size_t rows = (p.heads / p.kv_heads) * p.lq, nl = plan.n_limits;
  decode_book<T> book(p, plan, rows);
  const double flops = 2.0 * book.work * double(p.kv_heads) * double(p.dk + p.dv);
  const auto by_work = static_cast<std::size_t>(alg::max(1.0, flops / flash_min_flops_per_thread));
  const auto want = static_cast<unsigned>(alg::min<std::size_t>({alg::max(1u, threads), book.nc, by_work}));
  // Chunks per item: as many as leave two items per thread (one thread: a whole (b, g) per item).
  book.cut(p, want > 1 ? alg::max<std::size_t>(1, book.nc / (2 * std::size_t{want})) : book.nc);
  const auto slots = static_cast<unsigned>(alg::min<std::size_t>(want, book.ni));
  // The chunks' states and each slot's scratch, in one block.
  const std::size_t per_state = rows * (p.dv + 2);
  const std::size_t scratch = scratch_layout::lines(kernel.scratch_elems(rows, p.dk, p.dv) * sizeof(T));
  scratch_layout work_layout;
  const std::size_t states_at = work_layout.add<T>(book.nc * per_state), buf_at = work_layout.add<std::byte>(scratch * slots);
  const scratch_block work_block(work_layout.bytes);
  T* const st = work_block.at<T>(states_at);
  exec::parallel_for(book.ni, slots, [&](std::size_t n, unsigned slot) {
    const typename decode_book<T>::item& it = book.items[n];
    kernel.run(p, plan, k, v, it.b, it.g, it.k0, it.k1, decode_chunk, work_block.at<T>(buf_at + scratch * slot),
               book.limits + it.b * 2 * nl * rows, book.ends + it.b * rows, st + it.state * per_state);
  });
  merge_chunks(p, book, st);
}

#if ATTNX_HEADER_ONLY
// Header-only, the decode kernels over bf16 / f16 K and V (half of all the kernels' code) are compiled only in programs
// that use them: use_kv16<KV>() (a kv_cache of that storage calls it) puts them in this table, one per instruction set.
template <class KV>
inline exec::detail::atomic<decode_kernel_ref<float> (*)()> kv16_decoders[simd::all_isas.size()]{};
#endif

// The decode kernels of instruction set I, by storage type (bf16 / f16 only with T = float).
template <class T, simd::isa I, template <class, class> class Kernel>
void run_decode_kv(const attention_problem<T>& p, unsigned threads) {
  if (p.kv == kv_storage::same) return run_decode(p, untyped(p.k), untyped(p.v), threads, decode_ref<Kernel<T, T>, T>());
  if constexpr (std::is_same_v<T, float>) {
    const kv_stack k = untyped(p.k16), v = untyped(p.v16);
#if ATTNX_HEADER_ONLY
    const auto kernel = [&]<class KV>(std::type_identity<KV>) {
      const auto get = kv16_decoders<KV>[static_cast<std::size_t>(I)].load(exec::detail::memory_order_acquire);
      if (!get)
        ATTNX_THROW(std::invalid_argument(std::string("attnx::kernels::flash_attention: header-only, the decode kernels over ") +
                                          (p.kv == kv_storage::bf16 ? "bf16" : "f16") +
                                          " keys and values are compiled where kernels::use_kv16<attnx::" +
                                          (p.kv == kv_storage::bf16 ? "bf16" : "f16") +
                                          ">() is called (a kv_cache of that storage calls it)"));
      return get();
    };
    if (p.kv == kv_storage::bf16) return run_decode(p, k, v, threads, kernel(std::type_identity<bf16>{}));
    return run_decode(p, k, v, threads, kernel(std::type_identity<f16>{}));
#else
    if (p.kv == kv_storage::bf16) return run_decode(p, k, v, threads, decode_ref<Kernel<T, bf16>, T>());
    return run_decode(p, k, v, threads, decode_ref<Kernel<T, f16>, T>());
#endif
  }
}

// Keys and values shared by every batch item (batch stride 0: a prefix stored once, a memory of one item), under a
// score program that depends on neither the item nor the row: factors, key padding, key lengths equal for every
// item, masks and biases broadcast over items and rows. The items' rows are then rows of one problem
// (batch_folded), so that K and V are read once for all the items instead of once per item. Only for the decode
// kernel's row counts: the prefill kernel reads K and V once per block of rows anyway (B ceil(L_q / block) passes
// against ceil(B L_q / block)), and the gathered copies of Q and O would grow with L_q.
template <class T>
bool kv_shared_by_batch(const attention_problem<T>& p) {
  // (`p.batch < 2` would not do: clang 14 reads attnx::batch<2...>)
  if (p.batch <= 1 || p.lk == 0 || p.lq > decode_max_rows) return false;
  if (p.kv == kv_storage::same ? p.k.batch != 0 || p.v.batch != 0 : p.k16.batch != 0 || p.v16.batch != 0) return false;
  for (std::size_t s = 0; s < p.n_steps; ++s) {
    const score_step<T>& st = p.steps[s];
    switch (st.kind) {
      case step_kind::multiply:
      case step_kind::divide:
      case step_kind::tanh:
      case step_kind::key_padding: break;
      case step_kind::key_lengths:
        for (std::size_t b = 1; b < p.batch; ++b)
          if (st.lengths[b] != st.lengths[0]) return false;
        break;
      case step_kind::boolean_mask:
        if (st.mask.batch != 0 || st.mask.row != 0) return false;
        break;
      case step_kind::additive_mask:
        if (st.bias.batch != 0 || st.bias.row != 0) return false;
        break;
      default: return false;  // the causal steps: a row's visible keys depend on its index
    }
  }
  return true;
}

}  // namespace attnx::kernels::detail
ATTNX_OPTIMIZE_END

#if ATTNX_HEADER_ONLY
namespace attnx::kernels {
template <class KV>
void use_kv16() noexcept {
  static const bool registered = [] {
    auto& table = detail::kv16_decoders<KV>;
    table[static_cast<std::size_t>(simd::isa::scalar)].store(&detail::decode_ref<detail::scalar::decode_kernel<float, KV>, float>,
                                                             exec::detail::memory_order_release);
#if ATTNX_SIMD_X86
    table[static_cast<std::size_t>(simd::isa::avx2)].store(&detail::decode_ref<detail::avx2::decode_kernel<float, KV>, float>,
                                                           exec::detail::memory_order_release);
    table[static_cast<std::size_t>(simd::isa::avx512)].store(&detail::decode_ref<detail::avx512::decode_kernel<float, KV>, float>,
                                                             exec::detail::memory_order_release);
#endif
    return true;
  }();
  (void)registered;
}
}  // namespace attnx::kernels
#endif
