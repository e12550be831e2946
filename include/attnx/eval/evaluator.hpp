// attnx: evaluators, one per node. A node says WHAT is computed; its evaluator says HOW.
//
// The protocol (every evaluator has it):
//   evaluator<E> ev(expr);   // may materialise operands that need random access (see below)
//   ev.begin_row(r);         // r: row index of E's shape, all axes but the last flattened row-major
//   ev.at(j);                // element j of that row, j < shape::cols
// Element-wise evaluators forward begin_row and compose at(): a chain of them is one loop, no
// temporaries. Row-wise evaluators (reductions, softmax) compute the whole row into a buffer of one
// row in begin_row, and at() reads it; the product does the same in a constant evaluation and, at run
// time, computes a block of rows at a time with the blocked GEMM (kernels/gemm.hpp). The only operands ever materialised whole are the
// right-hand side of a matrix product (and the operand of a transpose evaluated on its own) when
// they are not already in memory: they are read at random, and recomputing them per row would cost
// a factor of the row count. Why each expression becomes the loop it becomes is summarised in
// docs/design.md.
#pragma once

#include <cstddef>
#include <limits>
#include <type_traits>
#include <utility>

#include "attnx/math/builtin_math.hpp"
#include "attnx/expr/elementwise.hpp"
#include "attnx/core/expression.hpp"
#include "attnx/expr/heads.hpp"
#include "attnx/expr/map.hpp"
#include "attnx/expr/mask.hpp"
#include "attnx/expr/matmul.hpp"
#include "attnx/expr/norm.hpp"
#include "attnx/expr/position.hpp"
#include "attnx/expr/reduce.hpp"
#include "attnx/expr/score_position.hpp"
#include "attnx/expr/sinks.hpp"
#include "attnx/expr/select.hpp"
#include "attnx/expr/slice.hpp"
#include "attnx/exec/context.hpp"
#include "attnx/expr/cast.hpp"
#include "attnx/expr/evaluated.hpp"
#include "attnx/kernels/gemm.hpp"
#include "attnx/kernels/pointwise.hpp"
#include "attnx/tensor/storage.hpp"
#include "attnx/tensor/tensor.hpp"

namespace attnx {

template <class E>
struct evaluator;

// ---- terminals: tensors, tensor_refs, views -------------------------------------------------
template <dense_terminal E>
struct evaluator<E> {
  using T = value_t<E>;
  constexpr explicit evaluator(const E& e) noexcept : base(e.data()), row(base), cols(dims_cols(dims_of(e))) {}
  constexpr void begin_row(std::size_t r) noexcept { row = base + r * cols.value; }
  constexpr T at(std::size_t j) const noexcept { return row[j]; }
  const T* base;
  const T* row;
  [[no_unique_address]] extent_value<shape_of_t<E>::cols> cols;
};

template <class T>
struct evaluator<scalar<T>> {
  constexpr explicit evaluator(const scalar<T>& s) noexcept : v(s.value()) {}
  constexpr void begin_row(std::size_t) noexcept {}
  constexpr T at(std::size_t) const noexcept { return v; }
  T v;
};

// ---- conversion: cast<T>(e) ---------------------------------------------------------------------
template <class T, class A>
struct evaluator<cast_expr<T, A>> {
  constexpr explicit evaluator(const cast_expr<T, A>& e) : a(e.operand()) {}
  constexpr void begin_row(std::size_t r) { a.begin_row(r); }
  constexpr T at(std::size_t j) const { return static_cast<T>(a.at(j)); }
  evaluator<A> a;
};

// ---- broadcasting: an operand of shape From read as shape To --------------------------------
namespace detail {
// f(index_sequence<0 .. C-1>, index_sequence<0 .. N % C - 1>) with C = min(N, 16): the row loops below
// go over [0, N) in chunks of C elements, one statement of a fold per chunk, then the rest. Called once per
// row. A constant evaluation is bounded by what it runs (clang counts statements, -fconstexpr-steps; g++
// every operation, -fconstexpr-ops-limit; docs/design.md, "How large a model fits"): a fold over a chunk
// costs far less than a statement, a loop iteration and the index arithmetic per element.
template <std::size_t N, class F>
constexpr void with_chunks(F&& f) {
  constexpr std::size_t chunk = N < 16 ? (N > 0 ? N : 1) : 16;
  f(std::make_index_sequence<chunk>{}, std::make_index_sequence<N % chunk>{});
}

template <class From, class To>
struct broadcast_map {
  static constexpr std::size_t lead = To::rank > 0 ? To::rank - 1 : 0;  // leading axes of To
  static constexpr std::size_t off = To::rank - From::rank;              // From's axes start here
  static constexpr bool stretch_cols = From::cols == 1 && To::cols != 1;
  // For each leading axis of To: its extent, and the stride of the matching From row index (0 when
  // From has no such axis, or a static 1 there: a dyn axis stretches only from a static 1).
  std::array<std::size_t, lead + 1> ext{}, stride{};
  constexpr broadcast_map(const dims_t<From::rank>& from, const dims_t<To::rank>& to) noexcept {
    std::size_t s = 1;
    for (std::size_t k = lead; k-- > 0;) {
      ext[k] = to[k];
      if (k >= off) {
        stride[k] = From::extents[k - off] == 1 ? 0 : s;
        s *= from[k - off];
      }
    }
  }
  constexpr std::size_t row(std::size_t r) const noexcept {
    std::size_t fr = 0;
    for (std::size_t k = lead; k-- > 0;) {
      fr += (r % ext[k]) * stride[k];
      r /= ext[k];
    }
    return fr;
  }
};
// Two static shapes: the map is a constant (nothing stored in the evaluator, constant divisors).
template <class From, class To>
inline constexpr broadcast_map<From, To> static_broadcast_map{From::extents, To::extents};

// Whether an operand of shape From is read in shape To with no broadcasting: same rank, and no axis that
// stretches from a static 1 (a dyn extent equals the other side's at run time: checked when the node was built).
template <class From, class To>
constexpr bool same_layout() {
  if constexpr (From::rank != To::rank) {
    return false;
  } else {
    for (std::size_t k = 0; k < From::rank; ++k)
      if (From::extents[k] == 1 && To::extents[k] != 1) return false;
    return true;
  }
}

}  // namespace detail

// The evaluator of E read through the broadcasting of shape To (extents of 1 repeated).
template <class To, class E>
struct broadcast_evaluator {
  static constexpr bool is_static = shape_of_t<E>::is_static && To::is_static;
  using map = detail::broadcast_map<shape_of_t<E>, To>;
  struct no_map {};
  constexpr broadcast_evaluator(const E& e, const dims_t<To::rank>& to) : ev(e), m(make_map(e, to)) {}
  constexpr void begin_row(std::size_t r) {
    if constexpr (is_static) {
      ev.begin_row(detail::static_broadcast_map<shape_of_t<E>, To>.row(r));
    } else {
      ev.begin_row(m.row(r));
    }
  }
  constexpr auto at(std::size_t j) const { return ev.at(map::stretch_cols ? 0 : j); }
  static constexpr auto make_map(const E& e, const dims_t<To::rank>& to) {
    if constexpr (is_static) {
      return no_map{};
    } else {
      return map(dims_of(e), to);
    }
  }
  evaluator<E> ev;
  [[no_unique_address]] std::conditional_t<is_static, no_map, map> m;
};

// An operand read in its own shape (the result's extents are not needed).
template <class To, class E>
struct same_shape_evaluator : evaluator<E> {
  constexpr same_shape_evaluator(const E& e, const dims_t<To::rank>&) : evaluator<E>(e) {}
};

// The evaluator of an operand of E read in the shape To (of run-time extents `to`).
template <class To, class E>
using operand_evaluator = std::conditional_t<detail::same_layout<shape_of_t<E>, To>(), same_shape_evaluator<To, E>,
                                             broadcast_evaluator<To, E>>;

// ---- element-wise -----------------------------------------------------------------------------
template <class Op, class A>
struct evaluator<unary_expr<Op, A>> {
  constexpr explicit evaluator(const unary_expr<Op, A>& e) : a(e.operand()) {}
  constexpr void begin_row(std::size_t r) { a.begin_row(r); }
  constexpr auto at(std::size_t j) const { return Op{}(a.at(j)); }
  evaluator<A> a;
};

template <class Op, class A, class B>
struct evaluator<binary_expr<Op, A, B>> {
  using S = shape_of_t<binary_expr<Op, A, B>>;
  using T = typename binary_expr<Op, A, B>::operand_type;
  using R = value_t<binary_expr<Op, A, B>>;  // T, or bool for a comparison
  constexpr explicit evaluator(const binary_expr<Op, A, B>& e) : evaluator(e, dims_of(e)) {}
  constexpr evaluator(const binary_expr<Op, A, B>& e, const dims_t<S::rank>& d) : a(e.lhs(), d), b(e.rhs(), d) {}
  constexpr void begin_row(std::size_t r) {
    a.begin_row(r);
    b.begin_row(r);
  }
  constexpr R at(std::size_t j) const { return Op{}(static_cast<T>(a.at(j)), static_cast<T>(b.at(j))); }
  operand_evaluator<S, A> a;
  operand_evaluator<S, B> b;
};

// map(f, e): f (a copy, so a constant evaluation needs no pointer to the node) on each element, read once.
template <class F, class A>
struct evaluator<map_expr<F, A>> {
  constexpr explicit evaluator(const map_expr<F, A>& e) : f(e.function()), a(e.operand()) {}
  constexpr void begin_row(std::size_t r) { a.begin_row(r); }
  constexpr auto at(std::size_t j) const { return f(a.at(j)); }  // (f takes an arithmetic value: nothing for std::invoke to add)
  [[no_unique_address]] F f;
  evaluator<A> a;
};

// At run time, for float and double, an activation with a vector routine (kernels/pointwise.hpp: tanh, sigmoid, silu,
// gelu_tanh and the derivatives of the last two) computes a row at a time into a row buffer, in vectors of the
// context's instruction set; a constant evaluation keeps the scalar function, element by element (no buffer).
namespace detail {
template <class F>
inline constexpr int pointwise_of = -1;
template <> inline constexpr int pointwise_of<ops::tanh> = int(kernels::pointwise::tanh);
template <> inline constexpr int pointwise_of<ops::sigmoid> = int(kernels::pointwise::sigmoid);
template <> inline constexpr int pointwise_of<ops::silu> = int(kernels::pointwise::silu);
template <> inline constexpr int pointwise_of<ops::d_silu> = int(kernels::pointwise::d_silu);
template <> inline constexpr int pointwise_of<ops::gelu_tanh> = int(kernels::pointwise::gelu_tanh);
template <> inline constexpr int pointwise_of<ops::d_gelu_tanh> = int(kernels::pointwise::d_gelu_tanh);
template <class F, class T>
concept vector_pointwise = pointwise_of<F> >= 0 && (std::is_same_v<T, float> || std::is_same_v<T, double>);

template <class F, class A>
struct pointwise_rows {
  using T = value_t<A>;
  constexpr explicit pointwise_rows(const A& x) : a(x), n(dims_cols(dims_of(x))) {
    if (!std::is_constant_evaluated()) {
      buf = storage<T, dyn>(uninitialized, n);
      isa = current_context().isa();
    }
  }
  constexpr void begin_row(std::size_t r) {
    a.begin_row(r);
    if (std::is_constant_evaluated()) return;
    T* w = buf.data();
    for (std::size_t j = 0; j < n; ++j) w[j] = static_cast<T>(a.at(j));
    kernels::pointwise_map(static_cast<kernels::pointwise>(pointwise_of<F>), w, w, n, isa);
  }
  constexpr T at(std::size_t j) const { return std::is_constant_evaluated() ? F{}(static_cast<T>(a.at(j))) : buf.data()[j]; }
  evaluator<A> a;
  std::size_t n;
  storage<T, dyn> buf;
  simd::isa isa = simd::isa::scalar;
};
}  // namespace detail
template <class Op, class A>
  requires detail::vector_pointwise<Op, value_t<A>>
struct evaluator<unary_expr<Op, A>> : detail::pointwise_rows<Op, A> {
  constexpr explicit evaluator(const unary_expr<Op, A>& e) : detail::pointwise_rows<Op, A>(e.operand()) {}
};
template <class F, class A>
  requires detail::vector_pointwise<F, value_t<A>>
struct evaluator<map_expr<F, A>> : detail::pointwise_rows<F, A> {
  constexpr explicit evaluator(const map_expr<F, A>& e) : detail::pointwise_rows<F, A>(e.operand()) {}
};

template <class C, class A, class B>
struct evaluator<where_expr<C, A, B>> {
  using S = shape_of_t<where_expr<C, A, B>>;
  using T = value_t<A>;
  constexpr explicit evaluator(const where_expr<C, A, B>& e) : evaluator(e, dims_of(e)) {}
  constexpr evaluator(const where_expr<C, A, B>& e, const dims_t<S::rank>& d)
      : c(e.condition(), d), a(e.if_true(), d), b(e.if_false(), d) {}
  constexpr void begin_row(std::size_t r) {
    c.begin_row(r);
    a.begin_row(r);
    b.begin_row(r);
  }
  constexpr T at(std::size_t j) const { return c.at(j) ? static_cast<T>(a.at(j)) : static_cast<T>(b.at(j)); }
  operand_evaluator<S, C> c;
  operand_evaluator<S, A> a;
  operand_evaluator<S, B> b;
};

// ---- operands read at random: in memory already, or materialised once ------------------------
template <class E>
struct dense_operand {
  constexpr explicit dense_operand(const E& e) : t(e) {}
  constexpr const value_t<E>* data() const noexcept { return t.data(); }
  result_t<E> t;
};
template <dense_terminal E>
struct dense_operand<E> {
  constexpr explicit dense_operand(const E& e) noexcept : p(e.data()) {}
  constexpr const value_t<E>* data() const noexcept { return p; }
  const value_t<E>* p;
};

// evaluated_once(e): e in memory, computed once (no second copy when it is itself the operand read at random).
template <class A>
struct dense_operand<evaluated_once_expr<A>> {
  constexpr explicit dense_operand(const evaluated_once_expr<A>& e) : d(e.operand()) {}
  constexpr const value_t<A>* data() const noexcept { return d.data(); }
  dense_operand<A> d;
};
template <class A>
struct evaluator<evaluated_once_expr<A>> {
  constexpr explicit evaluator(const evaluated_once_expr<A>& e)
      : src(e.operand()), row(src.data()), cols(dims_cols(dims_of(e.operand()))) {}
  constexpr void begin_row(std::size_t r) noexcept { row = src.data() + r * cols.value; }
  constexpr auto at(std::size_t j) const noexcept { return row[j]; }
  dense_operand<A> src;
  const value_t<A>* row;
  [[no_unique_address]] extent_value<shape_of_t<A>::cols> cols;
};

// ---- row-wise: matrix product -----------------------------------------------------------------
// In a constant evaluation (and at run time for element types other than float and double, and small products)
// every output row is an axpy over the rows of B (out += a[k] * B[k, :]): the inner loop runs along contiguous
// memory, and each element is summed in the order k = 0, 1, ...
// At run time, fewer than kernels::gemm_direct_min_rows rows per matrix B (decoding) or a context with blocked_gemm
// off: the same sums, bit for bit, by kernels::gemm_rows, for groups of up to 16 rows at once (B read once a group).
// At run time otherwise (kernels/gemm.hpp, docs/gemm.md), with the current context's instruction set and
// threads: begin_row(r) for a row outside the current block computes a block of up to threads x MB
// consecutive output rows at once (A's rows read in place when A is
// in memory, else evaluated through A's own evaluator into a buffer; times B, packed once into column
// panels in the constructor; by a register-blocked micro-kernel), and at(j) reads the cached row.
// Memory: the packed B and MB x (K + N), never the whole output (this evaluator also runs under
// softmax for the scores).
// B = transpose(C) is materialised transposed once (a copy of C, O(rows x cols of C), never of the
// output).
template <class A, class B>
struct evaluator<matmul_expr<A, B>> {
  using T = value_t<matmul_expr<A, B>>;
  using SA = shape_of_t<A>;
  using SB = shape_of_t<B>;
  using SO = shape_of_t<matmul_expr<A, B>>;
  static constexpr bool batched_rhs = SB::rank > 2;
  // The sizes: compile-time constants, or run-time values for dyn extents.
  static constexpr std::size_t SM = SA::extents[SA::rank - 2], SK = SA::cols, SN = SB::cols, SR = SO::rows;
  static constexpr bool is_static = SA::is_static && SB::is_static;
  // Whether the blocked GEMM may run (the sizes are checked at run time when they are dyn).
  static constexpr bool blocked = (std::is_same_v<T, float> || std::is_same_v<T, double>) &&
                                  std::is_same_v<value_t<A>, T> && std::is_same_v<value_t<B>, T> &&
                                  (!is_static || ((batched_rhs ? SM : SR) >= kernels::gemm_min_rows && SK > 0 && SN > 0));

  constexpr explicit evaluator(const matmul_expr<A, B>& e) : evaluator(e, dims_of(e.lhs()), dims_cols(dims_of(e.rhs()))) {}
  // (the output's rows are A's: the product keeps A's leading axes)
  constexpr evaluator(const matmul_expr<A, B>& e, const dims_t<SA::rank>& da, std::size_t n)
      : a(e.lhs()), b(e.rhs()), M(da[SA::rank - 2]), K(dims_cols(da)), N(n), rows(dims_rows(da)), out(uninitialized, n) {
    if constexpr (blocked) {
      if (!std::is_constant_evaluated()) {
        const context& ctx = current_context();
        const std::size_t rows_per_b = batched_rhs ? M : rows;  // output rows that share one matrix B
        if (ctx.blocked_gemm() && rows_per_b >= kernels::gemm_direct_min_rows && K > 0 && N > 0) {
          gemm.init(b.data(), batched_rhs ? rows / M : 1, K, N, rows_per_b, ctx.isa(), ctx.threads());
          counted = &ctx;
        } else if (double(K.value) * double(N.value) >= few_rows_min_work) {
          few.isa = ctx.isa();
          few.threads = ctx.threads();
          few.rows_per_b = rows_per_b;
          const std::size_t g = alg::min(few_rows::group, rows_per_b);
          few.out.allocate(g * N);
          if constexpr (!dense_terminal<A>) few.a_rows.allocate(g * K);
        }
      }
    }
  }

  constexpr void begin_row(std::size_t r) {
    if constexpr (blocked) {
      if (!std::is_constant_evaluated() && gemm.active()) {
        if (!gemm.cached(r)) {
          const std::size_t blocks = gemm.compute(r, [this](std::size_t first, std::size_t count, T* buf) -> const T* {
            if constexpr (dense_terminal<A>) {
              return a.base + first * K;  // A's rows in place
            } else {
              for (std::size_t i = 0; i < count; ++i) {
                a.begin_row(first + i);
                T* d = buf + i * K;
                for (std::size_t k = 0; k < K; ++k) d[k] = static_cast<T>(a.at(k));
              }
              return buf;
            }
          });
          counted->count_gemm_blocks(blocks);
        }
        row = gemm.row(r);
        return;
      }
      if (!std::is_constant_evaluated() && few.threads != 0) {  // the same bits as axpy_row, in vectors, on threads
        if (r - few.first >= few.count) {  // the group of rows holding r, with one read of B
          const std::size_t rpb = few.rows_per_b, t = r / rpb, i0 = (r % rpb) / few_rows::group * few_rows::group;
          const std::size_t n_rows = alg::min(few_rows::group, rpb - i0);
          few.first = t * rpb + i0;
          few.count = 0;  // (until the group is complete)
          const T* ar = nullptr;
          if constexpr (dense_terminal<A>) {
            ar = a.base + few.first * K;
          } else {
            T* buf = few.a_rows.data();
            for (std::size_t i = 0; i < n_rows; ++i) {
              a.begin_row(few.first + i);
              for (std::size_t k = 0; k < K; ++k) buf[i * K + k] = static_cast<T>(a.at(k));
            }
            ar = buf;
          }
          kernels::gemm_rows<T>(ar, K, b.data() + (batched_rhs ? t * K * N : 0), 1, K, N, n_rows, few.out.data(), N,
                                nullptr, few.isa, few.threads);
          few.count = n_rows;
        }
        row = few.out.data() + (r - few.first) * N;
        return;
      }
    }
    a.begin_row(r);
    axpy_row(b.data() + (batched_rhs ? (r / M) * K * N : 0), out.data());
    if (!std::is_constant_evaluated()) row = out.data();
  }
  constexpr T at(std::size_t j) const { return std::is_constant_evaluated() ? out.data()[j] : row[j]; }

  // out = sum over k = 0, 1, ... of a[k] * B[k, :], each element summed from 0 in that order; the columns
  // in chunks (detail::with_chunks), with no index arithmetic per term.
  template <class BP>
  constexpr void axpy_row(const BP* bm, T* o) {
    if constexpr (SN == dyn) {
      for (std::size_t c = 0; c < N; ++c) o[c] = T(0);
      for (std::size_t k = 0; k < K; ++k) {
        const T ak = static_cast<T>(a.at(k));
        const BP* br = bm + k * N;
        for (std::size_t c = 0; c < N; ++c) o[c] += ak * static_cast<T>(br[c]);
      }
      return;
    } else {
    detail::with_chunks<SN>([&]<std::size_t... I, std::size_t... R>(std::index_sequence<I...>, std::index_sequence<R...>) {
      constexpr std::size_t chunk = sizeof...(I), full = SN - SN % chunk;
      for (std::size_t c = 0; c < full; c += chunk) {
        T* oc = o + c;
        ((oc[I] = T(0)), ...);
      }
      ((o[full + R] = T(0)), ...);
      // K.value, SN: constants when static (a conversion call per use would cost constant-evaluation steps)
      const std::size_t kk = K.value;
      for (std::size_t k = 0; k < kk; ++k) {
        const T ak = static_cast<T>(a.at(k));
        const BP* br = bm + k * SN;
        for (std::size_t c = 0; c < full; c += chunk) {
          T* oc = o + c;
          const BP* bc = br + c;
          ((oc[I] += ak * static_cast<T>(bc[I])), ...);
        }
        T* ot = o + full;
        const BP* bt = br + full;
        ((ot[R] += ak * static_cast<T>(bt[R])), ...);
      }
    });
    }
  }

  evaluator<A> a;
  dense_operand<B> b;
  [[no_unique_address]] extent_value<SM> M;
  [[no_unique_address]] extent_value<SK> K;
  [[no_unique_address]] extent_value<SN> N;
  [[no_unique_address]] extent_value<SR> rows;
  storage<T, SN> out;
  const T* row = nullptr;  // run time: the current output row (in out, or in the block)
  const context* counted = nullptr;  // run time: the context whose counters the blocks go to
  struct no_gemm {};
  [[no_unique_address]] std::conditional_t<blocked, kernels::gemm_row_blocks<T>, no_gemm> gemm;
  // Run time, too few rows for the blocked GEMM (or it is off) and enough work for the call: groups of rows by
  // kernels::gemm_rows.
  static constexpr double few_rows_min_work = 4096;
  struct few_rows {
    static constexpr std::size_t group = kernels::gemm_direct_min_rows;  // rows computed together (B read once)
    simd::isa isa = simd::isa::scalar;
    unsigned threads = 0;  // 0: the axpy loop here
    std::size_t rows_per_b = 1, first = 0, count = 0;  // the current group: rows first .. first + count - 1
    kernels::detail::gemm_buffer<T> out;     // the group's output rows
    kernels::detail::gemm_buffer<T> a_rows;  // A's rows of the group when A is not in memory
  };
  [[no_unique_address]] std::conditional_t<blocked, few_rows, no_gemm> few;
};

// ---- transpose evaluated on its own (not as a product's rhs): strided reads ------------------
template <class A>
struct evaluator<transpose_expr<A>> {
  using S = shape_of_t<A>;  // (..., P, Q); the result is (..., Q, P)
  constexpr explicit evaluator(const transpose_expr<A>& e) : evaluator(e, dims_of(e.operand())) {}
  constexpr evaluator(const transpose_expr<A>& e, const dims_t<S::rank>& d)
      : src(e.operand()), P(d[S::rank - 2]), Q(dims_cols(d)) {}
  // (An empty operand, P = 0, has no data to point into: its rows are empty and at() is never called.)
  constexpr void begin_row(std::size_t r) { col = P == 0 ? nullptr : src.data() + (r / Q) * P * Q + (r % Q); }
  constexpr auto at(std::size_t j) const { return col[j * Q]; }
  dense_operand<A> src;
  const value_t<A>* col = nullptr;
  [[no_unique_address]] extent_value<S::extents[S::rank - 2]> P;
  [[no_unique_address]] extent_value<S::cols> Q;
};

// ---- row-wise: reductions ---------------------------------------------------------------------
template <class Op, class A>
struct evaluator<reduce_expr<Op, A>> {
  using T = value_t<A>;
  constexpr explicit evaluator(const reduce_expr<Op, A>& e) : a(e.operand()), N(dims_cols(dims_of(e.operand()))) {}
  constexpr void begin_row(std::size_t r) {
    a.begin_row(r);
    T acc = Op::template init<T>();
    for (std::size_t j = 0; j < N.value; ++j) acc = Op{}(acc, static_cast<T>(a.at(j)));
    v = acc;
  }
  constexpr T at(std::size_t) const { return v; }
  evaluator<A> a;
  [[no_unique_address]] extent_value<shape_of_t<A>::cols> N;
  T v{};
};

// ---- row-wise: softmax --------------------------------------------------------------------------
template <class A>
struct evaluator<softmax_expr<A>> {
  using T = value_t<A>;
  static constexpr std::size_t SN = shape_of_t<A>::cols;
  constexpr explicit evaluator(const softmax_expr<A>& e) : a(e.operand()), N(dims_cols(dims_of(e.operand()))), buf(uninitialized, N) {}
  // In chunks of elements (detail::with_chunks): the same operations in the same order as one loop (a dyn
  // row length: one chunk of one element).
  constexpr void begin_row(std::size_t r) {
    a.begin_row(r);
    T* w = buf.data();
    detail::with_chunks<(SN == dyn ? 1 : SN)>([&]<std::size_t... I, std::size_t... R>(std::index_sequence<I...>, std::index_sequence<R...>) {
      constexpr std::size_t chunk = sizeof...(I);
      const std::size_t full = SN == dyn ? std::size_t(N) : SN - SN % chunk;
      constexpr T inf = std::numeric_limits<T>::infinity();
      T m = ops::row_max::init<T>();
      // m = ops::row_max{}(m, x), written out: a call per element costs a constant evaluation steps
      for (std::size_t c = 0; c < full; c += chunk)
        ((w[c + I] = static_cast<T>(a.at(c + I)), m = (w[c + I] > m || w[c + I] != w[c + I]) && m == m ? w[c + I] : m), ...);
      ((w[full + R] = static_cast<T>(a.at(full + R)),
        m = (w[full + R] > m || w[full + R] != w[full + R]) && m == m ? w[full + R] : m),
       ...);
      if (m != m) {  // NaN anywhere: the whole row is NaN
        for (std::size_t j = 0; j < N; ++j) w[j] = std::numeric_limits<T>::quiet_NaN();
      } else if (m == -inf) {  // every key blocked: no weight anywhere
        for (std::size_t j = 0; j < N; ++j) w[j] = 0;
      } else if (m == inf) {  // the limit of softmax: +inf entries share the weight
        T count = 0;
        for (std::size_t j = 0; j < N; ++j) count += w[j] == inf ? T(1) : T(0);
        for (std::size_t j = 0; j < N; ++j) w[j] = w[j] == inf ? T(1) / count : T(0);
      } else {  // every w - m is <= 0 or -inf: cexp_nonpositive when constant (same value as cexp), else std::exp
        bool constant = std::is_constant_evaluated();  // not const: a const bool's initialiser would be constant-evaluated (always true)
        T sum = 0;
        for (std::size_t c = 0; c < full; c += chunk)
          ((w[c + I] = constant ? math::cexp_nonpositive(w[c + I] - m) : math::rt::exp(w[c + I] - m), sum += w[c + I]), ...);
        ((w[full + R] = constant ? math::cexp_nonpositive(w[full + R] - m) : math::rt::exp(w[full + R] - m), sum += w[full + R]),
         ...);
        for (std::size_t c = 0; c < full; c += chunk) ((w[c + I] /= sum), ...);
        ((w[full + R] /= sum), ...);
      }
    });
  }
  constexpr T at(std::size_t j) const { return buf.data()[j]; }

  evaluator<A> a;
  [[no_unique_address]] extent_value<SN> N;
  storage<T, SN> buf;
};

// ---- row-wise: layer_norm, rms_norm ---------------------------------------------------------------
// The row into the buffer (read once), its statistics in two passes over the buffer (layer_norm: the mean,
// then the biased variance of the centred values), then x_hat * w + b in place. w and b (rank 1, or scalars when
// not given) are read through their evaluators' row 0.
template <norm_kind Kind, class A, class W, class B>
struct evaluator<norm_expr<Kind, A, W, B>> {
  using T = value_t<A>;
  static constexpr std::size_t SN = shape_of_t<A>::cols;
  static constexpr bool has_bias = !std::is_same_v<B, scalar<T>>;
  constexpr explicit evaluator(const norm_expr<Kind, A, W, B>& e)
      : a(e.operand()), w(e.weight()), b(e.bias()), eps(e.eps()), N(dims_cols(dims_of(e.operand()))), buf(uninitialized, N) {
    w.begin_row(0);
    b.begin_row(0);
  }
  constexpr void begin_row(std::size_t r) {
    a.begin_row(r);
    T* x = buf.data();
    const std::size_t n = N.value;
    if (n == 0) return;
    for (std::size_t j = 0; j < n; ++j) x[j] = static_cast<T>(a.at(j));
    T mean = 0;
    const T inv = norm_statistics<Kind>(x, n, eps, mean);
    for (std::size_t j = 0; j < n; ++j) {
      const T y = (x[j] - mean) * inv * static_cast<T>(w.at(j));
      x[j] = has_bias ? y + static_cast<T>(b.at(j)) : y;
    }
  }
  constexpr T at(std::size_t j) const { return buf.data()[j]; }

  evaluator<A> a;
  evaluator<W> w;
  evaluator<B> b;
  T eps;
  [[no_unique_address]] extent_value<SN> N;
  storage<T, SN> buf;
};

// ---- row-wise: log_softmax -------------------------------------------------------------------------
// x - m - log(sum exp(x - m)), m the row max; the special values are softmax's, through the log.
template <class A>
struct evaluator<log_softmax_expr<A>> {
  using T = value_t<A>;
  static constexpr std::size_t SN = shape_of_t<A>::cols;
  constexpr explicit evaluator(const log_softmax_expr<A>& e)
      : a(e.operand()), N(dims_cols(dims_of(e.operand()))), buf(uninitialized, N) {}
  constexpr void begin_row(std::size_t r) {
    a.begin_row(r);
    constexpr T inf = std::numeric_limits<T>::infinity();
    T* x = buf.data();
    const std::size_t n = N.value;
    T m = ops::row_max::init<T>();
    for (std::size_t j = 0; j < n; ++j) x[j] = static_cast<T>(a.at(j)), m = ops::row_max{}(m, x[j]);
    if (m != m) {
      for (std::size_t j = 0; j < n; ++j) x[j] = std::numeric_limits<T>::quiet_NaN();
    } else if (m == -inf) {
      for (std::size_t j = 0; j < n; ++j) x[j] = -inf;
    } else if (m == inf) {
      T count = 0;
      for (std::size_t j = 0; j < n; ++j) count += x[j] == inf ? T(1) : T(0);
      const T l = -math::log(count);
      for (std::size_t j = 0; j < n; ++j) x[j] = x[j] == inf ? l : -inf;
    } else {
      bool constant = std::is_constant_evaluated();  // (not const: see softmax)
      T sum = 0;
      for (std::size_t j = 0; j < n; ++j) sum += constant ? math::cexp_nonpositive(x[j] - m) : math::rt::exp(x[j] - m);
      const T ls = math::log(sum);  // (x - m) - log(sum): m + log(sum) would round log(sum) away next to a huge m
      for (std::size_t j = 0; j < n; ++j) x[j] = (x[j] - m) - ls;
    }
  }
  constexpr T at(std::size_t j) const { return buf.data()[j]; }

  evaluator<A> a;
  [[no_unique_address]] extent_value<SN> N;
  storage<T, SN> buf;
};

// ---- row-wise: rotary position encoding -----------------------------------------------------------------
// The L x D/2 table of cos and sin built once; row r is at position offset + r mod L (L: the axis before the last).
template <class A>
struct evaluator<rotary_expr<A>> {
  using T = value_t<A>;
  using S = shape_of_t<A>;
  static constexpr std::size_t SN = S::cols;
  constexpr explicit evaluator(const rotary_expr<A>& e)
      : a(e.operand()), style(e.style()), N(dims_cols(dims_of(e.operand()))), L(dims_matrix_rows(dims_of(e.operand()))),
        table(uninitialized, style == rope_style::none ? 0 : L * N.value), buf(uninitialized, N) {
    const std::size_t h = N.value / 2;
    if (style == rope_style::none) return;
    storage<double, dyn> w(uninitialized, h);
    detail::position_frequencies(N.value, e.base(), w.data());
    for (std::size_t l = 0; l < L; ++l)
      detail::rope_angles(e.offset() + l, h, w.data(), table.data() + 2 * l * h, table.data() + (2 * l + 1) * h);
  }
  constexpr void begin_row(std::size_t r) {
    a.begin_row(r);
    T* x = buf.data();
    const std::size_t n = N.value, h = n / 2;
    for (std::size_t j = 0; j < n; ++j) x[j] = static_cast<T>(a.at(j));
    if (style == rope_style::none || L == 0) return;
    const std::size_t l = r % L;
    detail::rope_rotate(x, n, table.data() + 2 * l * h, table.data() + (2 * l + 1) * h, style);
  }
  constexpr T at(std::size_t j) const { return buf.data()[j]; }

  evaluator<A> a;
  rope_style style;
  [[no_unique_address]] extent_value<SN> N;
  std::size_t L;
  storage<T, dyn> table;  // per position: D/2 cos, then D/2 sin (none: empty)
  storage<T, SN> buf;
};

// ---- slices, concatenation, row selection --------------------------------------------------------------
// slice on the last axis: the operand's row, shifted columns; on another axis: the row index mapped (detail::axis_rows).
template <std::size_t Axis, std::size_t Count, class A>
struct evaluator<slice_expr<Axis, Count, A>> {
  using S = shape_of_t<A>;
  static constexpr bool last = Axis + 1 == S::rank;
  constexpr explicit evaluator(const slice_expr<Axis, Count, A>& e)
      : a(e.operand()), begin(e.begin()), m(detail::make_axis_rows<S::rank>(dims_of(e), Axis)), n(dims_of(e.operand())[Axis]) {}
  constexpr void begin_row(std::size_t r) { a.begin_row(last ? r : m.row(r, n, m.index(r) + begin)); }
  constexpr auto at(std::size_t j) const { return a.at(last ? j + begin : j); }
  evaluator<A> a;
  std::size_t begin;
  detail::axis_rows m;
  std::size_t n;
};

template <std::size_t Axis, class A, class B>
struct evaluator<concat_expr<Axis, A, B>> {
  using S = shape_of_t<A>;
  using T = value_t<A>;
  static constexpr bool last = Axis + 1 == S::rank;
  constexpr explicit evaluator(const concat_expr<Axis, A, B>& e)
      : a(e.lhs()), b(e.rhs()), m(detail::make_axis_rows<S::rank>(dims_of(e), Axis)), na(dims_of(e.lhs())[Axis]),
        nb(dims_of(e.rhs())[Axis]) {}
  constexpr void begin_row(std::size_t r) {
    if constexpr (last) {
      a.begin_row(r);
      b.begin_row(r);
    } else {
      const std::size_t i = m.index(r);
      from_a = i < na;
      if (from_a) a.begin_row(m.row(r, na, i));
      else b.begin_row(m.row(r, nb, i - na));
    }
  }
  constexpr T at(std::size_t j) const {
    if constexpr (last) return j < na ? static_cast<T>(a.at(j)) : static_cast<T>(b.at(j - na));
    else return from_a ? static_cast<T>(a.at(j)) : static_cast<T>(b.at(j));
  }
  evaluator<A> a;
  evaluator<B> b;
  detail::axis_rows m;
  std::size_t na, nb;
  bool from_a = true;
};

// index_select: the table in memory (materialised once if it is an expression), row ids[r].
template <class A, class I>
struct evaluator<index_select_expr<A, I>> {
  constexpr explicit evaluator(const index_select_expr<A, I>& e)
      : src(e.operand()), ids(e.ids()), cols(dims_cols(dims_of(e.operand()))) {}
  constexpr void begin_row(std::size_t r) { row = src.data() + static_cast<std::size_t>(ids[r]) * cols.value; }
  constexpr auto at(std::size_t j) const { return row[j]; }
  dense_operand<A> src;
  const I* ids;
  const value_t<A>* row = nullptr;
  [[no_unique_address]] extent_value<shape_of_t<A>::cols> cols;
};

// ---- masks ----------------------------------------------------------------------------------------
template <class A, class Kind>
struct evaluator<masked_expr<A, Kind>> {
  using E = masked_expr<A, Kind>;
  using S = shape_of_t<E>;
  using T = value_t<E>;
  constexpr explicit evaluator(const E& e) : evaluator(e, dims_of(e)) {}
  constexpr evaluator(const E& e, const dims_t<S::rank>& d)
      : a(e.operand()), kind(e.kind()), fill(e.fill()), m(mask_of(e.kind(), d)), pos(d), Lq(d[S::rank - 2]),
        Lk(dims_cols(d)), rows(dims_rows(d)) {
    // The lengths live in the caller's memory: checked again now, as the fused path does.
    if constexpr (std::is_same_v<Kind, key_lengths_mask>) check_key_lengths<S>(kind, d);
    if constexpr (std::is_same_v<Kind, key_range_mask>) check_key_range_mask<S>(kind, d);
    if constexpr (S::rank >= 4) heads = d[S::rank - 3];
  }

  constexpr void begin_row(std::size_t r) {
    a.begin_row(r);
    if constexpr (is_causal) {
      const auto i = static_cast<std::ptrdiff_t>(r % Lq);
      limit = Kind::alignment == causal_alignment::top_left
                  ? i + 1
                  : i + 1 + static_cast<std::ptrdiff_t>(Lk) - static_cast<std::ptrdiff_t>(Lq);
    } else if constexpr (std::is_same_v<Kind, key_lengths_mask>) {
      limit = static_cast<std::ptrdiff_t>(kind.lengths[r / (rows / kind.count)]);
    } else if constexpr (std::is_same_v<Kind, key_range_mask>) {
      const key_span span = range_span(kind.range, Lq, Lk, 0, r % Lq);
      start = span.lo;
      limit = static_cast<std::ptrdiff_t>(span.hi);
    } else if constexpr (std::is_same_v<Kind, alibi_bias>) {  // (kernels::linear_bias_at's operations)
      slope = static_cast<T>(kind.slopes[kind.count == 1 ? 0 : (r / Lq) % heads]);
      from = static_cast<T>(r % Lq + Lk) - static_cast<T>(Lq);
    } else if constexpr (is_bool) {
      m.begin_row(r);
    } else if constexpr (is_function) {
      pos.row(r);
    }
  }
  constexpr T at(std::size_t j) const {
    if constexpr (is_bool) {
      return m.at(j) ? static_cast<T>(a.at(j)) : fill;
    } else if constexpr (is_function) {
      return kind.f(pos.b, pos.h, pos.i, static_cast<std::ptrdiff_t>(j)) ? static_cast<T>(a.at(j)) : fill;
    } else if constexpr (is_padding) {
      return j < Kind::length ? static_cast<T>(a.at(j)) : fill;
    } else if constexpr (std::is_same_v<Kind, key_range_mask>) {
      return j >= start && static_cast<std::ptrdiff_t>(j) < limit ? static_cast<T>(a.at(j)) : fill;
    } else if constexpr (std::is_same_v<Kind, alibi_bias>) {
      return static_cast<T>(a.at(j)) + slope * (static_cast<T>(j) - from);
    } else {
      return static_cast<std::ptrdiff_t>(j) < limit ? static_cast<T>(a.at(j)) : fill;
    }
  }

  template <class X> struct is_bool_kind : std::false_type {};
  template <class M> struct is_bool_kind<bool_mask<M>> : std::true_type {};
  template <class X> struct is_causal_kind : std::false_type {};
  template <causal_alignment Al> struct is_causal_kind<causal_mask<Al>> : std::true_type {};
  template <class X> struct is_padding_kind : std::false_type {};
  template <std::size_t L> struct is_padding_kind<key_padding_length<L>> : std::true_type {};
  static constexpr bool is_bool = is_bool_kind<Kind>::value;
  static constexpr bool is_causal = is_causal_kind<Kind>::value;
  static constexpr bool is_padding = is_padding_kind<Kind>::value;
  template <class X> struct is_function_kind : std::false_type {};
  template <class F> struct is_function_kind<function_mask<F>> : std::true_type {};
  static constexpr bool is_function = is_function_kind<Kind>::value;
  struct no_rows {
    constexpr explicit no_rows(const dims_t<S::rank>&) {}
  };

  struct no_mask {
    constexpr void begin_row(std::size_t) {}
    constexpr bool at(std::size_t) const { return true; }
  };
  template <class X> struct mask_evaluator { using type = no_mask; };
  template <class M> struct mask_evaluator<bool_mask<M>> { using type = operand_evaluator<S, M>; };
  static constexpr auto mask_of(const Kind& k, const dims_t<S::rank>& d) {
    if constexpr (is_bool) return typename mask_evaluator<Kind>::type(k.mask, d);
    else return no_mask{};
  }

  evaluator<A> a;
  Kind kind;
  T fill;
  typename mask_evaluator<Kind>::type m;
  [[no_unique_address]] std::conditional_t<is_function, detail::score_rows<S>, no_rows> pos;  // mask_fn's (b, h, i)
  std::ptrdiff_t limit = 0;
  std::size_t start = 0;
  T slope = T(0), from = T(0);  // alibi
  std::size_t heads = S::rank >= 4 ? 0 : 1;
  [[no_unique_address]] extent_value<S::extents[S::rank - 2]> Lq;
  [[no_unique_address]] extent_value<S::cols> Lk;
  [[no_unique_address]] extent_value<S::rows> rows;
};

// ---- functions of the score's position (expr/score_position.hpp) --------------------------------------------
// S op p and map(f, S) with f(score, b, h, i, j): the row's (b, h, i) found once per row, j the column.
template <class A, class S>
struct positioned_operand {
  constexpr positioned_operand(const A& e, const dims_t<S::rank>& d) : a(e), pos(d) {}
  constexpr void begin_row(std::size_t r) {
    a.begin_row(r);
    pos.row(r);
  }
  evaluator<A> a;
  detail::score_rows<S> pos;
};
template <class Op, class A, class P, bool PositionFirst>
struct evaluator<position_op_expr<Op, A, P, PositionFirst>> : positioned_operand<A, shape_of_t<A>> {
  using T = value_t<A>;
  constexpr explicit evaluator(const position_op_expr<Op, A, P, PositionFirst>& e)
      : positioned_operand<A, shape_of_t<A>>(e.operand(), dims_of(e)), p(e.positions()) {}
  constexpr T at(std::size_t j) const {
    const auto& q = this->pos;
    const T v = static_cast<T>(p(q.b, q.h, q.i, static_cast<std::ptrdiff_t>(j)));
    if constexpr (PositionFirst) return Op{}(v, static_cast<T>(this->a.at(j)));
    else return Op{}(static_cast<T>(this->a.at(j)), v);
  }
  P p;
};
template <class F, class A>
struct evaluator<score_map_expr<F, A>> : positioned_operand<A, shape_of_t<A>> {
  using T = value_t<A>;
  constexpr explicit evaluator(const score_map_expr<F, A>& e)
      : positioned_operand<A, shape_of_t<A>>(e.operand(), dims_of(e)), f(e.function()) {}
  constexpr T at(std::size_t j) const {
    const auto& q = this->pos;
    return static_cast<T>(f(static_cast<T>(this->a.at(j)), q.b, q.h, q.i, static_cast<std::ptrdiff_t>(j)));
  }
  [[no_unique_address]] F f;
};

// ---- attention sinks (expr/sinks.hpp) ---------------------------------------------------------------------
// Each output row of softmax(P) * V times its sink factor, from the row's log-sum-exp of P (P's row evaluated once
// more here: the path of constant evaluation and of a context with the fused path off is the row-by-row one).
template <class P, class V, class Sk>
struct evaluator<sinks_expr<matmul_expr<softmax_expr<P>, V>, Sk>> {
  using E = sinks_expr<matmul_expr<softmax_expr<P>, V>, Sk>;
  using T = value_t<E>;
  using SP = shape_of_t<P>;
  constexpr explicit evaluator(const E& e)
      : a(e.operand()), p(e.operand().lhs().operand()), sinks(e.sinks()), heads(e.heads()),
        lq(dims_of(e.operand().lhs().operand())[SP::rank - 2]), lk(dims_cols(dims_of(e.operand().lhs().operand()))) {}
  constexpr void begin_row(std::size_t r) {
    a.begin_row(r);
    p.begin_row(r);
    const T lse = detail::row_log_sum_exp<T>(lk, [this](std::size_t j) { return static_cast<T>(p.at(j)); });
    const std::size_t h = SP::rank >= 4 ? (r / lq) % heads : 0;
    factor = detail::sink_merge(lse, sink(h)).factor;
  }
  constexpr T at(std::size_t j) const { return static_cast<T>(a.at(j)) * factor; }
  constexpr T sink(std::size_t h) const {
    if constexpr (requires { sinks.value; }) return sinks.value;
    else return sinks.data()[dims_of(sinks)[0] == 1 ? 0 : h];
  }
  evaluator<matmul_expr<softmax_expr<P>, V>> a;
  evaluator<P> p;
  Sk sinks;
  std::size_t heads, lq, lk;
  T factor = T(1);
};

// ---- a unit batch axis (expr/heads.hpp) ------------------------------------------------------------
// Adding or dropping a unit axis in front changes no row: the operand's evaluator, row for row.
template <class A>
struct same_rows_evaluator {
  constexpr explicit same_rows_evaluator(const A& e) : a(e) {}
  constexpr void begin_row(std::size_t r) { a.begin_row(r); }
  constexpr auto at(std::size_t j) const { return a.at(j); }
  evaluator<A> a;
};
template <class A>
struct evaluator<unit_batch_expr<A>> : same_rows_evaluator<A> {
  constexpr explicit evaluator(const unit_batch_expr<A>& e) : same_rows_evaluator<A>(e.operand()) {}
};
template <class A>
struct evaluator<drop_unit_batch_expr<A>> : same_rows_evaluator<A> {
  constexpr explicit evaluator(const drop_unit_batch_expr<A>& e) : same_rows_evaluator<A>(e.operand()) {}
};

// The unit axis moves no data: a tensor with one in front is still the tensor's memory.
template <class A>
struct dense_operand<unit_batch_expr<A>> {
  constexpr explicit dense_operand(const unit_batch_expr<A>& e) : d(e.operand()) {}
  constexpr const value_t<A>* data() const noexcept { return d.data(); }
  dense_operand<A> d;
};

// ---- heads: strided reads, no copies of operands already in memory -----------------------------
// (split_heads: eval/strided_operand.hpp, with the strides the kernels get)
template <class A>
struct evaluator<merge_heads_expr<A>> {
  using S = shape_of_t<A>;  // (batch..., H, L, d); the result is (batch..., L, H * d)
  constexpr explicit evaluator(const merge_heads_expr<A>& e) : evaluator(e, dims_of(e.operand())) {}
  constexpr evaluator(const merge_heads_expr<A>& e, const dims_t<S::rank>& x)
      : src(e.operand()), H(x[S::rank - 3]), L(x[S::rank - 2]), d(dims_cols(x)) {}
  constexpr void begin_row(std::size_t r) { base = src.data() + ((r / L) * H * L + r % L) * d; }
  constexpr auto at(std::size_t j) const { return base[(j / d) * L * d + j % d]; }
  dense_operand<A> src;
  const value_t<A>* base = nullptr;
  [[no_unique_address]] extent_value<S::template extent<S::rank - 3>> H;
  [[no_unique_address]] extent_value<S::template extent<S::rank - 2>> L;
  [[no_unique_address]] extent_value<S::cols> d;
};

template <std::size_t G, class A>
struct evaluator<repeat_heads_expr<G, A>> {
  using S = shape_of_t<A>;  // (batch..., Hkv, L, d); the result has Hkv * G heads
  constexpr explicit evaluator(const repeat_heads_expr<G, A>& e) : evaluator(e, dims_of(e.operand())) {}
  constexpr evaluator(const repeat_heads_expr<G, A>& e, const dims_t<S::rank>& x)
      : a(e.operand()), Hkv(x[S::rank - 3]), L(x[S::rank - 2]) {}
  constexpr void begin_row(std::size_t r) {
    const std::size_t l = r % L, h = (r / L) % (Hkv * G), b = r / (L * Hkv * G);
    a.begin_row((b * Hkv + h / G) * L + l);
  }
  constexpr auto at(std::size_t j) const { return a.at(j); }
  evaluator<A> a;
  [[no_unique_address]] extent_value<S::template extent<S::rank - 3>> Hkv;
  [[no_unique_address]] extent_value<S::template extent<S::rank - 2>> L;
};

}  // namespace attnx

// The strided operands (split_heads) and their evaluators.
#include "attnx/eval/strided_operand.hpp"
