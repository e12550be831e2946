// A fingerprint of the attention kernels' results: one line per case (the problem, the instruction set, the decode
// tuning, the threads) with a hash of the output's and the log-sum-exp's bytes, over decode shapes (1 to 16 rows per
// KV head) and prefill ones. A change to the kernels that must not change their results (a restructuring) runs this
// before and after and compares the two outputs:
//   attnx_kernel_bits > before.txt; ...; attnx_kernel_bits > after.txt; cmp before.txt after.txt
#include <attnx/attnx.hpp>
#include <attnx/kernels/tuning.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace ak = attnx::kernels;

namespace {

struct lcg {
  std::uint64_t s;
  double next() {  // uniform in [-1, 1)
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return double(s >> 11) * 0x1p-52 - 1.0;
  }
};

std::uint64_t fnv(const void* p, std::size_t n, std::uint64_t h = 1469598103934665603ULL) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ULL;
  return h;
}

template <class T>
void run_case(const char* tname, ak::kv_storage kv, std::size_t B, std::size_t H, std::size_t G, std::size_t lq,
              std::size_t lk, std::size_t dk, std::size_t dv, int program, std::uint64_t seed) {
  lcg g{seed};
  std::vector<T> q(B * H * lq * dk), k(B * G * lk * dk), v(B * G * lk * dv), o(B * H * lq * dv), lse(B * H * lq);
  std::vector<std::uint16_t> k16(k.size()), v16(v.size());
  for (auto& x : q) x = T(g.next() * 2);
  for (auto& x : k) x = T(g.next() * 2);
  for (auto& x : v) x = T(g.next() * 3);
  for (std::size_t i = 0; i < k.size(); ++i) k16[i] = kv == ak::kv_storage::f16 ? attnx::f16::from_float(float(k[i])) : attnx::bf16::from_float(float(k[i]));
  for (std::size_t i = 0; i < v.size(); ++i) v16[i] = kv == ak::kv_storage::f16 ? attnx::f16::from_float(float(v[i])) : attnx::bf16::from_float(float(v[i]));
  std::vector<std::size_t> lens(B);
  for (std::size_t b = 0; b < B; ++b) lens[b] = lk - (b * 7) % (lk / 2 + 1);
  std::vector<bool> bits(B * lq * lk);
  std::vector<char> maskc(B * lq * lk);
  for (std::size_t i = 0; i < maskc.size(); ++i) maskc[i] = g.next() > -0.6;
  std::vector<T> bias(H * lk);
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = i % 97 == 5 ? -std::numeric_limits<T>::infinity() : T(g.next());
  const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
  ak::attention_problem<T> p;
  p.q = {q.data(), sz(H * lq * dk), sz(lq * dk), sz(dk)};
  if (kv == ak::kv_storage::same) {
    p.k = {k.data(), sz(G * lk * dk), sz(lk * dk), sz(dk)};
    p.v = {v.data(), sz(G * lk * dv), sz(lk * dv), sz(dv)};
  } else {
    p.kv = kv;
    p.k16 = {k16.data(), sz(G * lk * dk), sz(lk * dk), sz(dk)};
    p.v16 = {v16.data(), sz(G * lk * dv), sz(lk * dv), sz(dv)};
  }
  p.o = {o.data(), sz(H * lq * dv), sz(lq * dv), sz(dv)};
  p.lse = {lse.data(), sz(H * lq), sz(lq), 1};
  p.batch = B;
  p.heads = H;
  p.kv_heads = G;
  p.lq = lq;
  p.lk = lk;
  p.dk = dk;
  p.dv = dv;
  const T scale = T(1) / std::sqrt(T(dk));
  switch (program) {
    case 0: p.multiply(scale); break;
    case 1: p.multiply(scale).causal(ak::causal_kind::bottom_right); break;
    case 2: p.multiply(scale).key_lengths(lens.data()); break;
    case 3: p.multiply(scale).causal_lengths(lens.data()); break;
    case 4: p.multiply(scale).boolean_mask({reinterpret_cast<const bool*>(maskc.data()), sz(lq * lk), 0, sz(lk), 1}); break;
    case 5: p.multiply(scale).additive_mask({bias.data(), 0, sz(lk), 0, 1}).causal(ak::causal_kind::bottom_right); break;
    case 6: p.divide(T(3)).key_padding(lk / 2, T(-1e9)).multiply(T(2)); break;
    default: p.multiply(T(-1)).causal(ak::causal_kind::bottom_right, T(0)); break;
  }
  const bool prefill = lq * (H / G) > 16;
  const std::vector<int> families = prefill ? std::vector<int>{-1} : std::vector<int>{-1, 0, 0x19, 0x1a};
  for (attnx::simd::isa i : attnx::simd::supported())
    for (const int fam : families)
      for (unsigned threads : {1u, 2u}) {
        ak::detail::decode_tuning().store(fam);
        std::fill(o.begin(), o.end(), T(7));
        std::fill(lse.begin(), lse.end(), T(7));
        ak::flash_attention(p, i, threads);
        const std::uint64_t h = fnv(lse.data(), lse.size() * sizeof(T), fnv(o.data(), o.size() * sizeof(T)));
        std::printf("%s kv%d B%zu H%zu G%zu lq%zu lk%zu dk%zu dv%zu prog%d %s fam%d t%u %016llx\n", tname, int(kv), B, H, G,
                    lq, lk, dk, dv, program, std::string(attnx::simd::name(i)).c_str(), fam, threads,
                    static_cast<unsigned long long>(h));
      }
  ak::detail::decode_tuning().store(-1);
}

}  // namespace

int main() {
  std::uint64_t seed = 1;
  const std::size_t heads[][2] = {{1, 1}, {2, 2}, {4, 1}, {8, 2}, {8, 1}, {16, 2}, {12, 12}};  // H, kv heads
  for (const auto& hg : heads)
    for (const std::size_t lq : {1, 2, 3, 4, 5, 8, 16})
      for (const std::size_t d : {64, 128, 40})
        for (const std::size_t lk : {1, 37, 700})
          for (int prog = 0; prog < 8; ++prog) {
            if (hg[0] / hg[1] * lq > 16 && lq > 1) continue;  // (more rows per KV head than the decode kernel takes)
            const std::size_t B = lk == 700 ? 1 : 2;
            run_case<float>("f32", ak::kv_storage::same, B, hg[0], hg[1], lq, lk, d, d, prog, seed++);
            if (prog % 2 == 0) {
              run_case<float>("f32", ak::kv_storage::bf16, B, hg[0], hg[1], lq, lk, d, d, prog, seed++);
              run_case<float>("f32", ak::kv_storage::f16, B, hg[0], hg[1], lq, lk, d, d, prog, seed++);
            }
            if (prog % 4 == 1) run_case<double>("f64", ak::kv_storage::same, B, hg[0], hg[1], lq, lk, d, d, prog, seed++);
          }
  // prefill shapes (more than 16 rows per KV head), short and past several blocks
  for (const std::size_t lq : {17, 50, 130})
    for (const std::size_t d : {64, 40})
      for (int prog = 0; prog < 8; ++prog) {
        run_case<float>("f32", ak::kv_storage::same, 2, 4, 2, lq, lq + 7, d, d, prog, seed++);
        if (prog % 3 == 0) run_case<float>("f32", ak::kv_storage::bf16, 1, 2, 1, lq, 300, d, d, prog, seed++);
        if (prog % 2 == 1) run_case<double>("f64", ak::kv_storage::same, 1, 2, 2, lq, 200, d, d, prog, seed++);
      }
  // other head sizes of d_k and d_v
  for (const std::size_t lq : {1, 3, 4})
    for (const auto dd : {std::array<std::size_t, 2>{128, 64}, {64, 128}, {16, 16}, {48, 72}})
      run_case<float>("f32", ak::kv_storage::same, 2, 4, 2, lq, 600, dd[0], dd[1], 1, seed++);
  return 0;
}
