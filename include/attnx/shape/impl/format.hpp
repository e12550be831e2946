// attnx: run-time messages: the text of shapes, extent errors (the library's, or inline with ATTNX_HEADER_ONLY).
#pragma once

#include <string>
#include <string_view>

#include "attnx/shape/errors.hpp"
#include "attnx/shape/shape.hpp"

namespace attnx::detail {

ATTNX_LIB_INLINE std::string format_shape(const std::string_view* names, const std::size_t* extents, std::size_t rank) {
  std::string out = "[";
  for (std::size_t k = 0; k < rank; ++k) {
    if (k) out += ", ";
    if (!names[k].empty()) (out += names[k]) += '=';
    out += extents[k] == dyn ? std::string("dyn") : std::to_string(extents[k]);
  }
  return out + "]";
}

ATTNX_LIB_INLINE void throw_extent_error(const std::string& what, const char* fact1, std::size_t n1, const char* fact2,
                                         std::size_t n2) {
  ATTNX_THROW(extent_error("attnx: " + what + ": " + fact1 + " " + std::to_string(n1) + ", " + fact2 + " " + std::to_string(n2)));
}

}  // namespace attnx::detail
