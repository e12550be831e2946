// attnx: attention inside a constant evaluation, in as few of the compiler's counted steps as possible.
//
// The fused kernel is run-time code; in a constant evaluation attention used to go through the row-by-row
// evaluators, where every score is reached through a chain of calls (softmax's at -> the scale's at -> the
// product's at), and compilers bound a constant evaluation by what it runs (docs/design.md, "How large a
// model fits in a constant evaluation": g++ counts every tree node evaluated, clang every statement and
// call). This routine computes the same thing, with the same arithmetic in the same order (so the same
// bits) as the row evaluators, in loops over whole rows:
//   scores  s[j] = 0, s[j] += q[p] * K[j][p] for p = 0, 1, ... (K transposed once per matrix)
//   chain   the expression's scale / temperature / negation / limit masks, in its order, on the row
//   softmax the row evaluator's (max with NaN, the three special rows, exp, sum in order, divide)
//   output  o[c] = 0, o[c] += w[k] * V[k][c] for k = 0, 1, ...
// Rows are held as g++ vector-extension vectors under g++ (whose constant evaluator folds one vector
// operation as one node, so an axpy costs a node per 8 doubles instead of ~30 per element) and as plain
// arrays written in chunks of 16 per statement under clang (which counts statements, not operations, and
// cannot read a vector's element in a constant expression).
//
// Taken for  softmax(P) * V  when Q, K and V are tensors or views (rank 2, or the scores' rank), P's
// chain holds only scale / temperature / negation and causal, key-padding or key-length masks, and the
// element type is float or double. Anything else (boolean or additive masks, split_heads, dot_scores,
// casts, merge_heads) keeps the row evaluators, which compute the same values.
#pragma once

#include <cstddef>
#include <limits>
#include <type_traits>
#include <utility>

#include "attnx/eval/evaluator.hpp"
#include "attnx/eval/fused.hpp"
#include "attnx/expr/elementwise.hpp"
#include "attnx/expr/mask.hpp"
#include "attnx/expr/matmul.hpp"
#include "attnx/expr/reduce.hpp"
#include "attnx/math/constexpr_math.hpp"
#include "attnx/tensor/storage.hpp"

namespace attnx::constant_attention {

// What a chain step needs to know about the row it transforms.
struct row_info {
  std::size_t r;   // the row of the flattened scores
  std::size_t i;   // its query index (r % Lq)
  std::size_t lq;  // queries per matrix
  std::size_t lk;  // keys
  std::size_t rows;
};

// ---- the chain of score nodes ---------------------------------------------------------------------
template <class E>
struct chain {
  static constexpr bool value = false;
  using q = void;
  using k = void;
};

// Q * transpose(K), Q and K in memory
template <class Q, class K>
  requires dense_terminal<Q> && dense_terminal<K>
struct chain<matmul_expr<Q, transpose_expr<K>>> {
  using E = matmul_expr<Q, transpose_expr<K>>;
  static constexpr bool value = true;
  using q = Q;
  using k = K;
  static constexpr const E& core(const E& e) noexcept { return e; }
  static constexpr bool ok(const E&) noexcept { return true; }
  template <class S>
  static constexpr void check(const E&, const dims_t<S::rank>&) {}
  template <class Ops, class U>
  static constexpr void apply(const E&, U*, const row_info&) {}
};

// scale(P, s) / P * s, temperature(P, t) / P / t
template <class Op, class A, class U>
  requires(std::is_same_v<Op, ops::multiplies> || std::is_same_v<Op, ops::divides>)
struct chain<binary_expr<Op, A, scalar<U>>> {
  using E = binary_expr<Op, A, scalar<U>>;
  using inner = chain<A>;
  static constexpr bool value = inner::value;
  using q = typename inner::q;
  using k = typename inner::k;
  static constexpr const auto& core(const E& e) noexcept { return inner::core(e.lhs()); }
  static constexpr bool ok(const E& e) noexcept {
    using value = typename E::operand_type;  // (lower-case local names: a user's global T would be shadowed)
    const value x = static_cast<value>(e.rhs().value());
    return inner::ok(e.lhs()) && x == x && x != std::numeric_limits<value>::infinity() &&
           x != -std::numeric_limits<value>::infinity() && x != value(0);
  }
  template <class S>
  static constexpr void check(const E& e, const dims_t<S::rank>& d) { inner::template check<S>(e.lhs(), d); }
  template <class Ops, class W>
  static constexpr void apply(const E& e, W* s, const row_info& info) {
    inner::template apply<Ops>(e.lhs(), s, info);
    using value = typename E::operand_type;
    if constexpr (std::is_same_v<Op, ops::multiplies>) Ops::mul(s, static_cast<value>(e.rhs().value()), info.lk);
    else Ops::div(s, static_cast<value>(e.rhs().value()), info.lk);
  }
};

// -P
template <class A>
struct chain<unary_expr<ops::negate, A>> {
  using E = unary_expr<ops::negate, A>;
  using inner = chain<A>;
  static constexpr bool value = inner::value;
  using q = typename inner::q;
  using k = typename inner::k;
  static constexpr const auto& core(const E& e) noexcept { return inner::core(e.operand()); }
  static constexpr bool ok(const E& e) noexcept { return inner::ok(e.operand()); }
  template <class S>
  static constexpr void check(const E& e, const dims_t<S::rank>& d) { inner::template check<S>(e.operand(), d); }
  template <class Ops, class W>
  static constexpr void apply(const E& e, W* s, const row_info& info) {
    inner::template apply<Ops>(e.operand(), s, info);
    Ops::neg(s, info.lk);  // not a multiplication by -1: clang refuses arithmetic on a NaN in a constant evaluation
  }
};

// mask(P, causal | causal_bottom_right | key_padding<N> | key_lengths(...), fill): key j of row r is kept when
// j < limit(r), else it becomes the fill (the row evaluator's rule, evaluator<masked_expr>).
template <class A, class Kind>
struct chain<masked_expr<A, Kind>> {
  using E = masked_expr<A, Kind>;
  using inner = chain<A>;
  static constexpr bool value = inner::value && attnx::detail::is_limit_mask<Kind>;
  using q = typename inner::q;
  using k = typename inner::k;
  static constexpr const auto& core(const E& e) noexcept { return inner::core(e.operand()); }
  static constexpr bool ok(const E& e) noexcept { return inner::ok(e.operand()); }
  template <class S>
  static constexpr void check(const E& e, const dims_t<S::rank>& d) {
    inner::template check<S>(e.operand(), d);
    if constexpr (std::is_same_v<Kind, key_lengths_mask>) check_key_lengths<S>(e.kind(), d);
    if constexpr (std::is_same_v<Kind, key_range_mask>) check_key_range_mask<S>(e.kind(), d);
  }
  template <class Ops, class W>
  static constexpr void apply(const E& e, W* s, const row_info& info) {
    inner::template apply<Ops>(e.operand(), s, info);
    std::ptrdiff_t limit = 0;
    if constexpr (std::is_same_v<Kind, key_range_mask>) {
      const key_span span = range_span(e.kind().range, info.lq, info.lk, 0, info.i);
      if (span.hi < info.lk) Ops::fill_from(s, span.hi, e.fill(), info.lk);
      if (span.lo > 0) Ops::fill_to(s, span.lo, e.fill());
      return;
    } else if constexpr (std::is_same_v<Kind, causal_mask<causal_alignment::top_left>>) {
      limit = static_cast<std::ptrdiff_t>(info.i) + 1;
    } else if constexpr (std::is_same_v<Kind, causal_mask<causal_alignment::bottom_right>>) {
      limit = static_cast<std::ptrdiff_t>(info.i) + 1 + static_cast<std::ptrdiff_t>(info.lk) - static_cast<std::ptrdiff_t>(info.lq);
    } else if constexpr (std::is_same_v<Kind, key_lengths_mask>) {
      limit = static_cast<std::ptrdiff_t>(e.kind().lengths[info.r / (info.rows / e.kind().count)]);
    } else {
      limit = static_cast<std::ptrdiff_t>(Kind::length);
    }
    const std::size_t keep = limit <= 0 ? 0 : static_cast<std::size_t>(limit) >= info.lk ? info.lk : static_cast<std::size_t>(limit);
    if (keep < info.lk) Ops::fill_from(s, keep, e.fill(), info.lk);
  }
};

// ---- rows: the two representations ------------------------------------------------------------------
// A row of n elements takes units(n) units, padded with zeros (run() checks that Q, the scales and the
// temperatures are finite and the temperatures non-zero, so the padding never meets an operation whose
// result is NaN: a constant evaluation stops at one). Matrices are rows of units(n) units each.

// Plain arrays, 16 elements per statement (clang counts statements: a fold expression over a chunk is one,
// and a loop whose body is one statement costs one step per iteration).
template <class T>
struct array_rows {
  using unit = T;
  static constexpr std::size_t W = 16;
  using lanes = std::make_index_sequence<W>;
  static constexpr std::size_t units(std::size_t n) noexcept { return (n + W - 1) / W * W; }

  // d[j] = src[j * stride] for j < n, 0 up to units(n)
  static constexpr void load(T* d, const T* src, std::size_t stride, std::size_t n) {
    for (std::size_t j = 0; j < n; ++j) d[j] = src[j * stride];
    for (std::size_t j = n; j < units(n); ++j) d[j] = T(0);
  }
  // s = q . kt (kt: rows of uk, dk of them): weighted's loops with the roles renamed, c for k.
  static constexpr void scores(T* s, const T* q, const T* kt, std::size_t uk, std::size_t dk) { weighted(s, q, kt, dk, uk); }
  static constexpr void mul(T* s, T x, std::size_t n) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      for (std::size_t j = 0; j < units(n); j += W) ((s[j + I] = s[j + I] * x), ...);
    }(lanes{});
  }
  static constexpr void div(T* s, T x, std::size_t n) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      for (std::size_t j = 0; j < units(n); j += W) ((s[j + I] = s[j + I] / x), ...);
    }(lanes{});
  }
  static constexpr void neg(T* s, std::size_t n) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      for (std::size_t j = 0; j < units(n); j += W) ((s[j + I] = -s[j + I]), ...);
    }(lanes{});
  }
  static constexpr void fill_to(T* s, std::size_t last, T fill) {
    for (std::size_t j = 0; j < last; ++j) s[j] = fill;
  }
  static constexpr void fill_from(T* s, std::size_t first, T fill, std::size_t n) {
    std::size_t j = first;
    for (; j < n && j % W != 0; ++j) s[j] = fill;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      for (; j + W <= n; j += W) ((s[j + I] = fill), ...);
    }(lanes{});
    for (; j < n; ++j) s[j] = fill;
  }
  // The row evaluator's softmax (evaluator<softmax_expr>), on s[0, n) in place.
  static constexpr void softmax(T* s, std::size_t n) {
    constexpr T inf = std::numeric_limits<T>::infinity();
    const std::size_t full = n - n % W;
    T m = -inf;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      for (std::size_t j = 0; j < full; j += W) ((m = (s[j + I] > m || s[j + I] != s[j + I]) && m == m ? s[j + I] : m), ...);
    }(lanes{});
    for (std::size_t j = full; j < n; ++j) m = (s[j] > m || s[j] != s[j]) && m == m ? s[j] : m;
    if (m != m) {
      for (std::size_t j = 0; j < n; ++j) s[j] = std::numeric_limits<T>::quiet_NaN();
    } else if (m == -inf) {
      for (std::size_t j = 0; j < n; ++j) s[j] = 0;
    } else if (m == inf) {
      T count = 0;
      for (std::size_t j = 0; j < n; ++j) count += s[j] == inf ? T(1) : T(0);
      for (std::size_t j = 0; j < n; ++j) s[j] = s[j] == inf ? T(1) / count : T(0);
    } else {
      T sum = 0;
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        for (std::size_t j = 0; j < full; j += W) ((s[j + I] = math::cexp_nonpositive(s[j + I] - m), sum += s[j + I]), ...);
      }(lanes{});
      for (std::size_t j = full; j < n; ++j) s[j] = math::cexp_nonpositive(s[j] - m), sum += s[j];
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        for (std::size_t j = 0; j < full; j += W) ((s[j + I] /= sum), ...);
      }(lanes{});
      for (std::size_t j = full; j < n; ++j) s[j] /= sum;
    }
  }
  // o = sum over k < n of w[k] * v[k, :] (v: rows of uv), from o = 0, k in order (four keys per statement).
  static constexpr void weighted(T* o, const T* w, const T* v, std::size_t n, std::size_t uv) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      for (std::size_t c = 0; c < uv; c += W) {
        T* oc = o + c;
        const T* vc = v + c;
        ((oc[I] = T(0)), ...);
        std::size_t k = 0;
        for (; k + 4 <= n; k += 4)
          (((oc[I] += w[k] * vc[k * uv + I]), ...), ((oc[I] += w[k + 1] * vc[(k + 1) * uv + I]), ...),
           ((oc[I] += w[k + 2] * vc[(k + 2) * uv + I]), ...), ((oc[I] += w[k + 3] * vc[(k + 3) * uv + I]), ...));
        for (; k < n; ++k) ((oc[I] += w[k] * vc[k * uv + I]), ...);
      }
    }(lanes{});
  }
  static constexpr void store(T* dst, const T* o, std::size_t n) {
    for (std::size_t j = 0; j < n; ++j) dst[j] = o[j];
  }
};

#if defined(__GNUC__) && !defined(__clang__)
// g++ vector-extension vectors of 64 bytes (8 doubles, 16 floats): g++'s constant evaluator folds a whole
// vector operation as one node. A vector's element can be read but not assigned in a constant expression,
// so element-wise results are built as whole vectors.
template <class T>
struct vector_rows {
  static constexpr std::size_t W = 64 / sizeof(T);
  typedef T unit __attribute__((vector_size(64)));
  using index = std::conditional_t<sizeof(T) == 8, long long, int>;
  typedef index index_unit __attribute__((vector_size(64)));
  using lanes = std::make_index_sequence<W>;
  static constexpr std::size_t units(std::size_t n) noexcept { return (n + W - 1) / W; }

  static constexpr void load(unit* d, const T* src, std::size_t stride, std::size_t n) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      for (std::size_t u = 0, j = 0; j < n; ++u, j += W) d[u] = unit{(j + I < n ? src[(j + I) * stride] : T(0))...};
    }(lanes{});
  }
  // s[u] = 0, then s[u] += q[c] kt[c][u] for c = 0, 1, ... (a fold over eight c per statement cost g++ more
  // counted nodes, not fewer)
  static constexpr void scores(unit* s, const T* q, const unit* kt, std::size_t uk, std::size_t dk) {
    for (std::size_t u = 0; u < uk; ++u) s[u] = unit{};
    for (std::size_t c = 0; c < dk; ++c) {
      const T a = q[c];
      const unit* kc = kt + c * uk;
      for (std::size_t u = 0; u < uk; ++u) s[u] += a * kc[u];
    }
  }
  static constexpr void mul(unit* s, T x, std::size_t n) {
    for (std::size_t u = 0, e = units(n); u < e; ++u) s[u] = s[u] * x;
  }
  static constexpr void div(unit* s, T x, std::size_t n) {
    for (std::size_t u = 0, e = units(n); u < e; ++u) s[u] = s[u] / x;
  }
  static constexpr void neg(unit* s, std::size_t n) {
    for (std::size_t u = 0, e = units(n); u < e; ++u) s[u] = -s[u];
  }
  static constexpr void fill_to(unit* s, std::size_t last, T fill) {
    index_unit lane{};
    [&]<std::size_t... I>(std::index_sequence<I...>) { lane = index_unit{static_cast<index>(I)...}; }(lanes{});
    const unit f = unit{} + fill;
    const index_unit to = index_unit{} + static_cast<index>(last);
    for (std::size_t u = 0, e = (last + W - 1) / W; u < e; ++u) s[u] = lane + static_cast<index>(u * W) < to ? f : s[u];
  }
  static constexpr void fill_from(unit* s, std::size_t first, T fill, std::size_t n) {
    index_unit lane{};  // (set in a lambda rather than returned: a 64-byte vector return value draws g++'s -Wpsabi)
    [&]<std::size_t... I>(std::index_sequence<I...>) { lane = index_unit{static_cast<index>(I)...}; }(lanes{});
    const unit f = unit{} + fill;
    const index_unit from = index_unit{} + static_cast<index>(first);
    for (std::size_t u = first / W, e = units(n); u < e; ++u) s[u] = lane + static_cast<index>(u * W) < from ? s[u] : f;
  }
  // exp(x - m) lane by lane, exp_nonpositive_f64's operations (double): lanes below exp_min_f64 (-inf
  // included) are computed from 0 and then replaced by 0, as the scalar form returns before computing.
  // (y is an out-parameter: a 64-byte vector return value draws g++'s -Wpsabi without -mavx512f.)
  static constexpr void exp_shifted_unit(unit& y, const unit& xs, T m) noexcept {
    if constexpr (std::is_same_v<T, double>) {
      using namespace math::detail::tail;
      const unit x0 = xs - m;
      const index_unit tiny = x0 < math::detail::exp_min_f64, one = x0 > -0x1p-60;
      const unit x = tiny ? unit{} : x0;
      const index_unit k = __builtin_convertvector(x * math::detail::inv_ln2 - 0.5, index_unit);
      const unit kd = __builtin_convertvector(k, unit);
      const unit hi = x - kd * math::detail::ln2_hi, lo = kd * math::detail::ln2_lo, r = hi - lo;
      const index_unit normal = k >= -1022;
      const unit p =
          ((1.0 + (hi + (r * r * ((((((((((((c11 * r + c10) * r + c9) * r + c8) * r + c7) * r + c6) * r + c5) * r + c4) * r + c3) * r + c2) * r + c1) * r) + c0) - lo))) *
           __builtin_bit_cast(unit, ((normal ? k : k + 64) + 1023) << 52)) *
          (normal ? unit{} + 1.0 : unit{} + 0x1p-64);
      y = tiny ? unit{} : one ? 1.0 + x : p;
    } else {
      [&]<std::size_t... I>(std::index_sequence<I...>) { y = unit{math::cexp_nonpositive(xs[I] - m)...}; }(lanes{});
    }
  }
  static constexpr void softmax(unit* s, std::size_t n) {
    constexpr T inf = std::numeric_limits<T>::infinity();
    const std::size_t e = units(n), full = n / W;
    T m = -inf;
    if (full > 0) {  // lane-wise over the full units, then across the lanes, then the rest of the row
      unit mv = s[0];
      for (std::size_t u = 1; u < full; ++u) {
        const unit x = s[u];
        mv = ((x > mv) | (x != x)) & (mv == mv) ? x : mv;
      }
      [&]<std::size_t... I>(std::index_sequence<I...>) { ((m = (mv[I] > m || mv[I] != mv[I]) && m == m ? mv[I] : m), ...); }(lanes{});
    }
    for (std::size_t j = full * W; j < n; ++j) {
      const T x = s[j / W][j % W];
      m = (x > m || x != x) && m == m ? x : m;
    }
    if (m != m || m == -inf) {
      const T v = m != m ? std::numeric_limits<T>::quiet_NaN() : T(0);
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        for (std::size_t u = 0; u < e; ++u) s[u] = unit{((void)I, v)...};
      }(lanes{});
    } else if (m == inf) {
      T count = 0;
      for (std::size_t j = 0; j < n; ++j) count += s[j / W][j % W] == inf ? T(1) : T(0);
      const T share = T(1) / count;
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        for (std::size_t u = 0; u < e; ++u) s[u] = unit{(s[u][I] == inf ? share : T(0))...};
      }(lanes{});
    } else {
      T sum = 0;
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        for (std::size_t u = 0; u < full; ++u) {
          unit y{};
          exp_shifted_unit(y, s[u], m);
          s[u] = y;
          ((sum += y[I]), ...);
        }
        if (full < e) {  // the last, partial unit: exp of the row's elements only, 0 beyond
          const unit x = s[full];
          const std::size_t rest = n - full * W;
          s[full] = unit{(I < rest ? math::cexp_nonpositive(x[I] - m) : T(0))...};
          const unit y = s[full];
          ((sum += I < rest ? y[I] : T(0)), ...);  // + 0 beyond the row: the same sum
        }
      }(lanes{});
      for (std::size_t u = 0; u < e; ++u) s[u] = s[u] / sum;
    }
  }
  // o = sum over k < n of w[k] * v[k, :] (v: rows of uv units), from o = 0, k in order.
  static constexpr void weighted(unit* o, const unit* w, const unit* v, std::size_t n, std::size_t uv) {
    for (std::size_t c = 0; c < uv; ++c) o[c] = unit{};
    const std::size_t full = n / W;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      for (std::size_t u = 0; u < full; ++u) {
        const unit x = w[u];
        const unit* vu = v + u * W * uv;
        for (std::size_t c = 0; c < uv; ++c) o[c] = (o[c] + ... + (x[I] * vu[I * uv + c]));
      }
    }(lanes{});
    for (std::size_t k = full * W; k < n; ++k) {
      const T a = w[k / W][k % W];
      for (std::size_t c = 0; c < uv; ++c) o[c] += a * v[k * uv + c];
    }
  }
  static constexpr void store(T* dst, const unit* o, std::size_t n) {
    for (std::size_t j = 0; j < n; ++j) dst[j] = o[j / W][j % W];
  }
};
template <class T>
using row_form = vector_rows<T>;
#else
template <class T>
using row_form = array_rows<T>;
#endif

// ---- the whole pattern --------------------------------------------------------------------------------
template <class E>
struct pattern : std::false_type {};

// The fused recogniser's pattern (element types, ranks) with Q, K, V in memory and a chain this routine applies.
template <class P, class V>
struct pattern<matmul_expr<softmax_expr<P>, V>>
    : std::bool_constant<fused::pattern<matmul_expr<softmax_expr<P>, V>>::value && chain<P>::value && dense_terminal<V>> {};

// dst (the attention's shape, row-major) = e. False when there is nothing to compute (an empty extent): the
// row evaluator then loops zero times.
template <class T, class P, class V>
constexpr bool run(T* dst, const matmul_expr<softmax_expr<P>, V>& e) {
  using ch = chain<P>;
  using Ops = row_form<T>;
  using unit = typename Ops::unit;
  using shape_p = shape_of_t<P>;
  const P& p = e.lhs().operand();
  const auto& core = ch::core(p);
  const auto& qe = core.lhs();
  const auto& ke = core.rhs().operand();
  const V& ve = e.rhs();
  const auto d = dims_of(p);
  const std::size_t rows = dims_rows(d), lq = d[shape_p::rank - 2], lk = dims_cols(d);
  const std::size_t dk = dims_cols(dims_of(qe)), dv = dims_cols(dims_of(ve));
  if (rows == 0 || lk == 0 || dk == 0 || dv == 0 || !ch::ok(p)) return false;
  constexpr T inf = std::numeric_limits<T>::infinity();
  for (std::size_t j = 0, n = dims_size(dims_of(qe)); j < n; ++j)
    if (const T x = qe.data()[j]; x != x || x == inf || x == -inf) return false;
  ch::template check<shape_p>(p, d);
  constexpr bool k_batched = shape_of_t<typename ch::k>::rank > 2, v_batched = shape_of_t<V>::rank > 2;
  const T* q = qe.data();
  const T* k = ke.data();
  const T* v = ve.data();
  const std::size_t uk = Ops::units(lk), uv = Ops::units(dv);
  storage<unit, dyn> kt(dk * uk), vr(lk * uv), s(uk), o(uv);  // K transposed, V's rows, one score row, one output row
  std::size_t k_at = std::size_t(-1), v_at = std::size_t(-1);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t b = r / lq;
    if (const std::size_t kb = k_batched ? b : 0; kb != k_at) {
      for (std::size_t c = 0; c < dk; ++c) Ops::load(kt.data() + c * uk, k + kb * lk * dk + c, dk, lk);
      k_at = kb;
    }
    if (const std::size_t vb = v_batched ? b : 0; vb != v_at) {
      for (std::size_t j = 0; j < lk; ++j) Ops::load(vr.data() + j * uv, v + (vb * lk + j) * dv, 1, dv);
      v_at = vb;
    }
    Ops::scores(s.data(), q + r * dk, kt.data(), uk, dk);
    ch::template apply<Ops>(p, s.data(), row_info{r, r % lq, lq, lk, rows});
    Ops::softmax(s.data(), lk);
    Ops::weighted(o.data(), s.data(), vr.data(), lk, uv);
    Ops::store(dst + r * dv, o.data(), dv);
  }
  return true;
}

}  // namespace attnx::constant_attention
