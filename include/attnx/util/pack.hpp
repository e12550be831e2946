// attnx: the I-th type of a parameter pack, without <tuple> (std::tuple_element_t<I, std::tuple<Ts...>>
// was the only use of <tuple> in the shape and expression headers: 58 M of about 3300 M instructions of an
// empty program that includes <attnx/attnx.hpp>, g++ 12 -O2).
#pragma once

#include <cstddef>
#include <utility>

namespace attnx::detail {

template <std::size_t I, class T>
struct pack_slot {
  using type = T;
};
template <class Indices, class... Ts>
struct pack_slots;
template <std::size_t... Is, class... Ts>
struct pack_slots<std::index_sequence<Is...>, Ts...> : pack_slot<Is, Ts>... {};
// Deduces T from the one base pack_slot<I, T> (declared only: used in decltype).
template <std::size_t I, class T>
pack_slot<I, T> pick_slot(const pack_slot<I, T>&);

template <std::size_t I, class... Ts>
  requires(I < sizeof...(Ts))
using type_at_t = typename decltype(pick_slot<I>(pack_slots<std::index_sequence_for<Ts...>, Ts...>{}))::type;

}  // namespace attnx::detail
