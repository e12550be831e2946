// attnx: assignment, the one loop every expression becomes.
//
// An expression recognised as attention, softmax(mask(scale(Q K^T))) V, goes to the fused kernel
// at run time (eval/fused.hpp; with the context's fused path off, the library's row-by-row loop over the same
// problem), and in a constant evaluation to whole-row loops that cost the compiler fewer counted steps
// (eval/constant_attention.hpp). A product A * B (+ bias) with A in memory goes to the GEMM (eval/direct.hpp).
// Everything else:
// assign_into(dst, e) walks the rows of e's shape: begin_row(r), then dst[r][j] = at(j) for each j.
// Element-wise chains are therefore a single loop; row-wise nodes fill one-row buffers in
// begin_row. At run time, element-wise and row-wise trees over operands in memory (detail::row_parallel) of
// exec::parallel_min_elements or more run their rows in blocks on the context's threads. Nothing of size
// rows x cols is ever allocated unless an operand that is read at random (the rhs of a product) is itself an
// unevaluated expression. Results always go to fresh storage
// (tensor construction / assignment evaluates into a new buffer), so `a = a * b` is safe.
//
// How it runs (threads, instruction set, fused path on or off) is the current context's
// (exec/context.hpp): evaluate(e, ctx) and assign(dst, e, ctx) name one for a single evaluation.
#pragma once

#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "attnx/eval/constant_attention.hpp"
#include "attnx/eval/direct.hpp"
#include "attnx/eval/evaluator.hpp"
#include "attnx/eval/fused.hpp"
#include "attnx/eval/pairwise.hpp"
#include "attnx/exec/context.hpp"
#include "attnx/expr/cast.hpp"
#include "attnx/core/expression.hpp"

namespace attnx {

namespace detail {
template <class E>
struct cast_operand {
  using type = void;
};
template <class T, class A>
struct cast_operand<cast_expr<T, A>> {
  using type = A;
};

// Trees whose rows separate evaluators can compute on separate threads: each row of the result reads the same row
// of the operands alone, and making an evaluator evaluates nothing into memory. Element-wise nodes with the
// library's own functions (a map's callable only where it is one of them: a user's function may keep state) and
// the row-wise norms and softmaxes, over tensors, views and numbers.
template <class E>
struct row_parallel : std::false_type {};
template <class E>
  requires dense_terminal<E>
struct row_parallel<E> : std::true_type {};
template <class T>
struct row_parallel<scalar<T>> : std::true_type {};
template <class T, class A>
struct row_parallel<cast_expr<T, A>> : row_parallel<A> {};
template <class Op, class A>
struct row_parallel<unary_expr<Op, A>> : row_parallel<A> {};
template <class Op, class A, class B>
struct row_parallel<binary_expr<Op, A, B>> : std::bool_constant<row_parallel<A>::value && row_parallel<B>::value> {};
template <class F, class A>
  requires(pointwise_of<F> >= 0)
struct row_parallel<map_expr<F, A>> : row_parallel<A> {};
template <class C, class A, class B>
struct row_parallel<where_expr<C, A, B>>
    : std::bool_constant<row_parallel<C>::value && row_parallel<A>::value && row_parallel<B>::value> {};
template <norm_kind K, class A, class W, class B>
struct row_parallel<norm_expr<K, A, W, B>>
    : std::bool_constant<row_parallel<A>::value && row_parallel<W>::value && row_parallel<B>::value> {};
template <class A>
struct row_parallel<softmax_expr<A>> : row_parallel<A> {};
template <class A>
struct row_parallel<log_softmax_expr<A>> : row_parallel<A> {};

// The row loop of assign_into in blocks of rows over the context's threads, an evaluator per thread made on first
// use under the same context. Each row is computed as on one thread: the result is the same bits for any count.
template <class T, class E>
void assign_rows_parallel(T* dst, const E& e, std::size_t rows, std::size_t cols, const context& ctx) {
  constexpr std::size_t block_elements = std::size_t(1) << 14;  // (a block of rows: enough blocks to balance)
  const std::size_t per_block = alg::max<std::size_t>(1, block_elements / alg::max<std::size_t>(cols, 1));
  const std::size_t blocks = (rows + per_block - 1) / per_block;
  const unsigned slots = ctx.threads();
  std::vector<std::optional<evaluator<E>>> evs(slots);
  exec::parallel_for(blocks, slots, [&](std::size_t blk, unsigned slot) {
    const context_scope use(ctx);
    auto& ev = evs[slot];
    if (!ev) ev.emplace(e);
    const std::size_t r1 = alg::min(rows, (blk + 1) * per_block);
    for (std::size_t r = blk * per_block; r < r1; ++r) {
      ev->begin_row(r);
      T* out = dst + r * cols;
      for (std::size_t j = 0; j < cols; ++j) out[j] = static_cast<T>(ev->at(j));
    }
  });
}
}  // namespace detail

// Every caller has checked the assignment rules first (check_assignable): a failed_expr never gets here.
template <class T, class E>
constexpr void assign_into(T* dst, const E& e) {
  using S = shape_of_t<E>;
  if constexpr (constant_attention::pattern<E>::value && std::is_same_v<T, value_t<E>>) {
    // In a constant evaluation: attention in whole-row loops (eval/constant_attention.hpp), the same values.
    if (std::is_constant_evaluated() && constant_attention::run(dst, e)) return;
  }
  if constexpr (fused::pattern<E>::value) {
    if (!std::is_constant_evaluated()) {
      const context& ctx = current_context();
      using A = typename detail::cast_operand<E>::type;
      if constexpr (!std::is_void_v<A>) {
        // cast<T>(attention): the attention in its own type, then converted element by element.
        const dense_operand<A> inner(e.operand());
        const auto* src = inner.data();
        const std::size_t n = dims_size(dims_of(e));
        for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i]);
        return;
      } else if constexpr (std::is_same_v<T, value_t<E>>) {
        fused::run(dst, e, ctx);  // (the kernel, or with the fused path off the same problem row by row)
        return;
      }
    }
  } else if constexpr (direct::product<E>::value && std::is_same_v<T, value_t<E>>) {
    // A * B [+ bias] at run time: the whole product at once, every row block in parallel (eval/direct.hpp).
    if (!std::is_constant_evaluated()) return direct::run(dst, e, current_context());
  }
  const auto d = dims_of(e);
  const extent_value<S::rows> rows(dims_rows(d));
  const extent_value<S::cols> cols(dims_cols(d));
  if constexpr (detail::row_parallel<E>::value) {
    if (!std::is_constant_evaluated() && rows.value > 1 && rows.value * cols.value >= exec::parallel_min_elements) {
      const context& ctx = current_context();
      if (ctx.threads() > 1) return detail::assign_rows_parallel(dst, e, rows.value, cols.value, ctx);
    }
  }
  evaluator<E> ev(e);
  for (std::size_t r = 0; r < rows.value; ++r) {  // .value: a constant when static (no call per use)
    ev.begin_row(r);
    T* out = dst + r * cols.value;
    for (std::size_t j = 0; j < cols.value; ++j) out[j] = static_cast<T>(ev.at(j));
  }
}

// The value of an expression, as an owning tensor of its shape and element type.
template <expression E>
constexpr result_t<E> evaluate(const E& e) {
  return result_t<E>(e);
}

// The same, computed with ctx (threads, instruction set, fused path).
template <expression E>
result_t<E> evaluate(const E& e, const context& ctx) {
  const context_scope use(ctx);
  return result_t<E>(e);
}

// dst = e with ctx; dst is a tensor or a writable view (the assignment rules apply as for `=`).
template <class Dst, expression E>
void assign(Dst&& dst, const E& e, const context& ctx) {
  const context_scope use(ctx);
  std::forward<Dst>(dst) = e;
}

}  // namespace attnx
