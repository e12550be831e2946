// attnx: printing tensors and expressions. Ranks 0 to 2 as nested brackets (as the worked example prints its
// matrices); rank 3 and above as its shape, with the axes' names and extents, then one matrix per index of the
// leading axes, each under its index:
//   [batch=2, 2, 3]
//   (0, :, :) =
//   [[1, 2, 3],
//    [4, 5, 6]]
//   (1, :, :) = ...
// An expression prints its value (std::cout << Q * transpose(K) evaluates it, with the current context).
#pragma once

#include <cstddef>
#include <iosfwd>  // the operators are templates on the stream, so <ostream> (heavy) comes with the
                    // program's own <iostream> or <sstream>, not with attnx

#include "attnx/core/expression.hpp"
#include "attnx/eval/assign.hpp"
#include "attnx/shape/shape.hpp"
#include "attnx/tensor/tensor.hpp"
#include "attnx/tensor/view.hpp"

namespace attnx {

namespace detail {
template <class Os, class T>
void print_elements(Os& os, const T* p, const std::size_t* ext, std::size_t rank, std::size_t indent) {
  if (rank == 0) {
    os << *p;
    return;
  }
  std::size_t inner = 1;
  for (std::size_t k = 1; k < rank; ++k) inner *= ext[k];
  os << '[';
  for (std::size_t i = 0; i < ext[0]; ++i) {
    if (i) {
      os << (rank > 1 ? ",\n" : ", ");
      if (rank > 1)
        for (std::size_t k = 0; k <= indent; ++k) os << ' ';
    }
    print_elements(os, p + i * inner, ext + 1, rank - 1, indent + 1);
  }
  os << ']';
}

template <class S, class Os, class T>
void print_terminal(Os& os, const T* p, const dims_t<S::rank>& d) {
  constexpr std::size_t R = S::rank;
  if constexpr (R <= 2) {
    print_elements(os, p, d.data(), R, 0);
  } else {
    os << shape_string<S>(d).c_str();
    const std::size_t matrix = d[R - 2] * d[R - 1];
    std::size_t count = 1;
    for (std::size_t k = 0; k + 2 < R; ++k) count *= d[k];
    for (std::size_t n = 0; n < count; ++n) {
      os << "\n(";
      for (std::size_t k = 0, rest = n, stride = count; k + 2 < R; ++k) {
        stride /= d[k];
        os << rest / stride << ", ";
        rest %= stride;
      }
      os << ":, :) =\n";
      print_elements(os, p + n * matrix, d.data() + (R - 2), 2, 0);
    }
  }
}
}  // namespace detail

template <class C, class Tr, class T, class S>
std::basic_ostream<C, Tr>& operator<<(std::basic_ostream<C, Tr>& os, const basic_tensor<T, S>& t) {
  detail::print_terminal<S>(os, t.data(), t.dims());
  return os;
}
template <class C, class Tr, class T, class S>
std::basic_ostream<C, Tr>& operator<<(std::basic_ostream<C, Tr>& os, const basic_view<T, S>& v) {
  detail::print_terminal<S>(os, v.data(), v.dims());
  return os;
}
// Any other expression: its value.
template <class C, class Tr, expression E>
  requires(!dense_terminal<E>)
std::basic_ostream<C, Tr>& operator<<(std::basic_ostream<C, Tr>& os, const E& e) {
  return os << evaluate(e);
}

}  // namespace attnx
