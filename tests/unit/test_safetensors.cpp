// attnx/io/safetensors.hpp: round trips (float, double, transposed, views, metadata, a whole
// multi_head_attention module in both weight layouts), a hand-made file as another writer would produce
// it, BF16 and F16 files (every pattern, and a whole module) and the exact widenings (F32 into double, I32 into
// std::int64_t), writing narrower (entry::to: each value rounded once to nearest even, checked against a search
// over the format's values; I64 as I32), and one test per error: missing file, truncated file, header length
// beyond the file, corrupt JSON, malformed entries, data offsets beyond the data, missing tensor, a dtype the
// target does not load (each message with its own reason), wrong shape. Bool tensors (PyTorch's masks): BOOL and U8
// files made byte by byte load, bytes other than 0 or 1 are refused, a bool tensor is saved as BOOL. The head counts
// (save_mha's "attnx.heads" / "attnx.kv_heads"): stored, checked, and what goes wrong without them.
#define BOOST_TEST_MODULE safetensors
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>
#include <attnx/io/safetensors.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "messages.hpp"

#include "temp_dir.hpp"

using namespace attnx;
namespace st = attnx::safetensors;
namespace fs = std::filesystem;

namespace {

const test_support::temp_dir tmp{"attnx_safetensors_"};

// A file from raw parts: the 8-byte length (the header's own, unless given), the header, the data.
fs::path write_raw(const std::string& name, const std::string& header, const std::vector<unsigned char>& data,
                   std::int64_t length = -1) {
  const fs::path p = tmp / name;
  std::ofstream out(p, std::ios::binary);
  std::uint64_t n = length < 0 ? header.size() : static_cast<std::uint64_t>(length);
  for (int i = 0; i < 8; ++i, n >>= 8) out.put(static_cast<char>(n & 0xFF));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  return p;
}
fs::path write_bytes(const std::string& name, const std::string& bytes) {
  const fs::path p = tmp / name;
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}
std::vector<unsigned char> f32_bytes(const std::vector<float>& v) {
  std::vector<unsigned char> b(v.size() * 4);
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int k = 0; k < 4; ++k) b[i * 4 + k] = static_cast<unsigned char>((u >> (8 * k)) & 0xFF);  // little-endian
  }
  return b;
}

// Checks the exception type and that its message contains every fragment.
template <class Ex, class F>
void throws(F&& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    BOOST_ERROR("no exception thrown");
  } catch (const Ex& e) {
    const std::string m = e.what();
    BOOST_TEST_MESSAGE(m);
    for (const auto& frag : fragments) BOOST_TEST(m.find(frag) != std::string::npos, "'" << frag << "' in: " << m);
    BOOST_TEST((dynamic_cast<const st::error*>(&e) != nullptr));
  } catch (const std::exception& e) {
    BOOST_ERROR("wrong exception type: " << e.what());
  }
}

// The exception type (also a st::error) and its whole message.
template <class Ex, class F>
void throws_exactly(F&& f, const std::string& message) {
  test_support::throws_exactly<Ex, st::error>(std::forward<F>(f), message);
}

template <class Tensor>
Tensor iota(double start, double step) {
  Tensor t;
  for (std::size_t i = 0; i < Tensor::size; ++i) t.data()[i] = static_cast<typename Tensor::value_type>(start + step * double(i));
  return t;
}

// Every weight and bias of an 8-wide module with 4-wide projections (multi_head_attention<float, 8, 2, kv_heads 1>)
// from next().
template <class M, class F>
void fill_parameters(M& m, F next) {
  for (auto* p : {m.w_q.data(), m.w_k.data(), m.w_v.data(), m.w_o.data()})
    for (std::size_t i = 0; i < 64; ++i) p[i] = next();
  for (auto* p : {m.b_q.data(), m.b_k.data(), m.b_v.data(), m.b_o.data()})
    for (std::size_t i = 0; i < 4; ++i) p[i] = next();
}

}  // namespace

// ---- round trips -----------------------------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(round_trip_float_double_transposed_view_metadata) {
  const auto a = iota<tensor<float, 3, 4>>(-1.5, 0.25);
  const auto b = iota<tensor<double, 2, 3, 5>>(0.1, 1e-3);
  const auto c = iota<tensor<float, 7>>(3.0, -0.5);
  const fs::path p = tmp / "round_trip.safetensors";
  st::save(p, {st::make_entry("a", a), st::make_entry("b", b), st::make_entry("a_t", a, true), st::make_entry("c", c)},
           {{"format", "pt"}, {"made_by", "attnx"}});

  // The header is padded to a multiple of 8 bytes.
  std::ifstream in(p, std::ios::binary);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  BOOST_TEST(len[0] % 8 == 0);

  const st::file f(p);
  BOOST_TEST(f.tensors().size() == 4u);
  BOOST_TEST(f.metadata().at("made_by") == "attnx");
  BOOST_TEST(f.info("b").dtype == "F64");
  BOOST_TEST((f.info("a_t").shape == std::vector<std::size_t>{4, 3}));
  BOOST_TEST((f.load<tensor<float, 3, 4>>("a") == a));
  BOOST_TEST((f.load<tensor<double, 2, 3, 5>>("b") == b));
  BOOST_TEST((f.load_transposed<tensor<float, 3, 4>>("a_t") == a));
  BOOST_TEST((f.load<tensor<float, 4, 3>>("a_t") == evaluate(transpose(a))));
  // Named axes: only the extents are stored.
  BOOST_TEST((f.load<tensor<float, seq<3>, d_model<4>>>("a").data()[5] == a.data()[5]));
  std::vector<float> mem(7);
  f.load_into("c", view<float, 7>(mem));
  BOOST_TEST(mem[6] == c(6));
  // only a matrix has a transposed layout
  BOOST_CHECK_EXCEPTION((void)st::make_entry("b", b, true), std::invalid_argument,
                        test_support::is("attnx: safetensors: only a matrix can be stored transposed ('b' has shape [2, 3, 5])"));
}

BOOST_AUTO_TEST_CASE(a_file_from_another_writer) {
  // What the reference implementation writes for {"x": float32 [[1, 2], [3, -4.5]]} with metadata.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  const auto p = write_raw("other_writer.safetensors", header + std::string((8 - header.size() % 8) % 8, ' '),
                           f32_bytes({1.0f, 2.0f, 3.0f, -4.5f}));
  const st::file f(p);
  const auto x = f.load<tensor<float, 2, 2>>("x");
  BOOST_TEST(x(1, 1) == -4.5f);
  BOOST_TEST(x(0, 1) == 2.0f);
  BOOST_TEST(f.metadata().at("format") == "pt");
}

BOOST_AUTO_TEST_CASE(multi_head_attention_round_trip_both_layouts) {
  using M = multi_head_attention<float, 8, 2, mha_options{.kv_heads = 1}>;
  M m;
  std::mt19937 g(5);
  std::uniform_real_distribution<float> d(-1, 1);
  fill_parameters(m, [&] { return d(g); });
  const auto x = iota<tensor<float, 2, 3, 8>>(-0.5, 0.02);
  const tensor<float, 2, 3, 8> want = m(x, causal);

  const fs::path in_out = tmp / "mha_in_out.safetensors", out_in = tmp / "mha_out_in.safetensors";
  st::save(in_out, {st::make_entry("w_q", m.w_q), st::make_entry("w_k", m.w_k), st::make_entry("w_v", m.w_v),
                    st::make_entry("w_o", m.w_o), st::make_entry("b_q", m.b_q), st::make_entry("b_k", m.b_k),
                    st::make_entry("b_v", m.b_v), st::make_entry("b_o", m.b_o)});
  const auto names = st::mha_names::hugging_face("layers.0.attn.");
  st::save(out_in, {st::make_entry(names.w_q, m.w_q, true), st::make_entry(names.w_k, m.w_k, true),
                    st::make_entry(names.w_v, m.w_v, true), st::make_entry(names.w_o, m.w_o, true),
                    st::make_entry(names.b_q, m.b_q), st::make_entry(names.b_k, m.b_k), st::make_entry(names.b_v, m.b_v),
                    st::make_entry(names.b_o, m.b_o)});
  const M a = st::load_mha<M>(st::file(in_out), {}, st::weight_layout::in_out);
  const M b = st::load_mha<M>(st::file(out_in), names, st::weight_layout::out_in);
  const tensor<float, 2, 3, 8> ya = a(x, causal), yb = b(x, causal);
  BOOST_TEST((ya == want));
  BOOST_TEST((yb == want));
  // A module of other sizes: the shape error names the parameter.
  using M2 = multi_head_attention<float, 8, 2>;  // 2 key/value heads: W_K is 8 x 8, the file has 8 x 4
  throws<st::shape_error>([&] { (void)st::load_mha<M2>(st::file(in_out), {}, st::weight_layout::in_out); }, {"'w_k'", "[8, 4]", "[d_model=8, 8]"});
}

// ---- errors --------------------------------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(missing_file) {
  throws<st::file_error>([] { st::file f(tmp / "does_not_exist.safetensors"); }, {"cannot open", "does_not_exist.safetensors",
                                                                               "No such file"});
}

BOOST_AUTO_TEST_CASE(truncated_header_length) {
  const auto p = write_bytes("five_bytes.safetensors", std::string("\x10\x00\x00\x00\x00", 5));
  throws<st::format_error>([&] { st::file f(p); }, {"five_bytes.safetensors", "5 bytes long", "8-byte header length"});
  const auto e = write_bytes("empty.safetensors", "");
  throws<st::format_error>([&] { st::file f(e); }, {"0 bytes long"});
}

BOOST_AUTO_TEST_CASE(header_length_beyond_the_file) {
  const std::string header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  const auto p = write_raw("long_header.safetensors", header, f32_bytes({1}), 1000);
  throws<st::format_error>([&] { st::file f(p); }, {"header length 1000", "exceeds the", "truncated"});
  // A header cut short: the length is right but the file stops inside the header.
  const auto q = write_raw("cut_header.safetensors", header.substr(0, 20), {}, static_cast<std::int64_t>(header.size()));
  throws<st::format_error>([&] { st::file f(q); }, {"exceeds"});
  const auto z = write_raw("zero_header.safetensors", "", {});
  throws<st::format_error>([&] { st::file f(z); }, {"empty header"});
}

BOOST_AUTO_TEST_CASE(corrupt_json_header) {
  const auto p = write_raw("bad_json.safetensors", R"({"x":{"dtype":"F32","shape":[1],)", f32_bytes({1}));
  throws<st::format_error>([&] { st::file f(p); }, {"corrupt header", "does not parse"});
  const auto q = write_raw("not_object.safetensors", "[1, 2, 3]", {});
  throws<st::format_error>([&] { st::file f(q); }, {"not an object"});
  const auto garbage = write_bytes("garbage.safetensors", std::string("\x05\x00\x00\x00\x00\x00\x00\x00\xff\xfe\x00\x01\x02", 13));
  throws<st::format_error>([&] { st::file f(garbage); }, {"corrupt header"});
}

BOOST_AUTO_TEST_CASE(malformed_entries) {
  auto bad = [](const std::string& name, const std::string& entry, std::initializer_list<std::string> frags,
                std::vector<unsigned char> data = f32_bytes({1, 2})) {
    const auto p = write_raw(name + ".safetensors", R"({"x":)" + entry + "}", data);
    throws<st::format_error>([&] { st::file f(p); }, frags);
  };
  bad("no_dtype", R"({"shape":[2],"data_offsets":[0,8]})", {"tensor 'x' has no dtype"});
  bad("no_shape", R"({"dtype":"F32","data_offsets":[0,8]})", {"no shape"});
  bad("no_offsets", R"({"dtype":"F32","shape":[2]})", {"no data_offsets"});
  bad("negative_shape", R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})", {"non-negative"});
  bad("reversed_offsets", R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})", {"begin > end"});
  bad("unknown_dtype", R"({"dtype":"F128","shape":[2],"data_offsets":[0,8]})", {"unknown dtype 'F128'"});
  bad("size_mismatch", R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})", {"needs 12 bytes", "span 8"});
  bad("bad_metadata", R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"k":1})", {"__metadata__['k']"});
}

BOOST_AUTO_TEST_CASE(data_offsets_beyond_the_data) {
  // The header promises 4 floats, the file holds 2: a truncated data section.
  const auto p = write_raw("short_data.safetensors", R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                           f32_bytes({1, 2}));
  throws<st::format_error>([&] { st::file f(p); }, {"tensor 'x' ends at byte 16", "only 8 bytes", "truncated"});
}

BOOST_AUTO_TEST_CASE(missing_tensor) {
  const auto p = tmp / "two.safetensors";
  st::save(p, {st::make_entry("w_q", tensor<float, 2, 2>{}), st::make_entry("w_k", tensor<float, 2, 2>{})});
  const st::file f(p);
  BOOST_TEST(!f.contains("w_v"));
  throws<st::missing_tensor>([&] { (void)f.load<tensor<float, 2, 2>>("w_v"); }, {"no tensor 'w_v'", "two.safetensors",
                                                                                 "2 tensors: w_k, w_q"});
}

BOOST_AUTO_TEST_CASE(exact_widenings_load_and_narrowing_is_refused) {
  const auto p = tmp / "dtypes.safetensors";
  const auto fl = iota<tensor<float, 3>>(0.1, 1.0 / 3.0);  // no value exact in fewer than 24 bits
  st::save(p, {st::make_entry("f", fl), st::make_entry("d", tensor<double, 2>{}),
               st::make_entry("i", tensor<std::int32_t, 3>{{-7, 0, 2147483647}}), st::make_entry("l", tensor<std::int64_t, 1>{})});
  const st::file f(p);
  // F32 into double and I32 into std::int64_t: every value as stored.
  const auto fd = f.load<tensor<double, 3>>("f");
  for (std::size_t i = 0; i < 3; ++i) BOOST_TEST(fd(i) == static_cast<double>(fl(i)));
  const auto il = f.load<tensor<std::int64_t, 3>>("i");
  BOOST_TEST(il(0) == -7);
  BOOST_TEST(il(2) == 2147483647);
  // Narrowing and across kinds: refused, naming the tensor, the stored dtype, the element type, the reason and what
  // to do instead.
  const std::string in = " in '" + p.string() + "'";
  throws_exactly<st::dtype_error>(
      [&] { (void)f.load<tensor<float, 2>>("d"); },
      "attnx: safetensors: tensor 'd'" + in +
          " has dtype F64: float elements could lose "
          "digits (narrowing is refused; they load F32, BF16, F16): load it into a double tensor");
  throws_exactly<st::dtype_error>(
      [&] { (void)f.load<tensor<std::int32_t, 1>>("l"); },
      "attnx: safetensors: tensor 'l'" + in +
          " has dtype I64: std::int32_t elements could "
          "lose digits (narrowing is refused; they load I32): load it into a std::int64_t tensor");
  throws_exactly<st::dtype_error>([&] { (void)f.load<tensor<float, 3>>("i"); },
                                  "attnx: safetensors: tensor 'i'" + in +
                                      " has dtype I32, an integer dtype, and float "
                                      "elements load F32, BF16, F16 (nothing converts silently: load it into a "
                                      "std::int32_t tensor, then cast<float>)");
  throws_exactly<st::dtype_error>([&] { (void)f.load<tensor<double, 1>>("l"); },
                                  "attnx: safetensors: tensor 'l'" + in +
                                      " has dtype I64, an integer dtype, and double "
                                      "elements load F64, F32, BF16, F16 (nothing converts silently: load it into a "
                                      "std::int64_t tensor, then cast<double>)");
  throws_exactly<st::dtype_error>(
      [&] { (void)f.load<tensor<std::int64_t, 3>>("f"); },
      "attnx: safetensors: tensor 'f'" + in +
          " has dtype F32, a floating-point dtype, and "
          "std::int64_t elements load I64, I32 (nothing converts silently: load it into a float "
          "tensor, then cast<std::int64_t>)");
  throws_exactly<st::dtype_error>(
      [&] { (void)f.load<tensor<bool, 3>>("f"); },
      "attnx: safetensors: tensor 'f'" + in +
          " has dtype F32: a bool tensor loads BOOL, and "
          "U8 holding only 0 and 1 (a comparison makes a mask of other values, e.g. x > 0.5f)");
  // Dtypes of the format that attnx loads into nothing, and the two that load into bool only.
  for (const std::string dt : {"U16", "I16", "I8", "U32", "U64", "F8_E4M3", "F8_E5M2", "BOOL", "U8"}) {
    const std::size_t n = st::dtype_size(dt);
    const auto q =
        write_raw(dt + ".safetensors",
                  R"({"h":{"dtype":")" + dt + R"(","shape":[2],"data_offsets":[0,)" + std::to_string(2 * n) + "]}}",
                  std::vector<unsigned char>(2 * n, 0));
    const std::string where = "attnx: safetensors: tensor 'h' in '" + q.string() + "'";
    const std::string want = dt == "BOOL" ? where + " is a BOOL mask: load it into a bool tensor"
                             : dt == "U8"
                                 ? where +
                                       " has dtype U8, which attnx loads into bool tensors only (a mask, every "
                                       "element 0 or 1)"
                                 : where + " has dtype " + dt +
                                       ", which attnx does not load (it loads F64, F32, BF16, "
                                       "F16, I64, I32, BOOL, and U8 into bool)";
    throws_exactly<st::dtype_error>([&] { (void)st::file(q).load<tensor<double, 2>>("h"); }, want);
    throws_exactly<st::dtype_error>([&] { (void)st::file(q).load<tensor<std::int64_t, 2>>("h"); }, want);
    if (dt == "BOOL" || dt == "U8") BOOST_TEST((st::file(q).load<tensor<bool, 2>>("h") == tensor<bool, 2>{}));
  }
}

namespace {
// The value of a 16-bit pattern with E exponent bits and M = 15 - E fraction bits (bias 2^(E-1) - 1), by the
// definition of the format (IEEE 754 binary16 for E = 5, bfloat16 for E = 8), in double; NaN for NaN patterns.
double half_value(std::uint16_t h, int E) {
  const int M = 15 - E, bias = (1 << (E - 1)) - 1;
  const int e = (h >> M) & ((1 << E) - 1);
  const double m = h & ((1 << M) - 1), s = h >> 15 ? -1.0 : 1.0;
  if (e == (1 << E) - 1) return m == 0 ? s * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return s * std::ldexp(m, 1 - bias - M);        // zero, subnormal
  return s * std::ldexp(m + std::ldexp(1.0, M), e - bias - M);  // normal
}
}  // namespace

// Every one of the 65536 BF16 and F16 patterns, loaded into float and into double, against its value by the
// format's definition (signed zeros, subnormals, the largest finite values, infinities and NaN included); a
// transposed load; and a file as PyTorch writes a bf16 tensor.
BOOST_AUTO_TEST_CASE(bf16_and_f16_load_every_pattern_exactly) {
  for (const std::string dt : {"BF16", "F16"}) {
    const int E = dt == "BF16" ? 8 : 5;
    std::vector<unsigned char> data(2 * 65536);
    for (std::size_t i = 0; i < 65536; ++i) {
      data[2 * i] = static_cast<unsigned char>(i & 0xFF);
      data[2 * i + 1] = static_cast<unsigned char>(i >> 8);
    }
    const auto p = write_raw(dt + "_all.safetensors", R"({"h":{"dtype":")" + dt + R"(","shape":[65536],"data_offsets":[0,131072]}})", data);
    const st::file f(p);
    const auto hf = f.load<tensor<float, dyn>>("h");
    const auto hd = f.load<tensor<double, 65536>>("h");
    std::size_t wrong = 0, nans = 0, subnormals = 0;
    for (std::size_t i = 0; i < 65536; ++i) {
      const double want = half_value(static_cast<std::uint16_t>(i), E);
      if (std::isnan(want)) {
        ++nans;
        wrong += !std::isnan(hf(i)) || !std::isnan(hd(i)) || std::signbit(hf(i)) != (i >> 15 == 1);
        continue;
      }
      if (want != 0 && std::fabs(want) < std::ldexp(1.0, E == 8 ? -126 : -14)) ++subnormals;
      wrong += static_cast<double>(hf(i)) != want || hd(i) != want || std::signbit(hf(i)) != std::signbit(want) ||
               std::signbit(hd(i)) != std::signbit(want);
    }
    BOOST_TEST(wrong == 0u, dt << ": " << wrong << " patterns loaded wrong");
    BOOST_TEST(nans == (E == 8 ? 254u : 2046u));
    BOOST_TEST(subnormals == (E == 8 ? 254u : 2046u));
  }
  // Spot values: F16 65504 and 2^-24, BF16 1, -2 and the largest finite (0x7F7F = (2 - 2^-7) 2^127), as (2, 3)
  // stored (3, 2) for a transposed load.
  const std::vector<unsigned char> h16 = {0xFF, 0x7B, 0x01, 0x00, 0x00, 0x3C, 0x00, 0xC0, 0x00, 0x80, 0x00, 0x7C};
  const auto p16 = write_raw("f16_t.safetensors", R"({"w":{"dtype":"F16","shape":[3,2],"data_offsets":[0,12]}})", h16);
  const auto w = st::file(p16).load_transposed<tensor<float, 2, 3>>("w");
  BOOST_TEST(w(0, 0) == 65504.0f);
  BOOST_TEST(w(1, 0) == std::ldexp(1.0f, -24));
  BOOST_TEST(w(0, 1) == 1.0f);
  BOOST_TEST(w(1, 1) == -2.0f);
  BOOST_TEST((w(0, 2) == 0.0f && std::signbit(w(0, 2))));
  BOOST_TEST(w(1, 2) == std::numeric_limits<float>::infinity());
  // What torch.save_file({"x": torch.tensor([1.0, -2.0, 3.3895314e38], dtype=torch.bfloat16)}) writes.
  const std::string header = R"({"x":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]}})";
  const auto pb = write_raw("bf16_pt.safetensors", header + std::string((8 - header.size() % 8) % 8, ' '),
                            {0x80, 0x3F, 0x00, 0xC0, 0x7F, 0x7F});
  const auto x = st::file(pb).load<tensor<double, 3>>("x");
  BOOST_TEST(x(0) == 1.0);
  BOOST_TEST(x(1) == -2.0);
  BOOST_TEST(x(2) == std::ldexp(255.0, 120));
}

// A checkpoint stored in BF16 or F16 gives the module of the F32 checkpoint holding the same values (weights that
// both formats hold exactly: multiples of 2^-6 below 1), bit for bit in its output.
BOOST_AUTO_TEST_CASE(a_half_precision_checkpoint_loads_the_same_module) {
  using M = multi_head_attention<float, 8, 2, mha_options{.kv_heads = 1}>;
  M m;
  std::mt19937 g(11);
  std::uniform_int_distribution<int> k(-63, 63);
  fill_parameters(m, [&] { return static_cast<float>(k(g)) / 64.0f; });
  const auto x = iota<tensor<float, 2, 3, 8>>(-0.5, 0.02);
  const tensor<float, 2, 3, 8> want = m(x, causal);
  const auto names = st::mha_names::hugging_face("attn.");
  const auto f32 = tmp / "mha_f32.safetensors";
  st::save(f32, {st::make_entry(names.w_q, m.w_q, true), st::make_entry(names.w_k, m.w_k, true),
                 st::make_entry(names.w_v, m.w_v, true), st::make_entry(names.w_o, m.w_o, true),
                 st::make_entry(names.b_q, m.b_q), st::make_entry(names.b_k, m.b_k), st::make_entry(names.b_v, m.b_v),
                 st::make_entry(names.b_o, m.b_o)});
  // The same file in 16 bits: each F32 entry's bits rounded by the format's definition (these values are exact
  // in both: the low 16 bits of a float are zero for BF16; for F16 the exponent is rebiased and 10 fraction bits
  // kept), the offsets halved.
  const st::file src(f32);
  for (const std::string dt : {"BF16", "F16"}) {
    std::vector<st::entry> es;
    for (const auto& [name, t] : src.tensors()) {
      st::entry e{name, dt, t.shape, {}};
      std::vector<float> v(t.elements());
      if (t.shape.size() == 2) src.load_into(name, view<float, dyn, dyn>(v.data(), t.shape[0], t.shape[1]));
      else src.load_into(name, view<float, dyn>(v.data(), t.shape[0]));
      for (float y : v) {
        std::uint32_t u;
        std::memcpy(&u, &y, 4);
        std::uint16_t h;
        if (dt == "BF16") {
          BOOST_REQUIRE((u & 0xFFFF) == 0);
          h = static_cast<std::uint16_t>(u >> 16);
        } else if ((u & 0x7FFFFFFF) == 0) {
          h = static_cast<std::uint16_t>(u >> 16);
        } else {
          const int ex = static_cast<int>((u >> 23) & 0xFF) - 127;
          BOOST_REQUIRE((ex >= -14 && ex <= 15 && (u & 0x1FFF) == 0));
          h = static_cast<std::uint16_t>((u >> 16 & 0x8000) | (ex + 15) << 10 | (u >> 13 & 0x3FF));
        }
        e.bytes.push_back(static_cast<unsigned char>(h & 0xFF));
        e.bytes.push_back(static_cast<unsigned char>(h >> 8));
      }
      es.push_back(std::move(e));
    }
    const auto p = tmp / ("mha_" + dt + ".safetensors");
    st::save(p, es);
    const st::file f(p);
    BOOST_TEST(f.info(names.w_q).dtype == dt);
    const M a = st::load_mha<M>(f, names, st::weight_layout::out_in);
    BOOST_TEST((a.w_k == m.w_k));
    BOOST_TEST((a.b_o == m.b_o));
    const tensor<float, 2, 3, 8> y = a(x, causal);
    BOOST_TEST((y == want));
  }
}

namespace {
// x rounded to the 16-bit format with E exponent bits, to nearest with ties to the even pattern, by search over the
// format's values (half_value), not by bit manipulation: the pattern (NaN: any NaN pattern of x's sign).
struct half_rounding {
  int E;
  std::uint16_t maxp;          // the largest finite positive pattern (0x7F7F, 0x7BFF)
  std::vector<double> values;  // of the patterns 0 .. maxp, increasing
  explicit half_rounding(int e) : E(e), maxp(e == 8 ? 0x7F7F : 0x7BFF) {
    for (unsigned p = 0; p <= maxp; ++p) values.push_back(half_value(static_cast<std::uint16_t>(p), E));
  }
  std::uint16_t operator()(double x) const {
    const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const std::uint16_t inf = E == 8 ? 0x7F80 : 0x7C00;
    if (std::isnan(x)) return sign | inf | 1;
    const double a = std::fabs(x), top = values[maxp], half_ulp = (top - values[maxp - 1]) / 2;
    if (a >= top + half_ulp) return sign | inf;  // (at the midpoint too: maxp is odd)
    if (a >= top) return sign | maxp;
    const auto hi = static_cast<std::size_t>(std::lower_bound(values.begin(), values.end(), a) - values.begin());
    if (values[hi] == a) return static_cast<std::uint16_t>(sign | hi);  // (a = 0 too: values[0])
    const double up = values[hi] - a, down = a - values[hi - 1];
    const std::size_t p = up < down ? hi : down < up ? hi - 1 : (hi % 2 == 0 ? hi : hi - 1);
    return static_cast<std::uint16_t>(sign | p);
  }
  // got is what operator() gives for x, but for a NaN: any NaN pattern of x's sign.
  bool matches(std::uint16_t got, double x) const {
    const std::uint16_t want = (*this)(x);
    if (!std::isnan(x)) return got == want;
    const std::uint16_t inf = E == 8 ? 0x7F80 : 0x7C00;
    return (got & 0x7FFF) > inf && (got >> 15) == (want >> 15);
  }
};
std::vector<std::uint16_t> u16s(const std::vector<unsigned char>& b) {
  std::vector<std::uint16_t> v(b.size() / 2);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint16_t>(b[2 * i] | b[2 * i + 1] << 8);
  return v;
}
}  // namespace

// make_entry(...).to(BF16 or F16) rounds each double once to nearest, ties to even, against half_rounding: every
// value of the format, every midpoint between neighbours and the doubles next to it, values a hair off a midpoint
// (where rounding to float first would land on the midpoint and round again: counted, so that the test would catch
// it), beyond the range, +-inf, NaN, both signs. From F32 as well (the float of each input).
BOOST_AUTO_TEST_CASE(narrowing_on_writing_rounds_once_to_nearest_even) {
  for (const std::string dt : {"BF16", "F16"}) {
    const half_rounding round(dt == "BF16" ? 8 : 5);
    std::vector<double> x;
    for (std::size_t p = 0; p < round.maxp; ++p) {
      const double a = round.values[p], b = round.values[p + 1], mid = (a + b) / 2, off = (b - a) * 0x1p-30;
      for (const double v : {a, std::nextafter(a, 0.0), mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300), mid + off,
                             mid - off}) {
        x.push_back(v);
        x.push_back(-v);
      }
    }
    const double top = round.values[round.maxp], half_ulp = (top - round.values[round.maxp - 1]) / 2;
    const double fmax = std::numeric_limits<float>::max();  // (and a double above it that a float rounds down to it)
    for (const double v : {top, top + half_ulp, std::nextafter(top + half_ulp, 0.0), fmax, fmax + 0x1p102, 1e300,
                           std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(), 1e-300}) {
      x.push_back(v);
      x.push_back(-v);
    }
    const auto got = u16s(st::make_entry("x", view<double, dyn>(x.data(), x.size())).to(dt).bytes);
    std::size_t wrong = 0, traps = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      wrong += !round.matches(got[i], x[i]);
      traps += !std::isnan(x[i]) && round(static_cast<double>(static_cast<float>(x[i]))) != round(x[i]);
    }
    BOOST_TEST(wrong == 0u, dt << ": " << wrong << " of " << x.size() << " values rounded wrong");
    BOOST_TEST(traps > 1000u, dt << ": " << traps << " values where rounding through float first would be wrong");
    // From F32: each value's float, rounded once more.
    std::vector<float> xf(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) xf[i] = static_cast<float>(x[i]);
    const auto gotf = u16s(st::make_entry("x", view<float, dyn>(xf.data(), xf.size())).to(dt).bytes);
    std::size_t wrongf = 0;
    for (std::size_t i = 0; i < x.size(); ++i)
      wrongf += !round.matches(gotf[i], static_cast<double>(xf[i]));
    BOOST_TEST(wrongf == 0u, dt << " from F32: " << wrongf << " values rounded wrong");
  }
}

// Saved narrower and loaded back: a module written in BF16 (transposed, as Hugging Face stores it) holds each of
// its weights rounded to the nearest BF16; F64 written as F32 holds each double's nearest float; widening back to
// F64 keeps the value; I64 written as I32 holds the values that fit, and refuses, naming the element, one that
// does not; a dtype that is not one of the kind, or across kinds, is refused.
BOOST_AUTO_TEST_CASE(saving_narrower_and_what_is_refused) {
  using M = multi_head_attention<float, 8, 2, mha_options{.kv_heads = 1}>;
  M m;
  std::mt19937 g(5);
  std::normal_distribution<float> n01(0.0f, 0.3f);
  fill_parameters(m, [&] { return n01(g); });
  const auto names = st::mha_names::hugging_face();
  const auto pm = tmp / "mha_bf16_written.safetensors";
  st::save(pm, {st::make_entry(names.w_q, m.w_q, true).to("BF16"), st::make_entry(names.w_k, m.w_k, true).to("BF16"),
                st::make_entry(names.w_v, m.w_v, true).to("BF16"), st::make_entry(names.w_o, m.w_o, true).to("BF16"),
                st::make_entry(names.b_q, m.b_q).to("BF16"), st::make_entry(names.b_k, m.b_k).to("BF16"),
                st::make_entry(names.b_v, m.b_v).to("BF16"), st::make_entry(names.b_o, m.b_o).to("BF16")});
  const st::file fm(pm);
  BOOST_TEST(fm.info(names.w_v).dtype == "BF16");
  const M a = st::load_mha<M>(fm, names, st::weight_layout::out_in);
  const half_rounding bf(8);
  std::size_t wrong = 0, moved = 0;
  for (std::size_t i = 0; i < 64; ++i) {
    const double want = half_value(bf(m.w_v.data()[i]), 8);
    wrong += static_cast<double>(a.w_v.data()[i]) != want;
    moved += a.w_v.data()[i] != m.w_v.data()[i];
  }
  for (std::size_t i = 0; i < 4; ++i) wrong += static_cast<double>(a.b_o.data()[i]) != half_value(bf(m.b_o.data()[i]), 8);
  BOOST_TEST(wrong == 0u);
  BOOST_TEST(moved > 32u);  // (the weights are not all exact in BF16: the rounding is exercised)

  const auto d = iota<tensor<double, 4>>(0.1, 1e300);  // 0.1, then beyond float's range
  const auto l = tensor<std::int64_t, 3>{{-2147483648LL, 0, 2147483647LL}};
  const auto pd = tmp / "narrower.safetensors";
  st::save(pd, {st::make_entry("d", d).to("F32"), st::make_entry("d16", d).to("F16").to("F64"), st::make_entry("l", l).to("I32")});
  const st::file f(pd);
  BOOST_TEST(f.info("d").dtype == "F32");
  const auto df = f.load<tensor<float, 4>>("d");
  BOOST_TEST(df(0) == 0.1f);
  BOOST_TEST(df(1) == std::numeric_limits<float>::infinity());
  BOOST_TEST(f.info("d16").dtype == "F64");
  const auto d16 = f.load<tensor<double, 4>>("d16");
  BOOST_TEST(d16(0) == half_value(0x2E66, 5));  // 0.1 in F16: 0.0999755859375
  BOOST_TEST(d16(3) == std::numeric_limits<double>::infinity());
  BOOST_TEST((f.load<tensor<std::int32_t, 3>>("l") == tensor<std::int32_t, 3>{{-2147483647 - 1, 0, 2147483647}}));

  // To its own dtype: the same bytes (a signalling F16 NaN, 0x7C01, stays as it is).
  const st::entry h{"h", "F16", {2}, {0x01, 0x7C, 0x00, 0x3C}};
  BOOST_TEST((h.to("F16").bytes == h.bytes));
  BOOST_TEST((h.to("F32").to("F16").bytes == std::vector<unsigned char>{0x00, 0x7E, 0x00, 0x3C}));  // (quietened)

  throws<st::dtype_error>([] { (void)st::make_entry("l", tensor<std::int64_t, 2>{{5, 2147483648LL}}).to("I32"); },
                          {"entry 'l' (I64) cannot be stored as I32", "element 1 (in stored order) is 2147483648",
                           "outside I32's range"});
  throws<st::dtype_error>([] { (void)st::make_entry("l", tensor<std::int64_t, 2>{{0, -2147483649LL}}).to("I32"); },
                          {"element 1 (in stored order) is -2147483649"});
  throws<st::dtype_error>([&] { (void)st::make_entry("f", m.b_q).to("I32"); },
                          {"entry 'f' (F32) cannot be stored as I32", "floating-point entries are stored as F64, F32, BF16, F16"});
  throws<st::dtype_error>([&] { (void)st::make_entry("f", m.b_q).to("U8"); }, {"cannot be stored as U8"});
  throws<st::dtype_error>([&] { (void)st::make_entry("i", l).to("F32"); }, {"entry 'i' (I64) cannot be stored as F32",
                                                                            "integer ones as I64, I32"});
  throws<st::format_error>([] { (void)st::entry{"b", "F32", {3}, {0, 0, 0, 0}}.to("F16"); },
                           {"entry 'b' has 4 bytes, but shape [3] of F32 needs 12"});
  // A shape whose product wraps around to the byte count (2^62 x 4 = 2^64 = 0 in a size_t) is refused, not taken
  // as empty.
  throws<st::format_error>([] { (void)st::entry{"w", "F32", {std::size_t{1} << 62}, {}}.to("F16"); },
                           {"shape [4611686018427387904] of F32 needs more than a size_t can count"});
}

BOOST_AUTO_TEST_CASE(wrong_shape_names_both_shapes) {
  const auto p = tmp / "shapes.safetensors";
  st::save(p, {st::make_entry("w", tensor<float, 8, 16>{})});
  const st::file f(p);
  throws<st::shape_error>([&] { (void)f.load<tensor<float, 8, 8>>("w"); }, {"tensor 'w'", "has shape [8, 16]", "target has shape [8, 8]"});
  throws<st::shape_error>([&] { (void)f.load<tensor<float, 128>>("w"); }, {"[8, 16]", "[128]"});
  throws<st::shape_error>([&] { (void)f.load<tensor<float, d_model<8>, 16, 1>>("w"); }, {"[d_model=8, 16, 1]"});
  // Transposed: the target (8, 16) needs (16, 8) stored.
  throws<st::shape_error>([&] { (void)f.load_transposed<tensor<float, 8, 16>>("w"); },
                          {"has shape [8, 16]", "target has shape [8, 16]", "needs [16, 8] stored (transposed"});
  using W16x8 = tensor<float, 16, 8>;
  BOOST_CHECK_NO_THROW((void)f.load_transposed<W16x8>("w"));
}

// ---- sizes that overflow, entries named twice, entries that overlap ---------------------------------------
// shape x dtype size is counted with every product checked: before, [2^62] F32 with offsets [0, 0] wrapped
// around to 0 bytes and was accepted, and [2^61 + 1, 8] F64 with [0, 64] gave elements() == 8.
BOOST_AUTO_TEST_CASE(sizes_that_overflow_are_refused) {
  auto bad = [](const std::string& name, const std::string& header, std::size_t data, std::initializer_list<std::string> frags) {
    const auto p = write_raw(name + ".safetensors", header, std::vector<unsigned char>(data, 0));
    throws<st::format_error>([&] { st::file f(p); }, frags);
  };
  bad("wrap_f32", R"({"x":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0,
      {"tensor 'x'", "[4611686018427387904]", "more bytes than a size_t can count"});
  bad("wrap_f64", R"({"x":{"dtype":"F64","shape":[2305843009213693953,8],"data_offsets":[0,64]}})", 64,
      {"more bytes than a size_t can count"});
  bad("wrap_product", R"({"x":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0,
      {"more bytes than a size_t can count"});
  // A zero extent makes no bytes, whatever the others: accepted, and empty.
  const auto z = write_raw("zero_extent.safetensors", R"({"x":{"dtype":"F32","shape":[4611686018427387904,0],"data_offsets":[0,0]}})", {});
  const st::file f(z);
  BOOST_TEST(f.info("x").elements() == 0u);
}

BOOST_AUTO_TEST_CASE(entries_named_twice_or_overlapping_are_refused) {
  const auto twice = write_raw(
      "twice.safetensors",
      R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      f32_bytes({1, 2}));
  throws<st::format_error>([&] { st::file f(twice); }, {"the entry 'x' appears twice"});
  const auto overlap = write_raw(
      "overlap.safetensors",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      f32_bytes({1, 2, 3}));
  throws<st::format_error>([&] { st::file f(overlap); }, {"tensors 'a' and 'b' overlap", "bytes 0..8 and 4..12"});
  const auto same = write_raw(
      "same_bytes.safetensors",
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      f32_bytes({1}));
  throws<st::format_error>([&] { st::file f(same); }, {"overlap"});
  // Empty tensors take no bytes: two of them at one offset, and beside a tensor, are fine.
  const auto empties = write_raw(
      "empties.safetensors",
      R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"b":{"dtype":"F64","shape":[0,3],"data_offsets":[4,4]},"c":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
      f32_bytes({1, 2}));
  BOOST_CHECK_NO_THROW(st::file f(empties));
}

BOOST_AUTO_TEST_CASE(files_in_memory) {
  const auto a = iota<tensor<float, 3, 4>>(-1.5, 0.25);
  const fs::path p = tmp / "to_memory.safetensors";
  st::save(p, {st::make_entry("a", a)});
  std::ifstream in(p, std::ios::binary);
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const st::file f = st::file::from_memory(bytes, "weights in memory");
  BOOST_TEST((f.load<tensor<float, 3, 4>>("a") == a));
  bytes.resize(bytes.size() - 4);  // the last float cut off
  throws<st::format_error>([&] { (void)st::file::from_memory(bytes, "cut"); }, {"'cut'", "ends at byte 48", "only 44 bytes"});
  throws<st::format_error>([&] { (void)st::file::from_memory({1, 2, 3}, "tiny"); }, {"'tiny' is 3 bytes long"});
}

// ---- bool tensors: PyTorch's masks ---------------------------------------------------------------------
// torch (through safetensors) stores a bool tensor as BOOL, one byte 0 or 1 per element; older PyTorch kept masks as
// uint8, so U8 of 0 and 1 loads too. The files are written byte by byte here.
BOOST_AUTO_TEST_CASE(bool_masks_load_from_bool_and_u8) {
  const std::vector<unsigned char> bits{1, 0, 0, 1, 1, 0};  // (2, 3) in stored order
  std::vector<unsigned char> data = bits;
  data.insert(data.end(), bits.begin(), bits.end());
  const auto p = write_raw("masks.safetensors",
                           R"({"m":{"dtype":"BOOL","shape":[2,3],"data_offsets":[0,6]},)"
                           R"("u":{"dtype":"U8","shape":[2,3],"data_offsets":[6,12]}})",
                           data);
  const st::file f(p);
  const tensor<bool, 2, 3> want{{true, false, false}, {true, true, false}};
  BOOST_TEST((f.load<tensor<bool, 2, 3>>("m") == want));
  BOOST_TEST((f.load<tensor<bool, 2, 3>>("u") == want));
  const auto d = f.load<tensor<bool, dyn, 3>>("m");
  BOOST_TEST((d.dims()[0] == 2u && d(1, 1) && !d(1, 2) && d(0, 0) && !d(0, 1)));
  const auto t = f.load_transposed<tensor<bool, 3, 2>>("m");  // stored (2, 3): the target's transpose
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 2; ++j) BOOST_TEST(t(i, j) == want(j, i));
  bool mem[6] = {};
  f.load_into("u", view<bool, 2, 3>(mem));
  for (std::size_t i = 0; i < 6; ++i) BOOST_TEST(mem[i] == (bits[i] == 1));
}

BOOST_AUTO_TEST_CASE(bool_elements_other_than_0_or_1_are_refused) {
  const auto p = write_raw("bad_masks.safetensors",
                           R"({"m":{"dtype":"BOOL","shape":[5],"data_offsets":[0,5]},)"
                           R"("u":{"dtype":"U8","shape":[5],"data_offsets":[5,10]}})",
                           {1, 0, 0, 2, 1, /* u: */ 0, 1, 1, 1, 7});
  const st::file f(p);
  const std::string where = "attnx: safetensors: tensor 'm' in '" + p.string() + "'";
  throws_exactly<st::format_error>([&] { (void)f.load<tensor<bool, 5>>("m"); },
                                   where +
                                       ": element 3 (in stored order) of the BOOL tensor is the byte 2, and a BOOL "
                                       "element is 0 or 1");
  // Nothing is written when a load fails.
  bool mem[5] = {true, true, true, true, true};
  throws_exactly<st::dtype_error>(
      [&] { f.load_into("u", view<bool, 5>(mem)); },
      "attnx: safetensors: tensor 'u' in '" + p.string() +
          "' has dtype U8 and element 4 (in "
          "stored order) is 7: a U8 tensor loads into bool only when every element is 0 or 1");
  BOOST_TEST((mem[0] && mem[1] && mem[2] && mem[3] && mem[4]));
  // A U8 tensor of other values is not a mask, and an integer target does not take U8 either: the message says so.
  throws_exactly<st::dtype_error>([&] { (void)f.load<tensor<std::int32_t, 5>>("u"); },
                                  "attnx: safetensors: tensor 'u' in '" + p.string() +
                                      "' has dtype U8, which attnx "
                                      "loads into bool tensors only (a mask, every element 0 or 1)");
}

BOOST_AUTO_TEST_CASE(bool_tensors_are_saved_as_bool) {
  const tensor<bool, 2, 3> m{{true, false, true}, {false, false, true}};
  const auto p = tmp / "bool_saved.safetensors";
  st::save(p, {st::make_entry("m", m), st::make_entry("m_t", m, /*transposed=*/true)});
  // The bytes as the format has them: the header's entries, then one byte 0 or 1 per element.
  std::ifstream in(p, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string header = R"({"m":{"dtype":"BOOL","shape":[2,3],"data_offsets":[0,6]},)"
                             R"("m_t":{"dtype":"BOOL","shape":[3,2],"data_offsets":[6,12]}})";
  BOOST_TEST(bytes.substr(8, header.size()) == header);
  BOOST_TEST(bytes.substr(bytes.size() - 12) == std::string("\1\0\1\0\0\1\1\0\0\0\1\1", 12));  // m, then m_t
  const st::file f(p);
  BOOST_TEST((f.load<tensor<bool, 2, 3>>("m") == m));
  BOOST_TEST((f.load_transposed<tensor<bool, 2, 3>>("m_t") == m));
  // A BOOL entry is stored as BOOL only.
  throws_exactly<st::dtype_error>(
      [&] { (void)st::make_entry("m", m).to("U8"); },
      "attnx: safetensors: entry 'm' (BOOL) cannot be stored as U8: floating-point entries "
      "are stored as F64, F32, BF16, F16, integer ones as I64, I32, BOOL ones as BOOL only");
  BOOST_TEST((st::make_entry("m", m).to("BOOL").bytes == std::vector<unsigned char>{1, 0, 1, 0, 0, 1}));
  // Into an integer tensor: refused with the reason (a mask goes into bool).
  throws_exactly<st::dtype_error>([&] { (void)f.load<tensor<std::int32_t, 2, 3>>("m"); },
                                  "attnx: safetensors: tensor 'm' in '" + p.string() +
                                      "' is a BOOL mask: load it into a "
                                      "bool tensor");
}

// ---- the head count ------------------------------------------------------------------------------------
// A module's head count is not in its weights' shapes: 2 heads of 4 and 4 heads of 2 (with 1 and 2 key/value heads)
// read the same four (8 x 8, 8 x 4, 8 x 4, 8 x 8) matrices and compute different attentions. save_mha stores the
// counts; load_mha and load_torch_multihead_attention refuse a module with others.
BOOST_AUTO_TEST_CASE(head_counts_are_stored_and_checked) {
  using M = multi_head_attention<float, 8, 2, mha_options{.kv_heads = 1}>;
  using M4 = multi_head_attention<float, 8, 4, mha_options{.kv_heads = 2}>;  // the same shapes, other heads
  static_assert(std::is_same_v<M::w_q_shape, M4::w_q_shape> && std::is_same_v<M::w_k_shape, M4::w_k_shape> &&
                std::is_same_v<M::w_v_shape, M4::w_v_shape> && std::is_same_v<M::w_o_shape, M4::w_o_shape>);
  M m;
  std::mt19937 g(11);
  std::uniform_real_distribution<float> u(-1, 1);
  fill_parameters(m, [&] { return u(g); });
  const auto x = iota<tensor<float, 2, 3, 8>>(-0.5, 0.02);
  const tensor<float, 2, 3, 8> want = m(x, causal);

  const auto names = st::mha_names::hugging_face("attn.");
  const auto p = tmp / "mha_with_heads.safetensors";
  st::save_mha(p, m, names, st::weight_layout::out_in, {{"attnx.heads", "99"}, {"format", "pt"}});
  const st::file f(p);
  BOOST_TEST(f.metadata().at("attnx.heads") == "2");  // (save_mha's counts over the caller's)
  BOOST_TEST(f.metadata().at("attnx.kv_heads") == "1");
  BOOST_TEST(f.metadata().at("format") == "pt");
  BOOST_TEST((f.info(names.w_k).shape == std::vector<std::size_t>{4, 8}));  // (out, in)
  BOOST_TEST(
      (st::mha_metadata<M4>() == std::map<std::string, std::string>{{"attnx.heads", "4"}, {"attnx.kv_heads", "2"}}));
  const tensor<float, 2, 3, 8> y = st::load_mha<M>(f, names, st::weight_layout::out_in)(x, causal);
  BOOST_TEST((y == want));

  throws_exactly<st::shape_error>([&] { (void)st::load_mha<M4>(f, names, st::weight_layout::out_in); },
                                  "attnx: safetensors: '" + p.string() +
                                      "' holds a module with 2 heads (__metadata__ "
                                      "\"attnx.heads\"), but the module has 4: the head count is not in the weights' "
                                      "shapes (they hold heads x d_k), and another count computes another attention");
  // Only the key/value heads differ: 2 heads of 4, each with its own key/value head (w_k 8 x 8).
  using M2 = multi_head_attention<float, 8, 2>;
  throws_exactly<st::shape_error>(
      [&] { (void)st::load_mha<M2>(f, names, st::weight_layout::out_in); },
      "attnx: safetensors: '" + p.string() +
          "' holds a module with 1 key/value head "
          "(__metadata__ \"attnx.kv_heads\"), but the module has 2: the head count is not in "
          "the weights' shapes (they hold heads x d_k), and another count computes another "
          "attention");

  // What the check prevents: the same tensors without the counts load into M4 and give another output.
  const auto bare = tmp / "mha_without_heads.safetensors";
  st::save(bare, {st::make_entry(names.w_q, m.w_q, true), st::make_entry(names.w_k, m.w_k, true),
                  st::make_entry(names.w_v, m.w_v, true), st::make_entry(names.w_o, m.w_o, true),
                  st::make_entry(names.b_q, m.b_q), st::make_entry(names.b_k, m.b_k), st::make_entry(names.b_v, m.b_v),
                  st::make_entry(names.b_o, m.b_o)});
  const tensor<float, 2, 3, 8> y4 = st::load_mha<M4>(st::file(bare), names, st::weight_layout::out_in)(x, causal);
  float worst = 0;
  for (std::size_t i = 0; i < y4.size; ++i) worst = std::max(worst, std::abs(y4.data()[i] - want.data()[i]));
  BOOST_TEST_MESSAGE("4 heads instead of 2: max difference " << worst);
  BOOST_TEST(worst > 1e-2f);

  // Without biases, in attnx's own layout.
  using MB = multi_head_attention<double, 8, 4, mha_options{.bias = false}>;
  MB mb;
  for (auto* w : {mb.w_q.data(), mb.w_k.data(), mb.w_v.data(), mb.w_o.data()})
    for (std::size_t i = 0; i < 64; ++i) w[i] = u(g);
  const auto pb = tmp / "mha_no_bias.safetensors";
  st::save_mha(pb, mb, {}, st::weight_layout::in_out);
  const st::file fb(pb);
  BOOST_TEST(fb.tensors().size() == 4u);
  const MB back = st::load_mha<MB>(fb, {}, st::weight_layout::in_out);
  BOOST_TEST((back.w_q == mb.w_q && back.w_k == mb.w_k && back.w_v == mb.w_v && back.w_o == mb.w_o));
  using MB2 = multi_head_attention<double, 8, 2, mha_options{.bias = false}>;
  throws<st::shape_error>([&] { (void)st::load_mha<MB2>(fb, {}, st::weight_layout::in_out); },
                          {"holds a module with 4 heads", "the module has 2"});

  // With sink logits (mha_options::sinks): one more tensor, under names.sinks (Hugging Face: <prefix>sinks).
  using MS = multi_head_attention<double, 8, 4, mha_options{.bias = false, .sinks = true}>;
  MS ms;
  ms.w_q = mb.w_q, ms.w_k = mb.w_k, ms.w_v = mb.w_v, ms.w_o = mb.w_o;
  for (std::size_t h = 0; h < 4; ++h) ms.sinks(h) = u(g);
  const auto ps = tmp / "mha_sinks.safetensors";
  st::save_mha(ps, ms, st::mha_names::hugging_face("attn."), st::weight_layout::out_in);
  const st::file fs(ps);
  BOOST_TEST((fs.info("attn.sinks").shape == std::vector<std::size_t>{4}));
  const MS sback = st::load_mha<MS>(fs, st::mha_names::hugging_face("attn."), st::weight_layout::out_in);
  BOOST_TEST((sback.sinks == ms.sinks && sback.w_q == ms.w_q));
  throws<st::missing_tensor>([&] { (void)st::load_mha<MS>(fb, {}, st::weight_layout::in_out); }, {"sinks"});
}

BOOST_AUTO_TEST_CASE(head_counts_that_are_not_numbers_are_refused) {
  using M = multi_head_attention<float, 8, 2>;
  for (const std::string bad : {"", "two", "2.0", "-2", "+2", "0", "1234567890", " 2"}) {
    const auto p = tmp / "bad_heads.safetensors";
    st::save(p, {st::make_entry("w_q", tensor<float, 8, 8>{})}, {{"attnx.kv_heads", "2"}, {"attnx.heads", bad}});
    const st::file f(p);
    throws_exactly<st::format_error>([&] { (void)st::load_mha<M>(f, {}, st::weight_layout::in_out); },
                                     "attnx: safetensors: '" + p.string() + "': __metadata__ \"attnx.heads\" is \"" +
                                         bad + "\", not a positive head count");
  }
  // The counts are checked before any tensor is read: the file's 2 heads agree with M, so the missing w_k is next.
  const auto p = tmp / "good_heads.safetensors";
  st::save(p, {st::make_entry("w_q", tensor<float, 8, 8>{})}, st::mha_metadata<M>());
  throws<st::missing_tensor>([&] { (void)st::load_mha<M>(st::file(p), {}, st::weight_layout::in_out); },
                             {"no tensor 'w_k'"});
}

// The seed corpus of the loader's fuzz target (tests/fuzz/fuzz_safetensors.cpp): every file this suite
// wrote, good and bad, copied where the fuzz configuration looks for it (ATTNX_FUZZ_CORPUS, set by CMake).
BOOST_AUTO_TEST_CASE(write_the_fuzz_corpus) {
#ifdef ATTNX_FUZZ_CORPUS
  const fs::path corpus = ATTNX_FUZZ_CORPUS;
  fs::create_directories(corpus);
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(tmp.dir))
    if (e.is_regular_file() && e.file_size() < 64 * 1024) {
      fs::copy_file(e.path(), corpus / e.path().filename(), fs::copy_options::overwrite_existing);
      ++n;
    }
  BOOST_TEST_MESSAGE(n << " files written to the corpus " << corpus);
  BOOST_TEST(n >= 20u);
#endif
}
