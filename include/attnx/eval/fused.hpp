// attnx: recognising attention in an expression tree and handing it to the fused kernel.
//
// When assign_into meets, at run time, an expression of the form
//     softmax( [masks]( [scale](Q * transpose(K)) [+ additive] ) ) * V      (or dot_scores(Q, K))
// with Q, K, V of one floating-point type, it calls kernels::flash_attention instead of the
// row-by-row evaluator: the scale is folded into the exponent, masks become the kernel's mask
// descriptors, and the L_q x L_k scores exist only a tile at a time. Q, K and V that are
// expressions (projections X * W) are evaluated once into temporaries first; tensors and views are
// read where they are. The match is made at compile time (the types say everything); a few things are
// only known at run time (a fill value other than -inf, which changes the semantics of fully masked
// rows), and then the row-by-row evaluator runs instead. In a constant evaluation the row-by-row
// evaluator always runs: the kernel is run-time code.
#pragma once

#include <atomic>
#include <cstddef>
#include <limits>
#include <type_traits>

#include "attnx/eval/evaluator.hpp"
#include "attnx/expr/elementwise.hpp"
#include "attnx/expr/mask.hpp"
#include "attnx/expr/matmul.hpp"
#include "attnx/expr/pairwise.hpp"
#include "attnx/expr/reduce.hpp"
#include "attnx/kernels/flash_attention.hpp"

namespace attnx {

// Threads used by the fused kernel when an expression is evaluated (0: all hardware threads).
inline std::atomic<unsigned> fused_threads{0};
inline void set_threads(unsigned n) noexcept { fused_threads.store(n, std::memory_order_relaxed); }

// How many evaluations took the fused path (observability for tests and benchmarks).
inline std::atomic<std::size_t> fused_runs{0};

// Turn the fused path off (for comparisons and tests): evaluation then always goes row by row.
inline std::atomic<bool> fused_enabled{true};

namespace fused {

// ---- where an operand's (batch, head, row) matrices live --------------------------------------
// Scores have rank R in {2, 3, 4}: (Lq, Lk), (B, Lq, Lk) or (B, H, Lq, Lk). An operand of rank R has
// the same batch axes; one of rank 2 is shared by every batch item and head (stride 0).
template <class S, std::size_t R>
struct layout {
  static constexpr std::size_t rows = S::extents[S::rank - 2];
  static constexpr std::size_t cols = S::cols;
  static constexpr std::ptrdiff_t row_stride = static_cast<std::ptrdiff_t>(cols);
  static constexpr std::ptrdiff_t head_stride = (S::rank == 4) ? static_cast<std::ptrdiff_t>(rows * cols) : 0;
  static constexpr std::ptrdiff_t batch_stride =
      S::rank == 4 ? static_cast<std::ptrdiff_t>(S::extents[1] * rows * cols)
                   : (S::rank == 3 ? static_cast<std::ptrdiff_t>(rows * cols) : 0);
};

// An operand as the kernel reads it: a pointer and (batch, head, row) strides. Tensors and views are
// read in place, split_heads(X) reads X with the heads' strides (no copy), repeat_heads<G>(K) shares
// each K/V head among G query heads (GQA); anything else is evaluated once into a temporary.
template <class E, std::size_t R>
struct strided_operand {
  using L = layout<shape_of_t<E>, R>;
  constexpr explicit strided_operand(const E& e) : d(e) {}
  const value_t<E>* data() const noexcept { return d.data(); }
  static constexpr std::ptrdiff_t batch_stride = L::batch_stride, head_stride = L::head_stride, row_stride = L::row_stride;
  static constexpr std::size_t rows = L::rows, cols = L::cols, group = 1;
  dense_operand<E> d;
};
template <std::size_t H, class A, std::size_t R>
struct strided_operand<split_heads_expr<H, A>, R> {
  using SA = shape_of_t<A>;  // (B, L, D) -> (B, H, L, D/H), or (L, D) -> (H, L, D/H)
  constexpr explicit strided_operand(const split_heads_expr<H, A>& e) : d(e.operand()) {}
  const value_t<A>* data() const noexcept { return d.data(); }
  static constexpr std::size_t rows = SA::template extent<SA::rank - 2>, cols = SA::cols / H, group = 1;
  static constexpr std::ptrdiff_t row_stride = static_cast<std::ptrdiff_t>(SA::cols);
  // Rank-3 scores (H, Lq, Lk): the kernel's batch axis walks the heads.
  static constexpr std::ptrdiff_t batch_stride =
      SA::rank == 3 ? static_cast<std::ptrdiff_t>(rows * SA::cols) : static_cast<std::ptrdiff_t>(cols);
  static constexpr std::ptrdiff_t head_stride = SA::rank == 3 ? static_cast<std::ptrdiff_t>(cols) : 0;
  dense_operand<A> d;
};
template <std::size_t G, class A, std::size_t R>
struct strided_operand<repeat_heads_expr<G, A>, R> : strided_operand<A, R> {
  constexpr explicit strided_operand(const repeat_heads_expr<G, A>& e) : strided_operand<A, R>(e.operand()) {}
  static constexpr std::size_t group = G * strided_operand<A, R>::group;
};

// Strides of a mask of shape M broadcast to scores of shape S, for the kernel's (b, h, i, j) indexing.
template <class M, class S>
constexpr std::array<std::ptrdiff_t, 4> mask_strides() {
  std::array<std::ptrdiff_t, 4> out{0, 0, 0, 0};
  // Scores axes mapped to the kernel's four: rank 2 -> (i, j), rank 3 -> (b, i, j), rank 4 -> (b, h, i, j).
  std::ptrdiff_t stride = 1;
  for (std::size_t k = M::rank; k-- > 0;) {
    const std::size_t s_axis = k + S::rank - M::rank;  // right-aligned
    const std::size_t kernel_axis = S::rank == 2 ? s_axis + 2 : S::rank == 3 ? (s_axis == 0 ? 0 : s_axis + 1) : s_axis;
    out[kernel_axis] = M::extents[k] == 1 ? 0 : stride;
    stride *= static_cast<std::ptrdiff_t>(M::extents[k]);
  }
  return out;
}

// ---- the pattern, peeled from the outside in --------------------------------------------------
// scores_core<E>: Q * transpose(K), optionally scaled by a scalar (x s) or a temperature (/ s), or
// the pairwise dot similarity (dot_scores). Each gives its queries, keys and the factor on q.k.
template <class E>
struct scores_core : std::false_type {};
template <class Q, class K>
struct scores_core<matmul_expr<Q, transpose_expr<K>>> : std::true_type {
  using q = Q;
  using k = K;
  template <class E> static constexpr const Q& queries(const E& e) { return e.lhs(); }
  template <class E> static constexpr const K& keys(const E& e) { return e.rhs().operand(); }
  template <class T, class E> static constexpr T scale(const E&) { return T(1); }
};
template <class Q, class K, class S>
struct scores_core<binary_expr<ops::multiplies, matmul_expr<Q, transpose_expr<K>>, scalar<S>>> : std::true_type {
  using q = Q;
  using k = K;
  template <class E> static constexpr const Q& queries(const E& e) { return e.lhs().lhs(); }
  template <class E> static constexpr const K& keys(const E& e) { return e.lhs().rhs().operand(); }
  template <class T, class E> static constexpr T scale(const E& e) { return static_cast<T>(e.rhs().value()); }
};
template <class Q, class K, class S>
struct scores_core<binary_expr<ops::divides, matmul_expr<Q, transpose_expr<K>>, scalar<S>>> : std::true_type {
  using q = Q;
  using k = K;
  template <class E> static constexpr const Q& queries(const E& e) { return e.lhs().lhs(); }
  template <class E> static constexpr const K& keys(const E& e) { return e.lhs().rhs().operand(); }
  template <class T, class E> static constexpr T scale(const E& e) { return T(1) / static_cast<T>(e.rhs().value()); }
};
template <class Q, class K>
struct scores_core<pairwise_expr<similarity::dot, Q, K>> : std::true_type {
  using q = Q;
  using k = K;
  template <class E> static constexpr const Q& queries(const E& e) { return e.queries(); }
  template <class E> static constexpr const K& keys(const E& e) { return e.keys(); }
  template <class T, class E> static constexpr T scale(const E& e) { return static_cast<T>(e.similarity().scale); }
};

// scores<E>: the core under any number of masks (at most one of each kind) and one additive mask.
template <class E>
struct scores : scores_core<E> {
  static constexpr int causal = 0, padding = 0, lengths = 0, boolean = 0, additive = 0;
};
template <class A, class Kind>
struct scores<masked_expr<A, Kind>> : scores<A> {
  using inner = scores<A>;
  static constexpr int causal = inner::causal + (std::is_same_v<Kind, causal_mask<causal_alignment::top_left>> ||
                                                 std::is_same_v<Kind, causal_mask<causal_alignment::bottom_right>>);
  static constexpr int padding = inner::padding + (requires { Kind::length; } ? 1 : 0);
  static constexpr int lengths = inner::lengths + (std::is_same_v<Kind, key_lengths_mask> ? 1 : 0);
  static constexpr int boolean = inner::boolean + (requires(const Kind& k) { k.mask; } ? 1 : 0);
  static constexpr int additive = inner::additive;
};
template <class A, class M>
struct scores<binary_expr<ops::plus, A, M>> : scores<A> {
  // An additive mask of another element type is not the kernel's: no match (99 > 1).
  static constexpr int additive = scores<A>::additive + (std::is_same_v<value_t<M>, value_t<A>> ? 1 : 99);
};

// Shared K/V heads: only on the heads axis of rank-4 scores, the same grouping for K and V, none for Q.
template <class Q, class K, class V, std::size_t R>
constexpr bool kv_groups_ok() {
  constexpr std::size_t gq = strided_operand<Q, R>::group, gk = strided_operand<K, R>::group, gv = strided_operand<V, R>::group;
  return gq == 1 && gk == gv && (gk == 1 || R == 4);
}

template <class P, class V>
constexpr bool matches() {
  using s = scores<P>;
  using T = value_t<matmul_expr<softmax_expr<P>, V>>;
  if constexpr (!s::value) {
    return false;
  } else {
    return (std::is_same_v<T, float> || std::is_same_v<T, double>) && std::is_same_v<value_t<typename s::q>, T> &&
           std::is_same_v<value_t<typename s::k>, T> && std::is_same_v<value_t<V>, T> && std::is_same_v<value_t<P>, T> &&
           shape_of_t<P>::rank >= 2 && shape_of_t<P>::rank <= 4 && s::causal <= 1 && s::padding + s::lengths <= 1 &&
           s::boolean <= 1 && s::additive <= 1 && kv_groups_ok<typename s::q, typename s::k, V, shape_of_t<P>::rank>();
  }
}

template <class E>
struct pattern : std::false_type {};
template <class P, class V>
struct pattern<matmul_expr<softmax_expr<P>, V>> : std::bool_constant<matches<P, V>()> {};

template <class E>
inline constexpr bool is_fusable_v = pattern<E>::value;

// ---- filling the kernel's problem from the tree ------------------------------------------------
template <class T, class S>
struct builder {
  kernels::attention_problem<T>& p;
  std::size_t static_length = static_cast<std::size_t>(-1);  // none
  bool ok = true;
};

// Masks, outside in; the continuation k(core) runs with every temporary still alive.
template <class T, class S, class E, class K>
void walk(const E& e, builder<T, S>& b, K&& k);

template <class T, class S, class A, class Kind, class K>
void walk(const masked_expr<A, Kind>& e, builder<T, S>& b, K&& k) {
  if (!(e.fill() == -std::numeric_limits<T>::infinity())) b.ok = false;
  if constexpr (std::is_same_v<Kind, causal_mask<causal_alignment::top_left>>) {
    b.p.causal = kernels::causal_kind::top_left;
    walk(e.operand(), b, k);
  } else if constexpr (std::is_same_v<Kind, causal_mask<causal_alignment::bottom_right>>) {
    b.p.causal = kernels::causal_kind::bottom_right;
    walk(e.operand(), b, k);
  } else if constexpr (std::is_same_v<Kind, key_lengths_mask>) {
    b.p.key_lengths = e.kind().lengths;
    walk(e.operand(), b, k);
  } else if constexpr (requires { Kind::length; }) {
    b.static_length = Kind::length;
    walk(e.operand(), b, k);
  } else {  // boolean mask expression
    using M = std::remove_cvref_t<decltype(e.kind().mask)>;
    const dense_operand<M> m(e.kind().mask);
    constexpr auto st = mask_strides<shape_of_t<M>, S>();
    b.p.bool_mask = m.data();
    b.p.bm_batch_stride = st[0], b.p.bm_head_stride = st[1], b.p.bm_row_stride = st[2], b.p.bm_col_stride = st[3];
    walk(e.operand(), b, k);
  }
}

template <class T, class S, class A, class M, class K>
void walk(const binary_expr<ops::plus, A, M>& e, builder<T, S>& b, K&& k) {
  const dense_operand<M> m(e.rhs());
  constexpr auto st = mask_strides<shape_of_t<M>, S>();
  b.p.add_mask = m.data();
  b.p.am_batch_stride = st[0], b.p.am_head_stride = st[1], b.p.am_row_stride = st[2], b.p.am_col_stride = st[3];
  walk(e.lhs(), b, k);
}

template <class T, class S, class E, class K>
void walk(const E& e, builder<T, S>& b, K&& k) {  // the scaled core
  b.p.scale = scores_core<E>::template scale<T>(e);
  k(e);
}

// Runs the kernel; false if the expression must be evaluated row by row instead.
template <class T, class P, class V>
bool run(T* dst, const matmul_expr<softmax_expr<P>, V>& e) {
  if (!fused_enabled.load(std::memory_order_relaxed)) return false;
  using S = shape_of_t<P>;  // scores
  using O = shape_of_t<matmul_expr<softmax_expr<P>, V>>;
  constexpr std::size_t R = S::rank;
  kernels::attention_problem<T> p{};
  builder<T, S> b{p};
  bool ran = false;
  walk(e.lhs().operand(), b, [&](const auto& core_node) {
    if (!b.ok) return;
    using C = scores_core<std::remove_cvref_t<decltype(core_node)>>;
    using Q = typename C::q;
    using K = typename C::k;
    using LQ = strided_operand<Q, R>;
    using LK = strided_operand<K, R>;
    using LV = strided_operand<V, R>;
    using LO = layout<O, R>;
    const LQ q(C::queries(core_node));
    const LK k(C::keys(core_node));
    const LV v(e.rhs());
    p.q = q.data(), p.q_batch_stride = LQ::batch_stride, p.q_head_stride = LQ::head_stride, p.q_row_stride = LQ::row_stride;
    p.k = k.data(), p.k_batch_stride = LK::batch_stride, p.k_head_stride = LK::head_stride, p.k_row_stride = LK::row_stride;
    p.v = v.data(), p.v_batch_stride = LV::batch_stride, p.v_head_stride = LV::head_stride, p.v_row_stride = LV::row_stride;
    p.o = dst, p.o_batch_stride = LO::batch_stride, p.o_head_stride = LO::head_stride, p.o_row_stride = LO::row_stride;
    p.batch = R >= 3 ? S::extents[0] : 1;
    p.heads = R == 4 ? S::extents[1] : 1;
    p.kv_heads = p.heads / LK::group;
    p.lq = LQ::rows;
    p.lk = LK::rows;
    p.dk = LQ::cols;
    p.dv = LV::cols;
    p.threads = fused_threads.load(std::memory_order_relaxed);
    // A compile-time valid length becomes per-batch lengths (combined with run-time ones if both).
    std::array<std::size_t, (R >= 3 ? S::extents[0] : 1)> lens{};
    if (b.static_length != static_cast<std::size_t>(-1)) {
      for (std::size_t i = 0; i < lens.size(); ++i)
        lens[i] = p.key_lengths ? std::min(p.key_lengths[i], b.static_length) : b.static_length;
      p.key_lengths = lens.data();
    }
    kernels::flash_attention(p);
    fused_runs.fetch_add(1, std::memory_order_relaxed);
    ran = true;
  });
  return ran;
}

}  // namespace fused
}  // namespace attnx
