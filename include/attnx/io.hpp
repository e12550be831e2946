// attnx: printing tensors (nested brackets, like the worked example prints matrices).
#pragma once

#include <cstddef>
#include <iosfwd>  // the operators are templates on the stream, so <ostream> (heavy) comes with the
                    // program's own <iostream> or <sstream>, not with attnx

#include "attnx/core/expression.hpp"
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
}  // namespace detail

template <class C, class Tr, class T, class S>
std::basic_ostream<C, Tr>& operator<<(std::basic_ostream<C, Tr>& os, const basic_tensor<T, S>& t) {
  const auto d = t.dims();
  detail::print_elements(os, t.data(), d.data(), S::rank, 0);
  return os;
}
template <class C, class Tr, class T, class S>
std::basic_ostream<C, Tr>& operator<<(std::basic_ostream<C, Tr>& os, const basic_view<T, S>& v) {
  const auto d = v.dims();
  detail::print_elements(os, v.data(), d.data(), S::rank, 0);
  return os;
}

}  // namespace attnx
