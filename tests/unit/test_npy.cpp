// attnx/io/npy.hpp: round trips of every dtype at ranks 0 to 4 against the bytes the format prescribes (header text,
// padding, little-endian data written out here), dyn axes, files made byte by byte for the header versions 1.0, 2.0
// and 3.0 (other key orders, quotes and spacing, the exact widenings, '<u1' / '|u1' masks), the files numpy wrote
// (tests/data/npy, scripts/npy_reference.py: versions 1.0, 2.0, 3.0, a Fortran-ordered array) to the exact values, and
// every error with its whole message.
#define BOOST_TEST_MODULE npy
#include <attnx/attnx.hpp>
#include <attnx/io/npy.hpp>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "messages.hpp"
#include "temp_dir.hpp"

using namespace attnx;
namespace fs = std::filesystem;

namespace {

const test_support::temp_dir tmp{"attnx_npy_"};
const fs::path reference = fs::path(__FILE__).parent_path() / "../data/npy";

std::string write_bytes(const std::string& name, const std::string& bytes) {
  const std::string p = tmp / name;
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}
std::string read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A .npy file from its parts: the magic, the version, the header length (2 bytes for 1.0, 4 for 2.0 and 3.0,
// little-endian), the header as given, the data.
std::string npy_bytes(unsigned major, const std::string& header, const std::string& data, unsigned minor = 0) {
  std::string b = "\x93NUMPY";
  b += static_cast<char>(major);
  b += static_cast<char>(minor);
  for (unsigned k = 0; k < (major == 1 ? 2u : 4u); ++k) b += static_cast<char>((header.size() >> (8 * k)) & 0xFF);
  return b + header + data;
}
std::string npy_file(const std::string& name, unsigned major, const std::string& header, const std::string& data) {
  return write_bytes(name, npy_bytes(major, header, data));
}
// Values as little-endian bytes (bool: one byte, 0 or 1).
template <class T>
std::string le(const std::vector<T>& v) {
  std::string b;
  for (const T x : v) {
    if constexpr (std::is_same_v<T, bool>) {
      b += x ? '\1' : '\0';
    } else {
      std::uint64_t u = 0;
      std::memcpy(&u, &x, sizeof(T));
      for (std::size_t k = 0; k < sizeof(T); ++k) b += static_cast<char>((u >> (8 * k)) & 0xFF);
    }
  }
  return b;
}
// numpy's header for a C-order array: its dict, spaces, '\n', the data at a multiple of 64 bytes (version 1.0).
std::string numpy_header(const std::string& descr, const std::string& shape) {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
  return h + "\n";
}

// The exception type (also a npy::error) and its whole message.
template <class Ex, class F>
void throws_exactly(F&& f, const std::string& message) {
  test_support::throws_exactly<Ex, npy::error>(std::forward<F>(f), message);
}

template <class T>
T value(std::size_t i) {
  if constexpr (std::is_same_v<T, bool>) return i % 3 == 0;
  else if constexpr (std::is_same_v<T, float>) return -1.0f + 0.25f * static_cast<float>(i) + 1.0f / 3.0f;
  else if constexpr (std::is_same_v<T, double>) return static_cast<double>(i) / 3.0 - 1e300 * (i == 1);
  else if constexpr (std::is_same_v<T, std::int32_t>) return static_cast<std::int32_t>(i) * 1000 - 2147483647;
  else return (static_cast<std::int64_t>(i) << 40) - 5;
}

// Saves a tensor of this type, checks every byte of the file against the format, and loads it back.
template <class Tensor>
void round_trip(const std::string& descr, const std::string& shape_text) {
  using T = typename Tensor::value_type;
  Tensor t;
  std::vector<T> values;
  for (std::size_t i = 0; i < Tensor::size; ++i) {
    t.data()[i] = value<T>(i);
    values.push_back(value<T>(i));
  }
  const std::string p = tmp / ("round_trip_" + descr.substr(1) + "_" + std::to_string(Tensor::rank) + ".npy");
  npy::save(p, t);
  BOOST_TEST(read_bytes(p) == npy_bytes(1, numpy_header(descr, shape_text), le(values)), descr << " " << shape_text);
  const auto a = npy::inspect(p);
  BOOST_TEST((a.major == 1u && a.minor == 0u && a.descr == descr && !a.fortran_order && a.data_offset % 64 == 0));
  BOOST_TEST(
      (a.shape == std::vector<std::size_t>(Tensor::shape_type::extents.begin(), Tensor::shape_type::extents.end())));
  BOOST_TEST((npy::load<Tensor>(p) == t), descr << " " << shape_text);
}

template <class T>
void round_trip_ranks(const std::string& descr) {
  round_trip<tensor<T>>(descr, "()");
  round_trip<tensor<T, 5>>(descr, "(5,)");
  round_trip<tensor<T, 2, 3>>(descr, "(2, 3)");
  round_trip<tensor<T, 2, 1, 3>>(descr, "(2, 1, 3)");
  round_trip<tensor<T, 2, 3, 1, 2>>(descr, "(2, 3, 1, 2)");
}

}  // namespace

// ---- round trips -----------------------------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(round_trips_of_every_dtype_at_ranks_0_to_4) {
  round_trip_ranks<float>("<f4");
  round_trip_ranks<double>("<f8");
  round_trip_ranks<std::int32_t>("<i4");
  round_trip_ranks<std::int64_t>("<i8");
  round_trip_ranks<bool>("|b1");
  // An empty array (a dyn extent of 0) and a view.
  const tensor<float, dyn, 3> empty(std::size_t{0});
  const std::string e = tmp / "empty.npy";
  npy::save(e, empty);
  BOOST_TEST(read_bytes(e) == npy_bytes(1, numpy_header("<f4", "(0, 3)"), ""));
  BOOST_TEST((npy::load<tensor<float, dyn, 3>>(e).dims()[0] == 0u));
  std::vector<double> mem{1.5, -2.5, 3.25, 0.0};
  const std::string p = tmp / "view.npy";
  npy::save(p, view<const double, 2, 2>(mem));
  BOOST_TEST((npy::load<tensor<double, 2, 2>>(p) == tensor<double, 2, 2>{{1.5, -2.5}, {3.25, 0.0}}));
}

BOOST_AUTO_TEST_CASE(dyn_axes_take_the_stored_extents) {
  const auto t =
      tensor<float, 4, 3>::generate([](std::size_t i, std::size_t j) { return static_cast<float>(i * 3 + j) - 0.5f; });
  const std::string p = tmp / "dyn.npy";
  npy::save(p, t);
  const auto a = npy::load<tensor<float, dyn, 3>>(p);
  BOOST_TEST((a.dims()[0] == 4u && a(3, 2) == t(3, 2) && a(1, 0) == t(1, 0)));
  const auto b = npy::load<tensor<double, seq<dyn>, dyn>>(p);  // '<f4' widened into double, named axes
  BOOST_TEST((b.dims()[0] == 4u && b.dims()[1] == 3u && b(2, 1) == static_cast<double>(t(2, 1))));
  std::vector<float> mem(12);
  npy::load_into(p, view<float, dyn, 3>(mem));
  BOOST_TEST(mem[11] == t(3, 2));
  // A dyn tensor saved: its run-time extents in the header.
  const tensor<std::int32_t, dyn, 2> d = npy::load<tensor<std::int32_t, dyn, 2>>(
      npy_file("i4_3x2.npy", 1, numpy_header("<i4", "(3, 2)"), le<std::int32_t>({1, -2, 3, -4, 5, -6})));
  const std::string q = tmp / "dyn_saved.npy";
  npy::save(q, d);
  BOOST_TEST(read_bytes(q) == npy_bytes(1, numpy_header("<i4", "(3, 2)"), le<std::int32_t>({1, -2, 3, -4, 5, -6})));
  // The rank and the static extents are still checked.
  throws_exactly<npy::shape_error>([&] { (void)npy::load<tensor<float, dyn, 4>>(p); },
                                   "attnx: npy: '" + p + "' has shape [4, 3], but the target has shape [dyn, 4]");
  throws_exactly<npy::shape_error>([&] { (void)npy::load<tensor<float, dyn>>(p); },
                                   "attnx: npy: '" + p + "' has shape [4, 3], but the target has shape [dyn]");
  throws_exactly<npy::shape_error>([&] { npy::load_into(p, view<float, dyn, 3>(mem.data(), std::size_t{3})); },
                                   "attnx: npy: '" + p + "' has shape [4, 3], but the target has shape [3, 3]");
}

// ---- files made by hand ----------------------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(hand_made_files_of_each_header_version) {
  // 1.0, as numpy writes it.
  const auto v1 = npy_file("v1.npy", 1, numpy_header("<f8", "(2,)"), le<double>({0.1, -3.5}));
  BOOST_TEST((npy::load<tensor<double, 2>>(v1) == tensor<double, 2>{{0.1, -3.5}}));
  // 2.0: a 4-byte header length; the keys in another order, double quotes, no trailing comma, no padding.
  const auto v2 = npy_file("v2.npy", 2, "{\"shape\": (1, 2), \"fortran_order\": False, \"descr\": \"<i4\"}\n",
                           le<std::int32_t>({-5, 2147483647}));
  BOOST_TEST(npy::inspect(v2).major == 2u);
  BOOST_TEST(npy::inspect(v2).data_offset == 12u + 58u);
  BOOST_TEST((npy::load<tensor<std::int32_t, 1, 2>>(v2) == tensor<std::int32_t, 1, 2>{{-5, 2147483647}}));
  // '<i4' widened exactly into std::int64_t (the sign kept).
  BOOST_TEST((npy::load<tensor<std::int64_t, 1, 2>>(v2) == tensor<std::int64_t, 1, 2>{{-5, 2147483647}}));
  // 3.0 (a UTF-8 header): no spaces at all, a trailing comma in the tuple, a bool mask.
  const auto v3 =
      npy_file("v3.npy", 3, "{'descr':'|b1','fortran_order':False,'shape':(3,),}", le<bool>({true, false, true}));
  BOOST_TEST(npy::inspect(v3).major == 3u);
  BOOST_TEST((npy::load<tensor<bool, 3>>(v3) == tensor<bool, 3>{{true, false, true}}));
  // A mask saved as uint8 ('|u1', or '<u1'), holding 0 and 1; tabs and newlines between the tokens.
  for (const std::string u1 : {"|u1", "<u1"}) {
    const auto u =
        npy_file("u1.npy", 1, "{'descr':\t'" + u1 + "',\n 'fortran_order' : False , 'shape' : ( 2 , 2 ) }  \n",
                 std::string("\0\1\1\0", 4));
    BOOST_TEST((npy::load<tensor<bool, 2, 2>>(u) == tensor<bool, 2, 2>{{false, true}, {true, false}}));
  }
  // A scalar (shape ()), and '<f4' widened exactly into double.
  const auto s = npy_file("scalar.npy", 1, numpy_header("<f4", "()"), le<float>({1.0f / 3.0f}));
  BOOST_TEST(npy::load<tensor<double>>(s)() == static_cast<double>(1.0f / 3.0f));
  BOOST_TEST(npy::inspect(s).shape.empty());
  // fortran_order True of a 1-D array is inspected as it is (load refuses it, below).
  const auto f =
      npy_file("fortran_1d.npy", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }\n", le<float>({2}));
  BOOST_TEST(npy::inspect(f).fortran_order);
}

// ---- numpy's own files ----------------------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(files_written_by_numpy_load_to_the_exact_values) {
  const auto f4 = npy::load<tensor<float, 2, 3>>((reference / "f4_2x3.npy").string());
  const tensor<float, 2, 3> want_f4{{1.5f, -2.25f, 1.0f / 3.0f}, {0.0f, static_cast<float>(1e-3), -65504.0f}};
  BOOST_TEST((f4 == want_f4));
  BOOST_TEST(npy::inspect((reference / "f4_2x3.npy").string()).data_offset ==
             128u);  // (NumPy pads the header to 128 bytes, with room to grow)

  const auto f8 = npy::load<tensor<double, 4>>((reference / "f8_4.npy").string());
  BOOST_TEST((f8(0) == 0.1 && f8(1) == -1.0 / 3.0 && f8(2) == 1e300 && f8(3) == 0.0 && std::signbit(f8(3))));

  const auto i8 = npy::load<tensor<std::int64_t, 2, 2>>((reference / "i8_2x2.npy").string());
  BOOST_TEST((i8 == tensor<std::int64_t, 2, 2>{
                        {std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()},
                        {(std::int64_t{1} << 40) + 1, -7}}));

  // PyTorch's polarity (true = blocked): the causal mask, used as such.
  const auto m = npy::load<tensor<bool, 3, 3>>((reference / "b1_3x3.npy").string());
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 3; ++j) BOOST_TEST(m(i, j) == (j > i));
  const auto q = tensor<double, 3, 2>{{0.5, -1}, {2, 0.25}, {-0.75, 1}};
  const tensor<double, 3, 2> o = attention(q, q, q, blocked(m)), want = attention(q, q, q, causal);
  BOOST_TEST((o == want));

  // Format versions 2.0 and 3.0 as numpy writes them; a uint8 mask of 0 and 1.
  const std::string v2 = (reference / "i4_v2.npy").string(), v3 = (reference / "u1_v3.npy").string();
  BOOST_TEST((npy::inspect(v2).major == 2u && npy::inspect(v3).major == 3u));
  BOOST_TEST((npy::load<tensor<std::int64_t, 3>>(v2) == tensor<std::int64_t, 3>{{-2147483648LL, 0, 2147483647}}));
  BOOST_TEST((npy::load<tensor<bool, 2, 2>>(v3) == tensor<bool, 2, 2>{{false, true}, {true, true}}));

  const std::string fortran = (reference / "f4_fortran.npy").string();
  BOOST_TEST(npy::inspect(fortran).fortran_order);
  throws_exactly<npy::format_error>([&] { (void)npy::load<tensor<float, 2, 3>>(fortran); },
                                    "attnx: npy: '" + fortran +
                                        "' is in Fortran order (fortran_order: True), and attnx "
                                        "reads C order only (numpy: np.save(path, np.ascontiguousarray(a)))");
}

// ---- errors ---------------------------------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(files_that_are_not_npy) {
  const std::string missing = tmp / "missing.npy";
  throws_exactly<npy::file_error>([&] { (void)npy::load<tensor<float, 2>>(missing); },
                                  "attnx: npy: cannot open '" + missing + "': No such file or directory");
  const auto tiny = write_bytes("tiny.npy", "\x93NUM");
  throws_exactly<npy::format_error>([&] { (void)npy::inspect(tiny); },
                                    "attnx: npy: '" + tiny +
                                        "' is 4 bytes long, too short for the magic string and the "
                                        "format version (truncated, or not a .npy file)");
  const auto other = write_bytes("other.npy", "PK\x03\x04 a zip file, as numpy.savez writes");
  throws_exactly<npy::format_error>(
      [&] { (void)npy::inspect(other); },
      "attnx: npy: '" + other + "' is not a .npy file (it does not start with \"\\x93NUMPY\")");
  for (const auto& [major, minor] : {std::pair{4u, 0u}, {1u, 1u}, {0u, 0u}}) {
    const auto v = write_bytes("version.npy", npy_bytes(major, numpy_header("<f4", "(1,)"), le<float>({1}), minor));
    throws_exactly<npy::format_error>([&] { (void)npy::inspect(v); },
                                      "attnx: npy: '" + v + "' has format version " + std::to_string(major) + "." +
                                          std::to_string(minor) + ", and attnx reads 1.0, 2.0 and 3.0");
  }
  const auto no_length = write_bytes("no_length.npy", std::string("\x93NUMPY\x02\x00\x10\x00", 10));
  throws_exactly<npy::format_error>([&] { (void)npy::inspect(no_length); },
                                    "attnx: npy: '" + no_length +
                                        "' is 10 bytes long, too short for the header length "
                                        "(truncated, or not a .npy file)");
  const auto long_header = write_bytes("long_header.npy", std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 18));
  throws_exactly<npy::format_error>([&] { (void)npy::inspect(long_header); },
                                    "attnx: npy: '" + long_header +
                                        "': the header length 255 exceeds the 8 bytes that "
                                        "follow it (truncated?)");
}

BOOST_AUTO_TEST_CASE(headers_that_do_not_parse) {
  const auto bad = [](const std::string& header, const std::string& what) {
    const auto p = npy_file("bad_header.npy", 1, header, le<float>({1}));
    throws_exactly<npy::format_error>([&] { (void)npy::inspect(p); },
                                      "attnx: npy: '" + p + "': corrupt header: " + what);
  };
  bad("('descr', '<f4')\n", "the header does not start with '{' (a Python dict) at byte 0 of the header");
  bad("{'descr' '<f4', 'fortran_order': False, 'shape': (1,)}",
      "expected ':' after the key 'descr' at byte 9 of the header");
  bad("{descr: '<f4'}", "expected a key in quotes at byte 1 of the header");
  bad("{'descr': <f4, 'fortran_order': False, 'shape': (1,)}",
      "expected the value of 'descr' (a string) in quotes at byte 10 of the header");
  bad("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}",
      "unknown key 'extra' (a .npy header has exactly 'descr', 'fortran_order' and 'shape') at byte 56 of the header");
  bad("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
      "the key 'descr' appears twice at byte 17 of the header");
  bad("{'descr': '<f4', 'shape': (1,)}",
      "the key 'fortran_order' is missing (a .npy header has 'descr', 'fortran_order' and 'shape')");
  bad("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}",
      "the value of 'fortran_order' is neither True nor False at byte 34 of the header");
  bad("{'descr': '<f4', 'fortran_order': False, 'shape': (1)}",
      "the value of 'shape' is (1), a number in parentheses, not a tuple (a tuple of one is written (1,)) at byte 50 "
      "of the header");
  bad("{'descr': '<f4', 'fortran_order': False, 'shape': [1]}",
      "the value of 'shape' is not a tuple at byte 50 of the header");
  bad("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}",
      "expected an extent (a non-negative integer) in 'shape' at byte 51 of the header");
  bad("{'descr': '<f4', 'fortran_order': False, 'shape': (01,)}",
      "an extent with a leading zero at byte 51 of the header");
  bad("{'descr': '<f4', 'fortran_order': False, 'shape': (1 2)}",
      "expected ',' or ')' in 'shape' at byte 53 of the header");
  bad("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
      "an extent beyond a size_t at byte 51 of the header");
  bad("{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}",
      "expected ',' or '}' after the value of 'descr' at byte 16 of the header");
  bad("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (1,)}",
      "an escape sequence in a string (no .npy header attnx reads has one) at byte 13 of the header");
  bad("{'descr': '<f4", "a string that does not end at byte 10 of the header");
  bad("{'descr': '<f\n4', 'fortran_order': False, 'shape': (1,)}",
      "a string that does not end on its line at byte 13 of the header");
  bad("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x",
      "more text after the dict's '}' at byte 56 of the header");
  bad("{'descr': [('a', '<f4'), ('b', '<i4')", "a list that does not end at byte 10 of the header");
}

BOOST_AUTO_TEST_CASE(data_of_the_wrong_size) {
  const auto cut = npy_file("cut.npy", 1, numpy_header("<f4", "(2, 3)"), le<float>({1, 2, 3, 4, 5}));
  throws_exactly<npy::format_error>([&] { (void)npy::load<tensor<float, 2, 3>>(cut); },
                                    "attnx: npy: '" + cut +
                                        "': shape [2, 3] of '<f4' needs 24 bytes of data, and the file "
                                        "has 20 after its header (truncated?)");
  const auto more = npy_file("more.npy", 1, numpy_header("|b1", "(2,)"), le<bool>({true, false, true}));
  throws_exactly<npy::format_error>([&] { (void)npy::load<tensor<bool, 2>>(more); },
                                    "attnx: npy: '" + more +
                                        "': shape [2] of '|b1' needs 2 bytes of data, and the file has "
                                        "3 after its header (a .npy file ends with its data)");
  // Big-endian data of the right size is inspected (the size checked) and refused by load (below).
  const auto big = npy_file("big_size.npy", 1, numpy_header(">f8", "(2,)"), le<double>({1}));
  throws_exactly<npy::format_error>([&] { (void)npy::inspect(big); },
                                    "attnx: npy: '" + big +
                                        "': shape [2] of '>f8' needs 16 bytes of data, and the file has "
                                        "8 after its header (truncated?)");
  // A shape whose byte count wraps around (2^62 x 8 = 2^65) is refused, not taken as small.
  const auto wrap = npy_file("wrap.npy", 1, numpy_header("<f8", "(4611686018427387904, 1)"), "");
  throws_exactly<npy::format_error>([&] { (void)npy::inspect(wrap); },
                                    "attnx: npy: '" + wrap +
                                        "': shape [4611686018427387904, 1] has more elements than a "
                                        "size_t can count in bytes");
  const auto wrap2 = npy_file("wrap2.npy", 1, numpy_header("|b1", "(4294967296, 4294967296)"), "");
  throws_exactly<npy::format_error>([&] { (void)npy::inspect(wrap2); },
                                    "attnx: npy: '" + wrap2 +
                                        "': shape [4294967296, 4294967296] has more elements than a "
                                        "size_t can count in bytes");
  // A zero extent makes no bytes, whatever the others.
  const auto zero = npy_file("zero.npy", 1, numpy_header("<f8", "(4611686018427387904, 0)"), "");
  BOOST_TEST(npy::inspect(zero).elements() == 0u);
}

BOOST_AUTO_TEST_CASE(dtypes_that_do_not_load_say_why) {
  const auto file = [](const std::string& name, const std::string& descr, const std::string& data) {
    return npy_file(name + ".npy", 1, numpy_header(descr, "(2,)"), data);
  };
  const auto f4 = file("f4", "<f4", le<float>({1, 2})), f8 = file("f8", "<f8", le<double>({1, 2}));
  const auto i4 = file("i4", "<i4", le<std::int32_t>({1, 2})), i8 = file("i8", "<i8", le<std::int64_t>({1, 2}));
  const auto b1 = file("b1", "|b1", le<bool>({true, false})), u1 = file("u1", "|u1", std::string("\1\0", 2));
  const auto in = [](const std::string& p) { return "attnx: npy: '" + p + "'"; };
  throws_exactly<npy::dtype_error>([&] { (void)npy::load<tensor<std::int32_t, 2>>(b1); },
                                   in(b1) + " is a bool mask ('|b1'): load it into a bool tensor");
  throws_exactly<npy::dtype_error>([&] { (void)npy::load<tensor<float, 2>>(b1); },
                                   in(b1) + " is a bool mask ('|b1'): load it into a bool tensor");
  throws_exactly<npy::dtype_error>([&] { (void)npy::load<tensor<bool, 2>>(f4); },
                                   in(f4) +
                                       " has dtype '<f4': a bool tensor loads '|b1', and '|u1' holding only 0 and 1 (a "
                                       "comparison makes a mask of other values, e.g. x > 0.5f)");
  throws_exactly<npy::dtype_error>([&] { (void)npy::load<tensor<std::int64_t, 2>>(u1); },
                                   in(u1) +
                                       " has dtype '|u1', which attnx loads into bool tensors only (a mask, every "
                                       "element 0 or 1)");
  throws_exactly<npy::dtype_error>([&] { (void)npy::load<tensor<float, 2>>(f8); },
                                   in(f8) +
                                       " has dtype '<f8': float elements could lose digits (narrowing is refused; they "
                                       "load '<f4'): load it into a double tensor");
  throws_exactly<npy::dtype_error>([&] { (void)npy::load<tensor<std::int32_t, 2>>(i8); },
                                   in(i8) +
                                       " has dtype '<i8': std::int32_t elements could lose digits (narrowing is "
                                       "refused; they load '<i4'): load it into a std::int64_t tensor");
  throws_exactly<npy::dtype_error>(
      [&] { (void)npy::load<tensor<double, 2>>(i4); },
      in(i4) +
          " has dtype '<i4', an integer dtype, and double elements load '<f8', '<f4' "
          "(nothing converts silently: load it into a std::int32_t tensor, then cast<double>)");
  throws_exactly<npy::dtype_error>(
      [&] { (void)npy::load<tensor<std::int64_t, 2>>(f8); },
      in(f8) +
          " has dtype '<f8', a floating-point dtype, and std::int64_t elements load '<i8', "
          "'<i4' (nothing converts silently: load it into a double tensor, then "
          "cast<std::int64_t>)");
  // Dtypes attnx does not read at all, whatever the target.
  const auto big = file("big", ">f4", le<float>({1, 2}));
  throws_exactly<npy::dtype_error>([&] { (void)npy::load<tensor<float, 2>>(big); },
                                   in(big) +
                                       " holds big-endian data ('>f4'), and attnx reads little-endian ones (numpy: "
                                       "np.save(path, a.astype('<f4')))");
  for (const std::string d : {"<f2", "<u2", "|i1", "=f4", ">u1", "<c8", "<U3", "<M8[ns]"}) {
    const auto p = file("other", d, "");
    throws_exactly<npy::dtype_error>([&] { (void)npy::load<tensor<double, 2>>(p); },
                                     in(p) + " has dtype '" + d +
                                         "', which attnx does not read (it reads '<f4', '<f8', "
                                         "'<i4', '<i8', '|b1', '|u1')");
  }
  const auto structured = npy_file("structured.npy", 1,
                                   "{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, "
                                   "'shape': (2,), }\n",
                                   std::string(16, '\0'));
  BOOST_TEST(npy::inspect(structured).descr == "[('a', '<f4'), ('b', '<i4')]");
  throws_exactly<npy::dtype_error>([&] { (void)npy::load<tensor<float, 2>>(structured); },
                                   in(structured) +
                                       " has a structured dtype ([('a', '<f4'), ('b', '<i4')]), which attnx "
                                       "does not read");
  // A dtype attnx does not read, with a shape of 2^40 elements, into a dyn tensor: refused before anything is
  // allocated for it.
  const auto huge = npy_file("huge.npy", 1, numpy_header("<f2", "(1099511627776,)"), "");
  throws_exactly<npy::dtype_error>([&] { (void)npy::load<tensor<float, dyn>>(huge); },
                                   in(huge) +
                                       " has dtype '<f2', which attnx does not read (it reads '<f4', '<f8', '<i4', "
                                       "'<i8', '|b1', '|u1')");
}

BOOST_AUTO_TEST_CASE(bool_elements_other_than_0_or_1_and_nothing_written) {
  const auto b1 = npy_file("bad_b1.npy", 1, numpy_header("|b1", "(4,)"), std::string("\1\0\2\1", 4));
  throws_exactly<npy::format_error>([&] { (void)npy::load<tensor<bool, 4>>(b1); },
                                    "attnx: npy: '" + b1 +
                                        "': element 2 (in C order) of the '|b1' array is the byte 2, and "
                                        "a bool element is 0 or 1");
  const auto u1 = npy_file("bad_u1.npy", 1, numpy_header("|u1", "(2, 2)"), std::string("\0\1\1\xff", 4));
  bool mem[4] = {true, true, true, true};
  throws_exactly<npy::dtype_error>([&] { npy::load_into(u1, view<bool, 2, 2>(mem)); },
                                   "attnx: npy: '" + u1 +
                                       "' has dtype '|u1' and element 3 (in C order) is 255: a '|u1' "
                                       "array loads into bool only when every element is 0 or 1");
  BOOST_TEST((mem[0] && mem[1] && mem[2] && mem[3]));  // the view as it was
  std::vector<float> keep(6, 7.0f);
  const auto f = npy_file("fortran.npy", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n",
                          le<float>({1, 2, 3, 4, 5, 6}));
  throws_exactly<npy::format_error>([&] { npy::load_into(f, view<float, 2, 3>(keep)); },
                                    "attnx: npy: '" + f +
                                        "' is in Fortran order (fortran_order: True), and attnx reads C "
                                        "order only (numpy: np.save(path, np.ascontiguousarray(a)))");
  throws_exactly<npy::shape_error>(
      [&] {
        npy::load_into(npy_file("f4_6.npy", 1, numpy_header("<f4", "(6,)"), le<float>({1, 2, 3, 4, 5, 6})),
                       view<float, 2, 3>(keep));
      },
      "attnx: npy: '" + (tmp / "f4_6.npy").string() + "' has shape [6], but the target has shape [2, 3]");
  BOOST_TEST((keep == std::vector<float>(6, 7.0f)));
}

BOOST_AUTO_TEST_CASE(saving_where_nothing_can_be_written) {
  const std::string p = tmp / "no_such_directory/x.npy";
  throws_exactly<npy::file_error>([&] { npy::save(p, tensor<float, 2>{}); },
                                  "attnx: npy: cannot open '" + p + "' for writing");
}
