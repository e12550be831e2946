// attnx: the vocabulary of compile-time errors.
//
// Every shape rule is one `static_assert(ok || holds<error::RULE<facts...>>, "attnx: ...")`.
// The message names the rule in words; the facts carry the numbers and axis names into the
// compiler's output (g++ prints the failing expression in a note, clang in the requirement), so the
// user sees e.g. `matmul_inner_extents_differ<lhs_columns<4>, rhs_rows<3>>` — both sizes, once.
// The node is still built with a well-formed shape, so no cascade of follow-on errors appears.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "attnx/config.hpp"
#include "attnx/shape/axis.hpp"

namespace attnx::error {

// Facts: the numbers and names that a message reports.
template <std::size_t N> struct lhs_columns {};
template <std::size_t N> struct rhs_rows {};
template <class Name> struct lhs_column_axis {};
template <class Name> struct rhs_row_axis {};
template <std::size_t N> struct lhs_rank {};
template <std::size_t N> struct rhs_rank {};
template <std::size_t N> struct rank {};
template <std::size_t N> struct axis_index {};
template <std::size_t N> struct lhs_extent {};
template <std::size_t N> struct rhs_extent {};
template <class Name> struct lhs_axis {};
template <class Name> struct rhs_axis {};
template <std::size_t N> struct mask_extent {};
template <std::size_t N> struct score_extent {};
template <std::size_t N> struct target_extent {};
template <std::size_t N> struct source_extent {};
template <class Name> struct target_axis {};
template <class Name> struct source_axis {};
template <class Name> struct requested_axis {};
template <class Name> struct last_axis {};
template <std::size_t N> struct key_length {};
template <std::size_t N> struct keys {};
template <std::size_t N> struct d_model {};
template <std::size_t N> struct heads {};
template <class T> struct lhs_element_type {};
template <class T> struct rhs_element_type {};
template <class T> struct target_element_type {};
template <class T> struct source_element_type {};
// Whole shapes, as their extents: target_shape<4, 3> and source_shape<3, 4>.
template <std::size_t... E> struct target_shape {};
template <std::size_t... E> struct source_shape {};
template <std::size_t... E> struct view_shape {};
template <std::size_t... E> struct tensor_shape {};
template <std::size_t N> struct value_rows {};
template <std::size_t N> struct L_k {};
template <std::size_t N> struct mask_batch {};
template <class T> struct argument_type {};
template <std::size_t N> struct argument_position {};
template <class T> struct element_type {};
template <class T> struct result_type {};
template <class T> struct condition_element_type {};
template <std::size_t N> struct features {};
template <bool B> struct cross_attention {};
template <std::size_t N> struct weight_extent {};
template <std::size_t N> struct weight_rank {};
template <std::size_t N> struct slice_end {};
template <std::size_t N> struct extent {};
template <std::size_t N> struct source_size {};
template <std::size_t N> struct target_size {};
template <std::size_t N> struct mask_count {};

// A shape with a dyn axis as a fact: its extents as types, extent<N> or dyn_extent (a dyn extent as a number would
// print as 18446744073709551615): target_extents<dyn_extent, extent<4>>.
struct dyn_extent {};
template <class... E> struct target_extents {};
template <class... E> struct source_extents {};
template <class... E> struct view_extents {};
template <class... E> struct tensor_extents {};

namespace detail {
template <std::size_t N>
struct extent_type {
  using type = extent<N>;
};
template <>
struct extent_type<dyn> {
  using type = dyn_extent;
};
template <template <std::size_t...> class Fact, template <class...> class DynFact, class S,
          class Seq = std::make_index_sequence<S::rank>>
struct extents_fact;
template <template <std::size_t...> class Fact, template <class...> class DynFact, class S, std::size_t... I>
struct extents_fact<Fact, DynFact, S, std::index_sequence<I...>> {
  using type = std::conditional_t<S::is_static, Fact<S::extents[I]...>, DynFact<typename extent_type<S::extents[I]>::type...>>;
};
}  // namespace detail
// A shape S as the fact target_shape<E...> (source_shape, view_shape, tensor_shape): its extents in the message;
// with a dyn axis, target_extents<...> (above).
template <class S> using target_shape_of = typename detail::extents_fact<target_shape, target_extents, S>::type;
template <class S> using source_shape_of = typename detail::extents_fact<source_shape, source_extents, S>::type;
template <class S> using view_shape_of = typename detail::extents_fact<view_shape, view_extents, S>::type;
template <class S> using tensor_shape_of = typename detail::extents_fact<tensor_shape, tensor_extents, S>::type;

// Rules. Each is only ever named inside `holds<...>`, which is false: the rule failed.
template <class... Facts> struct matmul_inner_extents_differ { static constexpr bool value = false; };
template <class... Facts> struct matmul_inner_axes_differ { static constexpr bool value = false; };
template <class... Facts> struct matmul_needs_rank_2_operands { static constexpr bool value = false; };
template <class... Facts> struct matmul_batch_axes_differ { static constexpr bool value = false; };
template <class... Facts> struct elementwise_extents_differ { static constexpr bool value = false; };
template <class... Facts> struct elementwise_axes_differ { static constexpr bool value = false; };
template <class... Facts> struct transpose_needs_rank_2 { static constexpr bool value = false; };
template <class... Facts> struct mask_extents_differ { static constexpr bool value = false; };
template <class... Facts> struct mask_axes_differ { static constexpr bool value = false; };
template <class... Facts> struct mask_needs_rank_2_scores { static constexpr bool value = false; };
template <class... Facts> struct mask_must_be_boolean { static constexpr bool value = false; };
template <class... Facts> struct bool_mask_needs_polarity { static constexpr bool value = false; };
template <class... Facts> struct key_length_exceeds_keys { static constexpr bool value = false; };
template <class... Facts> struct key_padding_mask_shape { static constexpr bool value = false; };
template <class... Facts> struct key_padding_mask_temporary { static constexpr bool value = false; };
template <class... Facts> struct key_padding_mask_unbatched_scores { static constexpr bool value = false; };
template <class... Facts> struct softmax_axis_is_not_last { static constexpr bool value = false; };
template <class... Facts> struct softmax_needs_rank_1 { static constexpr bool value = false; };
template <class... Facts> struct assignment_extents_differ { static constexpr bool value = false; };
template <class... Facts> struct assignment_axes_differ { static constexpr bool value = false; };
template <class... Facts> struct assignment_ranks_differ { static constexpr bool value = false; };
template <class... Facts> struct d_model_not_divisible_by_heads { static constexpr bool value = false; };
template <class... Facts> struct heads_need_a_sequence_axis { static constexpr bool value = false; };
template <class... Facts> struct element_types_differ { static constexpr bool value = false; };
template <class... Facts> struct assignment_element_types_differ { static constexpr bool value = false; };
template <class... Facts> struct view_shape_differs_from_tensor { static constexpr bool value = false; };
template <class... Facts> struct view_element_type_differs_from_tensor { static constexpr bool value = false; };
template <class... Facts> struct not_an_attnx_expression { static constexpr bool value = false; };
template <class... Facts> struct attention_value_rows_differ_from_keys { static constexpr bool value = false; };
template <class... Facts> struct map_function_not_callable { static constexpr bool value = false; };
template <class... Facts> struct map_result_not_arithmetic { static constexpr bool value = false; };
template <class... Facts> struct positions_need_rank_2_scores { static constexpr bool value = false; };
template <class... Facts> struct mask_function_not_boolean { static constexpr bool value = false; };
template <class... Facts> struct sinks_need_rank_1 { static constexpr bool value = false; };
template <class... Facts> struct sinks_need_softmax_times_v { static constexpr bool value = false; };
template <class... Facts> struct block_mask_needs_a_named_tensor { static constexpr bool value = false; };
template <class... Facts> struct position_table_needs_rank_1 { static constexpr bool value = false; };
template <class... Facts> struct where_condition_must_be_boolean { static constexpr bool value = false; };
template <class... Facts> struct norm_weight_must_be_rank_1 { static constexpr bool value = false; };
template <class... Facts> struct norm_weight_extent_differs { static constexpr bool value = false; };
template <class... Facts> struct axis_index_out_of_range { static constexpr bool value = false; };
template <class... Facts> struct slice_exceeds_extent { static constexpr bool value = false; };
template <class... Facts> struct concat_ranks_differ { static constexpr bool value = false; };
template <class... Facts> struct concat_extents_differ { static constexpr bool value = false; };
template <class... Facts> struct index_select_needs_a_matrix { static constexpr bool value = false; };
template <class... Facts> struct reshape_sizes_differ { static constexpr bool value = false; };
template <class... Facts> struct rotary_features_must_be_even { static constexpr bool value = false; };
template <class... Facts> struct block_cross_attention_needs_memory { static constexpr bool value = false; };
template <class... Facts> struct block_without_cross_attention_given_memory { static constexpr bool value = false; };
template <class... Facts> struct block_rows_per_item_need_memory_cache { static constexpr bool value = false; };
template <class... Facts> struct block_cross_memory_must_follow_x { static constexpr bool value = false; };
template <class... Facts> struct block_memory_cache_is_temporary { static constexpr bool value = false; };
template <class... Facts> struct block_memory_cache_takes_no_masks { static constexpr bool value = false; };
template <class... Facts> struct step_argument_is_not_a_mask { static constexpr bool value = false; };
template <class... Facts> struct step_too_many_masks { static constexpr bool value = false; };
template <class... Facts> struct step_additive_mask_element_type_differs { static constexpr bool value = false; };
template <class... Facts> struct attend_cache_arguments_out_of_order { static constexpr bool value = false; };
template <class... Facts> struct attend_cache_too_many_masks { static constexpr bool value = false; };
template <class... Facts> struct attend_cache_additive_mask_element_type_differs { static constexpr bool value = false; };
template <class T> struct input_element_type {};
template <class T> struct block_element_type {};
template <class... Facts> struct block_input_element_type_differs { static constexpr bool value = false; };
template <class State> struct first_state {};
template <class... States> struct other_states {};
template <class... Facts> struct merge_state_types_differ { static constexpr bool value = false; };
template <class Node> struct node_type {};
template <class... Facts> struct no_derivative { static constexpr bool value = false; };
template <class... Facts> struct wrt_needs_named_tensors { static constexpr bool value = false; };

// holds<Rule<Facts...>>: false, the failed rule named with its facts in the compiler's message (docs/errors.md).
template <class Rule>
inline constexpr bool holds = Rule::value;

}  // namespace attnx::error

namespace attnx {

// The run-time side of the shape rules: a rule that involves a dyn extent is checked once, when the
// expression node (or tensor, or view) is built, and a failure throws extent_error, whose message uses the
// compile-time rule's vocabulary: "attnx: matmul: the inner extents differ: lhs_columns 37, rhs_rows 36".
// (Derived from std::invalid_argument, so code that catches that keeps working.)
class extent_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace detail {
// "attnx: <what>: <fact> <n>, <fact> <n>"
[[noreturn]] void throw_extent_error(const std::string& what, const char* fact1, std::size_t n1, const char* fact2,
                                     std::size_t n2);
}  // namespace detail

}  // namespace attnx

#if ATTNX_HEADER_ONLY
#include "attnx/shape/impl/format.hpp"
#endif
