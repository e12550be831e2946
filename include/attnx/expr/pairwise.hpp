// attnx: pairwise similarity scores, s_ij = f(q_i, k_j) (seed 002: dot, cosine, rbf; seed 003:
// additive / Bahdanau), and their evaluator.
//
//   pairwise(Q, K, f)               Q (batch..., Lq, d), K (batch..., Lk, d) or (Lk, d) shared by all
//                                   -> scores (batch..., Lq, Lk), s_ij = f(row i of Q, row j of K)
//   dot_scores(Q, K[, scale])       f = similarity::dot{scale}, scale = 1/sqrt(d) by default
//   cosine_scores(Q, K, tau[, eps]) f = similarity::cosine{tau, eps}: (q/(|q|+eps)) . (k/(|k|+eps)) / tau
//   rbf_scores(Q, K, tau)           f = similarity::rbf{tau}: -|q - k|^2 / (2 tau^2)
//   additive_scores(Q, K, W1, W2, w)  s_ij = sum_a w_a tanh((q_i W1)_a + (k_j W2)_a)
//                                   = pairwise(Q * W1, K * W2, similarity::additive(w))
//   additive_scores(Q, K, W1, W2, w, b)  the same with a hidden bias: tanh(q_i W1 + k_j W2 + b)
// The scores are an expression like any other: softmax(mask(rbf_scores(Q, K, 0.5), causal)) * V.
//
// A similarity is any callable f(std::span<const T> q, std::span<const T> k) -> T (a lambda
// `[](auto q, auto k) { ... }` works). Two optional hooks, used by the evaluator when present:
//   f.prepare(std::span<T> v)          a per-vector map applied once to each query row and once to
//   f.prepared(q, k) -> T              each key row, then `prepared` scores the mapped vectors
//                                      (cosine normalises each vector once instead of per pair);
//   f.template bind<T>() -> callable   the callable actually used, built once per evaluation
//                                      (the additive similarity materialises its weight vector w).
//
// Evaluation (the row protocol of eval/evaluator.hpp): begin_row(r) evaluates row r of Q into a
// buffer (Q may be any expression, e.g. the projection X * W_Q: one row at a time), then computes
// the whole score row against every row of K; at(j) reads it. K is read at random, so it is
// materialised once if it is an expression (dense_operand), or copied once when the similarity
// prepares keys or the element types differ. Memory: one row of Q and one row of scores; the
// Lq x Lk score matrix is never stored.
#pragma once

#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>

#include "attnx/expr/cast.hpp"
#include "attnx/core/expression.hpp"
#include "attnx/expr/matmul.hpp"
#include "attnx/math/constexpr_math.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/shape/shape.hpp"
#include "attnx/tensor/storage.hpp"
#include "attnx/tensor/tensor.hpp"

// ---- the error vocabulary of the pairwise rules (see shape/errors.hpp for the scheme) ----------
namespace attnx::error {

// Facts.
template <std::size_t N> struct query_rank {};
template <std::size_t N> struct key_rank {};
template <std::size_t N> struct query_features {};
template <std::size_t N> struct key_features {};
template <class Name> struct query_feature_axis {};
template <class Name> struct key_feature_axis {};
template <std::size_t N> struct query_batch_extent {};
template <std::size_t N> struct key_batch_extent {};
template <class Name> struct query_batch_axis {};
template <class Name> struct key_batch_axis {};
template <std::size_t N> struct query_hidden {};
template <std::size_t N> struct key_hidden {};
template <std::size_t N> struct weight_size {};
template <std::size_t N> struct hidden_extent {};

// Rules.
template <class... Facts> struct pairwise_needs_rank_2_operands { static constexpr bool value = false; };
template <class... Facts> struct pairwise_feature_extents_differ { static constexpr bool value = false; };
template <class... Facts> struct pairwise_feature_axes_differ { static constexpr bool value = false; };
template <class... Facts> struct pairwise_batch_ranks_differ { static constexpr bool value = false; };
template <class... Facts> struct pairwise_batch_extents_differ { static constexpr bool value = false; };
template <class... Facts> struct pairwise_batch_axes_differ { static constexpr bool value = false; };
template <class... Facts> struct pairwise_similarity_not_callable { static constexpr bool value = false; };
template <class... Facts> struct additive_hidden_extents_differ { static constexpr bool value = false; };
template <class... Facts> struct additive_weight_size_differs { static constexpr bool value = false; };

}  // namespace attnx::error

namespace attnx {

// ---- similarity functions ------------------------------------------------------------------------
namespace detail {
// Sum of g(i) for i < n with four partial sums (independent additions: about 4x the throughput of
// one running sum at run time; the same order at compile time and at run time).
template <class T, class G>
constexpr T sum4(std::size_t n, G g) {
  T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += g(i);
    s1 += g(i + 1);
    s2 += g(i + 2);
    s3 += g(i + 3);
  }
  for (; i < n; ++i) s0 += g(i);
  return (s0 + s1) + (s2 + s3);
}
template <class T>
constexpr T dot(std::span<const T> q, std::span<const T> k) {
  return sum4<T>(q.size(), [&](std::size_t i) { return q[i] * k[i]; });
}
}  // namespace detail

namespace similarity {

// s = scale * q . k  (scale 1/sqrt(d) is the transformer's choice).
struct dot {
  double scale = 1.0;
  template <class T>
  constexpr T operator()(std::span<const T> q, std::span<const T> k) const {
    return detail::dot(q, k) * static_cast<T>(scale);
  }
};

// s = (q / (|q| + eps)) . (k / (|k| + eps)) / tau, as in seed 002. eps keeps a zero vector finite
// (its similarity to anything is 0) and changes nothing measurable otherwise. Range [-1/tau, 1/tau].
struct cosine {
  double tau = 1.0;
  double eps = 1e-9;
  template <class T>
  constexpr T norm_plus_eps(std::span<const T> v) const {
    return math::sqrt(detail::dot(v, v)) + static_cast<T>(eps);
  }
  // The evaluator's path: each vector normalised once, then dot products.
  template <class T>
  constexpr void prepare(std::span<T> v) const {
    const T n = norm_plus_eps(std::span<const T>(v));
    for (auto& x : v) x = x / n;
  }
  template <class T>
  constexpr T prepared(std::span<const T> qn, std::span<const T> kn) const {
    return detail::dot(qn, kn) / static_cast<T>(tau);
  }
  // One pair on its own: the same operations in the same order (bit-identical to the above).
  template <class T>
  constexpr T operator()(std::span<const T> q, std::span<const T> k) const {
    const T nq = norm_plus_eps(q), nk = norm_plus_eps(k);
    return detail::sum4<T>(q.size(), [&](std::size_t i) { return (q[i] / nq) * (k[i] / nk); }) / static_cast<T>(tau);
  }
};

// s = -|q - k|^2 / (2 tau^2): 0 for k = q, negative otherwise; a Gaussian kernel's log.
struct rbf {
  double tau = 1.0;
  template <class T>
  constexpr T operator()(std::span<const T> q, std::span<const T> k) const {
    const T d2 = detail::sum4<T>(q.size(), [&](std::size_t i) {
      const T t = q[i] - k[i];
      return t * t;
    });
    const T tau_t = static_cast<T>(tau);
    return -d2 / (T(2) * (tau_t * tau_t));
  }
};

// Additive (Bahdanau) scoring of projected vectors: s = sum_a w_a tanh(qh_a + kh_a), where qh = q W1
// and kh = k W2 are computed by additive_scores (or by the caller). w is an expression of h elements,
// stored by the ownership rule; it is materialised once per evaluation (bind).
template <class T, std::size_t H>
struct bound_additive {
  constexpr explicit bound_additive(std::size_t h) : w(uninitialized, h) {}
  storage<T, H> w;
  constexpr T operator()(std::span<const T> qh, std::span<const T> kh) const {
    const T* wp = w.data();
    return detail::sum4<T>(qh.size(), [&](std::size_t a) { return wp[a] * math::tanh(qh[a] + kh[a]); });
  }
};

// Additive (Bahdanau) similarity w . tanh(q + k) between every query and key, as a score function.
template <class W>
struct additive_similarity {
  W w;
  static constexpr std::size_t hidden = shape_of_t<W>::size;
  template <class T>
  constexpr bound_additive<T, hidden> bind() const {
    const std::size_t h = dims_size(dims_of(w));  // hidden, or the run-time count of a dyn w
    bound_additive<T, hidden> b(h);
    const basic_tensor<T, shape_of_t<W>> full(cast<T>(w));  // w (h), (h, 1), (1, h) or an expression: row-major
    for (std::size_t a = 0; a < h; ++a) b.w.data()[a] = full.data()[a];
    return b;
  }
  // Called directly (outside an expression), when w sits in memory.
  template <class T>
    requires dense_terminal<W>
  constexpr T operator()(std::span<const T> qh, std::span<const T> kh) const {
    const auto* wp = w.data();
    return detail::sum4<T>(qh.size(),
                           [&](std::size_t a) { return static_cast<T>(wp[a]) * math::tanh(qh[a] + kh[a]); });
  }
};

// similarity::additive(w): the additive similarity with weight vector w.
template <expression W>
constexpr auto additive(W&& w) {
  return additive_similarity<stored_t<W>>{store(std::forward<W>(w))};
}

}  // namespace similarity

// ---- how the evaluator calls a similarity -------------------------------------------------------
namespace detail {
template <class F, class T>
constexpr auto bind_similarity(const F& f) {
  if constexpr (requires { f.template bind<T>(); }) {
    return f.template bind<T>();
  } else {
    return f;
  }
}
template <class F, class T>
using bound_similarity_t = decltype(bind_similarity<F, T>(std::declval<const F&>()));

template <class F, class T>
concept preparing_similarity = requires(const F& f, std::span<T> v, std::span<const T> c) {
  f.prepare(v);
  { f.prepared(c, c) } -> std::convertible_to<T>;
};

template <class F, class T>
inline constexpr bool similarity_callable_v = [] {
  using bound = bound_similarity_t<F, T>;
  if constexpr (preparing_similarity<bound, T>) {
    return true;
  } else if constexpr (std::is_invocable_v<const bound&, std::span<const T>, std::span<const T>>) {
    return std::is_convertible_v<std::invoke_result_t<const bound&, std::span<const T>, std::span<const T>>, T>;
  } else {
    return false;
  }
}();

// A similarity holding an expression (the additive one's w): listed among the node's operands.
template <class F>
concept holds_expression_operand = requires(const F& f) {
  { f.w };
  requires expression<decltype(f.w)>;
};
}  // namespace detail

// ---- the node ------------------------------------------------------------------------------------
namespace detail {
template <class SQ, class SK, bool = (SQ::rank >= 2 && SK::rank >= 2)>
struct pairwise_shape {  // rejected by the rank rule; a well-formed shape so no second error follows
  using type = shape<axis<anon, 1>, axis<anon, 1>>;
};
template <class SQ, class SK>
struct pairwise_shape<SQ, SK, true> {
  using type = shape_cat_t<batch_axes_t<SQ>, shape<typename SQ::template axis_t<SQ::rank - 2>,
                                                   typename SK::template axis_t<SK::rank - 2>>>;
};
}  // namespace detail

// (batch..., Lq, d) and (batch..., Lk, d) or (Lk, d)  ->  (batch..., Lq, Lk): Q's batch and row axes,
// then K's row axis.
template <class SQ, class SK>
using pairwise_shape_t = typename detail::pairwise_shape<SQ, SK>::type;

// F(q_i, k_j) for every query row i and key row j (the pairwise scores), the node.
template <class F, class Q, class K>
class pairwise_expr : public expression_tag {
 public:
  using value_type = std::common_type_t<value_t<Q>, value_t<K>>;
  using shape_type = pairwise_shape_t<shape_of_t<Q>, shape_of_t<K>>;
  using similarity_type = F;
  // The feature extent d (the length of the vectors f compares).
  static constexpr std::size_t features = shape_of_t<Q>::cols;
  constexpr pairwise_expr(Q q, K k, F f) : q_(std::move(q)), k_(std::move(k)), f_(std::move(f)) {}
  constexpr dims_t<shape_type::rank> dims() const {
    const auto q = dims_of(q_);
    dims_t<shape_type::rank> out{};
    for (std::size_t a = 0; a + 1 < shape_type::rank; ++a) out[a] = q[a];
    out[shape_type::rank - 1] = dims_of(k_)[shape_of_t<K>::rank - 2];
    return out;
  }
  constexpr const Q& queries() const noexcept { return q_; }
  constexpr const K& keys() const noexcept { return k_; }
  constexpr const F& similarity() const noexcept { return f_; }
  constexpr auto operands() const {
    if constexpr (detail::holds_expression_operand<F>) {
      return boost::hana::make_tuple(&q_, &k_, &f_.w);
    } else {
      return boost::hana::make_tuple(&q_, &k_);
    }
  }

 private:
  Q q_;
  K k_;
  F f_;
};

// ---- the shape rules -----------------------------------------------------------------------------
namespace rules {
template <class SQ, class SK, bool Quiet = false>
constexpr bool check_pairwise() {
  constexpr bool ranks_ok = SQ::rank >= 2 && SK::rank >= 2;
  static_assert(Quiet || ranks_ok ||
                    error::holds<error::pairwise_needs_rank_2_operands<error::query_rank<SQ::rank>, error::key_rank<SK::rank>>>,
                "attnx: pairwise: Q and K need at least two axes (rows x features; use a 1 x d tensor for one vector)");
  if constexpr (ranks_ok) {
    using QF = typename SQ::template axis_t<SQ::rank - 1>;
    using KF = typename SK::template axis_t<SK::rank - 1>;
    constexpr bool extents_ok = may_equal_extents(QF::extent, KF::extent);
    constexpr bool names_ok = names_unify_v<typename QF::name, typename KF::name>;
    static_assert(Quiet || extents_ok ||
                      error::holds<error::pairwise_feature_extents_differ<error::query_features<QF::extent>,
                                                                          error::key_features<KF::extent>>>,
                  "attnx: pairwise: the queries' and keys' feature extents differ (rows of Q and K are compared)");
    static_assert(Quiet || !extents_ok || names_ok ||
                      error::holds<error::pairwise_feature_axes_differ<error::query_feature_axis<typename QF::name>,
                                                                       error::key_feature_axis<typename KF::name>>>,
                  "attnx: pairwise: the queries' and keys' feature axes have different names");
    constexpr bool quiet = Quiet || !extents_ok || !names_ok;
    // K: a plain matrix shared by every batch item, or exactly Q's batch axes.
    constexpr bool shared = SK::rank == 2;
    constexpr bool batch_rank_ok = shared || SK::rank == SQ::rank;
    static_assert(quiet || batch_rank_ok ||
                      error::holds<error::pairwise_batch_ranks_differ<error::query_rank<SQ::rank>, error::key_rank<SK::rank>>>,
                  "attnx: pairwise: a batched K must have Q's batch axes (or be a plain matrix shared by all)");
    if constexpr (!shared && SK::rank == SQ::rank) {
      constexpr std::size_t nbatch = SQ::rank - 2;
      constexpr auto first = [](bool names) {
        std::size_t bad = nbatch;
        [&]<std::size_t... I>(std::index_sequence<I...>) {
          ((bad == nbatch && [&] {
             using QA = typename SQ::template axis_t<I>;
             using KA = typename SK::template axis_t<I>;
             constexpr bool may_equal = may_equal_extents(QA::extent, KA::extent);
             return names ? (may_equal && !names_unify_v<typename QA::name, typename KA::name>) : !may_equal;
           }() ? (bad = I, 0) : 0),
           ...);
        }(std::make_index_sequence<nbatch>{});
        return bad;
      };
      constexpr std::size_t e = first(false);
      using EX = typename SQ::template axis_t<(e < nbatch ? e : 0)>;
      using EY = typename SK::template axis_t<(e < nbatch ? e : 0)>;
      static_assert(quiet || e == nbatch ||
                        error::holds<error::pairwise_batch_extents_differ<
                            error::axis_index<e>, error::query_batch_extent<EX::extent>, error::key_batch_extent<EY::extent>>>,
                    "attnx: pairwise: the batch extents of Q and K differ");
      constexpr std::size_t n = first(true);
      using NX = typename SQ::template axis_t<(n < nbatch ? n : 0)>;
      using NY = typename SK::template axis_t<(n < nbatch ? n : 0)>;
      static_assert(quiet || e < nbatch || n == nbatch ||
                        error::holds<error::pairwise_batch_axes_differ<error::axis_index<n>, error::query_batch_axis<typename NX::name>,
                                                                       error::key_batch_axis<typename NY::name>>>,
                    "attnx: pairwise: the batch axes of Q and K have different names");
      return extents_ok && names_ok && e == nbatch && n == nbatch;
    } else {
      return extents_ok && names_ok && batch_rank_ok;
    }
  } else {
    return false;
  }
}

template <class F, class T, bool Quiet = false>
constexpr bool check_similarity() {
  static_assert(Quiet || detail::similarity_callable_v<F, T> ||
                    error::holds<error::pairwise_similarity_not_callable<error::element_type<T>>>,
                "attnx: pairwise: the similarity must be callable as f(std::span<const T> q, std::span<const T> k) "
                "and return a value convertible to T");
  return detail::similarity_callable_v<F, T>;
}

// additive_scores: Q W1 and K W2 must have the same hidden extent h, and w h elements.
// (A dyn extent passes here; check_additive_dims compares the run-time values.)
template <class W1, class W2, class W, bool Quiet = false>
constexpr bool check_additive() {
  constexpr std::size_t h1 = W1::cols, h2 = W2::cols;
  constexpr bool hidden_ok = may_equal_extents(h1, h2);
  static_assert(Quiet || hidden_ok ||
                    error::holds<error::additive_hidden_extents_differ<error::query_hidden<h1>, error::key_hidden<h2>>>,
                "attnx: additive_scores: W1 and W2 must project to the same hidden extent (their column counts differ)");
  constexpr bool w_ok = may_equal_extents(W::size, h1);
  static_assert(Quiet || !hidden_ok || w_ok ||
                    error::holds<error::additive_weight_size_differs<error::weight_size<W::size>, error::hidden_extent<h1>>>,
                "attnx: additive_scores: w must have one element per hidden unit (the column count of W1 and W2)");
  return hidden_ok && w_ok;
}
template <class W1, class W2, class W>
constexpr void check_additive_dims(const dims_t<W1::rank>& w1, const dims_t<W2::rank>& w2, const dims_t<W::rank>& w) {
  const std::size_t h1 = dims_cols(w1), h2 = dims_cols(w2), n = dims_size(w);
  if (h1 != h2)
    detail::throw_extent_error("additive_scores: W1 and W2 must project to the same hidden extent (their column counts differ)",
                               "query_hidden", h1, "key_hidden", h2);
  if (n != h1)
    detail::throw_extent_error("additive_scores: w must have one element per hidden unit (the column count of W1 and W2)",
                               "weight_size", n, "hidden_extent", h1);
}
// The run-time half, where an extent is dyn: the feature extents, then the batch axes of a batched K.
template <class SQ, class SK>
constexpr void check_pairwise_dims(const dims_t<SQ::rank>& q, const dims_t<SK::rank>& k) {
  if (q[SQ::rank - 1] != k[SK::rank - 1])
    detail::throw_extent_error("pairwise: the queries' and keys' feature extents differ (rows of Q and K are compared)",
                               "query_features", q[SQ::rank - 1], "key_features", k[SK::rank - 1]);
  if constexpr (SK::rank > 2) {
    for (std::size_t a = 0; a + 2 < SK::rank; ++a)
      if (q[a] != k[a])
        detail::throw_extent_error("pairwise: the batch extents of Q and K differ on axis " + std::to_string(a),
                                   "query_batch_extent", q[a], "key_batch_extent", k[a]);
  }
}
}  // namespace rules

// ---- building scores -------------------------------------------------------------------------------
namespace detail {
template <bool Quiet, class Q, class K, class F>
constexpr auto make_pairwise(Q&& q, K&& k, F&& f) {
  using FD = std::decay_t<F>;
  using SQ = shape_of_t<Q>;
  using SK = shape_of_t<K>;
  using T = std::common_type_t<value_t<Q>, value_t<K>>;
  constexpr bool quiet = Quiet || any_failed_v<Q, K>;
  constexpr bool shapes_ok = rules::check_pairwise<SQ, SK, quiet>();
  constexpr bool types_ok = rules::check_element_types<value_t<Q>, value_t<K>, quiet || !shapes_ok>();
  constexpr bool f_ok = rules::check_similarity<FD, T, quiet || !shapes_ok || !types_ok>();
  if constexpr (quiet || !shapes_ok || !types_ok || !f_ok) {
    return failed_expr<T, pairwise_shape_t<SQ, SK>>{};
  } else {
    if constexpr (!SQ::is_static || !SK::is_static) rules::check_pairwise_dims<SQ, SK>(dims_of(q), dims_of(k));
    return pairwise_expr<FD, stored_t<Q>, stored_t<K>>(store(std::forward<Q>(q)), store(std::forward<K>(k)),
                                                       std::forward<F>(f));
  }
}
}  // namespace detail

// s_ij = f(q_i, k_j) for every query row i and key row j.
template <expression Q, expression K, class F>
  requires(!expression<F>)
constexpr auto pairwise(Q&& q, K&& k, F&& f) {
  return detail::make_pairwise<false>(std::forward<Q>(q), std::forward<K>(k), std::forward<F>(f));
}

// q . k * scale, by default scale = 1 / sqrt(d) (then equal to scaled_scores(Q, K)).
template <expression Q, expression K>
constexpr auto dot_scores(Q&& q, K&& k, double scale) {
  return pairwise(std::forward<Q>(q), std::forward<K>(k), similarity::dot{scale});
}
template <expression Q, expression K>
constexpr auto dot_scores(Q&& q, K&& k) {
  const std::size_t d = dims_cols(dims_of(q));  // may be dyn
  return dot_scores(std::forward<Q>(q), std::forward<K>(k), 1.0 / math::sqrt(static_cast<double>(d)));
}
template <expression Q, expression K>
constexpr auto cosine_scores(Q&& q, K&& k, double tau, double eps = 1e-9) {
  return pairwise(std::forward<Q>(q), std::forward<K>(k), similarity::cosine{tau, eps});
}
template <expression Q, expression K>
constexpr auto rbf_scores(Q&& q, K&& k, double tau) {
  return pairwise(std::forward<Q>(q), std::forward<K>(k), similarity::rbf{tau});
}

// Bahdanau: s_ij = w^T tanh(W1^T q_i + W2^T k_j), with W1 (d_q, h), W2 (d_k, h), w of h elements.
// Q * W1 is evaluated one row at a time, K * W2 once; the Lq x Lk x h tensor of sums is never formed.
template <expression Q, expression K, expression W1, expression W2, expression W>
constexpr auto additive_scores(Q&& q, K&& k, W1&& w1, W2&& w2, W&& w) {
  constexpr bool ok = rules::check_additive<shape_of_t<W1>, shape_of_t<W2>, shape_of_t<W>, any_failed_v<Q, K, W1, W2, W>>();
  if constexpr (ok && !any_failed_v<Q, K, W1, W2, W> &&
                (!shape_of_t<W1>::is_static || !shape_of_t<W2>::is_static || !shape_of_t<W>::is_static))
    rules::check_additive_dims<shape_of_t<W1>, shape_of_t<W2>, shape_of_t<W>>(dims_of(w1), dims_of(w2), dims_of(w));
  return detail::make_pairwise<!ok>(std::forward<Q>(q) * std::forward<W1>(w1), std::forward<K>(k) * std::forward<W2>(w2),
                                   similarity::additive(std::forward<W>(w)));
}

// With a bias b of h elements on the hidden layer: s_ij = w^T tanh(W1^T q_i + W2^T k_j + b). (The
// bias is added to the query side, Q * W1 + b, before the sum; b broadcasts as in any element-wise sum.)
template <expression Q, expression K, expression W1, expression W2, expression W, expression B>
constexpr auto additive_scores(Q&& q, K&& k, W1&& w1, W2&& w2, W&& w, B&& b) {
  constexpr bool ok = rules::check_additive<shape_of_t<W1>, shape_of_t<W2>, shape_of_t<W>, any_failed_v<Q, K, W1, W2, W>>();
  if constexpr (ok && !any_failed_v<Q, K, W1, W2, W> &&
                (!shape_of_t<W1>::is_static || !shape_of_t<W2>::is_static || !shape_of_t<W>::is_static))
    rules::check_additive_dims<shape_of_t<W1>, shape_of_t<W2>, shape_of_t<W>>(dims_of(w1), dims_of(w2), dims_of(w));
  return detail::make_pairwise<!ok>(std::forward<Q>(q) * std::forward<W1>(w1) + std::forward<B>(b),
                                   std::forward<K>(k) * std::forward<W2>(w2), similarity::additive(std::forward<W>(w)));
}

// Foreign arguments (a std::vector, a pointer): one error saying how to wrap them.
template <class Q, class K, class F>
  requires(any_foreign<Q, K> && !expression<F>)
constexpr auto pairwise(Q&&, K&&, F&&) {
  return foreign_arguments<Q, K>();
}
template <class Q, class K, class... Args>
  requires any_foreign<Q, K>
constexpr auto dot_scores(Q&&, K&&, Args...) {
  return foreign_arguments<Q, K>();
}
template <class Q, class K, class... Args>
  requires any_foreign<Q, K>
constexpr auto cosine_scores(Q&&, K&&, Args...) {
  return foreign_arguments<Q, K>();
}
template <class Q, class K, class... Args>
  requires any_foreign<Q, K>
constexpr auto rbf_scores(Q&&, K&&, Args...) {
  return foreign_arguments<Q, K>();
}
template <class Q, class K, class W1, class W2, class W, class... B>
  requires(sizeof...(B) <= 1 && any_foreign<Q, K, W1, W2, W, B...>)
constexpr auto additive_scores(Q&&, K&&, W1&&, W2&&, W&&, B&&...) {
  return foreign_arguments<Q, K, W1, W2, W, B...>();
}

}  // namespace attnx
