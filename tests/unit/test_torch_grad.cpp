// Gradients against PyTorch 1.13 autograd (tests/data/torch_grad.safetensors, written by
// scripts/torch_grad_reference.py, float64): attention with each mask kind, grouped-query attention,
// torch.nn.MultiheadAttention and a pre-norm transformer block, each written as one attnx expression and
// differentiated with backward(). Every case runs twice: with the fused backward (the default) and with the
// context's fused path off (the rules node by node).
#define BOOST_TEST_MODULE torch_grad
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>
#include <attnx/io/safetensors.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

using namespace attnx;
namespace st = attnx::safetensors;

namespace {
const std::filesystem::path data = std::filesystem::path(__FILE__).parent_path() / "../data/torch_grad.safetensors";

// The largest |got - want| / (1 + |want|).
template <class G, class W>
double rel_err(const G& got, const W& want) {
  BOOST_REQUIRE_EQUAL(got.numel(), want.numel());
  double e = 0;
  for (std::size_t i = 0; i < want.numel(); ++i)
    e = std::max(e, std::abs(double(got.data()[i]) - want.data()[i]) / (1 + std::abs(want.data()[i])));
  return e;
}
template <class Tn>
Tn load(const st::file& f, const std::string& name) {
  return f.load<Tn>(name);
}
// Runs body once with the fused path on and once with it off. body(backward) calls backward through the argument,
// which checks that the fused backward ran (the context counts its runs) where it is on.
template <class F>
void both_paths(const F& body) {
  for (const bool fused : {true, false}) {
    BOOST_TEST_CONTEXT((fused ? "fused backward" : "rules")) {
      context ctx;
      ctx.set_fused(fused);
      const context_scope scope(ctx);
      body([&](const auto& y, const auto& dy, const auto& w) {
        const std::size_t before = ctx.fused_runs();
        auto g = backward(y, dy, w);
        BOOST_TEST((ctx.fused_runs() > before) == fused);
        return g;
      });
    }
  }
}
constexpr double tol = 1e-12;  // float64 on both sides: the differences are rounding, a few 1e-15
using q_t = tensor<double, 2, 3, 5, 8>;
using kv_t = tensor<double, 2, 3, 9, 8>;
}  // namespace

BOOST_AUTO_TEST_CASE(attention_each_mask_kind) {
  const st::file f(data);
  for (const std::string c : {"none", "allowed", "additive", "lengths"}) {
    BOOST_TEST_CONTEXT("case " << c) {
      const auto q = load<q_t>(f, c + ".q");
      const auto k = load<kv_t>(f, c + ".k");
      const auto v = load<kv_t>(f, c + ".v");
      const auto dy = load<q_t>(f, c + ".dy");
      tensor<double, 5, 9> bias;
      tensor<bool, 5, 9> mask;
      std::vector<std::size_t> lengths;
      if (c == "additive") bias = load<tensor<double, 5, 9>>(f, c + ".bias");
      if (c == "allowed") mask = load<tensor<bool, 5, 9>>(f, c + ".mask");
      if (c == "lengths") {
        const auto l = load<tensor<std::int64_t, 2>>(f, c + ".lengths");
        lengths = {std::size_t(l(0)), std::size_t(l(1))};
      }
      both_paths([&](const auto& backward) {
        const auto run = [&](const auto& y) {
          const q_t out = y;
          BOOST_TEST(rel_err(out, load<q_t>(f, c + ".y")) < tol);
          const auto [dq, dk, dv] = backward(y, dy, wrt(q, k, v));
          BOOST_TEST(rel_err(dq, load<q_t>(f, c + ".dq")) < tol);
          BOOST_TEST(rel_err(dk, load<kv_t>(f, c + ".dk")) < tol);
          BOOST_TEST(rel_err(dv, load<kv_t>(f, c + ".dv")) < tol);
          if (c == "additive") {  // the bias differentiated too: the rules (its gradient is dS)
            const auto [dq2, db] = attnx::backward(y, dy, wrt(q, bias));
            BOOST_TEST(rel_err(dq2, load<q_t>(f, c + ".dq")) < tol);
            BOOST_TEST(rel_err(db, load<tensor<double, 5, 9>>(f, c + ".dbias")) < tol);
          }
        };
        if (c == "none") run(attention(q, k, v));
        if (c == "allowed") run(attention(q, k, v, allowed(mask)));
        if (c == "additive") run(attention(q, k, v, additive(bias)));
        if (c == "lengths") run(attention(q, k, v, key_lengths(lengths)));
      });
    }
  }
}

BOOST_AUTO_TEST_CASE(causal_and_grouped_queries) {
  const st::file f(data);
  using c_t = tensor<double, 2, 3, 7, 8>;
  const auto q = load<c_t>(f, "causal.q"), k = load<c_t>(f, "causal.k"), v = load<c_t>(f, "causal.v");
  const auto dy = load<c_t>(f, "causal.dy");
  using gq_t = tensor<double, 2, 4, 6, 8>;
  using gkv_t = tensor<double, 2, 2, 6, 8>;
  const auto gq = load<gq_t>(f, "gqa.q");
  const auto gk = load<gkv_t>(f, "gqa.k"), gv = load<gkv_t>(f, "gqa.v");
  const auto gdy = load<gq_t>(f, "gqa.dy");
  both_paths([&](const auto& backward) {
    const auto [dq, dk, dv] = backward(attention(q, k, v, causal), dy, wrt(q, k, v));
    BOOST_TEST(rel_err(dq, load<c_t>(f, "causal.dq")) < tol);
    BOOST_TEST(rel_err(dk, load<c_t>(f, "causal.dk")) < tol);
    BOOST_TEST(rel_err(dv, load<c_t>(f, "causal.dv")) < tol);
    const auto y = attention(gq, repeat_heads<2>(gk), repeat_heads<2>(gv), causal);
    BOOST_TEST(rel_err(evaluate(y), load<gq_t>(f, "gqa.y")) < tol);
    const auto [dgq, dgk, dgv] = backward(y, gdy, wrt(gq, gk, gv));
    BOOST_TEST(rel_err(dgq, load<gq_t>(f, "gqa.dq")) < tol);
    BOOST_TEST(rel_err(dgk, load<gkv_t>(f, "gqa.dk")) < tol);
    BOOST_TEST(rel_err(dgv, load<gkv_t>(f, "gqa.dv")) < tol);
  });
}

// torch.nn.MultiheadAttention(16, 4), causal self-attention, as attnx writes it.
BOOST_AUTO_TEST_CASE(multihead_attention_module) {
  const st::file f(data);
  using x_t = tensor<double, 2, 7, 16>;
  using w_t = tensor<double, 16, 16>;
  using b_t = tensor<double, 16>;
  const auto x = load<x_t>(f, "mha.x"), dy = load<x_t>(f, "mha.dy");
  const auto wq = load<w_t>(f, "mha.wq"), wk = load<w_t>(f, "mha.wk"), wv = load<w_t>(f, "mha.wv"), wo = load<w_t>(f, "mha.wo");
  const auto bq = load<b_t>(f, "mha.bq"), bk = load<b_t>(f, "mha.bk"), bv = load<b_t>(f, "mha.bv"), bo = load<b_t>(f, "mha.bo");
  both_paths([&](const auto& backward) {
    const auto y = merge_heads(attention(split_heads<4>(x * wq + bq), split_heads<4>(x * wk + bk), split_heads<4>(x * wv + bv),
                                         causal)) * wo + bo;
    BOOST_TEST(rel_err(evaluate(y), load<x_t>(f, "mha.y")) < tol);
    const auto [dx, dwq, dwk, dwv, dwo, dbq, dbk, dbv, dbo] = backward(y, dy, wrt(x, wq, wk, wv, wo, bq, bk, bv, bo));
    BOOST_TEST(rel_err(dx, load<x_t>(f, "mha.dx")) < tol);
    BOOST_TEST(rel_err(dwq, load<w_t>(f, "mha.dwq")) < tol);
    BOOST_TEST(rel_err(dwk, load<w_t>(f, "mha.dwk")) < tol);
    BOOST_TEST(rel_err(dwv, load<w_t>(f, "mha.dwv")) < tol);
    BOOST_TEST(rel_err(dwo, load<w_t>(f, "mha.dwo")) < tol);
    BOOST_TEST(rel_err(dbq, load<b_t>(f, "mha.dbq")) < tol);
    BOOST_TEST(rel_err(dbk, load<b_t>(f, "mha.dbk")) < tol);
    BOOST_TEST(rel_err(dbv, load<b_t>(f, "mha.dbv")) < tol);
    BOOST_TEST(rel_err(dbo, load<b_t>(f, "mha.dbo")) < tol);
  });
}

// A pre-norm block, y = h + gelu(layer_norm(h) w1 + c1) w2 + c2, h = x + mha(layer_norm(x)): h is read twice, and
// every parameter's gradient is PyTorch's.
BOOST_AUTO_TEST_CASE(pre_norm_transformer_block) {
  const st::file f(data);
  using x_t = tensor<double, 2, 7, 16>;
  using w_t = tensor<double, 16, 16>;
  using v16 = tensor<double, 16>;
  const auto x = load<x_t>(f, "block.x"), dy = load<x_t>(f, "block.dy");
  const auto wq = load<w_t>(f, "block.wq"), wk = load<w_t>(f, "block.wk"), wv = load<w_t>(f, "block.wv"),
             wo = load<w_t>(f, "block.wo");
  const auto bq = load<v16>(f, "block.bq"), bk = load<v16>(f, "block.bk"), bv = load<v16>(f, "block.bv"),
             bo = load<v16>(f, "block.bo");
  const auto g1 = load<v16>(f, "block.g1"), b1 = load<v16>(f, "block.b1"), g2 = load<v16>(f, "block.g2"),
             b2 = load<v16>(f, "block.b2"), c2 = load<v16>(f, "block.c2");
  const auto w1 = load<tensor<double, 16, 32>>(f, "block.w1");
  const auto w2 = load<tensor<double, 32, 16>>(f, "block.w2");
  const auto c1 = load<tensor<double, 32>>(f, "block.c1");
  both_paths([&](const auto& backward) {
    const auto a = layer_norm(x, g1, b1);
    const auto h = x + merge_heads(attention(split_heads<4>(a * wq + bq), split_heads<4>(a * wk + bk),
                                             split_heads<4>(a * wv + bv), causal)) * wo + bo;
    const auto y = h + gelu(layer_norm(h, g2, b2) * w1 + c1) * w2 + c2;
    BOOST_TEST(rel_err(evaluate(y), load<x_t>(f, "block.y")) < tol);
    const auto g = backward(y, dy, wrt(x, wq, wk, wv, wo, bq, bk, bv, bo, g1, b1, g2, b2, w1, c1, w2, c2));
    const char* names[] = {"x", "wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo", "g1", "b1", "g2", "b2", "w1", "c1", "w2", "c2"};
    std::size_t i = 0;
    const auto one = [&](const auto& t) {
      BOOST_TEST_CONTEXT("d" << names[i]) {
        BOOST_TEST(rel_err(t, load<std::remove_cvref_t<decltype(t)>>(f, std::string("block.d") + names[i])) < tol);
      }
      ++i;
    };
    std::apply([&](const auto&... t) { (one(t), ...); }, g);
  });
}
