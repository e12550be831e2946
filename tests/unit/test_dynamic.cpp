// Dynamic extents (attnx::dyn): tensors and views whose extents are known at run time only, and every
// operation on them, against plain double loops (naive.hpp) at sizes that are not multiples of the kernels'
// tiles, through the fused kernel and row by row; the same values as the same static shapes; every run-time
// rule (attnx::extent_error, thrown when the node is built) with its message; empty extents; printing; a
// constant evaluation.
#define BOOST_TEST_MODULE dynamic
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "naive.hpp"
#include "support.hpp"

using namespace attnx;
using naive::mat;
using namespace test_support;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

// A tensor of type Tn holding m, its dyn extents given as to the constructor.
template <class Tn, class... I>
Tn holding(const mat& m, I... e) {
  using T = typename Tn::value_type;
  const std::vector<T> v = as<T>(m);
  return Tn::from_flat(std::span<const T>(v), e...);
}
// Same extents and the same bits (a dyn tensor against the static one).
template <class A, class B>
bool same_bits(const A& a, const B& b) {
  return a.dims() == b.dims() && std::memcmp(a.data(), b.data(), a.numel() * sizeof(*a.data())) == 0;
}

// A context without the fused kernel: the row evaluator.
const context& rows_only() {
  static const context c = [] {
    context x;
    x.set_fused(false);
    return x;
  }();
  return c;
}

using allowed_fn = std::function<bool(std::size_t b, std::size_t i, std::size_t j)>;
const allowed_fn everything = [](std::size_t, std::size_t, std::size_t) { return true; };

// Attention of nb independent problems (row-major q (nb, lq, d), k (nb, lk, d), v (nb, lk, dv)); bias, when
// given, is added to the scaled scores ((nb, lq, lk)); blocked scores are -inf; a fully blocked row gives 0.
mat reference_attention(const mat& q, const mat& k, const mat& v, std::size_t nb, std::size_t lq, std::size_t lk,
                        std::size_t d, std::size_t dv, const allowed_fn& allowed, const mat* bias = nullptr) {
  mat out;
  for (std::size_t b = 0; b < nb; ++b) {
    mat s(lq * lk);
    for (std::size_t i = 0; i < lq; ++i)
      for (std::size_t j = 0; j < lk; ++j) {
        double dot = 0;
        for (std::size_t p = 0; p < d; ++p) dot += q[(b * lq + i) * d + p] * k[(b * lk + j) * d + p];
        s[i * lk + j] = dot / std::sqrt(double(d)) + (bias ? (*bias)[(b * lq + i) * lk + j] : 0.0);
        if (!allowed(b, i, j)) s[i * lk + j] = -inf;
      }
    const mat vb(v.begin() + b * lk * dv, v.begin() + (b + 1) * lk * dv);
    const mat ob = naive::matmul(naive::softmax_rows(s, lq, lk), vb, lq, lk, dv);
    out.insert(out.end(), ob.begin(), ob.end());
  }
  return out;
}

// (B, L, F) with B and L dyn; F static, or dyn too.
template <class T, std::size_t F, bool DynF>
auto batch_rows(const mat& m, std::size_t B, std::size_t L) {
  if constexpr (DynF) {
    return holding<tensor<T, dyn, dyn, dyn>>(m, B, L, F);
  } else {
    return holding<tensor<T, dyn, dyn, F>>(m, B, L);
  }
}

}  // namespace

// ---- tensors and views ------------------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(tensor_construction_and_access) {
  tensor<float, dyn, 4> t(3);
  static_assert(!shape_of_t<decltype(t)>::is_static && shape_of_t<decltype(t)>::dynamic_count == 1);
  BOOST_TEST((t.dims() == dims_t<2>{3, 4}));
  BOOST_TEST(t.numel() == 12u);
  BOOST_TEST(t.extent(0) == 3u);
  BOOST_TEST(t.extent(1) == 4u);
  BOOST_TEST(std::all_of(t.begin(), t.end(), [](float x) { return x == 0.0f; }));
  t(2, 3) = 5;
  t(1, 0) = 7;
  BOOST_TEST(t.at(2, 3) == 5.0f);
  BOOST_TEST(t.data()[4] == 7.0f);
  BOOST_CHECK_EXCEPTION((void)t.at(3, 0), std::out_of_range, says({"index 3", "axis 0", "[3, 4]"}));
  BOOST_CHECK_EXCEPTION((void)t.at(0, 4), std::out_of_range, says({"index 4", "axis 1"}));

  tensor<float, dyn, 4> all_axes(3, 4);  // one extent per axis
  BOOST_TEST((all_axes.dims() == dims_t<2>{3, 4}));
  tensor<float, seq<dyn>, d_k<64>> named(5);
  BOOST_TEST((named.dims() == dims_t<2>{5, 64}));
  tensor<double, dyn, dyn, 16> three(2, 3);
  BOOST_TEST(three.numel() == 96u);
  tensor<float, dyn, 4> empty;  // a dyn axis is 0 until given
  BOOST_TEST((empty.dims() == dims_t<2>{0, 4}));
  BOOST_TEST(empty.numel() == 0u);

  // Nested braces: a dyn axis takes the count of its list.
  tensor<double, dyn, 3> a{{1, 2, 3}, {4, 5, 6}};
  BOOST_TEST((a.dims() == dims_t<2>{2, 3}));
  BOOST_TEST(a(1, 2) == 6.0);
  tensor<double, dyn, dyn> b{{1, 2}, {3, 4}, {5, 6}};
  BOOST_TEST((b.dims() == dims_t<2>{3, 2}));
  BOOST_TEST(b(2, 0) == 5.0);
  BOOST_CHECK_THROW((tensor<double, dyn, 3>{{1, 2, 3}, {4, 5}}), std::invalid_argument);
  BOOST_CHECK_THROW((tensor<double, dyn, dyn>{{1, 2}, {3}}), std::invalid_argument);

  // from_flat, generate, filled.
  const std::vector<float> v12{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  const auto f = tensor<float, dyn, 4>::from_flat(v12, 3);
  BOOST_TEST(f(2, 1) == 9.0f);
  BOOST_CHECK_EXCEPTION((void)(tensor<float, dyn, 4>::from_flat(v12, 2)), std::length_error, says({"needs 8 elements, got 12"}));
  const auto g = tensor<int, dyn, dyn>::generate([](std::size_t i, std::size_t j) { return int(10 * i + j); }, 3, 5);
  BOOST_TEST((g.dims() == dims_t<2>{3, 5}));
  BOOST_TEST(g(2, 4) == 24);
  const auto h = tensor<double, 2, dyn, 3>::filled(1.5, 4);
  BOOST_TEST((h.dims() == dims_t<3>{2, 4, 3}));
  BOOST_TEST(std::all_of(h.begin(), h.end(), [](double x) { return x == 1.5; }));

  // From an expression: its extents. Assigned an expression: the dyn axes resize.
  tensor<float, dyn, 4> s = f + f;
  BOOST_TEST((s.dims() == dims_t<2>{3, 4}));
  BOOST_TEST(s(2, 1) == 18.0f);
  tensor<float, dyn, 4> from_static = tensor<float, 5, 4>{};
  BOOST_TEST((from_static.dims() == dims_t<2>{5, 4}));
  s = tensor<float, dyn, 4>::filled(2.0f, 7) + 1.0f;
  BOOST_TEST((s.dims() == dims_t<2>{7, 4}));
  BOOST_TEST(std::all_of(s.begin(), s.end(), [](float x) { return x == 3.0f; }));
  s = s * 2.0f;  // reads itself, same extents (element-wise: safe in place)
  BOOST_TEST(s(6, 3) == 6.0f);
  b = transpose(b);  // aliasing, new extents
  BOOST_TEST((b.dims() == dims_t<2>{2, 3}));
  BOOST_TEST(b(0, 2) == 5.0);
  BOOST_TEST(b(1, 0) == 2.0);
  // Aliasing with the same extents: detected for dyn terminals too (their run-time element count).
  tensor<double, dyn, dyn> sq{{1, 2}, {3, 4}};
  BOOST_TEST(reads_memory(transpose(sq), sq.data(), sq.numel()));
  sq = transpose(sq);
  BOOST_TEST(sq(0, 1) == 3.0);
  BOOST_TEST(sq(1, 0) == 2.0);
  tensor<double, dyn, dyn> sm{{1, 2}, {3, 4}};
  sm = sm * sm;
  BOOST_TEST(sm(1, 0) == 15.0);
  BOOST_TEST(sm(1, 1) == 22.0);
  std::vector<double> mem{1, 2, 3, 4};
  view<double, dyn, 2> vm(mem.data(), 2);
  vm = vm * transpose(vm);  // [[5, 11], [11, 25]] through a fresh buffer
  BOOST_TEST(mem[1] == 11.0);
  BOOST_TEST(mem[3] == 25.0);
  tensor<double, dyn, dyn> copy = b;
  BOOST_TEST(copy == b);
  copy(0, 0) = -1;
  BOOST_TEST(!(copy == b));
  BOOST_TEST(!(tensor<double, dyn, dyn>(2, 3) == tensor<double, dyn, dyn>(3, 2)));
  // A static tensor from a dyn expression of the right extents.
  tensor<float, 3, 4> st = f * 1.0f;
  BOOST_TEST(st(2, 1) == 9.0f);

  // A moved-from dyn tensor is empty (or holds what it was swapped with: extents and buffer agree).
  {
    tensor<float, dyn, 4> small(1), big(3), c(3);
    for (auto& x : c) x = 1.5f;
    small = std::move(big);
    BOOST_TEST((big.dims() == dims_t<2>{1, 4}));  // small's extents and buffer, swapped
    big = c + c;
    BOOST_TEST((big.dims() == dims_t<2>{3, 4}));
    BOOST_TEST(big(2, 3) == 3.0f);
    tensor<float, dyn, 4> d(3), e(std::move(d));
    BOOST_TEST(d.numel() == 0);
    BOOST_TEST(e.numel() == 12);
    d = c + c;
    BOOST_TEST(d(2, 3) == 3.0f);
  }
}

BOOST_AUTO_TEST_CASE(views) {
  std::vector<float> buf(2 * 3 * 64);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = float(i);
  const view<const float, dyn, dyn, 64> v(buf.data(), 2, 3);
  BOOST_TEST((v.dims() == dims_t<3>{2, 3, 64}));
  BOOST_TEST(v.numel() == buf.size());
  BOOST_TEST(v(1, 2, 5) == buf[(1 * 3 + 2) * 64 + 5]);
  BOOST_TEST(v.span().size() == buf.size());

  // From a range with one dyn axis: deduced; not a multiple: std::length_error.
  std::vector<float> v12(12, 1.0f), v13(13);
  view<float, dyn, 4> w(v12);
  BOOST_TEST((w.dims() == dims_t<2>{3, 4}));
  BOOST_CHECK_EXCEPTION((view<float, dyn, 4>(v13)), std::length_error, says({"multiple of 4", "got 13"}));
  view<float, dyn, 4> w2(v12, 3);  // a range and the extents
  BOOST_TEST(w2.data() == v12.data());
  BOOST_CHECK_THROW((view<float, dyn, 4>(v13, 3)), std::length_error);
  BOOST_CHECK_THROW((view<float, dyn, 4>(static_cast<float*>(nullptr), 3)), std::invalid_argument);
  BOOST_TEST((view<float, dyn, 4>(static_cast<float*>(nullptr), 0).numel() == 0u));

  // Static tensor -> dyn view -> static view (checked at run time).
  tensor<float, 37, 64> t;
  t(36, 63) = 4;
  const view<const float, dyn, 64> tv(t);
  BOOST_TEST((tv.dims() == dims_t<2>{37, 64}));
  BOOST_TEST(tv(36, 63) == 4.0f);
  const view<const float, 37, 64> back(tv);
  BOOST_TEST(back.data() == t.data());
  BOOST_CHECK_EXCEPTION((view<const float, 36, 64>(tv)), extent_error,
                        is("attnx: view: the expression's extents differ from the target's on axis 0 (target [36, 64]): "
                           "target_extent 36, source_extent 37"));
  tensor<float, dyn, dyn> dd(5, 63);
  BOOST_CHECK_EXCEPTION((view<const float, dyn, 64>(dd)), extent_error, says({"view: ", "axis 1", "target_extent 64, source_extent 63"}));
  BOOST_CHECK_EXCEPTION((view<float, dyn, 4>(v12.data(), 3, 5)), extent_error,
                        says({"view: an extent given for a static axis differs from it (axis 1", "static_extent 4, given_extent 5"}));

  // Assignment writes in place; other extents throw (a view never resizes).
  w = tensor<float, dyn, 4>::filled(2.0f, 3) * 3.0f;
  BOOST_TEST(std::all_of(v12.begin(), v12.end(), [](float x) { return x == 6.0f; }));
  BOOST_CHECK_EXCEPTION((w = tensor<float, dyn, 4>(5)), extent_error,
                        is("attnx: assignment: the expression's extents differ from the target's on axis 0 (target [3, 4]): "
                           "target_extent 3, source_extent 5"));
  BOOST_TEST((w.dims() == dims_t<2>{3, 4}));
  w = w + w;  // aliasing
  BOOST_TEST(v12[11] == 12.0f);
  view<float, 3, 4> ws(v12);  // a static view assigned a dyn expression of other extents
  BOOST_CHECK_EXCEPTION((ws = tensor<float, dyn, 4>(2)), extent_error, says({"target_extent 3, source_extent 2"}));
}

BOOST_AUTO_TEST_CASE(printing) {
  std::ostringstream os;
  os << tensor<int, dyn, 2>{{1, 2}, {3, 4}};
  BOOST_TEST(os.str() == "[[1, 2],\n [3, 4]]");
  std::vector<int> mem{1, 2, 3, 4, 5, 6};
  std::ostringstream ov;
  ov << view<int, dyn, 3>(mem);
  BOOST_TEST(ov.str() == "[[1, 2, 3],\n [4, 5, 6]]");
  std::ostringstream oe;
  oe << tensor<int, dyn, 2>();
  BOOST_TEST(oe.str() == "[]");
  BOOST_TEST((shape_string<make_shape<seq<dyn>, 4>>()) == "[seq=dyn, 4]");
  BOOST_TEST((shape_string<make_shape<seq<dyn>, 4>>({7, 4})) == "[seq=7, 4]");
}

// ---- every run-time rule: extent_error when the node is built, with the rule's words and both numbers -----
BOOST_AUTO_TEST_CASE(run_time_rules) {
  static_assert(std::is_base_of_v<std::invalid_argument, extent_error>);
  tensor<float, dyn, dyn> a(3, 5), b(4, 6), x34(3, 4), x24(2, 4);
  // matmul
  BOOST_CHECK_EXCEPTION((void)(a * b), extent_error, is("attnx: matmul: the inner extents differ: lhs_columns 5, rhs_rows 4"));
  BOOST_CHECK_EXCEPTION((void)(tensor<float, dyn, 5>(3) * tensor<float, dyn, dyn>(4, 6)), extent_error,
                        says({"matmul: the inner extents differ", "lhs_columns 5, rhs_rows 4"}));
  tensor<float, dyn, dyn, dyn> a3(2, 3, 5), b3(3, 5, 6);
  BOOST_CHECK_EXCEPTION((void)(a3 * b3), extent_error,
                        is("attnx: matmul: a batched rhs must have the lhs's batch axes; they differ on axis 0: "
                           "lhs_extent 2, rhs_extent 3"));
  // element-wise: the message names the axis and both shapes; a dyn extent broadcasts only from a STATIC 1
  BOOST_CHECK_EXCEPTION((void)(x34 + x24), extent_error,
                        is("attnx: element-wise operation: the operands' extents differ on axis 0 (lhs [3, 4], rhs [2, 4]): "
                           "lhs_extent 3, rhs_extent 2"));
  BOOST_CHECK_EXCEPTION((void)hadamard(tensor<float, dyn, 4>(3), tensor<float, 2, 4>{}), extent_error,
                        says({"element-wise operation", "lhs_extent 3, rhs_extent 2"}));
  BOOST_CHECK_EXCEPTION((void)(tensor<float, dyn, 4>(1) - x34), extent_error, says({"on axis 0", "lhs_extent 1, rhs_extent 3"}));
  BOOST_CHECK_EXCEPTION((void)(tensor<float, dyn, dyn, 4>(2, 3) / x24), extent_error,
                        says({"on axis 1 (lhs [2, 3, 4], rhs [2, 4])", "lhs_extent 3, rhs_extent 2"}));
  BOOST_CHECK_NO_THROW((void)(x34 + tensor<float, 1, 4>{}));  // a static 1 broadcasts
  // masks
  tensor<float, dyn, dyn> s35(3, 5), s32(3, 2);
  tensor<bool, dyn, dyn> m34(3, 4);
  BOOST_CHECK_EXCEPTION((void)mask(s35, allowed(m34)), extent_error,
                        is("attnx: mask: the mask's extents must equal the scores' extents (or be 1 to broadcast); axis 1 "
                           "differs (scores [3, 5], mask [3, 4]): mask_extent 4, score_extent 5"));
  BOOST_CHECK_EXCEPTION((void)mask(s35, additive(tensor<float, dyn, 5>(2))), extent_error,
                        says({"mask: the mask's extents must equal", "axis 0", "mask_extent 2, score_extent 3"}));
  BOOST_CHECK_EXCEPTION((void)mask(s32, key_padding<3>), extent_error,
                        is("attnx: mask: the key padding length exceeds the number of keys: key_length 3, keys 2"));
  // key_lengths: a wrong count (std::invalid_argument), a length above the key count (std::out_of_range)
  tensor<float, dyn, dyn, dyn> s3(2, 3, 5);
  const std::vector<std::size_t> three{1, 2, 3}, too_long{5, 6};
  BOOST_CHECK_EXCEPTION((void)mask(s3, key_lengths(three)), std::invalid_argument,
                        says({"key_lengths has 3 entries", "[2, 3, 5]", "have 2 batch items"}));
  BOOST_CHECK_EXCEPTION((void)mask(s3, key_lengths(too_long)), std::out_of_range, says({"key_lengths[1] = 6", "the 5 keys"}));
  // attention: V's rows
  tensor<float, dyn, dyn> q(3, 8), k(5, 8), v(4, 8);
  BOOST_CHECK_EXCEPTION((void)attention(q, k, v), extent_error,
                        is("attnx: attention: V must have one row per key (V's row count must equal L_k, the row count of "
                           "K): value_rows 4, L_k 5"));
  BOOST_CHECK_EXCEPTION((void)attention(q, k, tensor<float, dyn, 8>(5), allowed(m34)), extent_error,
                        says({"mask_extent 4, score_extent 5"}));
  BOOST_CHECK_EXCEPTION((void)attention(q, tensor<float, dyn, 7>(5), tensor<float, dyn, 8>(5)), extent_error,
                        says({"matmul: the inner extents differ", "lhs_columns 8, rhs_rows 7"}));
  // split_heads on a dyn feature axis
  BOOST_CHECK_EXCEPTION((void)split_heads<4>(tensor<float, dyn, dyn>(3, 10)), extent_error,
                        is("attnx: split_heads: the feature extent (d_model) must be divisible by the number of heads: "
                           "d_model 10, heads 4"));
  // pairwise
  BOOST_CHECK_EXCEPTION((void)dot_scores(q, tensor<float, dyn, dyn>(5, 7)), extent_error,
                        is("attnx: pairwise: the queries' and keys' feature extents differ (rows of Q and K are compared): "
                           "query_features 8, key_features 7"));
  BOOST_CHECK_EXCEPTION((void)rbf_scores(tensor<float, dyn, dyn, 8>(2, 3), tensor<float, dyn, dyn, 8>(3, 5), 1.0), extent_error,
                        is("attnx: pairwise: the batch extents of Q and K differ on axis 0: query_batch_extent 2, "
                           "key_batch_extent 3"));
  // assignment: a static target, or a dyn target's static axis
  BOOST_CHECK_EXCEPTION((tensor<float, 3, 4>(x24)), extent_error,
                        is("attnx: assignment: the expression's extents differ from the target's on axis 0 (target [3, 4]): "
                           "target_extent 3, source_extent 2"));
  tensor<float, 3, 4> st;
  BOOST_CHECK_EXCEPTION(st = x24 * 2.0f, extent_error, says({"assignment: ", "target_extent 3, source_extent 2"}));
  BOOST_CHECK_EXCEPTION((tensor<float, dyn, 4>(a)), extent_error,
                        is("attnx: assignment: the expression's extents differ from the target's on axis 1 (target [3, 4]): "
                           "target_extent 4, source_extent 5"));
  tensor<float, dyn, 4> d4(2);
  BOOST_CHECK_EXCEPTION(d4 = a + a, extent_error, says({"on axis 1", "target_extent 4, source_extent 5"}));
  BOOST_TEST((d4.dims() == dims_t<2>{2, 4}));  // unchanged
  // tensor extents
  BOOST_CHECK_EXCEPTION((tensor<float, dyn, 4>(3, 5)), extent_error,
                        is("attnx: tensor: an extent given for a static axis differs from it (axis 1 of [dyn, 4]): "
                           "static_extent 4, given_extent 5"));
  BOOST_CHECK_EXCEPTION((basic_tensor<float, make_shape<dyn, 4>>(dims_t<2>{3, 5}, uninitialized)), extent_error,
                        says({"tensor: an extent given for a static axis differs from it (axis 1 of [dyn, 4])",
                              "static_extent 4, given_extent 5"}));
  BOOST_CHECK_EXCEPTION((tensor<float, dyn, 4>(-1)), extent_error, is("attnx: tensor: a negative extent"));
  // multi_head_attention
  using M = multi_head_attention<float, 16, 4>;
  const M m;
  tensor<float, dyn, dyn, dyn> x15(2, 3, 15), x16(2, 3, 16), mem15(2, 4, 15), mem16b3(3, 4, 16);
  BOOST_CHECK_EXCEPTION((void)m(x15), extent_error,
                        is("attnx: multi_head_attention: the input's feature extent (its last axis) must equal d_model: "
                           "input_features 15, d_model 16"));
  BOOST_CHECK_EXCEPTION((void)m(tensor<float, dyn, dyn>(3, 15), causal), extent_error, says({"input_features 15, d_model 16"}));
  BOOST_CHECK_EXCEPTION((void)m(x16, mem15), extent_error,
                        is("attnx: multi_head_attention: the memory's feature extent (its last axis) must equal d_model: "
                           "memory_features 15, d_model 16"));
  BOOST_CHECK_EXCEPTION((void)m(x16, mem16b3), extent_error,
                        is("attnx: multi_head_attention: the memory's batch extent must equal the input's: input_batch 2, "
                           "memory_batch 3"));
  BOOST_CHECK_EXCEPTION((void)m(x16, tensor<float, 3, dyn, 16>(4)), extent_error, says({"input_batch 2, memory_batch 3"}));
  BOOST_CHECK_NO_THROW((void)m(x16, tensor<float, 2, dyn, 16>(4)));
}

// The lengths of key_lengths live in the caller's memory: a length changed after the mask was built is
// checked again when the expression is evaluated, fused and row by row.
BOOST_AUTO_TEST_CASE(key_lengths_checked_again_when_evaluated) {
  tensor<float, dyn, dyn, 8> q(2, 3), k(2, 5), v(2, 5);
  std::vector<std::size_t> lens{5, 2};
  const auto e = attention(q, k, v, key_lengths(lens));
  lens[1] = 6;
  tensor<float, dyn, dyn, 8> out;
  BOOST_CHECK_THROW(out = e, std::out_of_range);
  BOOST_CHECK_THROW((void)evaluate(e, rows_only()), std::out_of_range);
}

// ---- attention on random run-time shapes against plain loops, fused and row by row ----------------------
template <class T, bool DynFeatures>
void attention_shapes(double tol) {
  constexpr std::size_t B = 2, d = 16, dv = 12;
  const std::size_t sizes[][2] = {{1, 1},   {3, 3},   {17, 17},  {65, 65},  {130, 130}, {257, 257}, {3, 17},
                                  {17, 130}, {65, 257}, {130, 65}, {257, 3}, {1, 257},   {257, 1}};
  unsigned seed = 100;
  for (const auto& size_pair : sizes) {
    const std::size_t lq = size_pair[0], lk = size_pair[1];  // (clang 14 cannot capture structured bindings)
    const mat qm = rounded<T>(B * lq * d, ++seed), km = rounded<T>(B * lk * d, ++seed), vm = rounded<T>(B * lk * dv, ++seed),
              bias = rounded<T>(B * lq * lk, ++seed);
    const auto Q = batch_rows<T, d, DynFeatures>(qm, B, lq);
    const auto K = batch_rows<T, d, DynFeatures>(km, B, lk);
    const auto V = batch_rows<T, dv, DynFeatures>(vm, B, lk);
    const auto A = holding<tensor<T, dyn, dyn, dyn>>(bias, B, lq, lk);  // an additive mask of dyn shape
    tensor<bool, dyn, dyn> Mb(lq, lk);                                   // a boolean mask shared by the batch
    std::mt19937 gen(seed);
    std::bernoulli_distribution keep(0.75);
    for (bool& x : Mb) x = keep(gen);
    const std::vector<std::size_t> lens{lk, lk / 2};
    const std::string shape = "L_q " + std::to_string(lq) + ", L_k " + std::to_string(lk);

    auto check = [&](const char* what, const allowed_fn& allowed, const mat* add, const auto&... masks) {
      const mat want = reference_attention(qm, km, vm, B, lq, lk, d, dv, allowed, add);
      tensor<T, dyn, dyn, dyn> fused;
      BOOST_TEST(evaluated_fused(fused, attention(Q, K, V, masks...)), what << ", " << shape << ": the fused kernel ran");
      const auto plain = evaluate(attention(Q, K, V, masks...), rows_only());
      BOOST_TEST((fused.dims() == dims_t<3>{B, lq, dv}));
      BOOST_TEST(max_err(fused, want) <= tol, what << ", " << shape << ": fused error " << max_err(fused, want));
      BOOST_TEST(max_err(plain, want) <= tol, what << ", " << shape << ": row-by-row error " << max_err(plain, want));
    };
    check("no mask", everything, nullptr);
    check("causal", [](std::size_t, std::size_t i, std::size_t j) { return j <= i; }, nullptr, causal);
    check("causal_bottom_right", [&](std::size_t, std::size_t i, std::size_t j) { return j + lq <= i + lk; }, nullptr,
          causal_bottom_right);
    check("key_lengths", [&](std::size_t b, std::size_t, std::size_t j) { return j < lens[b]; }, nullptr, key_lengths(lens));
    check("key_padding<1>", [](std::size_t, std::size_t, std::size_t j) { return j < 1; }, nullptr, key_padding<1>);
    check("bool mask", [&](std::size_t, std::size_t i, std::size_t j) { return bool(Mb(i, j)); }, nullptr, allowed(Mb));
    check("additive", everything, &bias, additive(A));
    check("causal + key_lengths + bool", [&](std::size_t b, std::size_t i, std::size_t j) { return j <= i && j < lens[b] && Mb(i, j); },
          nullptr, causal, key_lengths(lens), allowed(Mb));
  }
  BOOST_TEST(rows_only().fused_runs() == 0u);
}
BOOST_AUTO_TEST_CASE(attention_float) { attention_shapes<float, false>(2e-5); }
BOOST_AUTO_TEST_CASE(attention_double) { attention_shapes<double, false>(1e-12); }
BOOST_AUTO_TEST_CASE(attention_float_dyn_features) { attention_shapes<float, true>(2e-5); }

// ---- rank 4: heads split from a dyn (B, L, d_model) projection, GQA through repeat_heads ----------------
template <class T>
void heads_case(std::size_t B, std::size_t L, double tol) {
  constexpr std::size_t Dm = 32, H = 4, Hkv = 2, d = Dm / H, G = H / Hkv;
  const mat x = rounded<T>(B * L * Dm, 7), wq = rounded<T>(Dm * Dm, 8), wk = rounded<T>(Dm * Hkv * d, 9),
            wv = rounded<T>(Dm * Hkv * d, 10);
  const auto X = holding<tensor<T, dyn, dyn, Dm>>(x, B, L);
  const auto WQ = holding<tensor<T, Dm, Dm>>(wq);
  const auto WK = holding<tensor<T, Dm, Hkv * d>>(wk);
  const auto WV = holding<tensor<T, Dm, Hkv * d>>(wv);
  std::vector<std::size_t> lens(B);
  for (std::size_t b = 0; b < B; ++b) lens[b] = L - (b * L) / (B + 1);
  auto heads_out = [&] {
    return attention(split_heads<H>(X * WQ), repeat_heads<G>(split_heads<Hkv>(X * WK)), repeat_heads<G>(split_heads<Hkv>(X * WV)),
                     causal, key_lengths(lens));
  };
  static_assert(shape_of_t<decltype(heads_out())>::rank == 4 && shape_of_t<decltype(heads_out())>::extents[1] == H);
  tensor<T, dyn, H, dyn, d> fused;
  BOOST_TEST(evaluated_fused(fused, heads_out()), "L " << L << ": the fused kernel ran");
  const auto plain = evaluate(heads_out(), rows_only());
  tensor<T, dyn, dyn, Dm> merged = merge_heads(heads_out());

  const mat want = naive::gqa_heads(x, wq, wk, wv, B, L, Dm, H, Hkv, d,
                                    [&](std::size_t b, std::size_t i, std::size_t j) { return j <= i && j < lens[b]; });
  const mat want_merged = naive::merge_heads(want, B, H, L, d);
  BOOST_TEST((fused.dims() == dims_t<4>{B, H, L, d}));
  BOOST_TEST(max_err(fused, want) <= tol, "L " << L << ": fused error " << max_err(fused, want));
  BOOST_TEST(max_err(plain, want) <= tol, "L " << L << ": row-by-row error " << max_err(plain, want));
  BOOST_TEST(max_err(merged, want_merged) <= tol, "L " << L << ": merged error " << max_err(merged, want_merged));

  // The same heads given as rank-4 dyn tensors (B, H, L, d) and (B, Hkv, L, d).
  const tensor<T, dyn, H, dyn, d> Qh = split_heads<H>(X * WQ);
  const tensor<T, dyn, dyn, dyn, dyn> Kh = split_heads<Hkv>(X * WK), Vh = split_heads<Hkv>(X * WV);
  tensor<T, dyn, H, dyn, d> direct;
  BOOST_TEST(evaluated_fused(direct, attention(Qh, repeat_heads<G>(Kh), repeat_heads<G>(Vh), causal, key_lengths(lens))));
  BOOST_TEST(max_err(direct, want) <= tol, "L " << L << ": rank-4 tensors error " << max_err(direct, want));
}
BOOST_AUTO_TEST_CASE(heads_gqa_float) {
  for (std::size_t L : {1, 3, 17, 65, 130}) heads_case<float>(3, L, 2e-5);
}
BOOST_AUTO_TEST_CASE(heads_gqa_double) {
  for (std::size_t L : {3, 65, 257}) heads_case<double>(2, L, 1e-12);
}

// ---- matmul: dyn M (and K, N) through the blocked GEMM and the row evaluator -----------------------------
template <class T>
void matmul_case(std::size_t M, std::size_t K, std::size_t N, double tol) {
  const mat a = rounded<T>(M * K, 11), b = rounded<T>(K * N, 12), bias = rounded<T>(N, 13);
  const mat want = naive::matmul(a, b, M, K, N);
  const std::string what = std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N);
  const auto A = holding<tensor<T, dyn, dyn>>(a, M, K);
  const auto Bm = holding<tensor<T, dyn, dyn>>(b, K, N);
  const bool blocked = M >= kernels::gemm_direct_min_rows && K > 0 && N > 0;

  const auto blocks0 = default_context().gemm_blocks();
  tensor<T, dyn, dyn> C = A * Bm;  // assigned: the whole product at once
  BOOST_TEST((default_context().gemm_blocks() != blocks0) == blocked, what << ": GEMM taken iff M >= gemm_direct_min_rows");
  BOOST_TEST((C.dims() == dims_t<2>{M, N}));
  BOOST_TEST(max_err(C, want) <= tol, what << ": GEMM error " << max_err(C, want));
  // Inside an expression: the matmul evaluator (blocks of rows), and with the blocked GEMM off (axpy rows).
  tensor<T, dyn, dyn> C2 = (A * Bm) * T(2);
  context axpy;
  axpy.set_blocked_gemm(false);
  const auto C3 = evaluate(A * Bm, axpy);
  BOOST_TEST(axpy.gemm_blocks() == 0u);
  mat twice = want;
  for (auto& x : twice) x *= 2;
  BOOST_TEST(max_err(C2, twice) <= 2 * tol, what << ": row evaluator error " << max_err(C2, twice));
  BOOST_TEST(max_err(C3, want) <= tol, what << ": axpy error " << max_err(C3, want));
  // A static right-hand side (a weight) with a bias: the projection x W + b of a dyn sequence.
  if (K == 24 && N == 40) {
    const auto W = holding<tensor<T, 24, 40>>(b);
    const auto bv = holding<tensor<T, 40>>(bias);
    tensor<T, dyn, 40> P = A * W + bv;
    mat wb = want;
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) wb[i * N + j] += bias[j];
    BOOST_TEST(max_err(P, wb) <= tol, what << ": x W + b error " << max_err(P, wb));
    BOOST_TEST(max_err(evaluate(A * W + bv, axpy), wb) <= tol);
  }
}
BOOST_AUTO_TEST_CASE(matmul_dyn) {
  for (std::size_t M : {1, 3, 4, 17, 65, 130, 257}) {
    matmul_case<float>(M, 24, 40, 1e-5);
    matmul_case<double>(M, 24, 40, 1e-12);
    matmul_case<float>(M, 33, 19, 1e-5);
    matmul_case<double>(M, 7, 130, 1e-12);
  }
  matmul_case<double>(5, 0, 3, 0.0);  // an empty contraction: zeros
  // A batched rhs: (B, M, K) x (B, K, N), both dyn.
  constexpr std::size_t B = 3, M = 17, K = 9, N = 13;
  const mat a = rounded<double>(B * M * K, 14), b = rounded<double>(B * K * N, 15);
  const auto A = holding<tensor<double, dyn, dyn, dyn>>(a, B, M, K);
  const auto Bb = holding<tensor<double, dyn, dyn, dyn>>(b, B, K, N);
  const tensor<double, dyn, dyn, dyn> C = A * Bb;
  mat want;
  for (std::size_t i = 0; i < B; ++i) {
    const mat c = naive::matmul(mat(a.begin() + i * M * K, a.begin() + (i + 1) * M * K), mat(b.begin() + i * K * N, b.begin() + (i + 1) * K * N),
                                M, K, N);
    want.insert(want.end(), c.begin(), c.end());
  }
  BOOST_TEST(max_err(C, want) <= 1e-12);
}

// ---- a dyn shape gives the values of the same static shape ---------------------------------------------
BOOST_AUTO_TEST_CASE(dynamic_equals_static) {
  constexpr std::size_t B = 3, L = 17, F = 7;
  const mat xm = rounded<float>(B * L * F, 21), ym = rounded<float>(B * F, 22), wm = rounded<float>(F * 5, 23);
  const auto xs = naive::make<tensor<float, B, L, F>>(xm);
  const auto xd = holding<tensor<float, dyn, dyn, F>>(xm, B, L);
  const auto xdd = holding<tensor<float, dyn, dyn, dyn>>(xm, B, L, F);
  const auto cs = naive::make<tensor<float, B, 1, F>>(ym);  // a static 1 broadcasts against the dyn L
  const auto cd = holding<tensor<float, dyn, 1, dyn>>(ym, B, F);
  const auto w = naive::make<tensor<float, F, 5>>(wm);

  auto chain = [](const auto& x, const auto& c) { return exp(x - row_max(x)) / row_sum(exp(x - row_max(x))) + hadamard(x, c) * 2.0f - 1.0f; };
  const auto want = evaluate(chain(xs, cs));
  BOOST_TEST(same_bits(evaluate(chain(xd, cs)), want));
  BOOST_TEST(same_bits(evaluate(chain(xd, cd)), want));
  BOOST_TEST(same_bits(evaluate(chain(xdd, cd)), want));
  tensor<float, B, L, F> into_static = chain(xdd, cd);  // a static target, checked at run time
  BOOST_TEST(same_bits(into_static, want));
  // a missing axis broadcasts (and a dyn axis against a dyn one, a static 1 against a static extent); a
  // static extent meets a dyn one (checked at run time; the result's extent is the static one)
  const auto row = naive::make<tensor<float, F>>(mat(ym.begin(), ym.begin() + F));
  const auto col_s = naive::make<tensor<float, L, 1>>(mat(xm.begin(), xm.begin() + L));
  const auto col_d = holding<tensor<float, dyn, 1>>(mat(xm.begin(), xm.begin() + L), L);
  BOOST_TEST(same_bits(evaluate(xd + row), evaluate(xs + row)));
  BOOST_TEST(same_bits(evaluate(col_d - xdd), evaluate(col_s - xs)));
  BOOST_TEST(same_bits(evaluate(xd - xs), evaluate(xs - xs)));
  static_assert(shape_of_t<decltype(xd - xs)>::is_static, "a dyn extent against a static one takes the static one");
  BOOST_TEST(same_bits(evaluate(sqrt(abs(xd)) + tanh(xd) + log(abs(xd) + 1.0f) - square(-xd)),
                       evaluate(sqrt(abs(xs)) + tanh(xs) + log(abs(xs) + 1.0f) - square(-xs))));
  BOOST_TEST(same_bits(evaluate(softmax(xdd)), evaluate(softmax(xs))));
  BOOST_TEST(same_bits(evaluate(row_max(xdd)), evaluate(row_max(xs))));
  BOOST_TEST(same_bits(evaluate(transpose(xd)), evaluate(transpose(xs))));
  BOOST_TEST(same_bits(evaluate(xd * w), evaluate(xs * w)));
  BOOST_TEST(same_bits(evaluate(xdd * w), evaluate(xs * w)));
  BOOST_TEST(same_bits(evaluate(cast<double>(xd)), evaluate(cast<double>(xs))));
  BOOST_TEST(same_bits(evaluate(evaluated_once(xd * w) * transpose(w)), evaluate(evaluated_once(xs * w) * transpose(w))));
  BOOST_TEST(same_bits(evaluate(softmax(xd * transpose(xd))), evaluate(softmax(xs * transpose(xs)))));

  // attention, fused and row by row, with masks; cast<double>(attention)
  const mat vm = rounded<float>(B * L * 9, 24);
  const auto vs = naive::make<tensor<float, B, L, 9>>(vm);
  const auto vd = holding<tensor<float, dyn, dyn, dyn>>(vm, B, L, 9);
  const std::vector<std::size_t> lens{17, 5, 1};
  const auto fs = evaluate(attention(xs, xs, vs, causal, key_lengths(lens)));
  tensor<float, dyn, dyn, dyn> fd;
  BOOST_TEST(evaluated_fused(fd, attention(xd, xdd, vd, causal, key_lengths(lens))));
  BOOST_TEST(same_bits(fd, fs));
  BOOST_TEST(same_bits(evaluate(attention(xd, xd, vd, causal, key_lengths(lens)), rows_only()),
                       evaluate(attention(xs, xs, vs, causal, key_lengths(lens)), rows_only())));
  BOOST_TEST(same_bits(evaluate(attention_weights(xd, xd, causal_bottom_right)), evaluate(attention_weights(xs, xs, causal_bottom_right))));
  tensor<double, dyn, dyn, dyn> as_double = cast<double>(attention(xd, xd, vd, causal));
  BOOST_TEST(same_bits(as_double, evaluate(cast<double>(attention(xs, xs, vs, causal)))));

  // named dyn axes: the names still unify and travel
  const auto qn = holding<tensor<float, seq<dyn>, d_k<F>>>(mat(xm.begin(), xm.begin() + L * F), L);
  const auto vn = holding<tensor<float, seq<dyn>, d_v<9>>>(mat(vm.begin(), vm.begin() + L * 9), L);
  using named_out = shape_of_t<decltype(attention(qn, qn, vn))>;
  static_assert(std::is_same_v<named_out::axis_t<1>, axis<names::d_v, 9>> && named_out::extents[0] == dyn);
  const auto on = evaluate(attention(qn, qn, vn, causal));
  const auto os = evaluate(attention(naive::make<tensor<float, L, F>>(mat(xm.begin(), xm.begin() + L * F)),
                                     naive::make<tensor<float, L, F>>(mat(xm.begin(), xm.begin() + L * F)),
                                     naive::make<tensor<float, L, 9>>(mat(vm.begin(), vm.begin() + L * 9)), causal));
  BOOST_TEST(same_bits(on, os));
}

// ---- pairwise similarities --------------------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(pairwise_dyn) {
  for (const auto [lq, lk, d] : {std::array<std::size_t, 3>{1, 1, 1}, {3, 17, 5}, {65, 3, 16}, {130, 257, 7}}) {
    const mat qm = rounded<double>(2 * lq * d, 31), km = rounded<double>(2 * lk * d, 32);
    const auto Q = holding<tensor<double, dyn, dyn, dyn>>(qm, 2, lq, d);
    const auto K = holding<tensor<double, dyn, dyn, dyn>>(km, 2, lk, d);
    const auto dot = evaluate(dot_scores(Q, K));
    const auto cosv = evaluate(cosine_scores(Q, K, 0.5));
    const auto rbf = evaluate(rbf_scores(Q, K, 0.7));
    BOOST_TEST((dot.dims() == dims_t<3>{2, lq, lk}));
    double e_dot = 0, e_cos = 0, e_rbf = 0;
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t i = 0; i < lq; ++i)
        for (std::size_t j = 0; j < lk; ++j) {
          double dt = 0, nq = 0, nk = 0, dist = 0;
          for (std::size_t p = 0; p < d; ++p) {
            const double x = qm[(b * lq + i) * d + p], y = km[(b * lk + j) * d + p];
            dt += x * y, nq += x * x, nk += y * y, dist += (x - y) * (x - y);
          }
          e_dot = std::max(e_dot, std::abs(dot(b, i, j) - dt / std::sqrt(double(d))));
          e_cos = std::max(e_cos, std::abs(cosv(b, i, j) - dt / ((std::sqrt(nq) + 1e-9) * (std::sqrt(nk) + 1e-9)) / 0.5));
          e_rbf = std::max(e_rbf, std::abs(rbf(b, i, j) + dist / (2 * 0.7 * 0.7)));
        }
    BOOST_TEST(e_dot <= 1e-12);
    BOOST_TEST(e_cos <= 1e-12);
    BOOST_TEST(e_rbf <= 1e-12);
    // additive (Bahdanau) scores of dyn Q and K with static weights: the static shape's values
    if (lq == 3) {
      const auto W1 = naive::make<tensor<double, 5, 6>>(rounded<double>(30, 34)), W2 = naive::make<tensor<double, 5, 6>>(rounded<double>(30, 35));
      const auto w = naive::make<tensor<double, 6>>(rounded<double>(6, 36));
      BOOST_TEST(same_bits(evaluate(additive_scores(Q, K, W1, W2, w)),
                           evaluate(additive_scores(naive::make<tensor<double, 2, 3, 5>>(qm), naive::make<tensor<double, 2, 17, 5>>(km), W1, W2, w))));
    }
    // softmax(dot_scores) * V is attention: the fused kernel takes it
    const mat vm = rounded<double>(2 * lk * 3, 33);
    const auto V = holding<tensor<double, dyn, dyn, 3>>(vm, 2, lk);
    tensor<double, dyn, dyn, 3> o;
    BOOST_TEST(evaluated_fused(o, softmax(dot_scores(Q, K)) * V));
    const mat want = reference_attention(qm, km, vm, 2, lq, lk, d, 3, everything);
    BOOST_TEST(max_err(o, want) <= 1e-12);
  }
}

// ---- multi_head_attention on (dyn, dyn, d_model) and (dyn, d_model) inputs -------------------------------
namespace {
using mha_t = multi_head_attention<float, 16, 4>;
struct mha_fixture {
  mat wq = rounded<float>(16 * 16, 41), wk = rounded<float>(16 * 16, 42), wv = rounded<float>(16 * 16, 43),
      wo = rounded<float>(16 * 16, 44), bq = rounded<float>(16, 45), bk = rounded<float>(16, 46), bv = rounded<float>(16, 47),
      bo = rounded<float>(16, 48);
  std::vector<float> fq = as<float>(wq), fk = as<float>(wk), fv = as<float>(wv), fo = as<float>(wo), gq = as<float>(bq),
                     gk = as<float>(bk), gv = as<float>(bv), go = as<float>(bo);
  mha_t m = mha_t::from_memory({fq, fk, fv, fo, gq, gk, gv, go});

  // (B, Lq, 16) from x and the memory (B, Lk, 16), plain loops.
  mat reference(const mat& x, const mat& mem, std::size_t B, std::size_t Lq, std::size_t Lk, const allowed_fn& allowed) const {
    constexpr std::size_t D = 16, H = 4, d = 4;
    auto project = [](const mat& in, std::size_t rows, const mat& w, const mat& bias) {
      mat out = naive::matmul(in, w, rows, D, D);
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < D; ++j) out[i * D + j] += bias[j];
      return out;
    };
    mat out;
    for (std::size_t b = 0; b < B; ++b) {
      const mat q = project(mat(x.begin() + b * Lq * D, x.begin() + (b + 1) * Lq * D), Lq, wq, bq);
      const mat k = project(mat(mem.begin() + b * Lk * D, mem.begin() + (b + 1) * Lk * D), Lk, wk, bk);
      const mat v = project(mat(mem.begin() + b * Lk * D, mem.begin() + (b + 1) * Lk * D), Lk, wv, bv);
      mat concat(Lq * D);
      for (std::size_t h = 0; h < H; ++h) {
        mat qh(Lq * d), kh(Lk * d), vh(Lk * d);
        for (std::size_t c = 0; c < d; ++c) {
          for (std::size_t i = 0; i < Lq; ++i) qh[i * d + c] = q[i * D + h * d + c];
          for (std::size_t j = 0; j < Lk; ++j) kh[j * d + c] = k[j * D + h * d + c], vh[j * d + c] = v[j * D + h * d + c];
        }
        const mat oh = naive::attention(qh, kh, vh, Lq, Lk, d, d, [&](std::size_t i, std::size_t j) { return allowed(b, i, j); });
        for (std::size_t i = 0; i < Lq; ++i)
          for (std::size_t c = 0; c < d; ++c) concat[i * D + h * d + c] = oh[i * d + c];
      }
      const mat ob = project(concat, Lq, wo, bo);
      out.insert(out.end(), ob.begin(), ob.end());
    }
    return out;
  }
};
}  // namespace

BOOST_AUTO_TEST_CASE(mha_dynamic_inputs) {
  const mha_fixture f;
  const auto& m = f.m;
  constexpr std::size_t B = 2, L = 9, Lk = 13;
  const mat xm = rounded<float>(B * L * 16, 51), mm = rounded<float>(B * Lk * 16, 52);
  const auto xs = naive::make<tensor<float, B, L, 16>>(xm);
  const auto xd = holding<tensor<float, dyn, dyn, 16>>(xm, B, L);
  const auto xdd = holding<tensor<float, dyn, dyn, dyn>>(xm, B, L, 16);
  const auto ms = naive::make<tensor<float, B, Lk, 16>>(mm);
  const auto md = holding<tensor<float, dyn, dyn, 16>>(mm, B, Lk);
  const std::vector<std::size_t> lens{13, 4};

  // Self-attention, causal: bit for bit the static shape's, and the reference's values; fused once.
  const auto ys = evaluate(m(xs, causal));
  tensor<float, dyn, dyn, 16> yd;
  BOOST_TEST(evaluated_fused(yd, m(xd, causal)));
  BOOST_TEST((yd.dims() == dims_t<3>{B, L, 16}));
  BOOST_TEST(same_bits(yd, ys));
  BOOST_TEST(same_bits(evaluate(m(xdd, causal)), ys));
  BOOST_TEST(same_bits(m.forward(xd, causal), ys));
  BOOST_TEST(same_bits(evaluate(m(xd, causal), rows_only()), evaluate(m(xs, causal), rows_only())));
  const mat want = f.reference(xm, xm, B, L, L, [](std::size_t, std::size_t i, std::size_t j) { return j <= i; });
  BOOST_TEST(max_err(yd, want) <= 3e-5, "MHA self, causal: error " << max_err(yd, want));
  BOOST_TEST(max_err(evaluate(m(xd, causal), rows_only()), want) <= 3e-5);
  BOOST_TEST(same_bits(evaluate(m.weights(xd, causal)), evaluate(m.weights(xs, causal))));
  // weights() checks the module's input rules as the call operator does.
  BOOST_CHECK_EXCEPTION((void)m.weights(holding<tensor<float, dyn, dyn, dyn>>(mat(2 * 3 * 15), 2, 3, 15)), extent_error,
                        says({"multi_head_attention: the input's feature extent", "input_features 15, d_model 16"}));

  // Unbatched (dyn, 16).
  const mat x1(xm.begin(), xm.begin() + L * 16);
  const auto y1s = evaluate(m(naive::make<tensor<float, L, 16>>(x1)));
  tensor<float, dyn, 16> y1d;
  BOOST_TEST(evaluated_fused(y1d, m(holding<tensor<float, dyn, 16>>(x1, L))));
  BOOST_TEST(same_bits(y1d, y1s));
  BOOST_TEST(max_err(y1d, f.reference(x1, x1, 1, L, L, everything)) <= 3e-5);

  // Cross-attention (L_q != L_k) with key_lengths, and a boolean (B, 1, Lq, Lk) mask of dyn shape.
  const auto zs = evaluate(m(xs, ms, key_lengths(lens)));
  tensor<float, dyn, dyn, 16> zd;
  BOOST_TEST(evaluated_fused(zd, m(xd, md, key_lengths(lens))));
  BOOST_TEST(same_bits(zd, zs));
  const mat wantz = f.reference(xm, mm, B, L, Lk, [&](std::size_t b, std::size_t, std::size_t j) { return j < lens[b]; });
  BOOST_TEST(max_err(zd, wantz) <= 3e-5, "MHA cross, key_lengths: error " << max_err(zd, wantz));
  tensor<bool, dyn, 1, dyn, dyn> bm(B, L, Lk);
  tensor<bool, B, 1, L, Lk> bms;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < Lk; ++j) bm(b, 0, i, j) = bms(b, 0, i, j) = (i * 7 + j * 3 + b) % 5 != 0;
  tensor<float, dyn, dyn, 16> zb;
  BOOST_TEST(evaluated_fused(zb, m(xd, md, causal, allowed(bm))));
  BOOST_TEST(same_bits(zb, evaluate(m(xs, ms, causal, allowed(bms)))));
  const mat wantb =
      f.reference(xm, mm, B, L, Lk, [&](std::size_t b, std::size_t i, std::size_t j) { return j <= i && bool(bms(b, 0, i, j)); });
  BOOST_TEST(max_err(zb, wantb) <= 3e-5, "MHA cross, causal + bool: error " << max_err(zb, wantb));
  // A static input with a dyn memory.
  BOOST_TEST(same_bits(evaluate(m(xs, md, key_lengths(lens))), zs));
}

// ---- empty extents ----------------------------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(empty_extents) {
  tensor<float, dyn, 4> e(0);
  BOOST_TEST(e.numel() == 0u);
  tensor<float, dyn, 4> s = exp(e + e) * 2.0f;
  BOOST_TEST((s.dims() == dims_t<2>{0, 4}));
  tensor<float, dyn, 3> p = e * tensor<float, 4, 3>{};
  BOOST_TEST((p.dims() == dims_t<2>{0, 3}));
  BOOST_TEST((evaluate(softmax(e)).dims() == dims_t<2>{0, 4}));
  BOOST_TEST((evaluate(row_sum(transpose(e))).dims() == dims_t<2>{4, 1}));
  BOOST_TEST(evaluate(row_sum(transpose(e)))(3, 0) == 0.0f);

  // L_q = 0, L_k = 0, B = 0: no crash, the right extents; with no key a row of attention is 0.
  for (const auto [B, Lq, Lk] : {std::array<std::size_t, 3>{2, 0, 3}, {2, 3, 0}, {0, 3, 3}, {2, 0, 0}}) {
    const tensor<float, dyn, dyn, 8> Q = tensor<float, dyn, dyn, 8>::filled(0.5f, B, Lq), K = tensor<float, dyn, dyn, 8>::filled(0.25f, B, Lk);
    const tensor<float, dyn, dyn, 5> V = tensor<float, dyn, dyn, 5>::filled(1.0f, B, Lk);
    const auto runs = default_context().fused_runs();
    tensor<float, dyn, dyn, 5> o = attention(Q, K, V, causal);
    BOOST_TEST((o.dims() == dims_t<3>{B, Lq, 5}));
    BOOST_TEST(std::all_of(o.begin(), o.end(), [](float x) { return x == 0.0f; }));
    BOOST_TEST(default_context().fused_runs() == runs, "an empty problem goes to the row evaluator");
    const auto plain = evaluate(attention(Q, K, V, causal_bottom_right), rows_only());
    BOOST_TEST((plain.dims() == dims_t<3>{B, Lq, 5}));
    const std::vector<std::size_t> lens(B, std::min<std::size_t>(Lk, 1));
    tensor<float, dyn, dyn, 5> ol = attention(Q, K, V, key_lengths(lens));
    BOOST_TEST((ol.dims() == dims_t<3>{B, Lq, 5}));
  }
}

// ---- a constant evaluation: dyn storage comes from std::allocator and is freed before the end -----------
namespace {
constexpr double constant_dynamic() {
  tensor<double, dyn, 3> a{{1, 2, 3}, {4, 5, 6}};
  tensor<double, dyn, 3> b = a + a * 0.5;         // 1.5 a
  tensor<double, dyn, dyn> s = a * transpose(b);  // 2 x 2
  s = softmax(s);
  const tensor<double, dyn, 3> o = attention(a, a, b, causal);  // row 0 sees key 0 only: b's row 0
  return s(0, 0) + s(0, 1) + o(0, 2) + static_cast<double>(s.extent(0) + o.numel());
}
}  // namespace
BOOST_AUTO_TEST_CASE(constant_evaluation) {
  constexpr double c = constant_dynamic();
  static_assert(c > 13.5 - 1e-12 && c < 13.5 + 1e-12);
  BOOST_TEST(c == constant_dynamic());  // the same value at run time
}

// An unbatched rvalue input: the module copies it for the queries and keys before it moves it into the
// values (in one call's arguments the order is unspecified: once a copy of a moved-from tensor). A static
// (300, 64) float tensor is 75 KiB, on the heap like every dyn one.
BOOST_AUTO_TEST_CASE(mha_rvalue_unbatched_input) {
  using M = multi_head_attention<float, 64, 4>;
  M m;
  const auto g = [](auto i, auto j) { return float((i * 7 + j * 3) % 13) * 0.02f - 0.1f; };
  m.w_q = M::w_q_type::generate(g);
  m.w_k = M::w_k_type::generate(g);
  m.w_v = M::w_v_type::generate(g);
  m.w_o = M::w_o_type::generate(g);
  const auto make = [](auto t) {
    for (std::size_t i = 0; i < t.numel(); ++i) t.data()[i] = float(i % 17) * 0.05f;
    return t;
  };
  using XS = tensor<float, 300, 64>;
  using XD = tensor<float, dyn, 64>;
  const XS xs = make(XS());
  const XS from_lvalue = m(xs, causal);
  const XS from_rvalue = m(make(XS()), causal);
  const XD dyn_rvalue = m(make(XD(300)), causal);
  const tensor<float, heads<4>, 300, 300> w_rvalue = m.weights(make(XS()));
  const tensor<float, heads<4>, 300, 300> w_lvalue = m.weights(xs);
  BOOST_TEST(from_rvalue == from_lvalue);
  BOOST_TEST(same_bits(dyn_rvalue, from_lvalue));
  BOOST_TEST(w_rvalue == w_lvalue);
}

// Additive (Bahdanau) scores with weights of dyn shape: the same scores as with static weights; the hidden
// extents are checked at run time.
BOOST_AUTO_TEST_CASE(additive_scores_dyn_weights) {
  const auto q = tensor<float, 5, 4>::generate([](auto i, auto j) { return float(i + j) * 0.1f; });
  const auto w1s = tensor<float, 4, 6>::generate([](auto i, auto j) { return float(i * j % 5) * 0.1f - 0.2f; });
  const auto ws = tensor<float, 6>::generate([](auto i) { return float(i) * 0.1f; });
  const tensor<float, dyn, dyn> w1 = w1s;
  const tensor<float, dyn> w = ws;
  const tensor<float, 5, 5> want = additive_scores(q, q, w1s, w1s, ws);
  const tensor<float, 5, 5> got = additive_scores(q, q, w1, w1, w);
  BOOST_TEST(same_bits(got, want));
  const tensor<float, dyn> w7(7);
  BOOST_CHECK_EXCEPTION((void)additive_scores(q, q, w1, w1, w7), extent_error,
                        says({"attnx: additive_scores: w must have one element per hidden unit", "weight_size 7, hidden_extent 6"}));
  const tensor<float, dyn, dyn> w2(4, 5);
  BOOST_CHECK_EXCEPTION((void)additive_scores(q, q, w1, w2, w), extent_error,
                        says({"attnx: additive_scores: W1 and W2 must project to the same hidden extent", "query_hidden 6, key_hidden 5"}));
}
