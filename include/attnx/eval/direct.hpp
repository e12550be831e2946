// attnx: assignments that skip the row loop at run time.
//
//   dst = A * B            (batched or shared B)
//   dst = A * B + bias     (bias of N elements, broadcast to every row: the projection x W + b)
// are computed by kernels::gemm_into when A lies in memory (a tensor, a view, evaluated_once(e), ...:
// lhs_in_memory): B packed once, then every row block of the whole product split across the context's
// threads, each thread writing its rows (and the bias) straight into dst; a product of fewer than
// kernels::gemm_direct_min_rows rows per matrix B (decoding steps), or one with the blocked GEMM off, by
// kernels::gemm_rows. transpose(X) * B with X a matrix in memory takes the same path, X transposed first. With any
// other A (a softmax, a chain, ...) and inside an expression (under softmax, for
// instance), a product keeps the row protocol and computes blocks of rows of A as they are asked for: A is never
// stored whole (eval/evaluator.hpp).
#pragma once

#include <cstddef>
#include <type_traits>

#include "attnx/eval/evaluator.hpp"
#include "attnx/exec/context.hpp"
#include "attnx/expr/elementwise.hpp"
#include "attnx/expr/evaluated.hpp"
#include "attnx/expr/heads.hpp"
#include "attnx/expr/matmul.hpp"
#include "attnx/kernels/gemm.hpp"

namespace attnx::direct {

// Whether A's rows are in memory already, or cost nothing to bring there: the cases the direct path takes.
template <class A>
struct lhs_in_memory : std::bool_constant<dense_terminal<A>> {};
template <class A>
struct lhs_in_memory<evaluated_once_expr<A>> : std::true_type {};
// transpose(X) of a matrix in memory (the weight gradient X^T dY): X transposed into a buffer first, O(rows x cols of
// X) against the product's O(rows x cols x N), so that the product runs on the GEMM rather than the row loop.
template <class A>
  requires dense_terminal<A> && (shape_of_t<A>::rank == 2)
struct lhs_in_memory<transpose_expr<A>> : std::true_type {};

// The operand of the direct path: A in memory, read in place (dense_operand), or transpose(X) copied transposed.
template <class A>
struct direct_operand : dense_operand<A> {
  direct_operand(const A& e, const context&) : dense_operand<A>(e) {}
};
template <class A>
  requires dense_terminal<A> && (shape_of_t<A>::rank == 2)
struct direct_operand<transpose_expr<A>> {
  using T = value_t<A>;
  direct_operand(const transpose_expr<A>& e, const context& ctx) {
    const auto d = dims_of(e.operand());
    const std::size_t r = d[0], c = d[1];
    buf.allocate(r * c);
    const T* src = e.operand().data();
    T* dst = buf.data();
    constexpr std::size_t tile = 32;  // (a tile of source rows and one of destination rows stay in L1)
    // Bands of source rows on the context's threads (each writes its own columns of the copy) when the copy is
    // large enough to pay for them.
    const std::size_t bands = (r + tile - 1) / tile;
    const unsigned slots = r * c >= exec::parallel_min_elements ? ctx.threads() : 1u;
    exec::parallel_for(bands, slots, [&](std::size_t band, unsigned) {
      const std::size_t i0 = band * tile;
      for (std::size_t j0 = 0; j0 < c; j0 += tile)
        for (std::size_t j = j0; j < alg::min(c, j0 + tile); ++j)
          for (std::size_t i = i0; i < alg::min(r, i0 + tile); ++i) dst[j * r + i] = src[i * c + j];
    });
  }
  const T* data() const noexcept { return buf.data(); }
  kernels::detail::gemm_buffer<T> buf;
};

// A product evaluated whole before it is read (the blocked GEMM), for the evaluators that need its rows.
template <class E>
struct product {
  static constexpr bool value = false;
};

template <class A, class B>
struct product<matmul_expr<A, B>> {
  using E = matmul_expr<A, B>;
  using T = value_t<E>;
  using SA = shape_of_t<A>;
  using SB = shape_of_t<B>;
  static constexpr std::size_t M = SA::extents[SA::rank - 2], K = SA::cols, N = SB::cols;  // dyn: known at run time
  static constexpr bool batched_rhs = SB::rank > 2;
  static constexpr std::size_t rows = shape_of_t<E>::rows;
  static constexpr std::size_t rows_per_b = batched_rhs ? M : rows;
  static constexpr bool is_static = SA::is_static && SB::is_static;
  // With dyn extents the sizes are checked at run time (run() returns false for a product too small).
  static constexpr bool value = (std::is_same_v<T, float> || std::is_same_v<T, double>) && std::is_same_v<value_t<A>, T> &&
                                std::is_same_v<value_t<B>, T> && lhs_in_memory<A>::value;
  static const E& core(const E& e) { return e; }
  static const T* bias(const E&) { return nullptr; }
};

// A * B + bias, the bias of N elements ((N), (1, N), ...): added to every row.
template <class A, class B, class M>
struct product<binary_expr<ops::plus, matmul_expr<A, B>, M>> : product<matmul_expr<A, B>> {
  using base = product<matmul_expr<A, B>>;
  static constexpr bool value = base::value && dense_terminal<M> && std::is_same_v<value_t<M>, typename base::T> &&
                                base::N != dyn && shape_of_t<M>::size == base::N && shape_of_t<M>::cols == base::N;
  static const matmul_expr<A, B>& core(const binary_expr<ops::plus, matmul_expr<A, B>, M>& e) { return e.lhs(); }
  static const typename base::T* bias(const binary_expr<ops::plus, matmul_expr<A, B>, M>& e) { return e.rhs().data(); }
};

// drop_unit_batch(x W + b) assigned: the product at once, as without the unit axis (expr/heads.hpp).
template <class A>
struct lhs_in_memory<unit_batch_expr<A>> : lhs_in_memory<A> {};
template <class A>
struct product<drop_unit_batch_expr<A>> : product<A> {
  static const auto& core(const drop_unit_batch_expr<A>& e) { return product<A>::core(e.operand()); }
  static auto bias(const drop_unit_batch_expr<A>& e) { return product<A>::bias(e.operand()); }
};

// dst (the expression's shape, row-major) = e with ctx: the blocked GEMM, or, for fewer than gemm_direct_min_rows rows
// per matrix B or with the blocked GEMM off, the library's row-by-row loop (kernels::gemm_rows: the row evaluator's
// order, so the row evaluator itself is left for constant evaluation).
template <class T, class E>
void run(T* dst, const E& e, const context& ctx) {
  using P = product<E>;
  const auto& m = P::core(e);
  using A = std::remove_cvref_t<decltype(m.lhs())>;
  using B = std::remove_cvref_t<decltype(m.rhs())>;
  const auto da = dims_of(m.lhs());
  constexpr std::size_t ra = shape_of_t<A>::rank;
  const std::size_t M = da[ra - 2], K = da[ra - 1], N = dims_cols(dims_of(m.rhs()));
  const std::size_t rows = dims_rows(da);
  const std::size_t rows_per_b = P::batched_rhs ? M : rows;
  const direct_operand<A> a(m.lhs(), ctx);
  const dense_operand<B> b(m.rhs());
  const std::size_t nb = P::batched_rhs ? rows / M : 1;
  if (!ctx.blocked_gemm() || rows_per_b < kernels::gemm_direct_min_rows || K == 0 || N == 0) {
    kernels::gemm_rows(a.data(), K, b.data(), nb, K, N, rows_per_b, dst, N, P::bias(e), ctx.isa(), ctx.threads());
    return;
  }
  ctx.count_gemm_blocks(kernels::gemm_into(a.data(), K, b.data(), nb, K, N, rows_per_b, dst, N, P::bias(e), ctx.isa(),
                                            ctx.threads()));
}

}  // namespace attnx::direct
