// attnx: generic walks over an expression tree.
//
// Every node lists its operands as a boost::hana tuple of pointers (operands()); the walks below are
// written once against that, for every node type there is or will be. They run at run time only
// where they compare addresses (unrelated pointers cannot be ordered in a constant expression).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <boost/hana/for_each.hpp>
#include <boost/hana/fold_left.hpp>
#include <boost/hana/tuple.hpp>

#include "attnx/core/expression.hpp"

namespace attnx {

// f(const T* data, std::size_t count) for every terminal that reads memory (tensors, views).
template <class E, class F>
constexpr void for_each_terminal(const E& e, F&& f) {
  if constexpr (dense_terminal<E>) {
    f(e.data(), dims_size(dims_of(e)));  // the run-time count (a dyn shape has no static size)
  } else if constexpr (requires { e.operands(); }) {
    boost::hana::for_each(e.operands(), [&](auto p) { for_each_terminal(*p, f); });
  }
}

// Does evaluating e read any of the `count` elements at `p`? (Then e must not be evaluated in place
// into p: evaluation goes through a fresh buffer.)
template <class E, class T>
bool reads_memory(const E& e, const T* p, std::size_t count) {
  bool hit = false;
  for_each_terminal(e, [&](const auto* data, std::size_t n) {
    // As addresses (a total order for pointers into different objects, as std::less gives).
    const auto a = reinterpret_cast<std::uintptr_t>(data);
    const auto b = reinterpret_cast<std::uintptr_t>(p);
    if (a < b + count * sizeof(T) && b < a + n * sizeof(*data)) hit = true;
  });
  return hit;
}

// The number of nodes (terminals included): a measure of an expression's size, used in tests and docs.
template <class E>
constexpr std::size_t node_count() {
  if constexpr (requires(const E& e) { e.operands(); }) {
    using ops = decltype(std::declval<const E&>().operands());
    return boost::hana::fold_left(ops{}, std::size_t{1}, [](std::size_t acc, auto p) {
      return acc + node_count<std::remove_cvref_t<decltype(*p)>>();
    });
  } else {
    return 1;
  }
}

}  // namespace attnx
