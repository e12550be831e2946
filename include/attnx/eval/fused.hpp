// attnx: recognising attention in an expression tree and handing it to the fused kernel.
//
// An expression  softmax(P) * V  is attention when P is a chain of score nodes ending in a core:
//   core:    Q * transpose(K),  or  dot_scores(Q, K) (the pairwise dot similarity, a core and a scale)
//   chain:   scale(P, s) / P * s,  temperature(P, t) / P / s,  -P,  tanh(P) (soft-capping: c * tanh(P / c)),
//            mask(P, causal | causal_bottom_right | key_padding<N> | key_lengths(...) | named interval | bool M,
//            fill), mask(P, additive(M)) / P + M
// in any number and order (at most kernels::max_score_steps nodes), with any fill values, and with Q, K,
// V, P of one floating-point type and scores of rank 2 to 4. Each node type below is one specialisation
// of `chain` that is at once the compile-time match (value, steps), the operands it must keep alive while
// the kernel runs (held) and the run-time extraction of its part of the kernel's problem (extract): the
// pattern is written once. The kernel applies the steps in the expression's order, so fused and row-by-row
// evaluation agree on every special value (docs/design.md). Q, K and V are read where they lie (tensors,
// views, split_heads / repeat_heads of them: eval/strided_operand.hpp); expressions among them and among
// the masks are evaluated once into temporaries.
//
// is_fused_v<E> tells at compile time whether evaluating E runs the kernel (given a context with the
// fused path on, the default): static_assert(attnx::is_fused_v<decltype(e)>). docs/design.md lists the
// forms that fuse and those that do not, with why. The kernel is run-time code: in a constant evaluation
// attention runs in eval/constant_attention.hpp's whole-row loops, or the row-by-row evaluators.
#pragma once

#include <cstddef>
#include <limits>
#include <string_view>
#include <type_traits>

#include "attnx/eval/evaluator.hpp"
#include "attnx/eval/strided_operand.hpp"
#include "attnx/exec/context.hpp"
#include "attnx/expr/cast.hpp"
#include "attnx/expr/elementwise.hpp"
#include "attnx/expr/mask.hpp"
#include "attnx/expr/matmul.hpp"
#include "attnx/expr/pairwise.hpp"
#include "attnx/expr/reduce.hpp"
#include "attnx/kernels/flash_attention.hpp"
#include "attnx/kernels/rows.hpp"

namespace attnx {
namespace fused {

// The fused kernel's problem description (kernels/attention_problem.hpp).
template <class T>
using problem = kernels::attention_problem<T>;

// The strides of a mask of shape M broadcast to scores of shape S, in the kernel's (b, h, i, j) terms.
template <class M, class S, class U>
kernels::broadcast<const U> broadcast_of(const U* data, const dims_t<M::rank>& m) {
  std::ptrdiff_t st[4] = {0, 0, 0, 0};
  std::ptrdiff_t stride = 1;
  for (std::size_t k = M::rank; k-- > 0;) {
    const std::size_t s_axis = k + S::rank - M::rank;  // right-aligned
    const std::size_t kernel_axis = S::rank == 2 ? s_axis + 2 : S::rank == 3 ? (s_axis == 0 ? 0 : s_axis + 1) : s_axis;
    st[kernel_axis] = M::extents[k] == 1 ? 0 : stride;
    stride *= static_cast<std::ptrdiff_t>(m[k]);
  }
  return {data, st[0], st[1], st[2], st[3]};
}

// ---- the chain of score nodes, one specialisation per node ----------------------------------------
template <class E>
struct chain {
  static constexpr bool value = false;
  static constexpr std::size_t steps = 0;
  static constexpr bool functions = false;  // a step is a tile_function (compiled here; no fused backward)
  using q = void;
  using k = void;
};

// Q * transpose(K)
template <class Q, class K>
struct chain<matmul_expr<Q, transpose_expr<K>>> {
  static constexpr bool value = true;
  static constexpr std::size_t steps = 0;
  static constexpr bool functions = false;
  using q = Q;
  using k = K;
  struct held {
    strided_operand<Q> q;
    strided_operand<K> k;
    explicit held(const matmul_expr<Q, transpose_expr<K>>& e) : q(e.lhs()), k(e.rhs().operand()) {}
  };
  template <class S, class T>
  static void extract(const held& h, problem<T>& p, [[maybe_unused]] const dims_t<S::rank>& d) {
    p.q = h.q.template kernel_view<S::rank>();
    p.k = h.k.template kernel_view<S::rank>();
    p.dk = h.k.cols;
  }
};

// dot_scores(Q, K[, scale]): q . k, then times the scale
template <class Q, class K>
struct chain<pairwise_expr<similarity::dot, Q, K>> {
  static constexpr bool value = true;
  static constexpr std::size_t steps = 1;
  static constexpr bool functions = false;
  using q = Q;
  using k = K;
  struct held {
    strided_operand<Q> q;
    strided_operand<K> k;
    double scale;
    explicit held(const pairwise_expr<similarity::dot, Q, K>& e)
        : q(e.queries()), k(e.keys()), scale(e.similarity().scale) {}
  };
  template <class S, class T>
  static void extract(const held& h, problem<T>& p, [[maybe_unused]] const dims_t<S::rank>& d) {
    p.q = h.q.template kernel_view<S::rank>();
    p.k = h.k.template kernel_view<S::rank>();
    p.dk = h.k.cols;
    p.multiply(static_cast<T>(h.scale));
  }
};

// A node over an inner chain, adding one step.
template <class A>
struct chain_link {
  using inner = chain<A>;
  static constexpr bool value = inner::value;
  static constexpr std::size_t steps = inner::steps + 1;
  static constexpr bool functions = inner::functions;
  using q = typename inner::q;
  using k = typename inner::k;
};

// ---- functions of the score and its position: tile_function steps compiled here -------------------------------
namespace detail {
// f(s, b, h, i, j) over a tile (kernels/attention_problem.hpp's tile_function layout), the callable inlined.
template <class T, class F>
void tile_loop(T* s, std::ptrdiff_t rs, std::ptrdiff_t cs, std::size_t rows, std::size_t cols, std::size_t b,
               std::size_t h, std::size_t i0, std::size_t j0, const F& f) {
  const auto pb = static_cast<std::ptrdiff_t>(b), ph = static_cast<std::ptrdiff_t>(h);
  for (std::size_t c = 0; c < cols; ++c) {
    T* x = s + static_cast<std::ptrdiff_t>(c) * cs;
    const auto j = static_cast<std::ptrdiff_t>(j0 + c);
    for (std::size_t r = 0; r < rows; ++r) {
      T& v = x[static_cast<std::ptrdiff_t>(r) * rs];
      v = f(v, pb, ph, static_cast<std::ptrdiff_t>(i0 + r), j);
    }
  }
}
// A score function: Fn::template value<T>(f, s, b, h, i, j) is the new score.
template <class T, class Fn, class F>
void score_tile(const void* f, T* s, std::ptrdiff_t rs, std::ptrdiff_t cs, std::size_t rows, std::size_t cols,
                std::size_t b, std::size_t h, std::size_t i0, std::size_t j0, T) {
  const F& fn = *static_cast<const F*>(f);
  tile_loop(s, rs, cs, rows, cols, b, h, i0, j0, [&fn](T v, std::ptrdiff_t pb, std::ptrdiff_t ph, std::ptrdiff_t i,
                                                       std::ptrdiff_t j) { return Fn::template value<T>(fn, v, pb, ph, i, j); });
}
template <class T, class F>
void mask_tile(const void* f, T* s, std::ptrdiff_t rs, std::ptrdiff_t cs, std::size_t rows, std::size_t cols,
               std::size_t b, std::size_t h, std::size_t i0, std::size_t j0, T fill) {
  const F& fn = *static_cast<const F*>(f);
  tile_loop(s, rs, cs, rows, cols, b, h, i0, j0,
            [&fn, fill](T v, std::ptrdiff_t pb, std::ptrdiff_t ph, std::ptrdiff_t i, std::ptrdiff_t j) {
              return fn(pb, ph, i, j) ? v : fill;
            });
}
template <class F>
int mask_tile_cover(const void* f, std::size_t rows, std::size_t cols, std::size_t b, std::size_t h, std::size_t i0,
                    std::size_t j0) {
  const F& fn = *static_cast<const F*>(f);
  const auto pb = static_cast<std::ptrdiff_t>(b), ph = static_cast<std::ptrdiff_t>(h);
  bool any = false, every = true;
  for (std::size_t r = 0; r < rows; ++r) {
    const auto i = static_cast<std::ptrdiff_t>(i0 + r);
    std::size_t n = 0;  // (a count, not an early exit: a loop the compiler can vectorise)
    for (std::size_t c = 0; c < cols; ++c) n += fn(pb, ph, i, static_cast<std::ptrdiff_t>(j0 + c)) ? 1u : 0u;
    any = any || n != 0;
    every = every && n == cols;
    if (any && !every) return 1;
  }
  return any ? 2 : 0;
}
// The new score of each kind of score function (the row evaluators' arithmetic, eval/evaluator.hpp).
template <class Op, bool PositionFirst>
struct position_op_value {
  template <class T, class P>
  static T value(const P& p, T v, std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t i, std::ptrdiff_t j) {
    const T x = static_cast<T>(p(b, h, i, j));
    if constexpr (PositionFirst) return Op{}(x, v);
    else return Op{}(v, x);
  }
};
struct score_map_value {
  template <class T, class F>
  static T value(const F& f, T v, std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t i, std::ptrdiff_t j) {
    return static_cast<T>(f(v, b, h, i, j));
  }
};
template <class Op, class U, bool NumberFirst>
struct number_op_value {
  template <class T>
  static T value(const U& u, T v, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t) {
    if constexpr (NumberFirst) return Op{}(static_cast<T>(u), v);
    else return Op{}(v, static_cast<T>(u));
  }
};
template <class Op>
struct unary_value {
  struct none {};
  template <class T>
  static T value(const none&, T v, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t, std::ptrdiff_t) { return Op{}(v); }
};
}  // namespace detail

// A node over an inner chain whose step is a score function: F the data it keeps (a copy, alive while the kernel
// runs), Fn its arithmetic.
template <class A, class F, class Fn>
struct function_link : chain_link<A> {
  static constexpr bool functions = true;
  struct held {
    typename chain<A>::held in;
    F f;
    held(const A& a, F f_) : in(a), f(std::move(f_)) {}
  };
  template <class S, class T>
  static void extract(const held& h, problem<T>& p, [[maybe_unused]] const dims_t<S::rank>& d) {
    chain<A>::template extract<S>(h.in, p, d);
    p.function({&detail::score_tile<T, Fn, F>, nullptr, &h.f});
  }
};

// S op p, p op S: a position expression (expr/score_position.hpp)
template <class Op, class A, class P, bool First>
struct chain<position_op_expr<Op, A, P, First>> : function_link<A, P, detail::position_op_value<Op, First>> {
  struct held : function_link<A, P, detail::position_op_value<Op, First>>::held {
    explicit held(const position_op_expr<Op, A, P, First>& e)
        : function_link<A, P, detail::position_op_value<Op, First>>::held(e.operand(), e.positions()) {}
  };
};

// map(f, S) with f(score, b, h, i, j)
template <class F, class A>
struct chain<score_map_expr<F, A>> : function_link<A, F, detail::score_map_value> {
  struct held : function_link<A, F, detail::score_map_value>::held {
    explicit held(const score_map_expr<F, A>& e) : function_link<A, F, detail::score_map_value>::held(e.operand(), e.function()) {}
  };
};

// S + c, S - c, maximum(S, c), minimum(S, c) with c a number, and c - S, c / S
template <class Op, class A, class U>
  requires(std::is_same_v<Op, ops::minus> || std::is_same_v<Op, ops::maximum> || std::is_same_v<Op, ops::minimum>)
struct chain<binary_expr<Op, A, scalar<U>>> : function_link<A, U, detail::number_op_value<Op, U, false>> {
  using base = function_link<A, U, detail::number_op_value<Op, U, false>>;
  struct held : base::held {
    explicit held(const binary_expr<Op, A, scalar<U>>& e) : base::held(e.lhs(), e.rhs().value()) {}
  };
};
template <class A, class U>
struct chain<binary_expr<ops::plus, A, scalar<U>>> : function_link<A, U, detail::number_op_value<ops::plus, U, false>> {
  using base = function_link<A, U, detail::number_op_value<ops::plus, U, false>>;
  struct held : base::held {
    explicit held(const binary_expr<ops::plus, A, scalar<U>>& e) : base::held(e.lhs(), e.rhs().value()) {}
  };
};
template <class Op, class A, class U>
  requires(std::is_same_v<Op, ops::minus> || std::is_same_v<Op, ops::divides> || std::is_same_v<Op, ops::maximum> ||
           std::is_same_v<Op, ops::minimum>)
struct chain<binary_expr<Op, scalar<U>, A>> : function_link<A, U, detail::number_op_value<Op, U, true>> {
  using base = function_link<A, U, detail::number_op_value<Op, U, true>>;
  struct held : base::held {
    explicit held(const binary_expr<Op, scalar<U>, A>& e) : base::held(e.rhs(), e.lhs().value()) {}
  };
};
template <class A, class U>
struct chain<binary_expr<ops::plus, scalar<U>, A>> : function_link<A, U, detail::number_op_value<ops::plus, U, true>> {
  using base = function_link<A, U, detail::number_op_value<ops::plus, U, true>>;
  struct held : base::held {
    explicit held(const binary_expr<ops::plus, scalar<U>, A>& e) : base::held(e.rhs(), e.lhs().value()) {}
  };
};

// Op(S) for an element-wise function the program has no step of its own for (exp, abs, the activations, ...)
template <class Op, class A>
  requires(!std::is_same_v<Op, ops::negate> && !std::is_same_v<Op, ops::tanh> && !std::is_same_v<Op, ops::logical_not>)
struct chain<unary_expr<Op, A>> : function_link<A, typename detail::unary_value<Op>::none, detail::unary_value<Op>> {
  using base = function_link<A, typename detail::unary_value<Op>::none, detail::unary_value<Op>>;
  struct held : base::held {
    explicit held(const unary_expr<Op, A>& e) : base::held(e.operand(), {}) {}
  };
};

// scale(P, s): P * s, and temperature(P, t): P / t
template <class Op, class A, class U>
  requires(std::is_same_v<Op, ops::multiplies> || std::is_same_v<Op, ops::divides>)
struct chain<binary_expr<Op, A, scalar<U>>> : chain_link<A> {
  struct held {
    typename chain<A>::held in;
    U s;
    explicit held(const binary_expr<Op, A, scalar<U>>& e) : in(e.lhs()), s(e.rhs().value()) {}
  };
  template <class S, class T>
  static void extract(const held& h, problem<T>& p, [[maybe_unused]] const dims_t<S::rank>& d) {
    chain<A>::template extract<S>(h.in, p, d);
    if constexpr (std::is_same_v<Op, ops::multiplies>) p.multiply(static_cast<T>(h.s));
    else p.divide(static_cast<T>(h.s));
  }
};

// -P: a multiplication by -1 (the same bits, NaN and infinities included)
template <class A>
struct chain<unary_expr<ops::negate, A>> : chain_link<A> {
  struct held {
    typename chain<A>::held in;
    explicit held(const unary_expr<ops::negate, A>& e) : in(e.operand()) {}
  };
  template <class S, class T>
  static void extract(const held& h, problem<T>& p, [[maybe_unused]] const dims_t<S::rank>& d) {
    chain<A>::template extract<S>(h.in, p, d);
    p.multiply(T(-1));
  }
};

// tanh(P): logit soft-capping, c * tanh(P / c) (softcap(P, c)), as a divide, a tanh and a multiply step
template <class A>
struct chain<unary_expr<ops::tanh, A>> : chain_link<A> {
  struct held {
    typename chain<A>::held in;
    explicit held(const unary_expr<ops::tanh, A>& e) : in(e.operand()) {}
  };
  template <class S, class T>
  static void extract(const held& h, problem<T>& p, [[maybe_unused]] const dims_t<S::rank>& d) {
    chain<A>::template extract<S>(h.in, p, d);
    p.tanh();
  }
};

// mask(P, kind, fill)
namespace detail {
template <class Kind>
inline constexpr bool kernel_mask_kind = attnx::detail::is_limit_mask<Kind>;
template <class M>
inline constexpr bool kernel_mask_kind<bool_mask<M>> = true;
template <>
inline constexpr bool kernel_mask_kind<alibi_bias> = true;
template <class F>
inline constexpr bool kernel_mask_kind<function_mask<F>> = true;
template <class Kind>
inline constexpr bool is_function_mask = false;
template <class F>
inline constexpr bool is_function_mask<function_mask<F>> = true;

template <class Kind>
struct mask_data {  // what a mask kind keeps alive: nothing, or its boolean operand
  explicit mask_data(const Kind&) {}
};
template <class M>
struct mask_data<bool_mask<M>> {
  dense_operand<M> m;
  dims_t<shape_of_t<M>::rank> dims;
  explicit mask_data(const bool_mask<M>& k) : m(k.mask), dims(dims_of(k.mask)) {}
};
}  // namespace detail

template <class A, class Kind>
struct chain<masked_expr<A, Kind>> : chain_link<A> {
  static constexpr bool value = chain<A>::value && detail::kernel_mask_kind<Kind>;
  static constexpr bool functions = chain<A>::functions || detail::is_function_mask<Kind>;
  struct held {
    typename chain<A>::held in;
    Kind kind;
    value_t<A> fill;
    detail::mask_data<Kind> data;
    explicit held(const masked_expr<A, Kind>& e) : in(e.operand()), kind(e.kind()), fill(e.fill()), data(e.kind()) {}
  };
  template <class S, class T>
  static void extract(const held& h, problem<T>& p, [[maybe_unused]] const dims_t<S::rank>& d) {
    chain<A>::template extract<S>(h.in, p, d);
    const T fill = static_cast<T>(h.fill);
    if constexpr (std::is_same_v<Kind, causal_mask<causal_alignment::top_left>>) {
      p.causal(kernels::causal_kind::top_left, fill);
    } else if constexpr (std::is_same_v<Kind, causal_mask<causal_alignment::bottom_right>>) {
      p.causal(kernels::causal_kind::bottom_right, fill);
    } else if constexpr (std::is_same_v<Kind, key_lengths_mask>) {
      check_key_lengths<S>(h.kind, d);  // the lengths may have changed since the mask was built
      p.key_lengths(h.kind.lengths, fill);
    } else if constexpr (std::is_same_v<Kind, key_range_mask>) {
      check_key_range_mask<S>(h.kind, d);  // the offsets may have changed since the mask was built
      p.key_interval(h.kind.range, fill);
    } else if constexpr (std::is_same_v<Kind, alibi_bias>) {
      p.linear_bias(h.kind.slopes.data(), h.kind.count);
    } else if constexpr (detail::is_function_mask<Kind>) {
      using F = decltype(h.kind.f);
      p.mask_function({&detail::mask_tile<T, F>, &detail::mask_tile_cover<F>, &h.kind.f}, fill);
    } else if constexpr (requires { Kind::length; }) {
      p.key_padding(Kind::length, fill);
    } else {
      using M = std::remove_cvref_t<decltype(h.kind.mask)>;
      const kernels::broadcast<const bool> m = broadcast_of<shape_of_t<M>, S>(h.data.m.data(), h.data.dims);
      p.boolean_mask(m, fill);
      if (const mask_blocks& bl = h.kind.blocks; bl.state && bl.rows * bl.cols > 0) {  // the summary's strides, in blocks
        const auto br = static_cast<std::ptrdiff_t>((bl.rows + 7) / 8), bc = static_cast<std::ptrdiff_t>((bl.cols + 7) / 8);
        const auto matrix = static_cast<std::ptrdiff_t>(bl.rows * bl.cols);
        p.steps[p.n_steps - 1].blocks = {bl.state, m.batch / matrix * br * bc, m.head / matrix * br * bc,
                                         m.row == 0 ? 0 : bc, m.col == 0 ? 0 : 1};
      }
    }
  }
};

// mask(P, additive(M)): P + M
template <class A, class M>
struct chain<binary_expr<ops::plus, A, M>> : chain_link<A> {
  struct held {
    typename chain<A>::held in;
    dense_operand<M> bias;
    dims_t<shape_of_t<M>::rank> dims;
    explicit held(const binary_expr<ops::plus, A, M>& e) : in(e.lhs()), bias(e.rhs()), dims(dims_of(e.rhs())) {}
  };
  template <class S, class T>
  static void extract(const held& h, problem<T>& p, [[maybe_unused]] const dims_t<S::rank>& d) {
    chain<A>::template extract<S>(h.in, p, d);
    p.additive_mask(broadcast_of<shape_of_t<M>, S>(h.bias.data(), h.dims));
  }
};

// ---- the whole pattern: softmax(P) * V -------------------------------------------------------------
template <class E>
struct pattern : std::false_type {};

template <class P, class V>
struct pattern<matmul_expr<softmax_expr<P>, V>> {
  using c = chain<P>;
  using S = shape_of_t<P>;
  static constexpr bool value = [] {
    if constexpr (!c::value) {
      return false;
    } else {
      using elem_t = value_t<P>;
      using q_op = typename c::q;
      using k_op = typename c::k;
      constexpr std::size_t rank_n = S::rank;
      if constexpr (!(std::is_same_v<elem_t, float> || std::is_same_v<elem_t, double>) || !(rank_n >= 2 && rank_n <= 4)) {
        return false;
      } else {
        constexpr std::size_t rq = shape_of_t<q_op>::rank, rk = shape_of_t<k_op>::rank, rv = shape_of_t<V>::rank;
        if constexpr (!(rq == rank_n && (rk == 2 || rk == rank_n) && (rv == 2 || rv == rank_n))) {
          return false;
        } else {
          constexpr std::size_t gq = strided_operand<q_op>::group, gk = strided_operand<k_op>::group,
                                gv = strided_operand<V>::group;
          return std::is_same_v<value_t<q_op>, elem_t> && std::is_same_v<value_t<k_op>, elem_t> && std::is_same_v<value_t<V>, elem_t> &&
                 c::steps <= kernels::max_score_steps && gq == 1 && gk == gv && (gk == 1 || rank_n == 4);
        }
      }
    }
  }();
};

// cast<T>(attention): the kernel in the expression's type, converted as it is stored.
template <class T, class E>
struct pattern<cast_expr<T, E>> : pattern<E> {};

// with_sinks(attention): the kernel with each row's log-sum-exp, then each row merged with its head's sink.
template <class E, class Sk>
struct pattern<sinks_expr<E, Sk>> : pattern<E> {};

// merge_heads(attention): the kernel writes each head's output where merge_heads puts it, (B, L, H * dv)
// or (L, H * dv), with no copy.
template <class E>
struct pattern<merge_heads_expr<E>> {
  static constexpr bool value = pattern<E>::value && shape_of_t<E>::rank >= 3;
};

// A contiguous row-major operand of extents d as the kernel's (batch, head) stack: rank 4 is (batch, head, rows,
// cols), rank 3 (batch, rows, cols), rank 2 one matrix for every (batch, head) (strides 0).
template <class U, std::size_t RS>
kernels::strided<U> contiguous_stack(U* data, const dims_t<RS>& d) {
  const auto rows = static_cast<std::ptrdiff_t>(d[RS - 2]), cols = static_cast<std::ptrdiff_t>(d[RS - 1]);
  kernels::strided<U> s{data, 0, 0, cols};
  if constexpr (RS == 4) s.head = rows * cols, s.batch = static_cast<std::ptrdiff_t>(d[1]) * rows * cols;
  if constexpr (RS == 3) s.batch = rows * cols;
  return s;
}

// The kernel's problem for softmax(P) * V, its operands held in h and v (which must outlive it), scores of extents d;
// the output and lse are the caller's to set.
template <class T, class P, class V>
problem<T> describe(const typename chain<P>::held& h, const strided_operand<V>& v, const dims_t<shape_of_t<P>::rank>& d) {
  using S = shape_of_t<P>;
  constexpr std::size_t R = S::rank;
  problem<T> p;
  chain<P>::template extract<S>(h, p, d);
  p.v = v.template kernel_view<R>();
  p.batch = R >= 3 ? d[0] : 1;
  p.heads = R == 4 ? d[1] : 1;
  p.kv_heads = p.heads / strided_operand<typename chain<P>::k>::group;
  p.lq = d[R - 2];
  p.lk = d[R - 1];
  p.dv = v.cols;
  return p;
}

// Runs the kernel with ctx, its output (b, h, i, c) at o.data + b o.batch + h o.head + i o.row + c; with ctx's fused
// path off, or with no key or query at all (a dyn length of 0), the same problem row by row
// (kernels::attention_rows): the expression's own row evaluators are left for constant evaluation.
// With lse: also each row's log-sum-exp (the attention state, attnx/state.hpp).
template <class T, class P, class V>
bool run(kernels::strided<T> o, const matmul_expr<softmax_expr<P>, V>& e, const context& ctx,
         kernels::strided<T> lse = {}) {
  const auto d = dims_of(e.lhs().operand());
  const typename chain<P>::held h(e.lhs().operand());
  const strided_operand<V> v(e.rhs());
  problem<T> p = describe<T, P>(h, v, d);
  p.o = o;
  p.lse = lse;
  if (!ctx.fused() || dims_size(d) == 0 || p.dv == 0) {
    kernels::attention_rows(p, ctx);
    return true;
  }
  kernels::flash_attention(p, ctx);
  ctx.count_fused_run();
  return true;
}

// dst of the attention's own shape, row-major; with lse, each row's log-sum-exp there, row-major in the
// shape without its last axis (the attention state, attnx/state.hpp).
template <class T, class P, class V>
bool run(T* dst, const matmul_expr<softmax_expr<P>, V>& e, const context& ctx, T* lse = nullptr) {
  constexpr std::size_t R = shape_of_t<matmul_expr<softmax_expr<P>, V>>::rank;
  const auto d = dims_of(e);
  dims_t<R> dl = d;  // the lse: the output's shape without its last axis, as rows of one element
  dl[R - 1] = 1;
  return run(contiguous_stack(dst, d), e, ctx, contiguous_stack(lse, dl));
}

// with_sinks(softmax(P) * V): the attention with its log-sum-exps (a scratch row per query when lse is not asked
// for), then each row's output and lse merged with the sink of its head (expr/sinks.hpp).
template <class T, class A, class Sk>
bool run(kernels::strided<T> o, const sinks_expr<A, Sk>& e, const context& ctx, kernels::strided<T> lse = {}) {
  using S = shape_of_t<A>;
  constexpr std::size_t R = S::rank;
  const auto d = dims_of(e);
  const std::size_t batch = R >= 3 ? d[0] : 1, heads = R == 4 ? d[1] : 1, lq = d[R - 2], dv = d[R - 1];
  storage<T, dyn> scratch(uninitialized, lse.data ? 0 : batch * heads * lq);
  if (!lse.data) {
    const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
    lse = {scratch.data(), sz(heads * lq), sz(lq), 1};
  }
  run(o, e.operand(), ctx, lse);
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t h = 0; h < heads; ++h) {
      const T sigma = e.sink(h);
      for (std::size_t i = 0; i < lq; ++i) {
        T& l = lse.matrix(b, h)[static_cast<std::ptrdiff_t>(i) * lse.row];
        const attnx::detail::sunk_row<T> m = attnx::detail::sink_merge(l, sigma);
        T* row = o.matrix(b, h) + static_cast<std::ptrdiff_t>(i) * o.row;
        for (std::size_t c = 0; c < dv; ++c) row[c] *= m.factor;
        l = m.lse;
      }
    }
  return true;
}
template <class T, class A, class Sk>
bool run(T* dst, const sinks_expr<A, Sk>& e, const context& ctx, T* lse = nullptr) {
  constexpr std::size_t R = shape_of_t<A>::rank;
  const auto d = dims_of(e);
  dims_t<R> dl = d;
  dl[R - 1] = 1;
  return run(contiguous_stack(dst, d), e, ctx, contiguous_stack(lse, dl));
}

// dst of merge_heads' shape, (B, L, H * dv) or (L, H * dv).
template <class T, class E>
bool run(T* dst, const merge_heads_expr<E>& m, const context& ctx) {
  using O = shape_of_t<E>;  // (B, H, L, dv) or (H, L, dv)
  constexpr std::size_t R = O::rank;
  const auto d = dims_of(m.operand());
  const std::size_t H = d[R - 3], L = d[R - 2], dv = d[R - 1];
  kernels::strided<T> o{dst, 0, 0, static_cast<std::ptrdiff_t>(H * dv)};
  if constexpr (R == 4) {
    o.batch = static_cast<std::ptrdiff_t>(L * H * dv);
    o.head = static_cast<std::ptrdiff_t>(dv);
  } else {
    o.batch = static_cast<std::ptrdiff_t>(dv);  // the kernel's batch axis walks the heads
  }
  return run(o, m.operand(), ctx);
}

// ---- why an expression is not fused: the first part the recogniser rejects ----------------------------
// chain_rejects<P>::why: nullptr when chain<P> matches, else the first node of P (from the softmax inwards) that
// does not, in words; rejects<E>::why the same for the whole expression.
template <class P>
struct chain_rejects;
template <class X>
struct chain_node_rejects {
  static constexpr const char* why = "a node between the softmax and Q * transpose(K) that is no score step (scale, "
                                     "temperature, negation, tanh, a mask, a bias)";
};
template <class P>
struct chain_rejects {
  static constexpr const char* why = chain<P>::value ? nullptr : chain_node_rejects<P>::why;
};
template <class Op, class A, class U>
  requires(std::is_same_v<Op, ops::multiplies> || std::is_same_v<Op, ops::divides>)
struct chain_node_rejects<binary_expr<Op, A, scalar<U>>> : chain_rejects<A> {};
template <class A>
struct chain_node_rejects<unary_expr<ops::negate, A>> : chain_rejects<A> {};
template <class A>
struct chain_node_rejects<unary_expr<ops::tanh, A>> : chain_rejects<A> {};
template <class Op, class A>
struct chain_node_rejects<unary_expr<Op, A>> : chain_rejects<A> {};
template <class Op, class A, class P, bool First>
struct chain_node_rejects<position_op_expr<Op, A, P, First>> : chain_rejects<A> {};
template <class F, class A>
struct chain_node_rejects<score_map_expr<F, A>> : chain_rejects<A> {};
template <class A, class M>
struct chain_node_rejects<binary_expr<ops::plus, A, M>> : chain_rejects<A> {};
template <class A, class M>
struct chain_node_rejects<binary_expr<ops::minus, A, M>> {
  static constexpr const char* why = "scores minus a tensor (a bias is added: S + (-M), or additive(-M))";
};
template <class M>
inline constexpr bool is_number_operand = false;
template <class U>
inline constexpr bool is_number_operand<scalar<U>> = true;
template <class A, class M>
  requires(!is_number_operand<M>)
struct chain_node_rejects<binary_expr<ops::multiplies, A, M>> {
  static constexpr const char* why = "scores multiplied by a tensor (hadamard): only numbers scale them";
};
template <class A, class Kind>
struct chain_node_rejects<masked_expr<A, Kind>> {
  static constexpr const char* why =
      detail::kernel_mask_kind<Kind> ? chain_rejects<A>::why : "a mask kind the kernel does not take";
};
template <class Sim, class Q, class K>
struct chain_node_rejects<pairwise_expr<Sim, Q, K>> {
  static constexpr const char* why =
      "a similarity other than the dot product (cosine, rbf and additive scores run row by row)";
};
template <class Q, class B>
struct chain_node_rejects<matmul_expr<Q, B>> {
  static constexpr const char* why = "a core that is not Q * transpose(K)";
};

// Why the whole expression E (not matching `pattern`) is rejected: by its outermost node.
template <class E>
struct rejects_node {
  static constexpr const char* why = "the expression is not softmax(P) * V (attention_weights or a softmax alone is "
                                     "computed row by row, the weights being asked for)";
};
// nullptr when E fuses, else rejects_node<E>::why.
template <class E>
struct rejects {
  static constexpr const char* why = pattern<E>::value ? nullptr : rejects_node<E>::why;
};
template <class T, class E>
struct rejects_node<cast_expr<T, E>> : rejects<E> {};
template <class E, class Sk>
struct rejects_node<sinks_expr<E, Sk>> : rejects<E> {};
template <class E>
struct rejects_node<merge_heads_expr<E>> {
  static constexpr const char* why = pattern<E>::value ? "merge_heads of attention with no heads axis" : rejects<E>::why;
};
template <class P, class V>
struct rejects_node<matmul_expr<softmax_expr<P>, V>> {
  static constexpr const char* why = []() -> const char* {
    using S = shape_of_t<P>;
    using elem_t = value_t<P>;
    if constexpr (chain_rejects<P>::why != nullptr) return chain_rejects<P>::why;
    else if constexpr (!(std::is_same_v<elem_t, float> || std::is_same_v<elem_t, double>))
      return "the element type is not float or double";
    else if constexpr (!(S::rank >= 2 && S::rank <= 4))
      return "scores of rank 5 or more (the kernel has batch and heads axes only)";
    else if constexpr (chain<P>::steps > kernels::max_score_steps)
      return "more than 8 score steps";
    else
      return "Q, K and V's ranks, element types or head groups do not fit the kernel's operands";
  }();
};
}  // namespace fused

// Whether evaluating E at run time takes the fused attention kernel (with the fused path on, the default).
template <class E>
inline constexpr bool is_fused_v = fused::pattern<std::remove_cvref_t<E>>::value;

// Why E does not take the fused kernel: the first part the recogniser rejects, in words ("" when it fuses), e.g.
//   static_assert(attnx::why_not_fused_v<decltype(e)> == std::string_view{});   // or print it
// ("scores minus a tensor (a bias is added: S + (-M), or additive(-M))" for softmax(S - M) * V).
template <class E>
inline constexpr std::string_view why_not_fused_v = [] {
  const char* r = fused::rejects<std::remove_cvref_t<E>>::why;
  return r ? std::string_view(r) : std::string_view();
}();

// An expression that runs as the fused attention kernel (is_fused_v).
template <class E>
concept fused_attention = is_fused_v<E>;

}  // namespace attnx
