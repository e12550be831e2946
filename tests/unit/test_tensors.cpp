// Tensors, views, ownership of operands (`auto` never dangles), aliasing, heap storage.
#define BOOST_TEST_MODULE tensors
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <cmath>
#include <numeric>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "messages.hpp"

using namespace attnx;

namespace {
tensor<double, 2, 2> make_pair_matrix(double a, double b) { return tensor<double, 2, 2>{{a, b}, {b, a}}; }

// Returns an expression built from temporaries: it must own them.
auto make_product_of_temporaries() { return make_pair_matrix(1, 2) * make_pair_matrix(3, 4); }
}  // namespace

BOOST_AUTO_TEST_CASE(construction_and_access) {
  tensor<double, 2, 3> a{{1, 2, 3}, {4, 5, 6}};
  static_assert(decltype(a)::rank == 2 && decltype(a)::size == 6);
  static_assert(decltype(a)::strides[0] == 3 && decltype(a)::strides[1] == 1);
  BOOST_TEST(a(1, 2) == 6.0);
  a(0, 1) = 7;
  BOOST_TEST(a.data()[1] == 7.0);
  tensor<double, 2, 3> z;
  for (double x : z) BOOST_TEST(x == 0.0);
  auto g = tensor<int, 2, 3, 4>::generate([](auto i, auto j, auto k) { return int(100 * i + 10 * j + k); });
  BOOST_TEST(g(1, 2, 3) == 123);
  const std::vector<float> flat{1, 2, 3, 4};
  auto f = tensor<float, 2, 2>::from_flat(flat);
  BOOST_TEST(f(1, 0) == 3.0f);
  BOOST_TEST((tensor<float, 3>::filled(2.5f)(2)) == 2.5f);
}

// storage<T, N>[i] is element i of data(): inline, run-time count on the heap, fixed count on the heap; at
// compile time too.
constexpr int storage_sum() {
  storage<int, 3> small;
  storage<int, dyn> heap(4);
  for (std::size_t i = 0; i < 3; ++i) small[i] = int(i) + 1;
  for (std::size_t i = 0; i < 4; ++i) heap[i] = 10 * (int(i) + 1);
  return small[2] + heap[3] + small.data()[0] + heap.data()[1];
}
static_assert(storage_sum() == 3 + 40 + 1 + 20);
BOOST_AUTO_TEST_CASE(storage_indexing) {
  storage<std::size_t, dyn> d(uninitialized, 5);
  for (std::size_t i = 0; i < 5; ++i) d[i] = i * i;
  const storage<std::size_t, dyn>& c = d;
  for (std::size_t i = 0; i < 5; ++i) BOOST_TEST(c.data()[i] == i * i);
  BOOST_TEST(&c[4] == d.data() + 4);
  constexpr std::size_t n = inline_bytes / sizeof(float) + 16;
  storage<float, n> big;  // beyond inline_bytes: on the heap, the count fixed
  static_assert(decltype(big)::on_heap);
  big[n - 1] = 2.5f;
  BOOST_TEST(big.data()[n - 1] == 2.5f);
  BOOST_TEST(big[0] == 0.0f);  // value-initialised
  storage<int, 2> small;
  small[1] = -3;
  BOOST_TEST(small.data()[1] == -3);
}

BOOST_AUTO_TEST_CASE(bad_runtime_input_is_reported) {
  BOOST_CHECK_EXCEPTION((tensor<double, 2, 3>{{1, 2, 3}, {4, 5}}), std::invalid_argument,
                        test_support::says({"wrong number of elements"}));
  const std::vector<float> five(5);
  BOOST_CHECK_EXCEPTION((tensor<float, 2, 2>::from_flat(five)), std::length_error,
                        test_support::says({"needs 4 elements, got 5"}));
  tensor<double, 2, 3> a;
  BOOST_CHECK_EXCEPTION(a.at(1, 3), std::out_of_range,
                        test_support::says({"index 3 is out of range on axis 1 of a tensor of shape [2, 3]"}));
  BOOST_CHECK_NO_THROW(a.at(1, 2));
}

BOOST_AUTO_TEST_CASE(views_over_user_memory) {
  std::vector<float> mem(12);
  std::iota(mem.begin(), mem.end(), 0.0f);
  view<const float, 3, 4> v(mem);
  BOOST_TEST(v(2, 3) == 11.0f);
  // Size mismatch: the shape, the required and the given counts are in the message.
  std::vector<float> small(10);
  BOOST_CHECK_EXCEPTION((view<float, seq<3>, d_model<4>>(small.data(), small.size())), std::length_error,
                        test_support::says({"a view of shape [seq=3, d_model=4] needs 12 elements, got 10"}));
  BOOST_CHECK_THROW((view<float, 3, 4>(nullptr, 12)), std::invalid_argument);
  // Views are expressions; a writable view can be assigned an expression.
  std::vector<float> out(6);
  view<float, 3, 2> o(out);
  tensor<float, 4, 2> w{{1, 0}, {0, 1}, {1, 0}, {0, 1}};
  o = v * w;
  BOOST_TEST(out[0] == 0.0f + 2.0f);
  BOOST_TEST(out[5] == 9.0f + 11.0f);
}

BOOST_AUTO_TEST_CASE(assignment_reads_the_old_value_throughout) {
  // a = a * a must not read partially written results.
  tensor<double, 2, 2> a{{1, 2}, {3, 4}};
  a = a * a;
  BOOST_TEST(a(0, 0) == 7.0);
  BOOST_TEST(a(0, 1) == 10.0);
  BOOST_TEST(a(1, 0) == 15.0);
  BOOST_TEST(a(1, 1) == 22.0);
  // Same through a view over the same memory.
  std::vector<double> mem{1, 2, 3, 4};
  view<double, 2, 2> v(mem);
  v = v * v;
  BOOST_TEST(mem == (std::vector<double>{7, 10, 15, 22}));
  a = transpose(a);
  BOOST_TEST(a(0, 1) == 15.0);
}

BOOST_AUTO_TEST_CASE(ownership_rule) {
  tensor<double, 2, 2> x{{1, 2}, {3, 4}};
  // lvalue tensors are referenced, rvalue tensors are owned
  using by_ref = decltype(x * x);
  using by_val = decltype(make_pair_matrix(1, 2) * x);
  static_assert(std::is_same_v<by_ref, matmul_expr<tensor_ref<double, make_shape<2, 2>>, tensor_ref<double, make_shape<2, 2>>>>);
  static_assert(std::is_same_v<by_val, matmul_expr<tensor<double, 2, 2>, tensor_ref<double, make_shape<2, 2>>>>);
  // an expression that outlives the temporaries it was built from (ASan checks this in CI)
  auto e = make_product_of_temporaries();
  auto f = e + make_pair_matrix(10, 20);  // e copied in, the temporary moved in
  tensor<double, 2, 2> r = f;
  BOOST_TEST(r(0, 0) == 1 * 3 + 2 * 4 + 10.0);
  BOOST_TEST(r(0, 1) == 1 * 4 + 2 * 3 + 20.0);
  // lvalue tensors are seen as they are when the expression is evaluated (documented)
  auto g = x * 2.0;
  x(0, 0) = 100;
  tensor<double, 2, 2> gv = g;
  BOOST_TEST(gv(0, 0) == 200.0);
}

BOOST_AUTO_TEST_CASE(heap_storage_for_large_tensors) {
  using big = tensor<float, 300, 100>;  // 120 kB: above the inline limit
  static_assert(sizeof(big) < 64);
  big a = big::generate([](auto i, auto j) { return float(i % 7) - float(j % 5); });
  big b = a;
  BOOST_TEST(b(299, 99) == a(299, 99));
  big c = std::move(b);
  BOOST_TEST(c(10, 3) == a(10, 3));
  big d = a + c * 2.0f;
  BOOST_TEST(d(123, 45) == 3 * a(123, 45));
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(d.data()) % heap_alignment == 0);
  tensor<float, 300, 300> s = softmax(a * transpose(c));  // heap operands and row buffers
  tensor<float, 300, 1> sums = row_sum(s);
  for (std::size_t i = 0; i < 300; i += 37) BOOST_TEST(std::abs(sums(i, 0) - 1.0f) < 1e-5f);
}

BOOST_AUTO_TEST_CASE(printing) {
  std::ostringstream os;
  os << tensor<int, 2, 2>{{1, 2}, {3, 4}};
  BOOST_TEST(os.str() == "[[1, 2],\n [3, 4]]");
  BOOST_TEST((shape_string<make_shape<seq<3>, 4>>()) == "[seq=3, 4]");
  // Rank 3 and 4: the shape with its names, then each matrix under its leading indices.
  tensor<int, 2, 2, 3> t3;
  for (std::size_t n = 0; n < t3.numel(); ++n) t3.data()[n] = int(n);
  std::ostringstream o3;
  o3 << t3;
  BOOST_TEST(o3.str() == "[2, 2, 3]\n(0, :, :) =\n[[0, 1, 2],\n [3, 4, 5]]\n(1, :, :) =\n[[6, 7, 8],\n [9, 10, 11]]");
  tensor<int, batch<2>, heads<2>, 1, 2> t4;
  for (std::size_t n = 0; n < t4.numel(); ++n) t4.data()[n] = int(n);
  std::ostringstream o4;
  o4 << view<const int, dyn, 2, 1, 2>(t4.data(), 2);
  BOOST_TEST(o4.str() == "[2, 2, 1, 2]\n(0, 0, :, :) =\n[[0, 1]]\n(0, 1, :, :) =\n[[2, 3]]\n(1, 0, :, :) =\n[[4, 5]]\n"
                         "(1, 1, :, :) =\n[[6, 7]]");
  std::ostringstream o4n;
  o4n << t4;
  BOOST_TEST(o4n.str().substr(0, o4n.str().find('\n')) == "[batch=2, heads=2, 1, 2]");
  // An expression prints its value.
  const tensor<int, 2, 2> a{{1, 2}, {3, 4}};
  std::ostringstream oe;
  oe << a * transpose(a) + 1;
  BOOST_TEST(oe.str() == "[[6, 12],\n [12, 26]]");
}

BOOST_AUTO_TEST_CASE(aliasing_detection) {
  tensor<double, 2, 2> a{{1, 2}, {3, 4}}, b{{1, 0}, {0, 1}};
  BOOST_TEST(reads_memory(a * b + 1.0, a.data(), 4));
  BOOST_TEST(!reads_memory(b * b + 1.0, a.data(), 4));
  tensor<bool, 2, 2> m{{true, false}, {true, true}};
  BOOST_TEST(reads_memory(mask(b, allowed(m)), m.data(), 4));
  static_assert(node_count<decltype(a * b + 1.0)>() == 5);  // +, *, a, b, scalar
  // In-place element-wise update through the non-aliasing path and the aliasing one.
  a = b * 3.0;
  BOOST_TEST(a(1, 1) == 3.0);
  a = a + a;
  BOOST_TEST(a(1, 1) == 6.0);
  BOOST_TEST(a(0, 1) == 0.0);
}
