// attnx: the compile-time errors of the modules (multi_head_attention, the nn layers).
//
// Same style as attnx/shape/errors.hpp: one `static_assert(ok || holds<error::RULE<facts...>>, "attnx: ...")`
// per rule, the facts carrying the numbers into the compiler's output. The facts d_model<N>, heads<N> and
// rank<N> of the core vocabulary are reused; the ones below are new.
#pragma once

#include <cstddef>

#include "attnx/shape/errors.hpp"

namespace attnx::error {

// Facts.
template <std::size_t N> struct kv_heads {};
template <std::size_t N> struct d_k {};
template <std::size_t N> struct d_v {};
template <std::size_t N> struct input_features {};
template <std::size_t N> struct memory_features {};
template <std::size_t N> struct input_rank {};
template <std::size_t N> struct memory_rank {};
template <std::size_t N> struct input_batch {};
template <std::size_t N> struct memory_batch {};

// Rules.
template <class... Facts> struct mha_needs_heads { static constexpr bool value = false; };
template <class... Facts> struct mha_d_model_not_divisible_by_heads { static constexpr bool value = false; };
template <class... Facts> struct mha_heads_not_divisible_by_kv_heads { static constexpr bool value = false; };
template <class... Facts> struct mha_input_needs_rank_2_or_3 { static constexpr bool value = false; };
template <class... Facts> struct mha_input_features_differ_from_d_model { static constexpr bool value = false; };
template <class... Facts> struct mha_memory_features_differ_from_d_model { static constexpr bool value = false; };
template <class... Facts> struct mha_memory_rank_differs_from_input { static constexpr bool value = false; };
template <class... Facts> struct mha_memory_batch_differs_from_input { static constexpr bool value = false; };
template <class... Facts> struct layer_input_needs_an_axis { static constexpr bool value = false; };
template <class... Facts> struct layer_input_features_differ { static constexpr bool value = false; };

}  // namespace attnx::error
