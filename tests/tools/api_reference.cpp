// api_reference: docs/api.md, generated from the headers, and the test that keeps it whole.
//
//   api_reference INCLUDE_DIR OUT.md             writes the reference
//   api_reference INCLUDE_DIR --check API.md     fails when a public name has no comment, or when API.md is not what
//                                                the headers give (regenerate it: cmake --build <dir> --target api_doc)
//
// A public name: a class, function, variable, alias or enumeration declared at namespace scope in namespace attnx or
// one of its namespaces other than detail and rules, in a header of include/attnx that is not an implementation
// file (impl/, tiles/, detail/). Its entry: its declarations (up to the body), and the comment that stands
// directly above them: a comment above a group of declarations with no blank line between them covers the group.
// Specialisations and explicit instantiations are not new names. Written in C++ so that the test suite needs no
// interpreter; it reads the code as text (comments, strings, preprocessor lines and bodies skipped), not as C++.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct declaration {
  std::string ns, name, text, comment;
};

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::string squeeze(const std::string& s) {  // whitespace runs to one space, trimmed
  std::string out;
  bool space = false;
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = !out.empty();
    } else {
      if (space) out += ' ';
      out += c;
      space = false;
    }
  }
  return out;
}

// Skips a balanced run opened at s[i] (one of ( < {) and returns the index after its close; strings and comments
// were removed already. For '<', stops early at a ';' or '{' (a less-than, not a template bracket).
std::size_t skip_balanced(const std::string& s, std::size_t i) {
  const char open = s[i], close = open == '(' ? ')' : open == '<' ? '>' : '}';
  int depth = 0;
  for (; i < s.size(); ++i) {
    if (s[i] == open) ++depth;
    else if (s[i] == close && --depth == 0) return i + 1;
    else if (open == '<' && (s[i] == ';' || s[i] == '{')) return i;
    else if (open == '<' && s[i] == '(') i = skip_balanced(s, i) - 1;
  }
  return i;
}

// Skips a template parameter list opened at s[i] == '<' (default arguments may hold braces, parentheses and
// comparisons inside those), returning the index after its '>'.
std::size_t skip_template_header(const std::string& s, std::size_t i) {
  int angle = 0, other = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '(' || c == '{' || c == '[') ++other;
    else if (c == ')' || c == '}' || c == ']') --other;
    else if (other == 0 && c == '<') ++angle;
    else if (other == 0 && c == '>' && --angle == 0) return i + 1;
  }
  return i;
}

// The declared name of a namespace-scope declaration (text before its body or ';'), or "" when it declares no new
// name (a specialisation, an instantiation, a using-directive, an assertion).
std::string declared_name(std::string d) {
  d = squeeze(d);
  for (const char* skip : {"static_assert", "using namespace", "extern template", "template struct", "template class",
                           "template void", "template const", "template std::", "template float", "template double",
                           "template bool", "template <>", "friend", "using enum"})
    if (d.rfind(skip, 0) == 0) return "";
  // Drop the template header and requires clauses.
  std::string rest;
  for (std::size_t i = 0; i < d.size();) {
    if (d.compare(i, 8, "template") == 0 && (i + 8 >= d.size() || !ident_char(d[i + 8]))) {
      std::size_t j = i + 8;
      while (j < d.size() && d[j] == ' ') ++j;
      if (j < d.size() && d[j] == '<') {
        i = skip_template_header(d, j);
        continue;
      }
    }
    if (d.compare(i, 8, "requires") == 0 && (i == 0 || !ident_char(d[i - 1])) && (i + 8 >= d.size() || !ident_char(d[i + 8]))) {
      std::size_t j = i + 8;
      while (j < d.size() && d[j] == ' ') ++j;
      if (j < d.size() && d[j] == '(') {
        i = skip_balanced(d, j);
        continue;
      }
      // requires A<...> && B<...> ...: up to the next keyword that starts the declaration
      std::size_t k = j;
      while (k < d.size()) {
        if (d[k] == '<' || d[k] == '(') {
          k = skip_balanced(d, k);
          continue;
        }
        if (d[k] == ' ' && k + 1 < d.size() && d.compare(k + 1, 3, "&& ") != 0 && d.compare(k + 1, 3, "|| ") != 0 &&
            d.compare(k - 2, 2, "&&") != 0 && d.compare(k - 2, 2, "||") != 0)
          break;
        ++k;
      }
      i = k;
      continue;
    }
    rest += d[i++];
  }
  d = squeeze(rest);
  for (const char* kw : {"struct ", "class ", "enum class ", "enum struct ", "enum ", "union ", "concept "}) {
    const std::size_t at = d.find(kw);
    if (at == 0 || (std::string(kw) == "concept " && at != std::string::npos)) {
      std::size_t i = at + std::string(kw).size();
      while (i < d.size() && d[i] == '[') i = d.find(']', d.find(']', i) + 1) + 1, i += d[i] == ' ';
      std::size_t j = i;
      while (j < d.size() && ident_char(d[j])) ++j;
      const std::string name = d.substr(i, j - i);
      std::size_t k = j;
      while (k < d.size() && d[k] == ' ') ++k;
      if (k < d.size() && d[k] == '<') return "";  // a specialisation
      return name;
    }
  }
  if (d.rfind("using ", 0) == 0) {
    const std::size_t eq = d.find('=');
    if (eq == std::string::npos) return "";  // a using-declaration: the name is another namespace's
    return squeeze(d.substr(6, eq - 6));
  }
  // A function (the identifier or operator before the first '(' outside <...>), else a variable.
  for (std::size_t i = 0; i < d.size(); ++i) {
    if (d[i] == '<' && i > 0 && ident_char(d[i - 1])) {
      const std::size_t j = skip_balanced(d, i);
      if (j < d.size() && j > i) {
        i = j - 1;
        continue;
      }
    }
    if (d[i] == '=' || d[i] == '{') break;
    if (d[i] == '(') {
      std::size_t e = i;
      while (e > 0 && d[e - 1] == ' ') --e;
      const std::size_t op = d.rfind("operator", e);
      if (op != std::string::npos && d.find_first_not_of(" ", op + 8) <= e && e - op <= 12) return squeeze(d.substr(op, e - op));
      std::size_t b = e;
      if (b > 0 && d[b - 1] == '>') {  // name<args>(: the name before the template arguments
        int depth = 0;
        while (b > 0) {
          --b;
          if (d[b] == '>') ++depth;
          else if (d[b] == '<' && --depth == 0) break;
        }
        e = b;
      }
      b = e;
      while (b > 0 && ident_char(d[b - 1])) --b;
      const std::string name = d.substr(b, e - b);
      for (const char* kw : {"decltype", "noexcept", "alignas", "sizeof", "requires"})
        if (name == kw) return "";
      if (e < d.size() && d[e] == '<' && e != i) return "";  // f<...>(...): a specialisation of f
      return name;
    }
  }
  // A variable: the identifier before '=', '{' or the end; X<...> there is a specialisation.
  std::size_t e = d.size();
  for (std::size_t i = 0; i < d.size(); ++i)
    if (d[i] == '=' || d[i] == '{') {
      e = i;
      break;
    }
  while (e > 0 && d[e - 1] == ' ') --e;
  if (e > 0 && d[e - 1] == '>') return "";
  if (e > 0 && d[e - 1] == ']') e = d.rfind('[', e);
  while (e > 0 && d[e - 1] == ' ') --e;
  std::size_t b = e;
  while (b > 0 && ident_char(d[b - 1])) --b;
  return d.substr(b, e - b);
}

// One header's public declarations, in order.
std::vector<declaration> scan(const std::string& src) {
  // Pass 1: code without comments, strings and preprocessor lines; comments kept per position (the comment block
  // that ends there), blank lines marked.
  std::string code;
  std::vector<std::string> comment_at;  // per character of code: the comment block standing before it ("" if none)
  std::string pending;
  bool line_has_code = false, prev_blank = false;
  for (std::size_t i = 0; i < src.size();) {
    const bool line_start = i == 0 || src[i - 1] == '\n';
    if (line_start) {
      std::size_t j = i;
      while (j < src.size() && (src[j] == ' ' || src[j] == '\t')) ++j;
      if (j < src.size() && src[j] == '\n') {  // a blank line ends a comment's reach
        pending.clear();
        prev_blank = true;
        i = j + 1;
        code += '\n';
        comment_at.push_back("");
        continue;
      }
      if (j < src.size() && src[j] == '#') {  // a preprocessor line, with its continuations
        while (j < src.size() && !(src[j] == '\n' && src[j - 1] != '\\')) ++j;
        i = j + 1;
        code += '\n';
        comment_at.push_back("");
        continue;
      }
      line_has_code = false;
    }
    if (src.compare(i, 2, "//") == 0) {
      std::size_t e = src.find('\n', i);
      if (e == std::string::npos) e = src.size();
      std::string text = squeeze(src.substr(i + 2, e - i - 2));
      if (!line_has_code) {
        if (prev_blank || pending.empty()) pending = text;
        else pending += " " + text;
        prev_blank = false;
      }
      i = e;
      continue;
    }
    if (src.compare(i, 2, "/*") == 0) {
      const std::size_t e = src.find("*/", i + 2);
      i = e == std::string::npos ? src.size() : e + 2;
      continue;
    }
    if (src[i] == '"' || (src[i] == '\'' && !(i > 0 && std::isxdigit(static_cast<unsigned char>(src[i - 1]))))) {
      const char q = src[i];
      std::size_t j = i + 1;
      while (j < src.size() && src[j] != q) j += src[j] == '\\' ? std::size_t{2} : std::size_t{1};
      code += q;
      code += q;
      comment_at.push_back(pending);
      comment_at.push_back(pending);
      i = j + 1;
      line_has_code = true;
      continue;
    }
    if (!std::isspace(static_cast<unsigned char>(src[i]))) line_has_code = true, prev_blank = false;
    code += src[i];
    comment_at.push_back(pending);
    ++i;
  }

  // Pass 2: namespace scopes; each statement at namespace scope ends at ';' or at its body.
  std::vector<declaration> out;
  std::vector<std::vector<std::string>> stack;  // per open namespace block: its names (a::b opens two)
  std::size_t start = 0;
  const auto ns_name = [&] {
    std::string n;
    for (const auto& part : stack)
      for (const auto& p : part) n += (n.empty() ? "" : "::") + p;
    return n;
  };
  const auto record = [&](std::size_t from, std::size_t to, bool body) {
    std::size_t b = from;
    while (b < to && std::isspace(static_cast<unsigned char>(code[b]))) ++b;
    if (b >= to) return;
    const std::string text = squeeze(code.substr(b, to - b));
    const std::string ns = ns_name();
    if (ns.rfind("attnx", 0) != 0) return;
    for (const char* hidden : {"::detail", "::rules"})
      if (ns.find(hidden) != std::string::npos) return;
    const std::string name = declared_name(text);
    if (name.empty() || name.rfind("ATTNX_", 0) == 0) return;  // (a macro's expansion: documented at the macro)
    if (!body && (text.find("struct " + name) != std::string::npos || text.find("class " + name) != std::string::npos) &&
        text.find('=') == std::string::npos)
      return;  // a forward declaration: the name is documented where it is defined
    out.push_back({ns, name, text, comment_at[b]});
  };
  for (std::size_t i = 0; i < code.size();) {
    if ((i == 0 || !ident_char(code[i - 1])) && code.compare(i, 10, "namespace ") == 0) {
      std::size_t j = i + 10, k = j;
      while (k < code.size() && (ident_char(code[k]) || code[k] == ':')) ++k;
      std::size_t b = k;
      while (b < code.size() && code[b] == ' ') ++b;
      if (b < code.size() && code[b] == '{') {
        std::vector<std::string> parts;
        std::string n = code.substr(j, k - j);
        for (std::size_t p = 0; p <= n.size();) {
          const std::size_t q = std::min(n.find("::", p), n.size());
          parts.push_back(n.substr(p, q - p));
          p = q + 2;
        }
        stack.push_back(parts);
        i = b + 1;
        start = i;
        continue;
      }
    }
    if ((i == 0 || !ident_char(code[i - 1])) && code.compare(i, 8, "template") == 0 &&
        (i + 8 < code.size() && !ident_char(code[i + 8]))) {
      std::size_t j = i + 8;
      while (j < code.size() && std::isspace(static_cast<unsigned char>(code[j]))) ++j;
      if (j < code.size() && code[j] == '<') {
        i = skip_template_header(code, j);
        continue;
      }
    }
    const char c = code[i];
    if (c == ';') {
      record(start, i, false);
      start = ++i;
    } else if (c == '{') {
      record(start, i, true);
      i = skip_balanced(code, i);
      std::size_t j = i;
      while (j < code.size() && std::isspace(static_cast<unsigned char>(code[j]))) ++j;
      if (j < code.size() && code[j] == ';') i = j + 1;  // class X { ... };
      else if (j < code.size() && code[j] != '}' && !ident_char(code[j]) && code[j] != '[' && code[j] != 't')
        i = j;  // an initialiser's brace: the statement goes on (x{} ; or x{}, ...)
      start = i;
    } else if (c == '}') {
      if (!stack.empty()) stack.pop_back();
      start = ++i;
    } else if (c == '(') {
      i = skip_balanced(code, i);  // a parameter list may hold braces (default arguments)
    } else {
      ++i;
    }
  }
  return out;
}

// The reference's text: per header, its public names, each with its comment and declarations.
std::string reference(const fs::path& include_dir, std::vector<std::string>& undocumented) {
  std::vector<fs::path> headers;
  for (const auto& e : fs::recursive_directory_iterator(include_dir / "attnx")) {
    if (!e.is_regular_file() || e.path().extension() != ".hpp") continue;
    const std::string rel = fs::relative(e.path(), include_dir).generic_string();
    if (rel.find("/impl/") != std::string::npos || rel.find("/tiles/") != std::string::npos ||
        rel.find("/detail/") != std::string::npos)
      continue;
    headers.push_back(e.path());
  }
  std::sort(headers.begin(), headers.end());
  std::ostringstream md;
  md << "# attnx API reference\n\n"
        "Every public name of attnx's headers: per header, each name with its namespace, the comment that documents it\n"
        "and its declarations (as written, up to the body). Generated from the headers by `tests/tools/api_reference.cpp`\n"
        "(`cmake --build build --target api_doc` rewrites this file); the test `docs.api_reference` fails when a public\n"
        "name has no comment or when this file is not what the headers give. Search it for a name; the headers hold\n"
        "the full comments. Names in `detail` and `rules` namespaces are the implementation's.\n";
  std::size_t total = 0;
  for (const auto& h : headers) {
    std::ifstream in(h, std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    const auto decls = scan(buf.str());
    if (decls.empty()) continue;
    const std::string rel = fs::relative(h, include_dir).generic_string();
    md << "\n## " << rel << "\n";
    // Group by (namespace, name), in order of first appearance.
    std::vector<std::pair<std::string, std::string>> order;
    std::map<std::pair<std::string, std::string>, std::vector<const declaration*>> groups;
    for (const auto& d : decls) {
      const auto key = std::make_pair(d.ns, d.name);
      if (!groups.count(key)) order.push_back(key);
      groups[key].push_back(&d);
    }
    for (const auto& key : order) {
      const auto& g = groups[key];
      std::string comment;
      for (const auto* d : g)
        if (!d->comment.empty()) {
          comment = d->comment;
          break;
        }
      if (comment.empty()) undocumented.push_back(rel + ": " + key.first + "::" + key.second);
      ++total;
      md << "\n### `" << key.first << "::" << key.second << "`\n\n";
      if (!comment.empty()) md << comment << "\n\n";
      for (const auto* d : g) md << "    " << d->text << "\n";
    }
  }
  md << "\n(" << total << " names.)\n";
  return md.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 4 && std::string(argv[2]) == "--check")) {
    std::cerr << "usage: api_reference INCLUDE_DIR OUT.md | api_reference INCLUDE_DIR --check API.md\n";
    return 2;
  }
  std::vector<std::string> undocumented;
  const std::string text = reference(argv[1], undocumented);
  if (argc == 3) {
    std::ofstream(argv[2], std::ios::binary) << text;
    for (const auto& u : undocumented) std::cerr << "api_reference: no comment: " << u << "\n";
    return 0;
  }
  int status = 0;
  for (const auto& u : undocumented) {
    std::cerr << "api_reference: a public name without a comment: " << u << "\n";
    status = 1;
  }
  std::ifstream in(argv[3], std::ios::binary);
  std::stringstream have;
  have << in.rdbuf();
  if (have.str() != text) {
    std::cerr << "api_reference: " << argv[3] << " is not what the headers give: regenerate it (cmake --build <build dir> "
                 "--target api_doc)\n";
    status = 1;
  }
  if (status == 0) std::cout << "api_reference: " << argv[3] << " is complete and current\n";
  return status;
}
