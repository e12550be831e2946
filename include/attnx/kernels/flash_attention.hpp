// attnx fused attention kernel: O = softmax(scores(Q K^T)) V in one pass over K and V (FlashAttention-2
// loop order, online softmax), vectorised and threaded. Run-time only.
//
//   kernels::flash_attention(problem)        // the current context's instruction set and threads
//   kernels::flash_attention(problem, ctx)
// The problem (kernels/attention_problem.hpp) names the operands as strided matrix stacks and the
// score program step by step. The instruction set (AVX-512, AVX2 + FMA, or portable code) is the
// context's, which defaults to the best this CPU has (simd/isa.hpp); all three are in every build.
// Semantics, numerics and tuning: docs/fused_kernel.md.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "attnx/util/algorithm.hpp"
#include "attnx/math/builtin_math.hpp"
#include "attnx/exec/context.hpp"
#include "attnx/exec/memory.hpp"
#include "attnx/kernels/attention_problem.hpp"
#include "attnx/kernels/attention_state.hpp"
#include "attnx/simd/isa.hpp"
#include "attnx/simd/target.hpp"
#include "attnx/simd/vec.hpp"
#include "attnx/tensor/half.hpp"
#include "attnx/tensor/storage.hpp"

ATTNX_OPTIMIZE_BEGIN
namespace attnx::kernels::detail {

constexpr bool is_scale(step_kind k) { return k == step_kind::multiply || k == step_kind::divide; }
constexpr bool is_limit(step_kind k) {
  return k == step_kind::causal_top_left || k == step_kind::causal_bottom_right || k == step_kind::key_lengths ||
         k == step_kind::causal_lengths || k == step_kind::key_padding;
}
constexpr bool is_replace(step_kind k) { return is_limit(k) || k == step_kind::boolean_mask; }

// Keys j >= step_limit(...) are blocked by limit step s for query i of batch item b (in [0, Lk]).
template <class T>
std::size_t step_limit(const score_step<T>& s, const attention_problem<T>& p, std::size_t b, std::size_t i) {
  switch (s.kind) {
    case step_kind::causal_top_left: return alg::min(p.lk, i + 1);
    case step_kind::causal_bottom_right: {
      const auto end = static_cast<std::ptrdiff_t>(i + 1 + p.lk) - static_cast<std::ptrdiff_t>(p.lq);
      return end <= 0 ? 0 : alg::min(p.lk, static_cast<std::size_t>(end));
    }
    case step_kind::key_lengths: return alg::min(p.lk, s.lengths[b]);
    case step_kind::causal_lengths: {
      const std::size_t len = alg::min(p.lk, s.lengths[b]);
      const auto end = static_cast<std::ptrdiff_t>(i + 1 + len) - static_cast<std::ptrdiff_t>(p.lq);
      return end <= 0 ? 0 : alg::min(len, static_cast<std::size_t>(end));
    }
    case step_kind::key_padding: return alg::min(p.lk, s.length);
    default: return p.lk;
  }
}

// What the kernel makes of the score program, once per call.
//  - Fast path: when the program is a multiplication by a positive normal number s followed only by
//    masks that fill with -inf (the common case), the kernel keeps the raw dots q . k, takes the row max of
//    s * dot (= s * max dot), and computes the weights as 2^(dot * s log2 e - m log2 e) with one FMA: the
//    scaled scores s * dot themselves are never rounded, which changes nothing but rounding.
//  - Otherwise a first multiplication is folded into the store of the scores and the other steps run
//    on the tile.
//  - x / d becomes x * (1/d) when 1/d is a normal number, or d is 0, inf or NaN: the results are the same
//    but for rounding (1 ulp); a division stays a division when 1/d would overflow or be subnormal.
//  - Skipping: the keys a limit step blocks (causal, key lengths, key padding) need not be read at all
//    when the value they end with, after the steps that follow, is -inf (weight exactly 0: "hard"), or a
//    finite number F whose weight exp(F - m_i) has underflowed to exactly 0 for every row of the block
//    by the time the kernel gets there ("soft"; until then they are computed like any other key). A step
//    whose blocked keys could end as +inf or NaN, or meet an additive mask, is not skipped, with one
//    exception: an additive mask that only multiplications by positive numbers follow turns -inf into
//    -inf unless the bias is +inf or NaN there; then the skipped part of the bias is scanned for those
//    ("poison"), and a row that meets one is NaN, as -inf + inf is.
template <class T>
struct score_plan {
  std::array<score_step<T>, max_score_steps> steps{};
  std::size_t n = 0;
  T folded = T(1);
  std::size_t first = 0;  // the first step applied as a pass over the scores
  bool fast = false;      // raw dots in the tile, `folded` applied in the exponent
  std::array<std::size_t, max_score_steps> limits{};  // indices of the limit steps
  std::array<bool, max_score_steps> skippable{};      // per limit step
  std::size_t n_limits = 0;
  bool any_skippable = false;
  T skip_final = -std::numeric_limits<T>::infinity();  // -inf: hard skipping; finite: soft
  std::ptrdiff_t poison = -1;                          // the additive step scanned in the skipped part
  bool programmed = false;  // a step after the folded factor other than limits (masks, biases, factors)
};

template <class T>
score_plan<T> make_plan(const attention_problem<T>& p) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  score_plan<T> plan;
  plan.n = p.n_steps;
  for (std::size_t s = 0; s < plan.n; ++s) {
    score_step<T>& st = plan.steps[s] = p.steps[s];
    if (st.kind == step_kind::divide) {
      const T r = T(1) / st.value, a = math::rt::abs(r);
      if (!math::rt::isfinite(st.value) || st.value == T(0) ||
          (a >= std::numeric_limits<T>::min() && a <= std::numeric_limits<T>::max())) {
        st.kind = step_kind::multiply;
        st.value = r;
      }
    }
    if (is_limit(st.kind)) plan.limits[plan.n_limits++] = s;
  }
  if (plan.n > 0 && plan.steps[0].kind == step_kind::multiply) {
    plan.folded = plan.steps[0].value;
    plan.first = 1;
  }
  for (std::size_t s = plan.first; s < plan.n; ++s) plan.programmed = plan.programmed || !is_limit(plan.steps[s].kind);
  plan.fast = plan.folded > T(0) && math::rt::isnormal(plan.folded) &&
              alg::all_of(plan.steps.begin() + static_cast<std::ptrdiff_t>(plan.first),
                          plan.steps.begin() + static_cast<std::ptrdiff_t>(plan.n),
                          [](const score_step<T>& st) { return is_replace(st.kind) && st.value == -inf; });
  std::array<bool, max_score_steps> poisoned{};
  for (std::size_t li = 0; li < plan.n_limits; ++li) {
    const std::size_t t = plan.limits[li];
    std::array<T, max_score_steps + 1> vals{};
    std::size_t nv = 0, additive_at = plan.n;
    vals[nv++] = plan.steps[t].value;
    bool ok = true;
    for (std::size_t u = t + 1; u < plan.n && ok; ++u) {
      const score_step<T>& su = plan.steps[u];
      if (additive_at < plan.n) {  // after the additive step: positive, finite factors only
        ok = is_scale(su.kind) && su.value > T(0) && su.value < inf;
      } else if (su.kind == step_kind::multiply) {
        for (std::size_t v = 0; v < nv; ++v) vals[v] *= su.value;
      } else if (su.kind == step_kind::divide) {
        for (std::size_t v = 0; v < nv; ++v) vals[v] /= su.value;
      } else if (is_replace(su.kind)) {
        vals[nv++] = su.value;
      } else {
        additive_at = u;
      }
    }
    if (!ok) continue;
    if (additive_at < plan.n) {
      if (!alg::all_of(vals.begin(), vals.begin() + static_cast<std::ptrdiff_t>(nv), [](T x) { return x == -inf; })) continue;
      plan.poison = static_cast<std::ptrdiff_t>(additive_at);
      poisoned[li] = true;
    } else {
      if (!alg::all_of(vals.begin(), vals.begin() + static_cast<std::ptrdiff_t>(nv), [](T x) { return x == x && x != inf; }))
        continue;
      for (std::size_t v = 0; v < nv; ++v) plan.skip_final = alg::max(plan.skip_final, vals[v]);
    }
    plan.skippable[li] = true;
  }
  if (plan.poison >= 0 && plan.skip_final != -inf) {  // soft skipping would have to scan the bias too: don't skip those
    for (std::size_t li = 0; li < plan.n_limits; ++li)
      if (poisoned[li]) plan.skippable[li] = false;
    plan.poison = -1;
  }
  for (std::size_t li = 0; li < plan.n_limits; ++li) plan.any_skippable = plan.any_skippable || plan.skippable[li];
  return plan;
}

// Keys j >= skip_limit(...) may be left out for query i of batch item b (Lk when nothing is skipped).
template <class T>
std::size_t skip_limit(const attention_problem<T>& p, const score_plan<T>& plan, std::size_t b, std::size_t i) {
  std::size_t lim = p.lk;
  for (std::size_t li = 0; li < plan.n_limits; ++li)
    if (plan.skippable[li]) lim = alg::min(lim, step_limit(plan.steps[plan.limits[li]], p, b, i));
  return lim;
}

// K or V of the decode kernel, whatever its element type (T, bf16 or f16): element c of row j of matrix
// (b, g) at static_cast<const KV*>(data)[b * batch + g * head + j * row + c]. (Untyped so that the decode
// driver is compiled once per T, not once per storage type and instruction set.)
struct kv_stack {
  const void* data;
  std::ptrdiff_t batch, head, row;

  template <class KV>  // matrix (b, h) as KV elements (an empty operand may have no memory at all)
  const KV* matrix(std::size_t b, std::size_t h) const noexcept {
    const KV* d = static_cast<const KV*>(data);
    return d ? d + static_cast<std::ptrdiff_t>(b) * batch + static_cast<std::ptrdiff_t>(h) * head : d;
  }
};
template <class U>
kv_stack untyped(strided<const U> s) {
  return {s.data, s.batch, s.head, s.row};
}

// 2^f on |f| <= 1/2: near-minimax (Chebyshev) fits, max abs error 2.0e-9 (float, degree 6) and
// 3.2e-18 (double, degree 11); lowest degree first.
template <class T>
inline constexpr auto exp2_coefficients = std::array<T, 0>{};
template <>
inline constexpr auto exp2_coefficients<float> = std::array<float, 7>{
    1.0f, 0.69314720670283259577f, 0.24022650922288758071f, 0.055503272266703020589f,
    0.0096180566785246380754f, 0.001340042817761583794f, 0.00015461444698569129083f};
template <>
inline constexpr auto exp2_coefficients<double> = std::array<double, 12>{
    1.0, 0.69314718055994530925, 0.24022650695910159567, 0.055504108664821627039,
    0.0096181291075872566681, 0.0013333558146406470697, 0.00015403530463724354209,
    0.000015252733841556772589, 1.3215432535912376166e-6, 1.0178057087733941105e-7,
    7.0741942972885210056e-9, 4.455817908336064493e-10};

template <class T>
inline constexpr T log2e = T(1.442695040888963407359924681001892137L);

// The CPU the decode kernel tunes for: simd::amd_family() (0 for any CPU but AMD's), unless a test has set
// another family with decode_tuning() (-1, the default: this CPU's). The kernel chooses by it only between
// measured tunings that give the same bits (its prefetches; the loop taken by three or four fp32 rows, and by three
// or four 16-bit rows on Zen 5, where only the sign of a zero output can differ: decode_tile.inc), so that a test
// can run every tuning on any host and compare their results. Read at every call (a relaxed load); meant for tests
// and benchmarks, not for tuning.
inline std::atomic<int>& decode_tuning() noexcept {
  static std::atomic<int> family{-1};
  return family;
}
// The families the decode kernel has tunings for: any CPU but AMD's (0), AMD Zen 3 / Zen 4 (0x19), Zen 5 (0x1a).
inline constexpr int decode_families[] = {0, 0x19, 0x1a};
inline unsigned decode_family() noexcept {
  const int f = decode_tuning().load(std::memory_order_relaxed);
  return f < 0 ? simd::amd_family() : static_cast<unsigned>(f);
}

// Register tiles per instruction set: NI query vectors x NJ keys (scores), NI x NC value columns
// (output), BC keys per block.
template <class T, class I>
struct flash_shape;
template <class T>
struct flash_shape<T, simd::scalar_t> {
  static constexpr std::size_t NI = 4, NJ = 4, NC = 4, BC = 32;
};
template <class T>
struct flash_shape<T, simd::avx2_t> {  // 16 registers: 12 accumulators + NI loads + 1 broadcast
  static constexpr std::size_t NI = 2, NJ = 6, NC = 6, BC = 64;
};
template <class T>
struct flash_shape<T, simd::avx512_t> {  // 32 registers: 24 accumulators + NI loads
  static constexpr std::size_t NI = 3, NJ = 8, NC = 8, BC = 128;
};

}  // namespace attnx::kernels::detail

// --- the tile algorithm, once per instruction set ------------------------------------------------
namespace attnx::kernels::detail::scalar {
using isa_tag = simd::scalar_t;
#include "attnx/kernels/detail/flash_tile.inc"
#include "attnx/kernels/detail/decode_tile.inc"
}  // namespace attnx::kernels::detail::scalar

#if ATTNX_SIMD_X86
ATTNX_TARGET_AVX2_BEGIN
namespace attnx::kernels::detail::avx2 {
using isa_tag = simd::avx2_t;
#include "attnx/kernels/detail/flash_tile.inc"
#include "attnx/kernels/detail/decode_tile.inc"
}  // namespace attnx::kernels::detail::avx2
ATTNX_TARGET_END
ATTNX_TARGET_AVX512_BEGIN
namespace attnx::kernels::detail::avx512 {
using isa_tag = simd::avx512_t;
#include "attnx/kernels/detail/flash_tile.inc"
#include "attnx/kernels/detail/decode_tile.inc"
}  // namespace attnx::kernels::detail::avx512
ATTNX_TARGET_END
#endif  // ATTNX_SIMD_X86

namespace attnx::kernels {
namespace detail {

struct scratch_block {  // a block of exec::allocate_bytes, given back on destruction
  explicit scratch_block(std::size_t n) : bytes(n), p(static_cast<std::byte*>(exec::allocate_bytes(n))) {}
  scratch_block(const scratch_block&) = delete;
  scratch_block& operator=(const scratch_block&) = delete;
  ~scratch_block() { exec::release_bytes(p, bytes); }
  std::byte* get() const noexcept { return p; }
  template <class U>
  U* at(std::size_t offset) const noexcept {  // an array placed at offset by a scratch_layout
    return reinterpret_cast<U*>(p + offset);
  }
  std::size_t bytes;
  std::byte* p;
};
// Arrays of several types in one scratch_block, each at a multiple of 64 bytes: add() gives an array's offset
// before the block exists, scratch_block::at the array once it does. One allocation, not one per array.
struct scratch_layout {
  std::size_t bytes = 0;
  // b bytes rounded up to whole 64-byte lines (so that what follows starts on a line of its own).
  static constexpr std::size_t lines(std::size_t b) noexcept { return (b + 63) / 64 * 64; }
  template <class U>
  std::size_t add(std::size_t n) noexcept {
    const std::size_t offset = bytes;
    bytes += lines(n * sizeof(U));
    return offset;
  }
};

template <class T>
void validate(const attention_problem<T>& p) {
  if (p.kv_heads == 0 || p.heads % p.kv_heads != 0)
    throw std::invalid_argument("attnx::kernels::flash_attention: heads (" + std::to_string(p.heads) +
                                ") must be a multiple of kv_heads (" + std::to_string(p.kv_heads) + ")");
  if (p.kv != kv_storage::same && !std::is_same_v<T, float>)
    throw std::invalid_argument("attnx::kernels::flash_attention: bf16 / f16 keys and values need float queries");
  if (p.n_steps > max_score_steps) throw std::invalid_argument("attnx::kernels::flash_attention: too many score steps");
  for (std::size_t s = 0; s < p.n_steps; ++s) {
    const score_step<T>& st = p.steps[s];
    if (st.kind == step_kind::key_lengths || st.kind == step_kind::causal_lengths) {
      if (!st.lengths) throw std::invalid_argument("attnx::kernels::flash_attention: key_lengths without lengths");
      for (std::size_t b = 0; b < p.batch; ++b)
        if (st.lengths[b] > p.lk)
          throw std::out_of_range(std::string("attnx: mask: ") +
                                  (st.kind == step_kind::key_lengths ? "key_lengths[" : "causal_lengths[") +
                                  std::to_string(b) + "] = " + std::to_string(st.lengths[b]) + " exceeds the " +
                                  std::to_string(p.lk) + " keys");
    } else if (st.kind == step_kind::key_padding && st.length > p.lk) {
      throw std::out_of_range("attnx: mask: the key padding length " + std::to_string(st.length) + " exceeds the " +
                              std::to_string(p.lk) + " keys");
    } else if ((st.kind == step_kind::boolean_mask && !st.mask.data) ||
               (st.kind == step_kind::additive_mask && !st.bias.data)) {
      throw std::invalid_argument("attnx::kernels::flash_attention: a mask step without its data");
    }
  }
}

// Below this much work (flops) per thread, a second thread costs more in wake-up than it saves.
inline constexpr double flash_min_flops_per_thread = 2e6;

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

// Splits the problem into (batch, head, query block) work items, longest first (causal blocks near the
// diagonal are short), and runs them on the context's threads. p: validated, not empty.
template <class T>
void run_flash(const attention_problem<T>& p, unsigned threads, const flash_kernel_ref<T>& kernel) {
  const score_plan<T> plan = make_plan(p);

  struct item {
    std::size_t cost, i0, blocks;
    std::uint32_t b, h;
  };
  const std::size_t MQ = kernel.mq;
  const std::size_t blocks = (p.lq + MQ - 1) / MQ;
  threads = alg::max(1u, threads);

  // Query blocks per work item: up to kernel.g (fewer passes over K and V), but at least about 8
  // items per thread for the load balance. A last block of fewer than MQ rows is an item of its own
  // (it may run with a narrower kernel).
  const std::size_t full = p.lq / MQ;
  const std::size_t group = alg::clamp<std::size_t>(p.batch * p.heads * full / (8 * std::size_t{threads}), 1, kernel.g);
  // Work items (batch, head, query blocks), the head inside the batch item and the query blocks inside the
  // head, so that consecutive items read the same K and V (which stay in L2 between them).
  struct span {
    std::size_t cost, qb, n;
  };
  // bf16 / f16 K and V: each thread widens the keys and values its item reads, one (b, KV head) at a time,
  // into a buffer of its own (kept while its next items read the same matrices), instead of a float copy
  // of the whole stack.
  const bool widen = p.kv != kv_storage::same;
  // Per batch item: the query-block groups and their cost (keys x rows); at most one per query block.
  storage<span, dyn> spans(uninitialized, p.batch * blocks);
  std::size_t ns = 0;
  double total = 0;
  for (std::size_t b = 0; b < p.batch; ++b)
    for (std::size_t qb = 0; qb < blocks; qb += (qb < full ? alg::min(group, full - qb) : 1)) {
      const std::size_t n = qb < full ? alg::min(group, full - qb) : 1;
      // Limits grow with the row, so the last row of each block has the most keys.
      std::size_t cost = 0;
      for (std::size_t g = qb; g < qb + n; ++g) {
        const std::size_t last = alg::min(p.lq, (g + 1) * MQ) - 1;
        cost += (skip_limit(p, plan, b, last) + 1) * (last + 1 - g * MQ);
      }
      total += double(cost) * double(p.heads);
      spans[ns++] = {cost, qb, n};
    }
  const std::size_t per_b = ns / p.batch, ni = ns * p.heads;
  storage<item, dyn> items(uninitialized, ni);
  std::size_t n_items = 0;
  for (std::size_t b = 0; b < p.batch; ++b)
    for (std::size_t h = 0; h < p.heads; ++h)
      for (std::size_t s = b * per_b; s < (b + 1) * per_b; ++s)
        items[n_items++] = {spans[s].cost, spans[s].qb * MQ, spans[s].n, static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(h)};
  const double flops = 2.0 * total * double(p.dk + p.dv);
  const auto by_work = static_cast<std::size_t>(alg::max(1.0, flops / flash_min_flops_per_thread));
  const auto slots = static_cast<unsigned>(alg::min<std::size_t>({threads, ni, by_work}));
  // Several threads take the items in turn from a counter: the longest first balances causal problems.
  if (slots > 1) alg::stable_sort(items.data(), items.data() + ni, [](const item& x, const item& y) { return x.cost > y.cost; });

  // Per thread: the tile scratch, then the limits. Allocated here so that the workers cannot throw.
  const std::size_t tile_bytes = kernel.scratch * sizeof(T);
  const std::size_t bytes = scratch_layout::lines(tile_bytes + kernel.limits * sizeof(std::size_t));
  const scratch_block buf(bytes * slots);
  // Widening: per thread, L_k rows of K then of V (rows padded to 64 bytes), and which (b, KV head) they hold,
  // how many rows.
  struct widened {
    std::size_t b, g, rows;
  };
  const std::size_t ldk = (p.dk + 15) / 16 * 16, ldv = (p.dv + 15) / 16 * 16;
  const std::size_t kv_elems = widen ? p.lk * (ldk + ldv) : 0;
  const scratch_block kv_buf(kv_elems * sizeof(T) * slots);
  storage<widened, dyn> held(uninitialized, widen ? slots : 0);
  for (unsigned s = 0; widen && s < slots; ++s) held[s] = {0, 0, 0};
  const std::size_t group_heads = p.heads / p.kv_heads;

  exec::parallel_for(ni, slots, [&](std::size_t n, unsigned slot) {
    std::byte* mine = buf.get() + bytes * slot;
    const item& it = items[n];
    if (!widen) {
      kernel.run_block(p, plan, it.b, it.h, it.i0, it.blocks, reinterpret_cast<T*>(mine),
                       reinterpret_cast<std::size_t*>(mine + tile_bytes));
      return;
    }
    T* const k = reinterpret_cast<T*>(kv_buf.get()) + kv_elems * slot;
    T* const v = k + p.lk * ldk;
    widened& w = held[slot];
    const std::size_t g = it.h / group_heads;
    // The keys the kernel reads (its kend): where the skip is hard, up to the item's last row's skip limit (limits
    // grow with the row, as for the cost above); else all.
    const std::size_t keys = plan.skip_final == -std::numeric_limits<T>::infinity()
                                 ? skip_limit(p, plan, it.b, alg::min(p.lq, it.i0 + it.blocks * MQ) - 1)
                                 : p.lk;
    if (w.b != it.b || w.g != g) w = {it.b, g, 0};
    if (w.rows < keys) {
      kernel.widen_rows(p.kv, p.k16.matrix(it.b, g), p.k16.row, w.rows, keys, p.dk, k, ldk);
      kernel.widen_rows(p.kv, p.v16.matrix(it.b, g), p.v16.row, w.rows, keys, p.dv, v, ldv);
      w.rows = keys;
    }
    attention_problem<T> q = p;  // the same problem with K and V in the buffer, for every (b, KV head)
    q.kv = kv_storage::same;
    q.k = {k, 0, 0, static_cast<std::ptrdiff_t>(ldk)};
    q.v = {v, 0, 0, static_cast<std::ptrdiff_t>(ldv)};
    kernel.run_block(q, plan, it.b, it.h, it.i0, it.blocks, reinterpret_cast<T*>(mine),
                     reinterpret_cast<std::size_t*>(mine + tile_bytes));
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

// ---- decoding: few query rows, many keys (detail/decode_tile.inc) ------------------------------------

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
#ifdef ATTNX_EXTERN_KERNELS
// The decode kernels over bf16 / f16 K and V (float queries), instantiated by <attnx/kernels/instantiate.hpp> (with
// ATTNX_INSTANTIATE_KV16: a translation unit of their own if wanted, as theirs is about half the float kernels'
// compile).
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
// decode_chunk keys (AMD Zen 5, d 128, H 8, L_k 16384, one thread, from memory, against one item per chunk:
// one bf16 row 80-82% -> 88-89% of the read bandwidth, one f16 row 80-81% -> 87%; docs/decoding-log.md). The
// states, and so the results, are the same for any number of threads. Compiled once per T (the kernel comes
// as decode_kernel_ref). p: validated, not empty.
template <class T>
void run_decode(const attention_problem<T>& p, kv_stack k, kv_stack v, unsigned threads, const decode_kernel_ref<T>& kernel) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  const score_plan<T> plan = make_plan(p);
  const bool skip = plan.skip_final == -inf && plan.poison < 0 && plan.any_skippable;
  const std::size_t group = p.heads / p.kv_heads, rows = group * p.lq, nl = plan.n_limits;
  struct item {
    std::uint32_t b, g;
    std::size_t k0, k1, state;  // keys [k0, k1): chunks state, state + 1, ...
  };
  // The call's bookkeeping, in one block: per batch item and row the limit of each limit step (limits) and the
  // end of the keys read (ends); the work items, at most max(1, ceil(L_k / decode_chunk)) chunks per (b, g);
  // first: the chunks (states) of (b, g) are [first[bg], first[bg + 1]); kends: the end of the keys read per batch
  // item. (Five allocations before, and two more below: H 8, one row, L_k 16, one thread, a call took 2.23-2.32 us and
  // takes 1.95-2.00 with the two blocks; docs/decoding-log.md, twenty-ninth session.)
  const std::size_t most_chunks = alg::max<std::size_t>(1, (p.lk + decode_chunk - 1) / decode_chunk);
  scratch_layout book_layout;
  const std::size_t limits_at = book_layout.add<std::size_t>(p.batch * alg::max<std::size_t>(nl, 1) * rows),
                    ends_at = book_layout.add<std::size_t>(p.batch * rows),
                    items_at = book_layout.add<item>(p.batch * p.kv_heads * most_chunks),
                    first_at = book_layout.add<std::size_t>(p.batch * p.kv_heads + 1),
                    kends_at = book_layout.add<std::size_t>(p.batch);
  const scratch_block book(book_layout.bytes);
  std::size_t* const limits = book.at<std::size_t>(limits_at);
  std::size_t* const ends = book.at<std::size_t>(ends_at);
  item* const items = book.at<item>(items_at);
  std::size_t* const first = book.at<std::size_t>(first_at);
  std::size_t* const kends = book.at<std::size_t>(kends_at);
  std::size_t ni = 0, nc = 0;
  double work = 0;
  for (std::size_t b = 0; b < p.batch; ++b) {
    std::size_t kend = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      std::size_t e = p.lk;
      for (std::size_t li = 0; li < nl; ++li) {
        const std::size_t lim = step_limit(plan.steps[plan.limits[li]], p, b, r % p.lq);
        limits[(b * nl + li) * rows + r] = lim;
        if (skip && plan.skippable[li]) e = alg::min(e, lim);
      }
      ends[b * rows + r] = e;
      kend = alg::max(kend, e);
      work += double(e);
    }
    kends[b] = kend;
    const std::size_t chunks = alg::max<std::size_t>(1, (kend + decode_chunk - 1) / decode_chunk);
    for (std::size_t g = 0; g < p.kv_heads; ++g) {
      first[b * p.kv_heads + g] = nc;
      nc += chunks;
    }
  }
  first[p.batch * p.kv_heads] = nc;
  const double flops = 2.0 * work * double(p.kv_heads) * double(p.dk + p.dv);
  const auto by_work = static_cast<std::size_t>(alg::max(1.0, flops / flash_min_flops_per_thread));
  const auto want = static_cast<unsigned>(alg::min<std::size_t>({alg::max(1u, threads), nc, by_work}));
  // Chunks per item: as many as leave two items per thread (one thread: a whole (b, g) per item).
  const std::size_t span = want > 1 ? alg::max<std::size_t>(1, nc / (2 * std::size_t{want})) : nc;
  for (std::size_t b = 0; b < p.batch; ++b)
    for (std::size_t g = 0; g < p.kv_heads; ++g) {
      const std::size_t c0 = first[b * p.kv_heads + g], c1 = first[b * p.kv_heads + g + 1];
      for (std::size_t c = c0; c < c1; c += span)
        items[ni++] = {static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(g), (c - c0) * decode_chunk,
                       alg::min(kends[b], (alg::min(c + span, c1) - c0) * decode_chunk), c};
    }
  const auto slots = static_cast<unsigned>(alg::min<std::size_t>(want, ni));

  const std::size_t per_state = rows * (p.dv + 2);
  const std::size_t scratch = scratch_layout::lines(kernel.scratch_elems(rows, p.dk, p.dv) * sizeof(T));
  // The chunks' states and each slot's scratch, in one block.
  scratch_layout work_layout;
  const std::size_t states_at = work_layout.add<T>(nc * per_state), buf_at = work_layout.add<std::byte>(scratch * slots);
  const scratch_block work_block(work_layout.bytes);
  T* const st = work_block.at<T>(states_at);
  exec::parallel_for(ni, slots, [&](std::size_t n, unsigned slot) {
    const item& it = items[n];
    kernel.run(p, plan, k, v, it.b, it.g, it.k0, it.k1, decode_chunk, work_block.at<T>(buf_at + scratch * slot),
               limits + it.b * nl * rows, ends + it.b * rows, st + it.state * per_state);
  });

  // Merge the chunks of each (b, g), row by row, into the output (and the log-sum-exp).
  const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
  for (std::size_t b = 0; b < p.batch; ++b)
    for (std::size_t g = 0; g < p.kv_heads; ++g) {
      const std::size_t i0 = first[b * p.kv_heads + g], n = first[b * p.kv_heads + g + 1] - i0;
      for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t h = g * group + r / p.lq, i = r % p.lq;
        T* o = p.o.matrix(b, h) + sz(i) * p.o.row;
        const merged_row<T> m = merge_partials(n, st + i0 * per_state + r * (p.dv + 2), sz(per_state), p.dv, o);
        const T lse = finish_row(m, o, p.dv);
        if (p.lse.data) p.lse.matrix(b, h)[sz(i) * p.lse.row] = lse;
      }
    }
}

// The decode kernels of one instruction set, by storage type (bf16 / f16 only with T = float).
template <class T, template <class, class> class Kernel>
void run_decode_kv(const attention_problem<T>& p, unsigned threads) {
  if (p.kv == kv_storage::same) return run_decode(p, untyped(p.k), untyped(p.v), threads, decode_ref<Kernel<T, T>, T>());
  if constexpr (std::is_same_v<T, float>) {
    const kv_stack k = untyped(p.k16), v = untyped(p.v16);
    if (p.kv == kv_storage::bf16) return run_decode(p, k, v, threads, decode_ref<Kernel<T, bf16>, T>());
    return run_decode(p, k, v, threads, decode_ref<Kernel<T, f16>, T>());
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

template <class T, simd::isa I>
void flash_attention_isa(const attention_problem<T>& p, unsigned threads);

// p (kv_shared_by_batch) as one batch item of batch x lq rows per head: the queries gathered head by head, item
// after item; the outputs and log-sum-exps scattered back.
template <class T, simd::isa I>
void batch_folded(const attention_problem<T>& p, unsigned threads) {
  const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
  const std::size_t rows = p.batch * p.lq;
  storage<T, dyn> q(uninitialized, p.heads * rows * p.dk), o(uninitialized, p.heads * rows * p.dv),
      l(uninitialized, p.lse.data ? p.heads * rows : 0);
  for (std::size_t h = 0; h < p.heads; ++h)
    for (std::size_t b = 0; b < p.batch; ++b)
      for (std::size_t i = 0; i < p.lq; ++i)
        alg::copy_n(p.q.matrix(b, h) + sz(i) * p.q.row, p.dk, q.data() + (h * rows + b * p.lq + i) * p.dk);
  attention_problem<T> f = p;
  f.batch = 1;
  f.lq = rows;
  f.q = {q.data(), 0, sz(rows * p.dk), sz(p.dk)};
  f.o = {o.data(), 0, sz(rows * p.dv), sz(p.dv)};
  if (p.lse.data) f.lse = {l.data(), 0, sz(rows), 1};
  flash_attention_isa<T, I>(f, threads);
  for (std::size_t h = 0; h < p.heads; ++h)
    for (std::size_t b = 0; b < p.batch; ++b)
      for (std::size_t i = 0; i < p.lq; ++i) {
        const std::size_t r = h * rows + b * p.lq + i;
        alg::copy_n(o.data() + r * p.dv, p.dv, p.o.matrix(b, h) + sz(i) * p.o.row);
        if (p.lse.data) p.lse.matrix(b, h)[sz(i) * p.lse.row] = l[r];
      }
}

// The kernel of one instruction set (only where simd::cpu_supports(I)).
template <class T, simd::isa I>
void flash_attention_isa(const attention_problem<T>& p, unsigned threads) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "flash_attention: float or double");
  validate(p);
  if (p.lq == 0 || p.dv == 0 || p.batch == 0 || p.heads == 0) return;
  if (kv_shared_by_batch(p)) return batch_folded<T, I>(p, threads);
  if (p.lq <= decode_max_rows) {
    if constexpr (I == simd::isa::scalar) {
      return run_decode_kv<T, scalar::decode_kernel>(p, threads);
    }
#if ATTNX_SIMD_X86
    else if constexpr (I == simd::isa::avx2) {
      return run_decode_kv<T, avx2::decode_kernel>(p, threads);
    } else {
      return run_decode_kv<T, avx512::decode_kernel>(p, threads);
    }
#endif
  }
  if constexpr (I == simd::isa::scalar) {
    run_flash(p, threads, kernel_ref<scalar::kernel<T>>(p));
  }
#if ATTNX_SIMD_X86
  else if constexpr (I == simd::isa::avx2) {
    run_flash_sized<T, avx2::kernel<T>, avx2::kernel<T, 1>>(p, threads);
  } else {
    run_flash_sized<T, avx512::kernel<T>, avx512::kernel<T, 1>>(p, threads);
  }
#endif
}

}  // namespace detail

// O = softmax(scores(Q K^T)) V for every (batch, head); see attention_problem. The instruction set must
// be one this CPU has (std::invalid_argument otherwise); threads: at most that many (>= 1). K and V of batch
// stride 0 (shared by every item) are read once for all the items when the score program allows it
// (detail::kv_shared_by_batch).
template <class T>
void flash_attention(const attention_problem<T>& p, simd::isa i, unsigned threads) {
  if (!simd::cpu_supports(i))
    throw std::invalid_argument("attnx::kernels::flash_attention: this CPU cannot run the " + std::string(simd::name(i)) +
                                " path");
  switch (i) {
    case simd::isa::scalar: return detail::flash_attention_isa<T, simd::isa::scalar>(p, threads);
#if ATTNX_SIMD_X86
    case simd::isa::avx2: return detail::flash_attention_isa<T, simd::isa::avx2>(p, threads);
    case simd::isa::avx512: return detail::flash_attention_isa<T, simd::isa::avx512>(p, threads);
#else
    default: return detail::flash_attention_isa<T, simd::isa::scalar>(p, threads);
#endif
  }
}

// Kernels compiled once per program (opt-in): with ATTNX_EXTERN_KERNELS defined, a translation unit does not
// instantiate them; exactly one translation unit includes <attnx/kernels/instantiate.hpp> (docs/design.md).
#ifdef ATTNX_EXTERN_KERNELS
extern template void flash_attention<float>(const attention_problem<float>&, simd::isa, unsigned);
extern template void flash_attention<double>(const attention_problem<double>&, simd::isa, unsigned);
#endif

template <class T>
void flash_attention(const attention_problem<T>& p, const context& ctx) {
  flash_attention(p, ctx.isa(), ctx.threads());
}
template <class T>
void flash_attention(const attention_problem<T>& p) {
  flash_attention(p, current_context());
}

}  // namespace attnx::kernels
ATTNX_OPTIMIZE_END
