// attnx: the evaluator of pairwise scores (expr/pairwise.hpp): begin_row(r) evaluates row r of Q (or reads it in
// place), prepares it when the similarity wants, then computes its Lk scores against K's rows, read at random (in
// memory once: K itself, or a copy of element type T).
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

#include "attnx/eval/evaluator.hpp"
#include "attnx/expr/cast.hpp"
#include "attnx/expr/pairwise.hpp"
#include "attnx/tensor/storage.hpp"
#include "attnx/tensor/tensor.hpp"

namespace attnx {

namespace detail {
// The extent of the second-to-last axis (1 for shapes the rank rule rejects).
template <class S>
constexpr std::size_t matrix_rows() {
  if constexpr (S::rank >= 2) {
    return S::extents[S::rank - 2];
  } else {
    return 1;
  }
}

// Rows of K, read at random: K's own memory when possible, else a copy of element type T made once
// (K an expression of another type, or keys the similarity prepares in place).
template <class T, class K, bool Copy = (!std::is_same_v<value_t<K>, T>)>
struct key_rows {
  constexpr explicit key_rows(const K& k) : d(k) {}
  constexpr const T* data() const noexcept { return d.data(); }
  dense_operand<K> d;
};
template <class T, class K>
struct key_rows<T, K, true> {
  constexpr explicit key_rows(const K& k) : t(cast<T>(k)) {}
  constexpr T* data() noexcept { return t.data(); }
  constexpr const T* data() const noexcept { return t.data(); }
  basic_tensor<T, shape_of_t<K>> t;
};
}  // namespace detail

template <class F, class Q, class K>
struct evaluator<pairwise_expr<F, Q, K>> {
  using E = pairwise_expr<F, Q, K>;
  using T = value_t<E>;
  using SQ = shape_of_t<Q>;
  using SK = shape_of_t<K>;
  using bound = detail::bound_similarity_t<F, T>;
  static constexpr bool prepares = detail::preparing_similarity<bound, T>;
  static constexpr std::size_t SD = SQ::cols;   // features of a query row (dyn: known at run time)
  static constexpr std::size_t SDK = SK::cols;  // features of a key row (== D when the rules hold)
  static constexpr std::size_t SLq = detail::matrix_rows<SQ>();
  static constexpr std::size_t SLk = detail::matrix_rows<SK>();
  static constexpr bool batched_k = SK::rank > 2;
  // Q's row is read where it lies when it is already in memory, of type T, and not to be prepared.
  static constexpr bool copy_q = !(dense_terminal<Q> && std::is_same_v<value_t<Q>, T> && !prepares);

  constexpr explicit evaluator(const E& e)
      : q(e.queries()), k(e.keys()), f(detail::bind_similarity<F, T>(e.similarity())), D(dims_cols(dims_of(e.queries()))),
        DK(dims_cols(dims_of(e.keys()))), Lq(matrix_rows_of<SQ>(dims_of(e.queries()))),
        Lk(matrix_rows_of<SK>(dims_of(e.keys()))), qbuf(uninitialized, copy_q ? std::size_t(D) : 1), out(uninitialized, Lk) {
    if constexpr (prepares) {
      T* kp = k.data();
      const std::size_t krows = dims_rows(dims_of(e.keys()));
      for (std::size_t r = 0; r < krows; ++r) f.prepare(std::span<T>(kp + r * DK, DK));
    }
  }
  template <class S>
  static constexpr std::size_t matrix_rows_of(const dims_t<S::rank>& d) {
    if constexpr (S::rank >= 2) {
      return d[S::rank - 2];
    } else {
      return 1;
    }
  }

  constexpr void begin_row(std::size_t r) {
    q.begin_row(r);
    const T* qrow;
    if constexpr (copy_q) {
      T* b = qbuf.data();
      for (std::size_t p = 0; p < D; ++p) b[p] = static_cast<T>(q.at(p));
      if constexpr (prepares) f.prepare(std::span<T>(b, D));
      qrow = b;
    } else {
      qrow = q.row;
    }
    const std::span<const T> qs(qrow, D);
    const T* kb = k.data() + (batched_k ? (r / Lq) * Lk * DK : 0);
    T* o = out.data();
    for (std::size_t j = 0; j < Lk; ++j) {
      const std::span<const T> ks(kb + j * DK, DK);
      if constexpr (prepares) {
        o[j] = static_cast<T>(std::as_const(f).prepared(qs, ks));
      } else if constexpr (std::is_invocable_v<const bound&, std::span<const T>, std::span<const T>>) {
        o[j] = static_cast<T>(std::as_const(f)(qs, ks));
      } else {
        o[j] = T(0);  // not callable: rejected by the similarity rule already, no second error here
      }
    }
  }
  constexpr T at(std::size_t j) const { return out.data()[j]; }

  evaluator<Q> q;
  detail::key_rows<T, K, (prepares || !std::is_same_v<value_t<K>, T>)> k;
  bound f;
  [[no_unique_address]] extent_value<SD> D;
  [[no_unique_address]] extent_value<SDK> DK;
  [[no_unique_address]] extent_value<SLq> Lq;
  [[no_unique_address]] extent_value<SLk> Lk;
  storage<T, (copy_q ? SD : 1)> qbuf;
  storage<T, SLk> out;
};

}  // namespace attnx
