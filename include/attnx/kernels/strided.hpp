// attnx: how the kernels see memory. The evaluators export their operands in these terms
// (eval/strided_operand.hpp); the kernels take nothing else.
#pragma once

#include <cstddef>

namespace attnx::kernels {

// A stack of matrices with contiguous rows: element c of row i of matrix (b, h) is at
//   data[b * batch + h * head + i * row + c].
// A stride of 0 shares one matrix along that axis (a K used by every batch item, a K/V head used by
// several query heads is expressed by the kernel's head grouping instead).
template <class T>
struct strided {
  T* data = nullptr;
  std::ptrdiff_t batch = 0, head = 0, row = 0;

  T* matrix(std::size_t b, std::size_t h) const noexcept {  // (an empty operand may have no memory at all)
    return data ? data + static_cast<std::ptrdiff_t>(b) * batch + static_cast<std::ptrdiff_t>(h) * head : data;
  }
};

// An operand broadcast to the scores' (batch, heads, L_q, L_k): element (b, h, i, j) at
//   data[b * batch + h * head + i * row + j * col],
// a stride of 0 repeating it along that axis (a (B, 1, 1, L_k) padding mask has head = row = 0).
template <class T>
struct broadcast {
  T* data = nullptr;
  std::ptrdiff_t batch = 0, head = 0, row = 0, col = 0;

  T& at(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const noexcept {
    return data[static_cast<std::ptrdiff_t>(b) * batch + static_cast<std::ptrdiff_t>(h) * head +
                static_cast<std::ptrdiff_t>(i) * row + static_cast<std::ptrdiff_t>(j) * col];
  }
};

}  // namespace attnx::kernels
