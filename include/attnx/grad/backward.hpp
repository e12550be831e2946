// attnx: reverse-mode differentiation of expressions, derived from the expression's type.
//
//   auto [dWq, dWk, dWv] = grad(loss, wrt(W_Q, W_K, W_V));      // the gradient of the sum of loss's elements
//   auto [dX] = backward(y, dy, wrt(X));                          // dy weighted: the vector-Jacobian product
//
// There is no tape. backward walks the expression's type from the root: each node type has one rule (below)
// that turns the gradient of its result into the gradients of its operands, written as attnx expressions
// (hadamard(g, exp(a)), g * transpose(B), ...) and evaluated by the same loops and kernels as any other
// expression, into one tensor per operand; a leaf named in wrt() adds what reaches it. Leaves are matched by
// their memory (a named tensor, or a view over the same elements), so a tensor used twice gets both paths.
// Operands that hold no tensor or view (numbers, temporaries the expression owns) are not walked. A node without
// a derivative (a comparison, a bool mask read as a value, map's function, pairwise with a user's similarity) is one
// compile error naming it.
//
// What a rule keeps: the forward values it needs are recomputed from the operands (softmax's P, a product's
// other operand), one node at a time; memory is a gradient tensor per node on the path, never a tape.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/attention.hpp"
#include "attnx/core/expression.hpp"
#include "attnx/eval/assign.hpp"
#include "attnx/eval/fused.hpp"
#include "attnx/eval/strided_operand.hpp"
#include "attnx/expr/cast.hpp"
#include "attnx/expr/elementwise.hpp"
#include "attnx/expr/evaluated.hpp"
#include "attnx/expr/heads.hpp"
#include "attnx/expr/map.hpp"
#include "attnx/expr/mask.hpp"
#include "attnx/expr/matmul.hpp"
#include "attnx/expr/norm.hpp"
#include "attnx/expr/pairwise.hpp"
#include "attnx/expr/position.hpp"
#include "attnx/expr/reduce.hpp"
#include "attnx/expr/select.hpp"
#include "attnx/expr/slice.hpp"
#include "attnx/kernels/flash_attention_backward.hpp"
#include "attnx/math/constexpr_math.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/tensor/tensor.hpp"
#include "attnx/tensor/view.hpp"
#include "attnx/util/algorithm.hpp"

namespace attnx {

namespace detail::ad {
template <class L>
inline constexpr bool is_view = false;
template <class T, class S>
inline constexpr bool is_view<basic_view<T, S>> = true;
// What wrt() takes: a tensor or view of floating-point elements.
template <class L>
inline constexpr bool is_leaf = (is_tensor_v<L> || is_view<L>)&&std::is_floating_point_v<value_t<L>>;
template <class... L>
constexpr std::size_t first_bad_leaf() {
  std::size_t i = 0;
  bool found = false;
  ((found = found || !(std::is_lvalue_reference_v<L> && is_leaf<std::remove_cvref_t<L>>), i += found ? 0 : 1), ...);
  return i;
}
}  // namespace detail::ad

// wrt(a, b, ...): the leaves a gradient is taken with respect to, named tensors or views of floating-point elements
// (lvalues: the expression reads them, and they must outlive the call). Holds their addresses.
template <class... L>
struct wrt_list {
  std::tuple<const L*...> leaves;
};
namespace detail::ad {
// What a refused argument becomes: a tensor of its shape (of no shape, for a foreign type), so that the gradients keep
// their count and shapes (one error).
template <class L, bool = expression<L>>
struct placeholder {
  using type = basic_tensor<float, shape<>>;
};
template <class L>
struct placeholder<L, true> {
  using type = basic_tensor<value_t<L>, shape_of_t<L>>;
};
template <class L>
using leaf_or_placeholder = std::conditional_t<std::is_lvalue_reference_v<L> && is_leaf<std::remove_cvref_t<L>>,
                                               std::remove_cvref_t<L>, typename placeholder<std::remove_cvref_t<L>>::type>;
}  // namespace detail::ad
template <class... L>
constexpr auto wrt(L&&... l) {
  constexpr std::size_t bad = detail::ad::first_bad_leaf<L...>();
  if constexpr (bad < sizeof...(L)) {
    using Arg = std::remove_cvref_t<detail::type_at_t<bad, L...>>;
    static_assert(error::holds<error::wrt_needs_named_tensors<error::argument_position<bad + 1>, error::argument_type<Arg>>>,
                  "attnx: wrt(...): each argument must be a named tensor or view of floating-point elements (an lvalue "
                  "that the expression reads), not an expression or a temporary");
    return wrt_list<detail::ad::leaf_or_placeholder<L>...>{};
  } else {
    return wrt_list<std::remove_cvref_t<L>...>{{&l...}};
  }
}

namespace detail::ad {

// Whether E holds a tensor or view (by reference or as a view) of element type T that a wrt() leaf may be.
template <class E, class T>
struct may_reach;
template <class T, class... P>
constexpr bool any_operand(boost::hana::tuple<P...>*) {
  return (may_reach<std::remove_cvref_t<std::remove_pointer_t<P>>, T>::value || ...);
}
template <class E, class T>
struct may_reach {
  static constexpr bool value = [] {
    if constexpr (requires(const E& e) { e.operands(); }) {
      using ops = decltype(std::declval<const E&>().operands());
      return any_operand<T>(static_cast<ops*>(nullptr));
    } else {
      return false;
    }
  }();
};
template <class U, class S, class T>
struct may_reach<tensor_ref<U, S>, T> : std::bool_constant<std::is_same_v<U, T>> {};
template <class U, class S, class T>
struct may_reach<basic_view<U, S>, T> : std::bool_constant<std::is_same_v<std::remove_const_t<U>, T>> {};

// The leaves and their gradients (zero until a path reaches them).
template <class... L>
struct accumulators {
  std::tuple<const L*...> leaves;
  std::tuple<result_t<L>...> grads;  // (uninitialised until touched: the first gradient that covers one is copied)
  std::array<bool, sizeof...(L)> touched{};
  template <class E>
  static constexpr bool reaches = (may_reach<E, value_t<L>>::value || ...);
};

template <class T, class S>
constexpr basic_tensor<T, S> zeros(const dims_t<S::rank>& d) {
  basic_tensor<T, S> t(d, uninitialized);
  alg::fill_n(t.data(), t.numel(), T(0));
  return t;
}

// e, evaluated into a tensor of shape S (the operand's: its axis names and static extents).
template <class S, class E>
constexpr basic_tensor<value_t<E>, S> as(const E& e) {
  return basic_tensor<value_t<E>, S>(e);
}

// g (a broadcast result's gradient) summed over the axes that broadcasting stretched, to the operand's shape SA
// and extents da: right-aligned, a missing or static-1 axis of the operand is summed over, in row-major order.
template <class SA, class T, class SR>
constexpr basic_tensor<T, SA> sum_to(const basic_tensor<T, SR>& g, const dims_t<SA::rank>& da) {
  constexpr std::size_t R = SR::rank, RA = SA::rank;
  const auto dr = g.dims();
  basic_tensor<T, SA> out = zeros<T, SA>(da);
  // The common case, a bias: the operand's axes are g's last ones, any before them 1 or missing. Then out is the sum
  // of g's rows of out.numel() elements, in the order of the general loop below (the same bits).
  std::size_t same = 0;
  while (same < RA && same < R && da[RA - 1 - same] == dr[R - 1 - same]) ++same;
  bool rows_case = true;
  for (std::size_t k = 0; k + same < RA; ++k) rows_case = rows_case && da[k] == 1;
  if (rows_case) {
    const std::size_t inner = out.numel(), n = g.numel();
    T* o = out.data();
    const T* x = g.data();
    for (std::size_t r = 0; inner != 0 && r < n / inner; ++r, x += inner)
      for (std::size_t j = 0; j < inner; ++j) o[j] += x[j];
    return out;
  }
  dims_t<RA> st{};
  std::size_t acc = 1;
  for (std::size_t k = RA; k-- > 0;) st[k] = acc, acc *= da[k];
  const std::size_t n = g.numel();
  for (std::size_t flat = 0; flat < n; ++flat) {
    std::size_t rem = flat, off = 0;
    for (std::size_t i = R; i-- > 0;) {
      const std::size_t idx = rem % dr[i];
      rem /= dr[i];
      if (i + RA >= R && da[i + RA - R] != 1) off += idx * st[i + RA - R];
    }
    out.data()[off] += g.data()[flat];
  }
  return out;
}

template <class E>
struct rule;

// The gradient g of e's result (a tensor of e's shape) passed on to e's operands.
template <class E, class G, class Acc>
constexpr void backprop(const E& e, const G& g, Acc& acc) {
  if constexpr (Acc::template reaches<E>) rule<E>::apply(e, g, acc);
}
// g for operand a: ge (an expression of a's extents, or broadcast to them) passed on as a tensor of a's shape: as it
// is when it is one, evaluated into one when its extents are a's, else evaluated and summed over the broadcast axes.
template <class A, class GE, class Acc>
constexpr void pass(const A& a, const GE& ge, Acc& acc) {
  if constexpr (Acc::template reaches<A>) {
    using S = shape_of_t<A>;
    using SG = shape_of_t<GE>;
    if constexpr (std::is_same_v<std::remove_cvref_t<GE>, basic_tensor<value_t<GE>, S>>) {
      backprop(a, ge, acc);
    } else if constexpr (std::is_same_v<SG, S>) {
      backprop(a, as<S>(ge), acc);
    } else {
      if constexpr (may_equal_shapes<SG, S>()) {
        if (dims_of(ge) == dims_of(a)) return backprop(a, as<S>(ge), acc);
      }
      backprop(a, sum_to<S>(basic_tensor<value_t<GE>, SG>(ge), dims_of(a)), acc);
    }
  }
}

// A node without a derivative: one error naming it.
template <class E>
constexpr void no_derivative() {
  static_assert(error::holds<error::no_derivative<error::node_type<E>>>,
                "attnx: grad: this node has no derivative (comparisons, bool masks read as values, map's function and "
                "a user's pairwise similarity have none)");
}
template <class E>
struct rule {
  template <class G, class Acc>
  static constexpr void apply(const E&, const G&, Acc&) { no_derivative<E>(); }
};

// Leaves: a named tensor or a view adds g where its memory is a wrt() leaf's (the same first element and count;
// at run time also any contiguous part of one, e.g. a view of a tensor's rows).
template <class U, class L, class G>
constexpr void add_at_leaf(const U* data, std::size_t count, const L* leaf, result_t<L>& grad, bool& touched, const G& g) {
  if constexpr (std::is_same_v<value_t<L>, U>) {
    if (leaf == nullptr) return;
    const auto* base = leaf->data();
    const std::size_t n = grad.numel();
    std::size_t off = n;
    if (std::is_constant_evaluated()) {
      if (base == data && count <= n) off = 0;
    } else {
      const auto a = reinterpret_cast<std::uintptr_t>(data), b = reinterpret_cast<std::uintptr_t>(base);
      if (a >= b && a + count * sizeof(U) <= b + n * sizeof(U) && (a - b) % sizeof(U) == 0) off = (a - b) / sizeof(U);
    }
    if (off == n) return;
    if (!touched) {
      touched = true;
      if (off == 0 && count == n) {
        alg::copy_n(g.data(), n, grad.data());
        return;
      }
      alg::fill_n(grad.data(), n, value_t<L>(0));
    }
    for (std::size_t i = 0; i < count; ++i) grad.data()[off + i] += g.data()[i];
  }
}
template <class E, class G, class Acc>
constexpr void at_leaf(const E& e, const G& g, Acc& acc) {
  using U = value_t<E>;
  const U* data = e.data();
  const std::size_t count = dims_size(dims_of(e));
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (add_at_leaf(data, count, std::get<I>(acc.leaves), std::get<I>(acc.grads), acc.touched[I], g), ...);
  }(std::make_index_sequence<std::tuple_size_v<decltype(acc.leaves)>>{});
}
template <class U, class S>
struct rule<tensor_ref<U, S>> {
  template <class G, class Acc>
  static constexpr void apply(const tensor_ref<U, S>& e, const G& g, Acc& acc) { at_leaf(e, g, acc); }
};
template <class U, class S>
struct rule<basic_view<U, S>> {
  template <class G, class Acc>
  static constexpr void apply(const basic_view<U, S>& e, const G& g, Acc& acc) { at_leaf(e, g, acc); }
};

// The element-wise derivatives of the activations, f'(a), as functions of a (PyTorch's; 0 at a kink: relu at 0,
// abs at 0).
struct d_relu { template <class A> constexpr A operator()(A a) const { return a > A(0) ? A(1) : A(0); } };
struct d_abs { template <class A> constexpr A operator()(A a) const { return a > A(0) ? A(1) : a < A(0) ? A(-1) : a; } };
struct d_gelu {  // Phi(a) + a phi(a)
  template <class A> constexpr A operator()(A a) const {
    if (a == -std::numeric_limits<A>::infinity()) return A(0);
    if (a == std::numeric_limits<A>::infinity()) return A(1);
    const A cdf = A(0.5) * (A(1) + math::erf(a * A(0.70710678118654752440)));
    return cdf + a * A(0.39894228040143267794) * math::exp(A(-0.5) * a * a);
  }
};
using ops::d_silu;
using ops::d_gelu_tanh;

template <class Op, class A>
struct rule<unary_expr<Op, A>> {
  using E = unary_expr<Op, A>;
  using T = value_t<A>;
  template <class G, class Acc>
  static constexpr void apply(const E& e, const G& g, Acc& acc) {
    const A& a = e.operand();
    if constexpr (std::is_same_v<Op, ops::negate>) pass(a, -g, acc);
    else if constexpr (std::is_same_v<Op, ops::exp>) pass(a, hadamard(g, e), acc);
    else if constexpr (std::is_same_v<Op, ops::log>) pass(a, g / a, acc);
    else if constexpr (std::is_same_v<Op, ops::tanh>) pass(a, hadamard(g, T(1) - square(e)), acc);
    else if constexpr (std::is_same_v<Op, ops::sqrt>) pass(a, g / (e * T(2)), acc);
    else if constexpr (std::is_same_v<Op, ops::square>) pass(a, hadamard(g, a * T(2)), acc);
    else if constexpr (std::is_same_v<Op, ops::abs>) pass(a, hadamard(g, map(d_abs{}, a)), acc);
    else if constexpr (std::is_same_v<Op, ops::relu>) pass(a, hadamard(g, map(d_relu{}, a)), acc);
    else if constexpr (std::is_same_v<Op, ops::sigmoid>) pass(a, hadamard(g, hadamard(e, T(1) - e)), acc);
    else if constexpr (std::is_same_v<Op, ops::silu>) pass(a, hadamard(g, map(d_silu{}, a)), acc);
    else if constexpr (std::is_same_v<Op, ops::gelu>) pass(a, hadamard(g, map(d_gelu{}, a)), acc);
    else if constexpr (std::is_same_v<Op, ops::gelu_tanh>) pass(a, hadamard(g, map(d_gelu_tanh{}, a)), acc);
    else no_derivative<E>();  // logical_not: bool
  }
};

template <class Op, class A, class B>
struct rule<binary_expr<Op, A, B>> {
  using E = binary_expr<Op, A, B>;
  template <class G, class Acc>
  static constexpr void apply(const E& e, const G& g, Acc& acc) {
    using T = value_t<E>;
    const A& a = e.lhs();
    const B& b = e.rhs();
    if constexpr (std::is_same_v<T, bool>) {
      no_derivative<E>();  // a comparison
    } else if constexpr (std::is_same_v<Op, ops::plus>) {
      pass(a, g, acc), pass(b, g, acc);
    } else if constexpr (std::is_same_v<Op, ops::minus>) {
      pass(a, g, acc), pass(b, -g, acc);
    } else if constexpr (std::is_same_v<Op, ops::multiplies>) {
      pass(a, hadamard(g, b), acc), pass(b, hadamard(g, a), acc);
    } else if constexpr (std::is_same_v<Op, ops::divides>) {
      pass(a, g / b, acc), pass(b, -(hadamard(g, a) / square(b)), acc);
    } else if constexpr (std::is_same_v<Op, ops::maximum> || std::is_same_v<Op, ops::minimum>) {
      // PyTorch's: the larger (smaller) operand takes g, a tie splits it in halves, NaN in either gives both g.
      constexpr bool max = std::is_same_v<Op, ops::maximum>;
      const auto tie = where(equal(a, b), g * T(0.5), g);
      if constexpr (max) pass(a, where(a < b, T(0), tie), acc), pass(b, where(a > b, T(0), tie), acc);
      else pass(a, where(a > b, T(0), tie), acc), pass(b, where(a < b, T(0), tie), acc);
    } else {
      no_derivative<E>();
    }
  }
};

template <class A, class B>
struct matmul_rule {
  template <class G, class Acc>
  static constexpr void apply(const matmul_expr<A, B>& e, const G& g, Acc& acc) {
    const A& a = e.lhs();
    const B& b = e.rhs();
    using SA = shape_of_t<A>;
    using SB = shape_of_t<B>;
    using T = value_t<G>;
    pass(a, g * transpose(b), acc);
    if constexpr (Acc::template reaches<B>) {
      if constexpr (SB::rank == 2 && SA::rank > 2) {
        // One B for every batch item: the items' A^T g summed, as one product over the rows of all items.
        const dense_operand<A> av(a);  // (a leaf in memory is read in place)
        const auto da = dims_of(a);
        const std::size_t rows = dims_size(da) / da[SA::rank - 1];
        using SF = shape<axis<anon, dyn>, typename SA::template axis_t<SA::rank - 1>>;
        using SG = shape<axis<anon, dyn>, typename shape_of_t<G>::template axis_t<shape_of_t<G>::rank - 1>>;
        const basic_view<const T, SF> af(av.data(), rows);
        const basic_view<const T, SG> gf(g.data(), rows);
        backprop(b, as<SB>(transpose(af) * gf), acc);
      } else {
        pass(b, transpose(a) * g, acc);
      }
    }
  }
};

template <class A, class B>
struct rule<matmul_expr<A, B>> : matmul_rule<A, B> {};

// dot_scores(Q, K, s) = s Q K^T: dQ = s g K, dK = s g^T Q (summed over the batch where K is shared).
template <class Q, class K>
struct rule<pairwise_expr<similarity::dot, Q, K>> {
  template <class G, class Acc>
  static constexpr void apply(const pairwise_expr<similarity::dot, Q, K>& e, const G& g, Acc& acc) {
    using T = value_t<G>;
    const T s = static_cast<T>(e.similarity().scale);
    pass(e.queries(), (g * s) * e.keys(), acc);
    pass(e.keys(), transpose(g * s) * e.queries(), acc);
  }
};

// Attention, softmax(P) * V where the forward fuses it (is_fused_v): at run time, with the context's fused path on,
// the fused backward (kernels/flash_attention_backward.hpp) from the forward's O and lse, recomputed here: dQ, dK and
// dV without the L x L scores, passed on to Q, K and V (a repeat_heads operand's gradient summed over its repeated
// heads inside the kernel). Where the kernel declines (16-bit K/V, a row whose lse is NaN or +inf), where a bias in
// the scores is itself differentiated, and in a constant evaluation, the rules above, node by node.
template <class P, class V>
  requires fused::pattern<matmul_expr<softmax_expr<P>, V>>::value
struct rule<matmul_expr<softmax_expr<P>, V>> {
  using E = matmul_expr<softmax_expr<P>, V>;
  template <class G, class Acc>
  static constexpr void apply(const E& e, const G& g, Acc& acc) {
    if constexpr (!fused::chain<P>::functions) {  // (the kernel's backward has no tile_function step)
      if (!std::is_constant_evaluated() && fused_backward(e, g, acc)) return;
    }
    matmul_rule<softmax_expr<P>, V>::apply(e, g, acc);
  }

  // The core of the score chain: Q * transpose(K) or dot_scores(Q, K).
  template <class Q, class K>
  static const auto& core(const matmul_expr<Q, transpose_expr<K>>& x) { return x; }
  template <class Q, class K>
  static const auto& core(const pairwise_expr<similarity::dot, Q, K>& x) { return x; }
  template <class Op, class A, class U>
  static const auto& core(const binary_expr<Op, A, U>& x) { return core(x.lhs()); }
  template <class A>
  static const auto& core(const unary_expr<ops::negate, A>& x) { return core(x.operand()); }
  template <class A>
  static const auto& core(const unary_expr<ops::tanh, A>& x) { return core(x.operand()); }
  template <class A, class Kind>
  static const auto& core(const masked_expr<A, Kind>& x) { return core(x.operand()); }
  template <class C>
  static const auto& queries(const C& c) {
    if constexpr (requires { c.queries(); }) return c.queries();
    else return c.lhs();
  }
  template <class C>
  static const auto& keys(const C& c) {
    if constexpr (requires { c.keys(); }) return c.keys();
    else return c.rhs().operand();
  }
  // What K's (V's) gradient goes to: the operand of repeat_heads, with the K/V heads, or the operand itself.
  template <class X>
  static const auto& kv_target(const X& x) {
    if constexpr (strided_operand<X>::group > 1) return x.operand();
    else return x;
  }
  // Whether a bias of the score chain (additive(M): scores + M) is differentiated: its gradient is the L x L dS itself, which the
  // fused backward never forms; such an attention takes the rules. A bias in memory is checked against the leaves'
  // memory; an expression that may reach one counts as differentiated.
  template <class Acc, class M>
  static bool bias_is_leaf(const M& m, const Acc& acc) {
    if constexpr (!Acc::template reaches<M>) {
      return false;
    } else if constexpr (requires { m.data(); }) {
      using U = std::remove_const_t<std::remove_pointer_t<decltype(m.data())>>;
      const auto a = reinterpret_cast<std::uintptr_t>(m.data());
      const std::size_t n = dims_size(dims_of(m)) * sizeof(U);
      bool hit = false;
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        ((hit = hit || [&](const auto* leaf) {
           if (leaf == nullptr) return false;
           const auto b = reinterpret_cast<std::uintptr_t>(leaf->data());
           return a < b + leaf->numel() * sizeof(value_t<std::remove_cvref_t<decltype(*leaf)>>) && b < a + n;
         }(std::get<I>(acc.leaves))),
         ...);
      }(std::make_index_sequence<std::tuple_size_v<decltype(acc.leaves)>>{});
      return hit;
    } else {
      return true;
    }
  }
  template <class Acc, class A, class Kind>
  static bool biased(const masked_expr<A, Kind>& x, const Acc& acc) { return biased(x.operand(), acc); }
  template <class Acc, class Op, class A, class U>  // scores + M (additive(M)), or a factor (a number: not reached)
  static bool biased(const binary_expr<Op, A, U>& x, const Acc& acc) {
    return bias_is_leaf(x.rhs(), acc) || biased(x.lhs(), acc);
  }
  template <class Acc, class A>
  static bool biased(const unary_expr<ops::negate, A>& x, const Acc& acc) { return biased(x.operand(), acc); }
  template <class Acc, class A>
  static bool biased(const unary_expr<ops::tanh, A>& x, const Acc& acc) { return biased(x.operand(), acc); }
  template <class Acc, class X>
  static bool biased(const X&, const Acc&) { return false; }  // the core
  // (sunk(o, lse, d): called after the forward kernel, before the backward one; with_sinks merges its sinks there)
  struct no_sinks {
    template <class T, class D>
    void operator()(T*, T*, const D&) const {}
  };
  using T = value_t<E>;
  using lse_tensor = basic_tensor<T, shape<axis<anon, dyn>>>;
  // Whether the kernel may run for e at all (at run time, with the context's fused path on, not empty).
  static bool kernel_applies(const E& e) {
    return current_context().fused() && dims_size(dims_of(e.lhs().operand())) != 0;
  }
  // The lse's extents: one per output row.
  static auto lse_dims(const result_t<E>& o) {
    auto dl = o.dims();
    dl[shape_of_t<P>::rank - 1] = 1;
    return dl;
  }
  // o = e and its row log-sum-exps, by the forward kernel (kernel_applies(e) holds).
  static void forward(const E& e, result_t<E>& o, lse_tensor& lse) {
    const typename fused::chain<P>::held h(e.lhs().operand());
    const strided_operand<V> v(e.rhs());
    kernels::attention_problem<T> p = fused::describe<T, P>(h, v, dims_of(e.lhs().operand()));
    o = result_t<E>(dims_of(e), uninitialized);
    const auto dl = lse_dims(o);
    lse = lse_tensor(uninitialized, dims_size(dl));
    p.o = fused::contiguous_stack(o.data(), o.dims());
    p.lse = fused::contiguous_stack(lse.data(), dl);
    kernels::flash_attention(p, current_context());
  }
  template <class G, class Acc, class Sunk = no_sinks>
  static bool fused_backward(const E& e, const G& g, Acc& acc, const Sunk& sunk = {}) {
    if (biased(e.lhs().operand(), acc) || !kernel_applies(e)) return false;
    result_t<E> o;
    lse_tensor lse;
    forward(e, o, lse);
    sunk(o.data(), lse.data(), o.dims());
    return from_saved(e, g, acc, o, lse);
  }
  // The backward kernel from the forward's o and lse (computed here, or saved by attention_forward).
  template <class G, class Acc>
  static bool from_saved(const E& e, const G& g, Acc& acc, const result_t<E>& o, const lse_tensor& lse) {
    if (biased(e.lhs().operand(), acc)) return false;
    const context& ctx = current_context();
    const auto& c = core(e.lhs().operand());
    const auto& qx = queries(c);
    const auto& kx = kv_target(keys(c));
    const auto& vx = kv_target(e.rhs());
    using QX = std::remove_cvref_t<decltype(qx)>;
    using KX = std::remove_cvref_t<decltype(kx)>;
    using VX = std::remove_cvref_t<decltype(vx)>;
    const typename fused::chain<P>::held h(e.lhs().operand());
    const strided_operand<V> v(e.rhs());
    kernels::attention_problem<T> p = fused::describe<T, P>(h, v, dims_of(e.lhs().operand()));
    const auto dl = lse_dims(o);
    basic_tensor<T, shape_of_t<QX>> dq(dims_of(qx), uninitialized);
    basic_tensor<T, shape_of_t<KX>> dk(dims_of(kx), uninitialized);
    basic_tensor<T, shape_of_t<VX>> dv(dims_of(vx), uninitialized);
    kernels::attention_gradients<T> gr;
    gr.o = fused::contiguous_stack(o.data(), o.dims());
    gr.d_o = fused::contiguous_stack(static_cast<const T*>(g.data()), g.dims());
    gr.lse = fused::contiguous_stack(lse.data(), dl);
    gr.dq = fused::contiguous_stack(dq.data(), dq.dims());
    gr.dk = fused::contiguous_stack(dk.data(), dk.dims());
    gr.dv = fused::contiguous_stack(dv.data(), dv.dims());
    if (!kernels::flash_attention_backward(p, gr, ctx)) return false;
    ctx.count_fused_run();
    pass(qx, dq, acc);
    pass(kx, dk, acc);
    pass(vx, dv, acc);
    return true;
  }
};

template <class A>
struct rule<transpose_expr<A>> {
  template <class G, class Acc>
  static constexpr void apply(const transpose_expr<A>& e, const G& g, Acc& acc) { pass(e.operand(), transpose(g), acc); }
};

// softmax: dS_j = P_j (g_j - sum_k P_k g_k), computed per row about the row's largest weight P_m, as
// dS_j = P_j ((g_j - g_m) - sum_{k != m} P_k (g_k - g_m)) (the same, as the weights sum to 1): a saturated row
// (P_m = 1 - 1e-15) keeps its small gradients to full precision, where g_j - sum_k P_k g_k would cancel. A fully
// masked row (P = 0) gets 0; a NaN row NaN.
template <class A>
struct rule<softmax_expr<A>> {
  template <class G, class Acc>
  static constexpr void apply(const softmax_expr<A>& e, const G& g, Acc& acc) {
    using T = value_t<A>;
    result_t<softmax_expr<A>> p(e);
    const auto d = p.dims();
    const std::size_t n = d[shape_of_t<A>::rank - 1];
    const std::size_t rows = n == 0 ? 0 : p.numel() / n;
    for (std::size_t r = 0; r < rows; ++r) {
      T* pr = p.data() + r * n;
      const T* gr = g.data() + r * n;
      std::size_t m = 0;
      for (std::size_t j = 1; j < n; ++j) m = pr[j] > pr[m] ? j : m;
      T c = 0;
      for (std::size_t k = 0; k < n; ++k) c += k == m ? T(0) : pr[k] * (gr[k] - gr[m]);
      for (std::size_t j = 0; j < n; ++j) pr[j] *= (gr[j] - gr[m]) - c;  // (p becomes dS in place)
    }
    backprop(e.operand(), p, acc);  // (softmax's shape is its operand's)
  }
};
// log_softmax: g - exp(y) rowsum(g).
template <class A>
struct rule<log_softmax_expr<A>> {
  template <class G, class Acc>
  static constexpr void apply(const log_softmax_expr<A>& e, const G& g, Acc& acc) {
    const result_t<log_softmax_expr<A>> y(e);
    pass(e.operand(), g - hadamard(exp(y), row_sum(g)), acc);
  }
};

// row_sum: g repeated along the row; row_max: g to the row's maxima, shared equally by ties (torch.amax's rule; a
// row whose maximum is NaN passes nothing on).
template <class Op, class A>
struct rule<reduce_expr<Op, A>> {
  template <class G, class Acc>
  static constexpr void apply(const reduce_expr<Op, A>& e, const G& g, Acc& acc) {
    using T = value_t<A>;
    using S = shape_of_t<A>;
    const A& a = e.operand();
    const auto d = dims_of(a);
    const std::size_t n = d[S::rank - 1];
    const std::size_t rows = n == 0 ? 0 : dims_size(d) / n;
    basic_tensor<T, S> ga(d, uninitialized);
    if constexpr (std::is_same_v<Op, ops::row_sum>) {
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t j = 0; j < n; ++j) ga.data()[r * n + j] = g.data()[r];
    } else {
      const result_t<A> av(a);
      for (std::size_t r = 0; r < rows; ++r) {
        const T* x = av.data() + r * n;
        T m = ops::row_max::init<T>();
        for (std::size_t j = 0; j < n; ++j) m = ops::row_max{}(m, x[j]);
        std::size_t ties = 0;
        for (std::size_t j = 0; j < n; ++j) ties += x[j] == m;
        for (std::size_t j = 0; j < n; ++j) ga.data()[r * n + j] = x[j] == m ? g.data()[r] / static_cast<T>(ties) : T(0);
      }
    }
    backprop(a, ga, acc);
  }
};

// A mask: g where the score is kept, 0 where it is blocked (the same mask over the gradient, filled with 0).
template <class A, class Kind>
struct rule<masked_expr<A, Kind>> {
  template <class G, class Acc>
  static constexpr void apply(const masked_expr<A, Kind>& e, const G& g, Acc& acc) {
    using T = value_t<A>;
    pass(e.operand(), masked_expr<tensor_ref<T, shape_of_t<G>>, Kind>(tensor_ref<T, shape_of_t<G>>(g), e.kind(), T(0)), acc);
  }
};

// Attention sinks (expr/sinks.hpp): O' = f O, f_i = e^(lse_i) / (e^(lse_i) + e^(sigma_h)), lse' the merged log-sum-exp.
// With D'_i = sum_c g_ic O'_ic and the sink's weight w_i = 1 - f_i: dS_ij = P'_ij (dP'_ij - D'_i) (P' = e^(s - lse'),
// dP' = g v_j) and d sigma_h = -sum_i w_i D'_i over head h's rows. Fused: the backward kernel given O' and lse' computes
// exactly that. Rules: softmax(P) V takes f g (the same dS but for D' in place of f sum_c g O), and P the difference
// w_i D'_i P_ij (with P the weights: L x L, as the rules hold them anyway).
template <class P, class V, class Sk>
struct rule<sinks_expr<matmul_expr<softmax_expr<P>, V>, Sk>> {
  using A = matmul_expr<softmax_expr<P>, V>;
  using E = sinks_expr<A, Sk>;
  static constexpr bool leaf_sinks = !requires(const Sk& s) { s.value; };
  template <class G, class Acc>
  static constexpr void apply(const E& e, const G& g, Acc& acc) {
    using T = value_t<E>;
    using S = shape_of_t<A>;
    constexpr std::size_t R = S::rank;
    const auto d = dims_of(e);
    const std::size_t dv = d[R - 1], rows = dims_rows(d), lq = d[R - 2], heads = e.heads();
    const auto head_of = [&](std::size_t r) { return R >= 4 ? (r / lq) % heads : std::size_t{0}; };
    using vec = basic_tensor<T, shape<axis<anon, dyn>>>;
    vec dsigma(heads);
    const auto add_sink_grads = [&](std::size_t r, T w, const T* o_row) {  // d sigma_h -= w_r D'_r
      T dd = 0;
      for (std::size_t c = 0; c < dv; ++c) dd += g.data()[r * dv + c] * o_row[c];
      dsigma.data()[head_of(r)] -= w * dd;
    };
    bool done = false;
    if constexpr (fused::pattern<A>::value && !fused::chain<P>::functions) {
      if (!std::is_constant_evaluated()) {
        done = rule<A>::fused_backward(e.operand(), g, acc, [&](T* o, T* lse, const auto&) {
          for (std::size_t r = 0; r < rows; ++r) {
            const detail::sunk_row<T> m = detail::sink_merge(lse[r], e.sink(head_of(r)));
            for (std::size_t c = 0; c < dv; ++c) o[r * dv + c] *= m.factor;
            lse[r] = m.lse;
            add_sink_grads(r, m.sink, o + r * dv);
          }
        });
      }
    }
    if (!done) {
      for (std::size_t h = 0; h < heads; ++h) dsigma.data()[h] = T(0);  // (a kernel that declined after the forward)
      const auto& scores = e.operand().lhs().operand();
      const result_t<A> o = e.operand();
      const result_t<softmax_expr<P>> w = e.operand().lhs();
      evaluator<P> pe(scores);
      const std::size_t lk = dims_cols(dims_of(scores));
      basic_tensor<T, shape_of_t<G>> ga(dims_of(g), uninitialized);
      basic_tensor<T, shape_of_t<P>> gp(dims_of(scores), uninitialized);
      vec sunk(dv);
      for (std::size_t r = 0; r < rows; ++r) {
        pe.begin_row(r);
        const T lse = detail::row_log_sum_exp<T>(lk, [&pe](std::size_t j) { return static_cast<T>(pe.at(j)); });
        const detail::sunk_row<T> m = detail::sink_merge(lse, e.sink(head_of(r)));
        T dd = 0;
        for (std::size_t c = 0; c < dv; ++c) {
          sunk.data()[c] = o.data()[r * dv + c] * m.factor;
          ga.data()[r * dv + c] = g.data()[r * dv + c] * m.factor;
          dd += g.data()[r * dv + c] * sunk.data()[c];
        }
        for (std::size_t j = 0; j < lk; ++j) gp.data()[r * lk + j] = m.sink * dd * w.data()[r * lk + j];
        add_sink_grads(r, m.sink, sunk.data());
      }
      pass(e.operand(), ga, acc);
      pass(scores, gp, acc);
    }
    if constexpr (leaf_sinks) {
      basic_tensor<T, shape_of_t<Sk>> ds(dims_of(e.sinks()), uninitialized);
      alg::fill_n(ds.data(), ds.numel(), T(0));
      for (std::size_t h = 0; h < heads; ++h) ds.data()[ds.numel() == 1 ? 0 : h] += dsigma.data()[h];
      pass(e.sinks(), ds, acc);
    }
  }
};

// Scores with a position expression (expr/score_position.hpp): the position is a constant of the leaves.
template <class Op, class A, class P, bool PositionFirst>
struct rule<position_op_expr<Op, A, P, PositionFirst>> {
  template <class G, class Acc>
  static constexpr void apply(const position_op_expr<Op, A, P, PositionFirst>& e, const G& g, Acc& acc) {
    const A& a = e.operand();
    const P& p = e.positions();
    if constexpr (std::is_same_v<Op, ops::plus>) pass(a, g, acc);
    else if constexpr (std::is_same_v<Op, ops::minus> && PositionFirst) pass(a, -g, acc);
    else if constexpr (std::is_same_v<Op, ops::minus>) pass(a, g, acc);
    else if constexpr (std::is_same_v<Op, ops::multiplies>) pass(a, g * p, acc);
    else if constexpr (PositionFirst) pass(a, -((g * p) / square(a)), acc);  // p / a
    else pass(a, g / p, acc);
  }
};

// ALiBi: a bias that depends on no leaf, so g itself.
template <class A>
struct rule<masked_expr<A, alibi_bias>> {
  template <class G, class Acc>
  static constexpr void apply(const masked_expr<A, alibi_bias>& e, const G& g, Acc& acc) {
    pass(e.operand(), g, acc);
  }
};

template <class T, class A>
struct rule<cast_expr<T, A>> {
  template <class G, class Acc>
  static constexpr void apply(const cast_expr<T, A>& e, const G& g, Acc& acc) {
    if constexpr (std::is_same_v<value_t<A>, bool>) no_derivative<cast_expr<T, A>>();  // a bool read as a value
    else pass(e.operand(), cast<value_t<A>>(g), acc);
  }
};

template <class A>
struct rule<evaluated_once_expr<A>> {
  template <class G, class Acc>
  static constexpr void apply(const evaluated_once_expr<A>& e, const G& g, Acc& acc) { pass(e.operand(), g, acc); }
};

// where(c, a, b): g to a where c holds, to b elsewhere (c has no derivative and is not walked).
template <class C, class A, class B>
struct rule<where_expr<C, A, B>> {
  template <class G, class Acc>
  static constexpr void apply(const where_expr<C, A, B>& e, const G& g, Acc& acc) {
    using T = value_t<G>;
    pass(e.if_true(), where(e.condition(), g, T(0)), acc);
    pass(e.if_false(), where(e.condition(), T(0), g), acc);
  }
};

// The head reshapes: split and merge are each other's inverse; repeat_heads<G> sums the G copies of each head.
template <std::size_t H, class A>
struct rule<split_heads_expr<H, A>> {
  template <class G, class Acc>
  static constexpr void apply(const split_heads_expr<H, A>& e, const G& g, Acc& acc) { pass(e.operand(), merge_heads(g), acc); }
};
template <class A>
struct rule<merge_heads_expr<A>> {
  template <class G, class Acc>
  static constexpr void apply(const merge_heads_expr<A>& e, const G& g, Acc& acc) {
    pass(e.operand(), split_heads<merge_heads_expr<A>::heads>(g), acc);
  }
};
template <std::size_t Rep, class A>
struct rule<repeat_heads_expr<Rep, A>> {
  template <class G, class Acc>
  static constexpr void apply(const repeat_heads_expr<Rep, A>& e, const G& g, Acc& acc) {
    using S = shape_of_t<A>;
    using T = value_t<A>;
    const auto d = dims_of(e.operand());
    const std::size_t hk = d[S::rank - 3], inner = d[S::rank - 2] * d[S::rank - 1];
    const std::size_t outer = hk == 0 || inner == 0 ? 0 : dims_size(d) / (hk * inner);
    basic_tensor<T, S> ga = zeros<T, S>(d);
    for (std::size_t o = 0; o < outer; ++o)
      for (std::size_t h = 0; h < hk; ++h)
        for (std::size_t r = 0; r < Rep; ++r) {
          const T* src = g.data() + ((o * hk + h) * Rep + r) * inner;
          T* dst = ga.data() + (o * hk + h) * inner;
          for (std::size_t i = 0; i < inner; ++i) dst[i] += src[i];
        }
    backprop(e.operand(), ga, acc);
  }
};

// ---- slices, concatenation, rows, unit batch axes --------------------------------------------------------
// Blocks along one axis: count runs of `inner` elements (inner = the product of the extents after the axis) copied
// from index `from_at` of an axis of extent from_n to index `to_at` of one of extent to_n, for each of `outer` items.
template <class T>
constexpr void copy_along(const T* from, std::size_t from_n, std::size_t from_at, T* to, std::size_t to_n, std::size_t to_at,
                          std::size_t count, std::size_t outer, std::size_t inner) {
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t i = 0; i < count; ++i)
      alg::copy_n(from + ((o * from_n + from_at + i) * inner), inner, to + ((o * to_n + to_at + i) * inner));
}
template <std::size_t Axis, std::size_t R>
constexpr std::size_t inner_after(const dims_t<R>& d) {
  std::size_t inner = 1;
  for (std::size_t k = Axis + 1; k < R; ++k) inner *= d[k];
  return inner;
}
template <std::size_t Axis, std::size_t R>
constexpr std::size_t outer_before(const dims_t<R>& d) {
  std::size_t outer = 1;
  for (std::size_t k = 0; k < Axis; ++k) outer *= d[k];
  return outer;
}

// slice: g at the slice's place in a zero gradient of the operand's extents.
template <std::size_t Axis, std::size_t Count, class A>
struct rule<slice_expr<Axis, Count, A>> {
  template <class G, class Acc>
  static constexpr void apply(const slice_expr<Axis, Count, A>& e, const G& g, Acc& acc) {
    using S = shape_of_t<A>;
    const auto d = dims_of(e.operand());
    basic_tensor<value_t<A>, S> ga = zeros<value_t<A>, S>(d);
    const std::size_t c = g.dims()[Axis];
    copy_along(g.data(), c, 0, ga.data(), d[Axis], e.begin(), c, outer_before<Axis>(d), inner_after<Axis>(d));
    backprop(e.operand(), ga, acc);
  }
};
// concat: g cut in two along the axis.
template <std::size_t Axis, class A, class B>
struct rule<concat_expr<Axis, A, B>> {
  template <class G, class Acc>
  static constexpr void apply(const concat_expr<Axis, A, B>& e, const G& g, Acc& acc) {
    const auto da = dims_of(e.lhs());
    const auto db = dims_of(e.rhs());
    const std::size_t n = g.dims()[Axis], outer = outer_before<Axis>(da), inner = inner_after<Axis>(da);
    if constexpr (Acc::template reaches<A>) {
      basic_tensor<value_t<A>, shape_of_t<A>> ga(da, uninitialized);
      copy_along(g.data(), n, 0, ga.data(), da[Axis], 0, da[Axis], outer, inner);
      backprop(e.lhs(), ga, acc);
    }
    if constexpr (Acc::template reaches<B>) {
      basic_tensor<value_t<B>, shape_of_t<B>> gb(db, uninitialized);
      copy_along(g.data(), n, da[Axis], gb.data(), db[Axis], 0, db[Axis], outer, inner);
      backprop(e.rhs(), gb, acc);
    }
  }
};
// index_select: row i of g added to row ids[i] of the table's gradient (a scatter-add, in the order of the ids: the
// same sums for any thread count).
template <class A, class I>
struct rule<index_select_expr<A, I>> {
  template <class G, class Acc>
  static constexpr void apply(const index_select_expr<A, I>& e, const G& g, Acc& acc) {
    using S = shape_of_t<A>;
    const auto d = dims_of(e.operand());
    basic_tensor<value_t<A>, S> ga = zeros<value_t<A>, S>(d);
    const std::size_t n = g.dims()[0], cols = d[1];
    for (std::size_t i = 0; i < n; ++i) {
      value_t<A>* row = ga.data() + static_cast<std::size_t>(e.ids()[i]) * cols;
      for (std::size_t j = 0; j < cols; ++j) row[j] += g.data()[i * cols + j];
    }
    backprop(e.operand(), ga, acc);
  }
};
// The unit batch axis added or taken away: the same elements.
template <class S, class T, class SG>
constexpr basic_tensor<T, S> same_elements(const basic_tensor<T, SG>& g, const dims_t<S::rank>& d) {
  basic_tensor<T, S> out(d, uninitialized);
  alg::copy_n(g.data(), g.numel(), out.data());
  return out;
}
template <class A>
struct rule<unit_batch_expr<A>> {
  template <class G, class Acc>
  static constexpr void apply(const unit_batch_expr<A>& e, const G& g, Acc& acc) {
    backprop(e.operand(), same_elements<shape_of_t<A>>(g, dims_of(e.operand())), acc);
  }
};
template <class A>
struct rule<drop_unit_batch_expr<A>> {
  template <class G, class Acc>
  static constexpr void apply(const drop_unit_batch_expr<A>& e, const G& g, Acc& acc) {
    backprop(e.operand(), same_elements<shape_of_t<A>>(g, dims_of(e.operand())), acc);
  }
};

// rotary: each pair rotated back, by minus the angle of its position (a rotation's inverse is its transpose).
template <class A>
struct rule<rotary_expr<A>> {
  template <class G, class Acc>
  static constexpr void apply(const rotary_expr<A>& e, const G& g, Acc& acc) {
    using T = value_t<A>;
    using S = shape_of_t<A>;
    const auto d = g.dims();
    basic_tensor<T, S> ga(d, uninitialized);
    alg::copy_n(g.data(), g.numel(), ga.data());
    const std::size_t n = d[S::rank - 1], len = d[S::rank - 2], h = n / 2;
    const std::size_t rows = n == 0 ? 0 : ga.numel() / n;
    if (e.style() != rope_style::none && rows > 0) {
      basic_tensor<double, shape<axis<anon, dyn>>> w(uninitialized, h);
      position_frequencies(n, e.base(), w.data());
      basic_tensor<T, shape<axis<anon, dyn>>> c(uninitialized, len * h), s(uninitialized, len * h);
      for (std::size_t l = 0; l < len; ++l) {
        rope_angles(e.offset() + l, h, w.data(), c.data() + l * h, s.data() + l * h);
        for (std::size_t i = 0; i < h; ++i) s.data()[l * h + i] = -s.data()[l * h + i];
      }
      for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t l = r % len;
        rope_rotate(ga.data() + r * n, n, c.data() + l * h, s.data() + l * h, e.style());
      }
    }
    backprop(e.operand(), ga, acc);
  }
};

// ---- the pairwise similarities ------------------------------------------------------------------------------
// Q (batch..., Lq, d) and K (batch..., Lk, d) or (Lk, d) shared, evaluated; g (batch..., Lq, Lk). A similarity's
// rule fills dq and dk (zeroed, K's summed over the batch where it is shared) from per-pair terms.
template <class E, class G>
struct pairwise_parts {
  using Q = std::remove_cvref_t<decltype(std::declval<const E&>().queries())>;
  using K = std::remove_cvref_t<decltype(std::declval<const E&>().keys())>;
  using T = value_t<G>;
  result_t<Q> q;
  result_t<K> k;
  basic_tensor<T, shape_of_t<Q>> dq;
  basic_tensor<T, shape_of_t<K>> dk;
  std::size_t batch, lq, lk, d;
  bool shared;
  constexpr explicit pairwise_parts(const E& e)
      : q(e.queries()), k(e.keys()), dq(zeros<T, shape_of_t<Q>>(q.dims())), dk(zeros<T, shape_of_t<K>>(k.dims())) {
    const auto qd = q.dims();
    const auto kd = k.dims();
    constexpr std::size_t RQ = shape_of_t<Q>::rank, RK = shape_of_t<K>::rank;
    lq = qd[RQ - 2], d = qd[RQ - 1], lk = kd[RK - 2];
    shared = RK == 2 && RQ > 2;
    batch = lq == 0 || d == 0 ? 0 : q.numel() / (lq * d);
  }
  // f(g_ij, q_i, k_j, dq_i, dk_j) for every pair, q_i and k_j the rows of qs and ks (laid out as q and k).
  template <class F>
  constexpr void each_pair(const G& g, const T* qs, const T* ks, F f) {
    for (std::size_t b = 0; b < batch; ++b)
      for (std::size_t i = 0; i < lq; ++i)
        for (std::size_t j = 0; j < lk; ++j) {
          const std::size_t kr = (shared ? 0 : b) * lk + j;
          f(g.data()[(b * lq + i) * lk + j], qs + (b * lq + i) * d, ks + kr * d, dq.data() + (b * lq + i) * d,
            dk.data() + kr * d);
        }
  }
};

template <class F>
inline constexpr bool has_pairwise_rule = std::is_same_v<F, similarity::cosine> || std::is_same_v<F, similarity::rbf>;
template <class W>
inline constexpr bool has_pairwise_rule<similarity::additive_similarity<W>> = true;

// cosine: s = (qn . kn) / tau with qn = q / (|q| + eps): dqn = (1/tau) sum_j g_ij kn_j, and through the normalisation
// dq = dqn / n - q (q . dqn) / (|q| n^2), n = |q| + eps (0 for the second term of a zero vector); the same for k.
// rbf: s = -|q - k|^2 / (2 tau^2): dq_i = -(1/tau^2) sum_j g_ij (q_i - k_j), dk_j = (1/tau^2) sum_i g_ij (q_i - k_j).
// additive: s = sum_a w_a tanh(qh_ia + kh_ja), qh and kh the projected operands: with t = tanh(qh_ia + kh_ja),
// dqh_ia = sum_j g_ij w_a (1 - t^2), dkh_ja = sum_i g_ij w_a (1 - t^2), dw_a = sum_ij g_ij t; each passed on (to the
// projections and their weights).
template <class F, class Q, class K>
  requires has_pairwise_rule<F>
struct rule<pairwise_expr<F, Q, K>> {
  using E = pairwise_expr<F, Q, K>;
  template <class G, class Acc>
  static constexpr void apply(const E& e, const G& g, Acc& acc) {
    using T = value_t<G>;
    pairwise_parts<E, G> p(e);
    const std::size_t d = p.d;
    if constexpr (std::is_same_v<F, similarity::cosine>) {
      const T tau = static_cast<T>(e.similarity().tau), eps = static_cast<T>(e.similarity().eps);
      const std::size_t nq = d == 0 ? 0 : p.q.numel() / d, nk = d == 0 ? 0 : p.k.numel() / d;
      // The unit vectors and their norms.
      basic_tensor<T, shape<axis<anon, dyn>>> qn(uninitialized, nq * d), kn(uninitialized, nk * d), qnorm(nq), knorm(nk);
      const auto unit = [&](const T* x, T* out, T& norm) {
        T s = 0;
        for (std::size_t a = 0; a < d; ++a) s += x[a] * x[a];
        norm = math::sqrt(s);
        for (std::size_t a = 0; a < d; ++a) out[a] = x[a] / (norm + eps);
      };
      for (std::size_t r = 0; r < nq; ++r) unit(p.q.data() + r * d, qn.data() + r * d, qnorm.data()[r]);
      for (std::size_t r = 0; r < nk; ++r) unit(p.k.data() + r * d, kn.data() + r * d, knorm.data()[r]);
      // dqn into dq, dkn into dk, then each through its normalisation.
      p.each_pair(g, qn.data(), kn.data(), [&](T gij, const T* qi, const T* kj, T* dqi, T* dkj) {
        for (std::size_t a = 0; a < d; ++a) dqi[a] += gij / tau * kj[a], dkj[a] += gij / tau * qi[a];
      });
      const auto through = [&](const T* x, T norm, T* dx) {
        const T n = norm + eps;
        T xd = 0;
        for (std::size_t a = 0; a < d; ++a) xd += x[a] * dx[a];
        const T c = norm > T(0) ? xd / (norm * n * n) : T(0);
        for (std::size_t a = 0; a < d; ++a) dx[a] = dx[a] / n - x[a] * c;
      };
      for (std::size_t r = 0; r < nq; ++r) through(p.q.data() + r * d, qnorm.data()[r], p.dq.data() + r * d);
      for (std::size_t r = 0; r < nk; ++r) through(p.k.data() + r * d, knorm.data()[r], p.dk.data() + r * d);
    } else if constexpr (std::is_same_v<F, similarity::rbf>) {
      const T tau = static_cast<T>(e.similarity().tau), c = T(1) / (tau * tau);
      p.each_pair(g, p.q.data(), p.k.data(), [&](T gij, const T* qi, const T* kj, T* dqi, T* dkj) {
        for (std::size_t a = 0; a < d; ++a) {
          const T t = gij * c * (qi[a] - kj[a]);
          dqi[a] -= t, dkj[a] += t;
        }
      });
    } else {
      using W = std::remove_cvref_t<decltype(e.similarity().w)>;
      const W& wx = e.similarity().w;
      const basic_tensor<T, shape_of_t<W>> w(cast<T>(wx));
      basic_tensor<T, shape_of_t<W>> dw = zeros<T, shape_of_t<W>>(w.dims());
      p.each_pair(g, p.q.data(), p.k.data(), [&](T gij, const T* qi, const T* kj, T* dqi, T* dkj) {
        for (std::size_t a = 0; a < d; ++a) {
          const T t = math::tanh(qi[a] + kj[a]);
          const T u = gij * w.data()[a] * (T(1) - t * t);
          dqi[a] += u, dkj[a] += u;
          dw.data()[a] += gij * t;
        }
      });
      if constexpr (std::is_same_v<value_t<W>, T>) pass(wx, dw, acc);
      else pass(wx, cast<value_t<W>>(dw), acc);
    }
    pass(e.queries(), p.dq, acc);
    pass(e.keys(), p.dk, acc);
  }
};

// layer_norm / rms_norm over rows of n: with x^ the normalised row and r = 1 / sqrt(var + eps),
// dx = r (gw - mean(gw) - x^ mean(gw o x^)) (rms: without the first mean), gw = g o w; dw = sum over rows of g o x^,
// db = sum over rows of g.
template <norm_kind Kind, class A, class W, class B>
struct rule<norm_expr<Kind, A, W, B>> {
  template <class G, class Acc>
  static constexpr void apply(const norm_expr<Kind, A, W, B>& e, const G& g, Acc& acc) {
    using T = value_t<A>;
    using S = shape_of_t<A>;
    constexpr bool has_w = !std::is_same_v<W, scalar<T>>, has_b = !std::is_same_v<B, scalar<T>>;
    const dense_operand<A> x(e.operand());  // (an operand in memory is read in place)
    const auto d = dims_of(e.operand());
    const std::size_t n = d[S::rank - 1];
    const std::size_t rows = n == 0 ? 0 : dims_size(d) / n;
    basic_tensor<T, shape<axis<anon, dyn>>> w(n), dw(n), db(n);
    if constexpr (has_w) {
      const result_t<W> wv(e.weight());
      alg::copy_n(wv.data(), n, w.data());
    } else {
      alg::fill_n(w.data(), n, T(1));
    }
    basic_tensor<T, S> dx(d, uninitialized);
    basic_tensor<T, shape<axis<anon, dyn>>> xh(n), gw(n);
    for (std::size_t r = 0; r < rows; ++r) {
      const T* xr = x.data() + r * n;
      const T* gr = g.data() + r * n;
      T mean = 0;
      const T inv = norm_statistics<Kind>(xr, n, e.eps(), mean);
      T mg = 0, mgx = 0;
      for (std::size_t j = 0; j < n; ++j) {
        xh.data()[j] = (xr[j] - mean) * inv;
        gw.data()[j] = gr[j] * w.data()[j];
        mg += gw.data()[j];
        mgx += gw.data()[j] * xh.data()[j];
        dw.data()[j] += gr[j] * xh.data()[j];
        db.data()[j] += gr[j];
      }
      mg /= static_cast<T>(n), mgx /= static_cast<T>(n);
      if constexpr (Kind == norm_kind::rms) mg = 0;
      for (std::size_t j = 0; j < n; ++j) dx.data()[r * n + j] = inv * (gw.data()[j] - mg - xh.data()[j] * mgx);
    }
    backprop(e.operand(), dx, acc);
    if constexpr (has_w) pass(e.weight(), dw, acc);
    if constexpr (has_b) pass(e.bias(), db, acc);
  }
};

template <class... L>
constexpr accumulators<L...> start(const wrt_list<L...>& w) {
  accumulators<L...> acc{w.leaves, {}};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((std::get<I>(acc.grads) = std::get<I>(w.leaves) ? result_t<L>(dims_of(*std::get<I>(w.leaves)), uninitialized)
                                                      : result_t<L>{}),
     ...);
  }(std::index_sequence_for<L...>{});
  return acc;
}
// The gradients, zero where no path reached a leaf.
template <class... L>
constexpr std::tuple<result_t<L>...> finish(accumulators<L...>& acc) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((acc.touched[I] || !std::get<I>(acc.leaves)
          ? void()
          : void(alg::fill_n(std::get<I>(acc.grads).data(), std::get<I>(acc.grads).numel(), value_t<L>(0)))),
     ...);
  }(std::index_sequence_for<L...>{});
  return std::move(acc.grads);
}

}  // namespace detail::ad

// backward(y, dy, wrt(a, b, ...)): the gradients with respect to a, b, ... of the sum of y's elements weighted by
// dy (dy has y's shape): the vector-Jacobian product. A std::tuple of tensors, one per leaf, of the leaf's shape
// (axis names included); a leaf the expression does not read gets zeros.
template <expression Y, expression DY, class... L>
constexpr std::tuple<result_t<L>...> backward(const Y& y, const DY& dy, const wrt_list<L...>& w) {
  auto acc = detail::ad::start(w);
  if constexpr (!any_failed_v<Y, DY>) {
    if constexpr (std::is_same_v<DY, result_t<Y>>) {  // (dy in memory already: read in place)
      detail::ad::backprop(y, dy, acc);
    } else {
      const result_t<Y> g = dy;
      detail::ad::backprop(y, g, acc);
    }
  }
  return detail::ad::finish(acc);
}

// An attention's forward kept for its backward: its value o and, where the fused kernel computed it, the row
// log-sum-exps (what the backward kernel reads besides o), so that the backward does not run the forward again.
template <class E>
struct saved_attention {
  result_t<E> o;
  basic_tensor<value_t<E>, shape<axis<anon, dyn>>> lse;
  bool has_lse = false;  // (false: the rows path computed o; the backward recomputes what it needs)
};
namespace detail::ad {
// softmax(P) * V that the forward fuses and whose score program the backward kernel runs (no tile function).
template <class E>
inline constexpr bool kernel_attention_v = false;
template <class P, class V>
  requires fused::pattern<matmul_expr<softmax_expr<P>, V>>::value
inline constexpr bool kernel_attention_v<matmul_expr<softmax_expr<P>, V>> = !fused::chain<P>::functions;
template <class E>
concept kernel_attention = kernel_attention_v<E>;
}  // namespace detail::ad

// s = attention_forward(e) for an attention the forward fuses (softmax(P) * V, is_fused_v): s.o is e's value, computed
// by the fused kernel with its log-sum-exps where the current context's fused path is on (else by the rows path);
// backward(e, dy, wrt(...), s) then starts from them. e must read the same tensors, unchanged, in both calls.
template <expression E>
  requires detail::ad::kernel_attention<E>
saved_attention<E> attention_forward(const E& e) {
  saved_attention<E> s;
  using R = detail::ad::rule<E>;
  if (R::kernel_applies(e)) {
    R::forward(e, s.o, s.lse);
    s.has_lse = true;
    current_context().count_fused_run();
  } else {
    s.o = evaluate(e);
  }
  return s;
}
template <expression E, expression DY, class... L>
  requires detail::ad::kernel_attention<E>
std::tuple<result_t<L>...> backward(const E& e, const DY& dy, const wrt_list<L...>& w, const saved_attention<E>& s) {
  auto acc = detail::ad::start(w);
  const result_t<E> g = dy;
  if (!s.has_lse || !detail::ad::rule<E>::from_saved(e, g, acc, s.o, s.lse)) detail::ad::backprop(e, g, acc);
  return detail::ad::finish(acc);
}

// grad(f, wrt(a, b, ...)): the gradients of the sum of f's elements (f a scalar loss, or any expression, as
// PyTorch's f.sum().backward()); see backward.
template <expression F, class... L>
constexpr std::tuple<result_t<L>...> grad(const F& f, const wrt_list<L...>& w) {
  auto acc = detail::ad::start(w);
  if constexpr (!failed_v<F>) {
    result_t<F> g(dims_of(f), uninitialized);
    alg::fill_n(g.data(), g.numel(), value_t<F>(1));
    detail::ad::backprop(f, g, acc);
  }
  return detail::ad::finish(acc);
}

}  // namespace attnx
