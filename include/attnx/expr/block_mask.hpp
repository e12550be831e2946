// attnx: a bool mask with its block summary kept across calls (PyTorch FlexAttention's BlockMask, for bool tensors).
//
//   attnx::block_mask bm(M);                       M a bool tensor, true = allowed; summarised once, here
//   auto o = attention(Q, K, V, allowed(bm));      the fused kernel skips the tiles M blocks, reads no element of M in
//                                                  the tiles it allows, and reads M only in the tiles it partly blocks
//   ... M changed ...  bm.refresh();              (the summary is of M as it was: refresh it after changing M)
//
// Without a summary, a bool mask is summarised tile by tile as the kernel reaches each tile, which reads all of M
// on every call (L_q x L_k bytes). The summary holds one byte per 8 x 8 block of each of M's matrices (0: the block
// blocks every key, 1: some, 2: it allows every key), 1/64 of M's size, and the kernels' tiles are whole numbers of
// blocks. allowed(bm) is allowed(M) everywhere else (the row evaluator, the decode kernel, gradients), so a result
// never depends on whether the summary is used, only its speed. M is held by reference: it must outlive bm and
// every expression built from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "attnx/core/expression.hpp"
#include "attnx/expr/mask.hpp"
#include "attnx/shape/errors.hpp"
#include "attnx/tensor/tensor.hpp"

namespace attnx {

// A bool tensor of shape S with its summary by 8 x 8 blocks of its last two axes.
template <class S>
class block_mask {
 public:
  static constexpr std::size_t block = 8;
  explicit block_mask(const basic_tensor<bool, S>& m) : m_(&m) { refresh(); }
  template <class X>
    requires std::is_same_v<X, basic_tensor<bool, S>>
  explicit block_mask(X&&) {  // a temporary mask would dangle
    static_assert(error::holds<error::block_mask_needs_a_named_tensor<error::tensor_shape_of<S>>>,
                  "attnx: block_mask(M): M must be a named tensor that outlives the block mask (it is held by reference)");
  }

  // Summarises M again (after M changed).
  void refresh() {
    const auto d = dims_of(*m_);
    rows_ = S::rank >= 2 ? d[S::rank - 2] : 1;
    cols_ = d[S::rank - 1];
    const std::size_t br = (rows_ + block - 1) / block, bc = (cols_ + block - 1) / block;
    const std::size_t mats = rows_ * cols_ == 0 ? 0 : dims_size(d) / (rows_ * cols_);
    state_.assign(mats * br * bc, 0);
    const bool* x = m_->data();
    for (std::size_t k = 0; k < mats; ++k)
      for (std::size_t bi = 0; bi < br; ++bi)
        for (std::size_t bj = 0; bj < bc; ++bj) {
          std::size_t n = 0, all = 0;
          for (std::size_t i = bi * block; i < rows_ && i < (bi + 1) * block; ++i)
            for (std::size_t j = bj * block; j < cols_ && j < (bj + 1) * block; ++j, ++all)
              n += x[(k * rows_ + i) * cols_ + j] ? 1u : 0u;
          state_[(k * br + bi) * bc + bj] = n == 0 ? 0 : n == all ? 2 : 1;
        }
  }
  const basic_tensor<bool, S>& mask() const noexcept { return *m_; }
  // The summary: matrix k's block (bi, bj) at (k * block_rows() + bi) * block_cols() + bj.
  const std::uint8_t* summary() const noexcept { return state_.data(); }
  std::size_t rows() const noexcept { return rows_; }
  std::size_t cols() const noexcept { return cols_; }

 private:
  const basic_tensor<bool, S>* m_;
  std::vector<std::uint8_t> state_;
  std::size_t rows_ = 0, cols_ = 0;
};
template <class S>
block_mask(const basic_tensor<bool, S>&) -> block_mask<S>;

// allowed(bm): allowed(M) with M's summary for the fused kernel; blocked(bm) is not offered (its summary would be
// of !M: summarise the allowed mask).
template <class S>
auto allowed(const block_mask<S>& bm) {
  bool_mask<tensor_ref<bool, S>> m{tensor_ref<bool, S>(bm.mask())};
  m.blocks = {bm.summary(), bm.rows(), bm.cols()};
  return m;
}

}  // namespace attnx
