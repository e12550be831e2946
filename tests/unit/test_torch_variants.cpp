// The attention variants against PyTorch 1.13, which has none of them built in: scripts/torch_variants_reference.py
// writes them with torch operations in float64 (soft-capping, ALiBi with BLOOM's slopes for 3 heads, windows causal
// and two-sided, packed documents with an empty one, prefix LM, chunks, varlen sequences, a clamped relative-bias table, a function of
// the position, a mask as a function, attention sinks) and autograd's gradients. Each case's output and dQ, dK, dV are compared with
// the fused path on (every instruction set for the output) and off.
#define BOOST_TEST_MODULE torch_variants
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>
#include <attnx/io/safetensors.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

using namespace attnx;
namespace st = attnx::safetensors;

namespace {
const std::filesystem::path data = std::filesystem::path(__FILE__).parent_path() / "../data/torch_variants.safetensors";
using qkv_t = tensor<double, 2, 3, 37, 4>;
using idx = std::ptrdiff_t;
constexpr double tol = 1e-12;  // float64 on both sides: the differences are rounding

template <class G, class W>
double rel_err(const G& got, const W& want) {
  double e = 0;
  for (std::size_t i = 0; i < want.numel(); ++i)
    e = std::max(e, std::abs(double(got.data()[i]) - want.data()[i]) / (1 + std::abs(want.data()[i])));
  return e;
}

struct fixture {
  st::file f{data};
  qkv_t q = f.load<qkv_t>("q"), k = f.load<qkv_t>("k"), v = f.load<qkv_t>("v"), dy = f.load<qkv_t>("dy");
  tensor<double, 19> rel = f.load<tensor<double, 19>>("relbias.table");
  std::vector<std::size_t> offsets{0, 10, 10, 25, 37};

  // make(q, k, v): the case's expression; its output on every instruction set and row by row, and (Gradients) its
  // gradients with the fused path on and off, against PyTorch's.
  template <bool Gradients = true, class Make>
  void check(const std::string& c, const Make& make) {
    BOOST_TEST_CONTEXT("case " << c) {
      const auto y = f.load<qkv_t>(c + ".y");
      for (simd::isa i : simd::supported()) {
        context ctx;
        ctx.set_isa(i);
        const qkv_t got = evaluate(make(q, k, v), ctx);
        BOOST_TEST(ctx.fused_runs() == 1u, "fused on " << simd::name(i));
        BOOST_TEST(rel_err(got, y) < tol, "y on " << simd::name(i) << ": " << rel_err(got, y));
      }
      context rows;
      rows.set_fused(false);
      const qkv_t by_rows = evaluate(make(q, k, v), rows);
      BOOST_TEST(rel_err(by_rows, y) < tol, "y row by row: " << rel_err(by_rows, y));
      if constexpr (Gradients) {
        const auto dq = f.load<qkv_t>(c + ".dq"), dk = f.load<qkv_t>(c + ".dk"), dv = f.load<qkv_t>(c + ".dv");
        for (const bool fused : {true, false}) {
          context ctx;
          ctx.set_fused(fused);
          const context_scope scope(ctx);
          const auto [gq, gk, gv] = backward(make(q, k, v), dy, wrt(q, k, v));
          BOOST_TEST(rel_err(gq, dq) < tol, "dQ, fused " << fused << ": " << rel_err(gq, dq));
          BOOST_TEST(rel_err(gk, dk) < tol, "dK, fused " << fused << ": " << rel_err(gk, dk));
          BOOST_TEST(rel_err(gv, dv) < tol, "dV, fused " << fused << ": " << rel_err(gv, dv));
        }
      }
    }
  }
};
}  // namespace

BOOST_AUTO_TEST_CASE(named_variants) {
  fixture x;
  x.check("softcap", [](const auto& q, const auto& k, const auto& v) { return attention(q, k, v, softcap(5.0), causal); });
  x.check("alibi", [](const auto& q, const auto& k, const auto& v) { return attention(q, k, v, causal, alibi()); });
  x.check("window", [](const auto& q, const auto& k, const auto& v) { return attention(q, k, v, sliding_window(6)); });
  x.check("window_lr", [](const auto& q, const auto& k, const auto& v) { return attention(q, k, v, sliding_window(3, 2)); });
  x.check("documents", [&](const auto& q, const auto& k, const auto& v) {
    return attention(q, k, v, causal, documents(x.offsets));
  });
  x.check("prefix_lm", [](const auto& q, const auto& k, const auto& v) { return attention(q, k, v, prefix_lm(9)); });
  x.check("chunked", [](const auto& q, const auto& k, const auto& v) { return attention(q, k, v, causal, chunked(8)); });
  const std::vector<std::size_t> qo{0, 8, 8, 20, 37}, ko{0, 12, 15, 15, 37};
  x.check("varlen", [&](const auto& q, const auto& k, const auto& v) {
    return attention(q, k, v, varlen(qo, ko, causal_bottom_right));
  });
  x.check("varlen_any", [&](const auto& q, const auto& k, const auto& v) { return attention(q, k, v, varlen(qo, ko)); });
}

BOOST_AUTO_TEST_CASE(functions_of_the_position) {
  fixture x;
  x.check("relbias", [&](const auto& q, const auto& k, const auto& v) {
    return softmax(scale(q * transpose(k), 0.5) + index_select(x.rel, k_pos - q_pos + 9)) * v;
  });
  // the same function of the position as a position expression (differentiated) and as score_mod (forward only)
  x.check("scoremod", [](const auto& q, const auto& k, const auto& v) {
    return softmax((1.0 + batch_pos) * scale(q * transpose(k), 0.5) + 0.01 * (head_pos * (q_pos % 5) - k_pos % 3)) * v;
  });
  x.check<false>("scoremod", [](const auto& q, const auto& k, const auto& v) {
    return attention(q, k, v, score_mod([](double s, idx b, idx h, idx i, idx j) {
                       return s * double(1 + b) + 0.01 * double(h * (i % 5) - j % 3);
                     }));
  });
  x.check("maskfn", [](const auto& q, const auto& k, const auto& v) {
    return softmax(mask(scale(q * transpose(k), 0.5), mask_fn((q_pos + k_pos) % 3 != 1 || k_pos == q_pos))) * v;
  });
}

BOOST_AUTO_TEST_CASE(attention_sinks) {
  fixture x;
  const auto table = x.f.load<tensor<double, 3>>("sinks.table");
  x.check("sinks", [&](const auto& q, const auto& k, const auto& v) { return attention(q, k, v, causal, sinks(table)); });
  const auto dtable = x.f.load<tensor<double, 3>>("sinks.dtable");
  for (const bool fused : {true, false}) {
    context ctx;
    ctx.set_fused(fused);
    const context_scope scope(ctx);
    const auto grads = backward(attention(x.q, x.k, x.v, causal, sinks(table)), x.dy, wrt(table));
    BOOST_TEST(rel_err(std::get<0>(grads), dtable) < tol, "d sinks, fused " << fused);
  }
}
