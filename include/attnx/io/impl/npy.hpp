// attnx: .npy reading and writing, the library's part (the header's templates call these).
#pragma once

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <system_error>

#include "attnx/io/npy.hpp"

namespace attnx::npy {

namespace detail {
inline constexpr unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

// The dtypes attnx reads, each with its item size, as numpy writes them (a one-byte dtype's '<' is read as '|').
struct known_dtype {
  std::string_view descr;
  std::size_t size;
};
inline constexpr known_dtype known[] = {{"<f4", 4}, {"<f8", 8}, {"<i4", 4}, {"<i8", 8}, {"|b1", 1}, {"|u1", 1}};
inline constexpr std::string_view known_list = "'<f4', '<f8', '<i4', '<i8', '|b1', '|u1'";

// descr as attnx names it ('<u1' as '|u1'), or empty if attnx does not read it.
ATTNX_LIB_INLINE std::string_view canonical(std::string_view d) noexcept {
  for (const auto& k : known) {
    if (d == k.descr) return k.descr;
    if (k.size == 1 && d.size() == 3 && d[0] == '<' && d.substr(1) == k.descr.substr(1)) return k.descr;
  }
  return {};
}
// The item size of a dtype attnx reads in either byte order ('>f4' included, so that inspect checks the data size of
// a big-endian file too); 0 for any other.
ATTNX_LIB_INLINE std::size_t item_size(std::string_view d) noexcept {
  if (const auto c = canonical(d); !c.empty()) return d[2] == '4' ? 4 : d[2] == '8' ? 8 : 1;
  if (d.size() == 3 && d[0] == '>' && (d[1] == 'f' || d[1] == 'i') && (d[2] == '4' || d[2] == '8'))
    return d[2] == '4' ? 4 : 8;
  return 0;
}

ATTNX_LIB_INLINE std::string shape_text(const std::vector<std::size_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}
ATTNX_LIB_INLINE std::string in_quotes(std::string_view s) { return "'" + std::string(s) + "'"; }

// The header dict, parsed strictly: a Python dict literal of exactly the keys 'descr' (a string, or a structured
// dtype's list, kept as its text), 'fortran_order' (True or False) and 'shape' (a tuple of non-negative integers),
// each once, whitespace between the tokens and a trailing comma allowed (numpy writes one), nothing but whitespace
// after it. No escapes in strings: no dtype attnx reads needs one.
class header_parser {
 public:
  header_parser(std::string_view text, const std::string& path) : s_(text), path_(path) {}

  void parse(array_info& a) {
    bool have_descr = false, have_order = false, have_shape = false;
    space();
    expect('{', "the header does not start with '{' (a Python dict)");
    space();
    while (!at('}')) {
      const std::size_t key_at = i_;
      const std::string key = string_literal("a key");
      space();
      expect(':', "expected ':' after the key " + in_quotes(key));
      space();
      const auto once = [&](bool& have) {
        if (have) fail("the key " + in_quotes(key) + " appears twice", key_at);
        have = true;
      };
      if (key == "descr") {
        once(have_descr);
        a.descr = at('[') ? list_literal() : string_literal("the value of 'descr' (a string)");
      } else if (key == "fortran_order") {
        once(have_order);
        a.fortran_order = bool_literal();
      } else if (key == "shape") {
        once(have_shape);
        a.shape = tuple_literal();
      } else {
        fail("unknown key " + in_quotes(key) + " (a .npy header has exactly 'descr', 'fortran_order' and 'shape')",
             key_at);
      }
      space();
      if (at(',')) {
        ++i_;
        space();
      } else if (!at('}')) {
        fail("expected ',' or '}' after the value of " + in_quotes(key));
      }
    }
    ++i_;
    space();
    if (i_ != s_.size()) fail("more text after the dict's '}'");
    for (const auto& [have, key] :
         {std::pair{have_descr, "'descr'"}, {have_order, "'fortran_order'"}, {have_shape, "'shape'"}})
      if (!have)
        corrupt(std::string("the key ") + key + " is missing (a .npy header has 'descr', 'fortran_order' and 'shape')");
  }

 private:
  [[noreturn]] void corrupt(const std::string& what) const {
    ATTNX_THROW(format_error("attnx: npy: '" + path_ + "': corrupt header: " + what));
  }
  [[noreturn]] void fail(const std::string& what, std::size_t at_byte) const {
    corrupt(what + " at byte " + std::to_string(at_byte) + " of the header");
  }
  [[noreturn]] void fail(const std::string& what) const { fail(what, i_); }
  bool at(char c) const { return i_ < s_.size() && s_[i_] == c; }
  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c, const std::string& what) {
    if (!at(c)) fail(what);
    ++i_;
  }
  std::string string_literal(const std::string& what) {
    if (!at('\'') && !at('"')) fail("expected " + what + " in quotes");
    const char q = s_[i_++];
    const std::size_t begin = i_;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\') fail("an escape sequence in a string (no .npy header attnx reads has one)");
      if (s_[i_] == '\n') fail("a string that does not end on its line");
      ++i_;
    }
    if (i_ == s_.size()) fail("a string that does not end", begin - 1);
    return std::string(s_.substr(begin, i_++ - begin));
  }
  // A structured dtype's list of fields, as its text (its brackets matched, strings skipped).
  std::string list_literal() {
    const std::size_t begin = i_;
    int depth = 0;
    do {
      if (i_ == s_.size()) fail("a list that does not end", begin);
      const char c = s_[i_];
      if (c == '\'' || c == '"') {
        (void)string_literal("a string");
        continue;
      }
      depth += c == '[' || c == '(' ? 1 : c == ']' || c == ')' ? -1 : 0;
      ++i_;
    } while (depth > 0);
    return std::string(s_.substr(begin, i_ - begin));
  }
  bool bool_literal() {
    for (const auto& [word, value] : {std::pair{std::string_view("True"), true}, {std::string_view("False"), false}})
      if (s_.substr(i_, word.size()) == word) {
        i_ += word.size();
        return value;
      }
    fail("the value of 'fortran_order' is neither True nor False");
  }
  std::size_t int_literal() {
    const std::size_t begin = i_;
    std::size_t n = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      const auto d = static_cast<std::size_t>(s_[i_] - '0');
      if (n > (std::numeric_limits<std::size_t>::max() - d) / 10) fail("an extent beyond a size_t", begin);
      n = n * 10 + d;
      ++i_;
    }
    if (i_ == begin) fail("expected an extent (a non-negative integer) in 'shape'");
    if (s_[begin] == '0' && i_ - begin > 1) fail("an extent with a leading zero", begin);
    return n;
  }
  std::vector<std::size_t> tuple_literal() {
    std::vector<std::size_t> shape;
    const std::size_t begin = i_;
    expect('(', "the value of 'shape' is not a tuple");
    space();
    bool comma = false;  // (one element needs its comma: (3) is the number 3, not a tuple)
    while (!at(')')) {
      shape.push_back(int_literal());
      space();
      comma = at(',');
      if (comma) {
        ++i_;
        space();
      } else if (!at(')')) {
        fail("expected ',' or ')' in 'shape'");
      }
    }
    if (shape.size() == 1 && !comma)
      fail("the value of 'shape' is (" + std::to_string(shape[0]) + "), a number in parentheses, not a tuple (a tuple " +
               "of one is written (" + std::to_string(shape[0]) + ",))",
           begin);
    ++i_;
    return shape;
  }

  std::string_view s_;
  const std::string& path_;
  std::size_t i_ = 0;
};

ATTNX_LIB_INLINE std::uint32_t read_le(const unsigned char* p, std::size_t n) noexcept {
  std::uint32_t v = 0;
  for (std::size_t k = n; k-- > 0;) v = (v << 8) | p[k];
  return v;
}
ATTNX_LIB_INLINE void read_bytes(std::ifstream& in, char* dst, std::size_t n, const std::string& path,
                                 const char* what) {
  if (!in.read(dst, static_cast<std::streamsize>(n)))
    ATTNX_THROW(file_error("attnx: npy: '" + path + "': reading " + what + " failed"));
}
ATTNX_LIB_INLINE std::size_t file_size(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) ATTNX_THROW(file_error("attnx: npy: cannot open '" + path + "': " + ec.message()));
  return static_cast<std::size_t>(size);
}

// Little-endian bytes of T, into U (U = T, or the exact widening).
template <class T, class U>
void decode(const unsigned char* src, U* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    unsigned char b[sizeof(T)];
    for (std::size_t k = 0; k < sizeof(T); ++k)
      b[k] = src[i * sizeof(T) + (std::endian::native == std::endian::little ? k : sizeof(T) - 1 - k)];
    T v;
    std::memcpy(&v, b, sizeof(T));
    dst[i] = static_cast<U>(v);
  }
}
template <class T>
void encode(const T* src, unsigned char* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, bool>) {  // one byte, 0 or 1, whatever the host's bool looks like
      dst[i] = src[i] ? 1 : 0;
    } else {
      unsigned char b[sizeof(T)];
      std::memcpy(b, src + i, sizeof(T));
      for (std::size_t k = 0; k < sizeof(T); ++k)
        dst[i * sizeof(T) + k] = b[std::endian::native == std::endian::little ? k : sizeof(T) - 1 - k];
    }
  }
}

inline constexpr const char* element_names[] = {"float", "double", "std::int32_t", "std::int64_t", "bool"};

// The dtypes that load into elements of `e`: its own first, then the exact widening.
ATTNX_LIB_INLINE std::span<const std::string_view> loadable(element e) noexcept {
  static constexpr std::string_view f32[] = {"<f4"}, f64[] = {"<f8", "<f4"}, i32[] = {"<i4"}, i64[] = {"<i8", "<i4"},
                                    b8[] = {"|b1", "|u1"};
  switch (e) {
    case element::f32: return f32;
    case element::f64: return f64;
    case element::i32: return i32;
    case element::b8: return b8;
    default: return i64;
  }
}
ATTNX_LIB_INLINE std::string joined(std::span<const std::string_view> list) {
  std::string out;
  for (std::string_view d : list) out += (out.empty() ? "" : ", ") + in_quotes(d);
  return out;
}
// Why d (a dtype attnx reads, not in loadable(want)) does not load into elements `want`: the message's tail, after
// "'f.npy'". Each reason is the rule that refuses it, and what to do instead.
ATTNX_LIB_INLINE std::string refusal(std::string_view d, element want) {
  const char* target = element_names[static_cast<std::size_t>(want)];
  if (d == "|b1") return " is a bool mask ('|b1'): load it into a bool tensor";
  if (want == element::b8)
    return " has dtype " + in_quotes(d) +
           ": a bool tensor loads '|b1', and '|u1' holding only 0 and 1 (a comparison makes a "
           "mask of other values, e.g. x > 0.5f)";
  if (d == "|u1") return " has dtype '|u1', which attnx loads into bool tensors only (a mask, every element 0 or 1)";
  const bool floating = d[1] == 'f', float_target = want == element::f32 || want == element::f64;
  if (floating == float_target)  // the same kind, narrower: '<f8' into float, '<i8' into std::int32_t
    return " has dtype " + in_quotes(d) + ": " + target +
           " elements could lose digits (narrowing is refused; they load " + joined(loadable(want)) +
           "): load it into a " + (floating ? "double" : "std::int64_t") + " tensor";
  const char* own = d == "<f8" ? "double" : d == "<f4" ? "float" : d == "<i8" ? "std::int64_t" : "std::int32_t";
  return " has dtype " + in_quotes(d) + ", " + (floating ? "a floating-point" : "an integer") + " dtype, and " +
         target + " elements load " + joined(loadable(want)) + " (nothing converts silently: load it into a " + own +
         " tensor, then cast<" + target + ">)";
}
}  // namespace detail

ATTNX_LIB_INLINE array_info inspect(const std::string& path) {
  const std::size_t size = detail::file_size(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) ATTNX_THROW(file_error("attnx: npy: cannot open '" + path + "' for reading"));
  const auto short_file = [&](const char* what) {
    ATTNX_THROW(format_error("attnx: npy: '" + path + "' is " + std::to_string(size) + " bytes long, too short for " +
                             what + " (truncated, or not a .npy file)"));
  };
  if (size < 8) short_file("the magic string and the format version");
  unsigned char start[12];
  detail::read_bytes(in, reinterpret_cast<char*>(start), 8, path, "the magic string");
  if (!std::equal(start, start + 6, detail::magic))
    ATTNX_THROW(format_error("attnx: npy: '" + path + "' is not a .npy file (it does not start with \"\\x93NUMPY\")"));
  array_info a;
  a.major = start[6];
  a.minor = start[7];
  if (a.minor != 0 || a.major < 1 || a.major > 3)
    ATTNX_THROW(format_error("attnx: npy: '" + path + "' has format version " + std::to_string(a.major) + "." +
                             std::to_string(a.minor) + ", and attnx reads 1.0, 2.0 and 3.0"));
  const std::size_t len_bytes = a.major == 1 ? 2 : 4;
  if (size < 8 + len_bytes) short_file("the header length");
  detail::read_bytes(in, reinterpret_cast<char*>(start + 8), len_bytes, path, "the header length");
  const std::size_t n = detail::read_le(start + 8, len_bytes);
  a.data_offset = 8 + len_bytes + n;
  if (n > size - 8 - len_bytes)
    ATTNX_THROW(format_error("attnx: npy: '" + path + "': the header length " + std::to_string(n) + " exceeds the " +
                             std::to_string(size - 8 - len_bytes) + " bytes that follow it (truncated?)"));
  std::string header(n, '\0');
  detail::read_bytes(in, header.data(), n, path, "the header");
  detail::header_parser(header, path).parse(a);
  // The byte count, shape x item size, with every product checked (a shape of (2^62,) must not wrap around).
  const std::size_t item = detail::item_size(a.descr);
  std::size_t bytes = item, elements = 1;
  bool fits = true;
  for (std::size_t e : a.shape) {
    if (e != 0 && elements > std::numeric_limits<std::size_t>::max() / e) fits = false;
    elements *= e;
  }
  if (!fits || (item != 0 && elements > std::numeric_limits<std::size_t>::max() / item))
    ATTNX_THROW(format_error("attnx: npy: '" + path + "': shape " + detail::shape_text(a.shape) +
                             " has more elements than a size_t can count in bytes"));
  bytes *= elements;
  if (item != 0 && bytes != size - a.data_offset)
    ATTNX_THROW(format_error(
        "attnx: npy: '" + path + "': shape " + detail::shape_text(a.shape) + " of " + detail::in_quotes(a.descr) +
        " needs " + std::to_string(bytes) + " bytes of data, and the file has " + std::to_string(size - a.data_offset) +
        " after its header" + (bytes > size - a.data_offset ? " (truncated?)" : " (a .npy file ends with its data)")));
  return a;
}

ATTNX_LIB_INLINE void detail::check(const std::string& path, const array_info& a, element want, const std::size_t* dims,
                                    std::size_t rank, const std::string& target) {
  const std::string where = "attnx: npy: '" + path + "'";
  if (a.fortran_order)
    ATTNX_THROW(format_error(where + " is in Fortran order (fortran_order: True), and attnx reads C order only (numpy: "
                                     "np.save(path, np.ascontiguousarray(a)))"));
  const std::string_view d = canonical(a.descr);
  if (d.empty()) {
    if (!a.descr.empty() && a.descr[0] == '[')
      ATTNX_THROW(dtype_error(where + " has a structured dtype (" + a.descr + "), which attnx does not read"));
    if (item_size(a.descr) != 0)  // '>f4', '>f8', '>i4', '>i8'
      ATTNX_THROW(dtype_error(where + " holds big-endian data (" + in_quotes(a.descr) + "), and attnx reads " +
                              "little-endian ones (numpy: np.save(path, a.astype('<" + a.descr.substr(1) + "')))"));
    ATTNX_THROW(dtype_error(where + " has dtype " + in_quotes(a.descr) + ", which attnx does not read (it reads " +
                            std::string(known_list) + ")"));
  }
  const auto ok = loadable(want);
  if (std::ranges::find(ok, d) == ok.end()) ATTNX_THROW(dtype_error(where + refusal(d, want)));
  const std::vector<std::size_t> expected(dims, dims + rank);
  if (a.shape != expected)
    ATTNX_THROW(shape_error(where + " has shape " + shape_text(a.shape) + ", but the target has shape " + target));
}

ATTNX_LIB_INLINE void detail::read_into(const std::string& path, const array_info& a, element want, void* dst,
                                        const std::size_t* dims, std::size_t rank, const std::string& target) {
  check(path, a, want, dims, rank, target);
  const std::string where = "attnx: npy: '" + path + "'";
  const std::string_view d = canonical(a.descr);
  const std::size_t n = a.elements(), item = item_size(d);
  std::vector<unsigned char> bytes(n * item);  // (inspect checked that this fits and is what the file holds)
  std::ifstream in(path, std::ios::binary);
  if (!in) ATTNX_THROW(file_error("attnx: npy: cannot open '" + path + "' for reading"));
  in.seekg(static_cast<std::streamoff>(a.data_offset));
  read_bytes(in, reinterpret_cast<char*>(bytes.data()), bytes.size(), path, "the data");
  if (want == element::b8) {  // (checked before anything is written)
    const auto bad =
        static_cast<std::size_t>(std::ranges::find_if(bytes, [](unsigned char b) { return b > 1; }) - bytes.begin());
    if (bad < n && d == "|b1")
      ATTNX_THROW(format_error(where + ": element " + std::to_string(bad) +
                               " (in C order) of the '|b1' array is the byte " + std::to_string(bytes[bad]) +
                               ", and a bool element is 0 or 1"));
    if (bad < n)
      ATTNX_THROW(dtype_error(where + " has dtype '|u1' and element " + std::to_string(bad) + " (in C order) is " +
                              std::to_string(bytes[bad]) +
                              ": a '|u1' array loads into bool only when every element is 0 or 1"));
    bool* out = static_cast<bool*>(dst);
    for (std::size_t i = 0; i < n; ++i) out[i] = bytes[i] != 0;
    return;
  }
  const unsigned char* src = bytes.data();
  switch (want) {
    case element::f32: return decode<float>(src, static_cast<float*>(dst), n);
    case element::f64:
      return d == "<f8" ? decode<double>(src, static_cast<double*>(dst), n)
                        : decode<float>(src, static_cast<double*>(dst), n);
    case element::i32: return decode<std::int32_t>(src, static_cast<std::int32_t*>(dst), n);
    default:
      return d == "<i8" ? decode<std::int64_t>(src, static_cast<std::int64_t*>(dst), n)
                        : decode<std::int32_t>(src, static_cast<std::int64_t*>(dst), n);
  }
}

ATTNX_LIB_INLINE void detail::write(const std::string& path, element e, const void* src, const std::size_t* dims,
                                    std::size_t rank) {
  static constexpr std::string_view descrs[] = {"<f4", "<f8", "<i4", "<i8", "|b1"};
  const std::string_view descr = descrs[static_cast<std::size_t>(e)];
  // numpy's own text (keys sorted, a trailing comma, Python's tuple syntax), padded with spaces and ended by '\n' so
  // that the data starts at a multiple of 64 bytes.
  std::string shape = "(";
  std::size_t n = 1;
  for (std::size_t k = 0; k < rank; ++k) {
    shape += (k ? ", " : "") + std::to_string(dims[k]);
    n *= dims[k];
  }
  shape += rank == 1 ? ",)" : ")";
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const bool v1 = 10 + header.size() + 1 <= 65535;  // (version 1.0's length field is 2 bytes: 2.0 beyond)
  const std::size_t prefix = v1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  const std::size_t item = e == element::b8 ? 1 : e == element::f32 || e == element::i32 ? 4 : 8;
  std::vector<unsigned char> out(prefix + header.size() + n * item);
  std::memcpy(out.data(), magic, 6);
  out[6] = v1 ? 1 : 2;
  out[7] = 0;
  for (std::size_t k = 0; k < prefix - 8; ++k)
    out[8 + k] = static_cast<unsigned char>((header.size() >> (8 * k)) & 0xFF);
  std::memcpy(out.data() + prefix, header.data(), header.size());
  unsigned char* data = out.data() + prefix + header.size();
  switch (e) {
    case element::f32: encode(static_cast<const float*>(src), data, n); break;
    case element::f64: encode(static_cast<const double*>(src), data, n); break;
    case element::i32: encode(static_cast<const std::int32_t*>(src), data, n); break;
    case element::b8: encode(static_cast<const bool*>(src), data, n); break;
    default: encode(static_cast<const std::int64_t*>(src), data, n); break;
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) ATTNX_THROW(file_error("attnx: npy: cannot open '" + path + "' for writing"));
  f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
  if (!f) ATTNX_THROW(file_error("attnx: npy: writing '" + path + "' failed"));
}

}  // namespace attnx::npy
