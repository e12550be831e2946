// The blocked GEMM path of the product's row evaluator (kernels/gemm.hpp, docs/gemm.md) against plain
// double loops written here: the micro-kernels of every instruction set this CPU can run, called
// directly on odd shapes; then products as expressions (float and double, shapes that are multiples of
// no block or vector width, batched and shared B, B = transpose(C), A an expression, under softmax, under
// broadcasting and with rows asked for out of order, inside element-wise chains), each under every
// available instruction set (the default context's set_isa); the axpy path (constant evaluation, small
// products, a context with blocked_gemm off); the row blocks split across threads; and the memory promise
// (no allocation of the size of the scores).
#define BOOST_TEST_MODULE gemm
#include <boost/test/unit_test.hpp>

#include <attnx/attnx.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <new>
#include <numeric>
#include <random>
#include <vector>

#include "allocation_hooks.hpp"  // the memory promise: allocation_hooks::largest_allocation

using namespace attnx;
namespace kd = attnx::kernels::detail;

namespace {

using dvec = std::vector<double>;

dvec random_values(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  dvec v(n);
  for (auto& x : v) x = u(g);
  return v;
}

// Plain loops: C (m x n) = A (m x k) B (k x n), row-major, in double.
dvec ref_matmul(const dvec& a, const dvec& b, std::size_t m, std::size_t k, std::size_t n) {
  dvec c(m * n, 0.0);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::size_t p = 0; p < k; ++p) s += a[i * k + p] * b[p * n + j];
      c[i * n + j] = s;
    }
  return c;
}
// sum_p |a_ip| |b_pj|: the scale of the rounding error of element (i, j).
dvec ref_abs_matmul(const dvec& a, const dvec& b, std::size_t m, std::size_t k, std::size_t n) {
  dvec c(m * n, 0.0);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t p = 0; p < k; ++p) c[i * n + j] += std::abs(a[i * k + p] * b[p * n + j]);
  return c;
}

template <class Tensor>
Tensor make(const dvec& v) {
  Tensor t(uninitialized);
  for (std::size_t i = 0; i < Tensor::size; ++i) t.data()[i] = static_cast<typename Tensor::value_type>(v[i]);
  return t;
}

template <class T>
double eps() {
  return std::numeric_limits<T>::epsilon();
}

// |got - want| <= tol * (1 + |want|) everywhere; reports the worst element.
template <class P>
bool close_to(const P* got, const dvec& want, double tol) {
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double e = std::abs(double(got[i]) - want[i]) / (1 + std::abs(want[i]));
    if (!(e <= worst)) worst = e, at = i;  // NaN counts as worst
  }
  if (!(worst <= tol)) {
    BOOST_TEST_MESSAGE("worst relative error " << worst << " at element " << at << " (got " << got[at] << ", want "
                                               << want[at] << "), tolerance " << tol);
    return false;
  }
  return true;
}

// The instruction sets this CPU can run.
simd::isa_list available_isas() { return simd::supported(); }

// Runs body() once per available instruction set, with the products' evaluators using that one (set in
// the default context, which the evaluations below use).
template <class F>
void for_each_isa(F&& body) {
  for (simd::isa i : available_isas()) {
    BOOST_TEST_CONTEXT("isa " << simd::name(i)) {
      default_context().set_isa(i);
      body(i);
    }
  }
  default_context().set_isa(simd::best_supported());
}

// The isa a product's evaluator actually picked.
template <class E>
simd::isa isa_of(const E& e) {
  evaluator<E> ev(e);
  return ev.gemm.kernel_isa();
}

// ---- the kernels, called directly -----------------------------------------------------------------------
template <class T, simd::isa I>
void kernel_case(std::size_t m, std::size_t k, std::size_t n, unsigned seed) {
  const auto& ops = kd::gemm_ops_for<T>(I);
  const dvec a = random_values(m * k, seed), b = random_values(k * n, seed + 1);
  const std::size_t mr = ops.mr, nr = ops.nr, mp = (m + mr - 1) / mr * mr, np = (n + nr - 1) / nr * nr;
  kd::gemm_buffer<T> ap, bp, c, bsrc;
  const std::size_t lda = k + 3;  // A's rows need not be contiguous
  ap.allocate(std::max<std::size_t>(mp * lda, 1));
  bp.allocate(std::max<std::size_t>(np * k, 1));
  c.allocate(mp * np);
  bsrc.allocate(k * n);
  for (std::size_t i = 0; i < mp; ++i)
    for (std::size_t p = 0; p < lda; ++p) ap.data()[i * lda + p] = i < m && p < k ? T(a[i * k + p]) : T(0);
  for (std::size_t i = 0; i < k * n; ++i) bsrc.data()[i] = T(b[i]);
  // the path's own packing, in two row ranges (as the threads split it)
  ops.pack(bsrc.data(), k, n, n, 0, k / 2, bp.data());
  ops.pack(bsrc.data(), k, n, n, k / 2, k, bp.data());
  const dvec want = ref_matmul(a, b, m, k, n), scale = ref_abs_matmul(a, b, m, k, n);
  // The default chunking of K, and a chunk of 7 (partial sums stored and continued).
  for (std::size_t kc : {ops.kc, std::size_t{7}}) {
    std::fill_n(c.data(), mp * np, std::numeric_limits<T>::quiet_NaN());
    ops.block(ap.data(), lda, bp.data(), m, k, n, c.data(), np, kc);
    double worst = 0;
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        const double e = std::abs(double(c.data()[i * np + j]) - want[i * n + j]);
        const double bound = double(k + 1) * eps<T>() * scale[i * n + j] + std::numeric_limits<T>::min();
        worst = std::max(worst, e / bound);
        if (!(e <= bound)) {
          BOOST_TEST(e <= bound, simd::name(I) << " " << m << "x" << k << "x" << n << " kc " << kc << " element (" << i
                                                  << ", " << j << "): " << c.data()[i * np + j] << " vs " << want[i * n + j]);
          return;
        }
      }
  }
}

template <class T, simd::isa I>
void kernel_shapes() {
  const std::size_t shapes[][3] = {{1, 1, 1},   {7, 13, 5},  {67, 129, 33}, {300, 64, 17}, {12, 300, 32},
                                   {13, 31, 65}, {96, 512, 96}, {5, 0, 9},     {2, 3, 200},   {25, 257, 47}};
  unsigned seed = 10;
  for (const auto& s : shapes) kernel_case<T, I>(s[0], s[1], s[2], seed += 3);
}

template <class T>
void kernel_all_isas() {
  for (simd::isa i : available_isas()) {
    BOOST_TEST_CONTEXT("isa " << simd::name(i)) {
      if (i == simd::isa::scalar) kernel_shapes<T, simd::isa::scalar>();
#if ATTNX_SIMD_X86
      if (i == simd::isa::avx2) kernel_shapes<T, simd::isa::avx2>();
      if (i == simd::isa::avx512) kernel_shapes<T, simd::isa::avx512>();
#endif
    }
  }
}

// ---- products as expressions ------------------------------------------------------------------------------
// A (M x K) * B (K x N) against the loops, with the error bound of a K-term dot product.
template <class T, std::size_t M, std::size_t K, std::size_t N>
void product_case(unsigned seed, bool expect_blocked) {
  const dvec a = random_values(M * K, seed), b = random_values(K * N, seed + 1);
  const auto A = make<tensor<T, M, K>>(a);
  const auto Bt = make<tensor<T, K, N>>(b);
  const auto blocks0 = default_context().gemm_blocks();
  tensor<T, M, N> C = A * Bt;
  BOOST_TEST((default_context().gemm_blocks() != blocks0) == expect_blocked, M << "x" << K << "x" << N);
  const dvec want = ref_matmul(a, b, M, K, N), scale = ref_abs_matmul(a, b, M, K, N);
  for (std::size_t i = 0; i < M * N; ++i) {
    const double bound = double(K + 1) * eps<T>() * scale[i] + std::numeric_limits<T>::min();
    if (!(std::abs(double(C.data()[i]) - want[i]) <= bound)) {
      BOOST_TEST(std::abs(double(C.data()[i]) - want[i]) <= bound,
                 M << "x" << K << "x" << N << " element " << i << ": " << C.data()[i] << " vs " << want[i]);
      return;
    }
  }
}

template <class T>
void product_shapes() {
  product_case<T, 1, 1, 1>(1, false);  // fewer than gemm_direct_min_rows rows: the few-row path
  product_case<T, 3, 40, 70>(2, false);
  product_case<T, 4, 40, 70>(3, false);
  product_case<T, 7, 13, 5>(4, false);
  product_case<T, 15, 40, 70>(9, false);
  product_case<T, 16, 40, 70>(10, true);
  product_case<T, 67, 129, 33>(5, true);
  product_case<T, 300, 64, 17>(6, true);
  product_case<T, 97, 31, 65>(7, true);    // MB + 1 rows, N = 2 panels + 1
  product_case<T, 193, 8, 129>(8, true);
}

}  // namespace

// gemm_into with its row blocks split across threads (enough work for two or more: 4e6 flops each), batched
// (nb matrices of B, rows_per_b rows of A each) with a bias and strided A and C: every row of every matrix
// against the loops. Few blocks per thread: their number rounded to a multiple of the threads used.
template <class T>
void threaded_case(std::size_t nb, std::size_t rows_per_b, std::size_t k, std::size_t n, unsigned threads, simd::isa isa,
                   unsigned seed) {
  const std::size_t lda = k + 5, ldd = n + 3, rows = nb * rows_per_b;
  const dvec a = random_values(rows * k, seed), b = random_values(nb * k * n, seed + 1), bias = random_values(n, seed + 2);
  std::vector<T> at(rows * lda, T(0)), bt(nb * k * n), bs(n), dst(rows * ldd, std::numeric_limits<T>::quiet_NaN());
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t p = 0; p < k; ++p) at[i * lda + p] = T(a[i * k + p]);
  for (std::size_t i = 0; i < nb * k * n; ++i) bt[i] = T(b[i]);
  for (std::size_t j = 0; j < n; ++j) bs[j] = T(bias[j]);
  const std::size_t blocks = attnx::kernels::gemm_into(at.data(), lda, bt.data(), nb, k, n, rows_per_b, dst.data(), ldd, bs.data(), isa, threads);
  const double flops = 2.0 * double(rows) * double(k) * double(n);
  const auto used = unsigned(std::min(double(threads), flops / kd::gemm_min_flops_per_thread));
  BOOST_TEST(used >= 2u);  // the case is split
  BOOST_TEST(blocks % used == 0u, blocks << " blocks on " << used << " threads");
  std::size_t bad = 0;
  for (std::size_t t = 0; t < nb; ++t) {
    const dvec at_t(a.begin() + std::ptrdiff_t(t * rows_per_b * k), a.begin() + std::ptrdiff_t((t + 1) * rows_per_b * k));
    const dvec bt_t(b.begin() + std::ptrdiff_t(t * k * n), b.begin() + std::ptrdiff_t((t + 1) * k * n));
    const dvec want = ref_matmul(at_t, bt_t, rows_per_b, k, n), scale = ref_abs_matmul(at_t, bt_t, rows_per_b, k, n);
    for (std::size_t i = 0; i < rows_per_b; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        const double got = double(dst[(t * rows_per_b + i) * ldd + j]), w = want[i * n + j] + double(bs[j]);
        bad += !(std::abs(got - w) <= double(k + 2) * eps<T>() * (scale[i * n + j] + std::abs(double(bs[j]))) +
                                              std::numeric_limits<T>::min());
      }
  }
  BOOST_TEST(bad == 0u, nb << " x " << rows_per_b << "x" << k << "x" << n << " on " << threads << " threads, "
                          << simd::name(isa) << ": " << bad << " elements wrong");
}
template <class T>
void threaded_shapes() {
  for (simd::isa i : available_isas()) {
    threaded_case<T>(1, 200, 160, 130, 2, i, 40);   // 8.3e6 flops: two threads; blocks of MB rows rounded up to even
    threaded_case<T>(3, 100, 160, 130, 2, i, 44);   // three matrices over two threads
    threaded_case<T>(3, 97, 150, 140, 3, i, 48);    // three threads, rows not a whole number of panels
    threaded_case<T>(2, 301, 160, 100, 4, i, 52);   // 19e6 flops: four threads, more than the cores
  }
}
BOOST_AUTO_TEST_CASE(gemm_into_across_threads_float) { threaded_shapes<float>(); }
BOOST_AUTO_TEST_CASE(gemm_into_across_threads_double) { threaded_shapes<double>(); }

BOOST_AUTO_TEST_CASE(kernels_every_isa_float) { kernel_all_isas<float>(); }
BOOST_AUTO_TEST_CASE(kernels_every_isa_double) { kernel_all_isas<double>(); }

BOOST_AUTO_TEST_CASE(isa_override_reaches_the_evaluator) {
  const tensor<float, 32, 32> A{};  // 32 rows: the blocked GEMM (fewer than gemm_direct_min_rows go to gemm_rows)
  for_each_isa([&](simd::isa i) { BOOST_TEST(int(isa_of(A * A)) == int(i)); });
  BOOST_TEST(int(isa_of(A * A)) == int(simd::best_supported()));
  const tensor<float, 4, 128> F{};  // 4 rows: the few-rows path, same instruction set
  const tensor<float, 128, 64> G{};
  for_each_isa([&](simd::isa i) {
    evaluator<decltype(F * G)> ev(F * G);
    BOOST_TEST(int(ev.few.isa) == int(i));
  });
  BOOST_TEST_MESSAGE("instruction sets tested: " << available_isas().size() << ", best "
                                                 << simd::name(simd::best_supported()));
}

BOOST_AUTO_TEST_CASE(products_odd_shapes) {
  for_each_isa([](simd::isa) {
    product_shapes<float>();
    product_shapes<double>();
  });
}

BOOST_AUTO_TEST_CASE(batched_and_shared_rhs) {
  constexpr std::size_t Bn = 3, M = 37, K = 20, N = 41;
  const dvec a = random_values(Bn * M * K, 20), b = random_values(Bn * K * N, 21), w = random_values(K * N, 22);
  for_each_isa([&](simd::isa) {
    {  // batched B: item t of A times item t of B
      const auto A = make<tensor<float, Bn, M, K>>(a);
      const auto B = make<tensor<float, Bn, K, N>>(b);
      tensor<float, Bn, M, N> C = A * B;
      dvec want;
      for (std::size_t t = 0; t < Bn; ++t) {
        const dvec at(a.begin() + t * M * K, a.begin() + (t + 1) * M * K), bt(b.begin() + t * K * N, b.begin() + (t + 1) * K * N);
        const dvec ct = ref_matmul(at, bt, M, K, N);
        want.insert(want.end(), ct.begin(), ct.end());
      }
      BOOST_TEST(close_to(C.data(), want, 1e-5));
    }
    {  // shared B: every item times W, one GEMM over Bn * M rows
      const auto A = make<tensor<double, Bn, M, K>>(a);
      const auto W = make<tensor<double, K, N>>(w);
      tensor<double, Bn, M, N> C = A * W;
      BOOST_TEST(close_to(C.data(), ref_matmul(a, w, Bn * M, K, N), 1e-13));
    }
    {  // batched B, rank 4: (2, 3, M, K) x (2, 3, K, N)
      const auto A = make<tensor<float, 2, 3, 10, 9>>(random_values(2 * 3 * 10 * 9, 23));
      const auto B = make<tensor<float, 2, 3, 9, 11>>(random_values(2 * 3 * 9 * 11, 24));
      tensor<float, 2, 3, 10, 11> C = A * B;
      for (std::size_t t = 0; t < 6; ++t) {
        dvec at(A.data() + t * 90, A.data() + (t + 1) * 90), bt(B.data() + t * 99, B.data() + (t + 1) * 99);
        BOOST_TEST(close_to(C.data() + t * 110, ref_matmul(at, bt, 10, 9, 11), 1e-5));
      }
    }
  });
}

BOOST_AUTO_TEST_CASE(rhs_transposed) {
  constexpr std::size_t M = 45, K = 19, N = 70;
  const dvec a = random_values(M * K, 30), c = random_values(N * K, 31);
  dvec ct(K * N);  // C^T
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t j = 0; j < K; ++j) ct[j * N + i] = c[i * K + j];
  for_each_isa([&](simd::isa) {
    const auto A = make<tensor<float, M, K>>(a);
    const auto Cm = make<tensor<float, N, K>>(c);
    tensor<float, M, N> R = A * transpose(Cm);
    BOOST_TEST(close_to(R.data(), ref_matmul(a, ct, M, K, N), 1e-5));
    // batched: Q K^T per item
    const auto Q = make<tensor<double, 2, M, K>>(random_values(2 * M * K, 32));
    const auto Kt = make<tensor<double, 2, N, K>>(random_values(2 * N * K, 33));
    tensor<double, 2, M, N> S = Q * transpose(Kt);
    for (std::size_t t = 0; t < 2; ++t) {
      const dvec q(Q.data() + t * M * K, Q.data() + (t + 1) * M * K);
      dvec kt(K * N);
      for (std::size_t i = 0; i < N; ++i)
        for (std::size_t j = 0; j < K; ++j) kt[j * N + i] = Kt.data()[t * N * K + i * K + j];
      BOOST_TEST(close_to(S.data() + t * M * N, ref_matmul(q, kt, M, K, N), 1e-13));
    }
  });
}

// transpose(X) * B with X in memory (a weight gradient X^T dY): the direct path transposes X in tiles of 32 first;
// sizes that are not multiples of the tile, on either axis, and a view of a dyn tensor as the backward passes it.
BOOST_AUTO_TEST_CASE(lhs_transposed) {
  constexpr std::size_t R = 70, M = 45, N = 37;  // X: R x M, B: R x N, X^T B: M x N
  const dvec x = random_values(R * M, 34), b = random_values(R * N, 35);
  dvec xt(M * R);
  for (std::size_t i = 0; i < R; ++i)
    for (std::size_t j = 0; j < M; ++j) xt[j * R + i] = x[i * M + j];
  for_each_isa([&](simd::isa) {
    const auto X = make<tensor<float, R, M>>(x);
    const auto B = make<tensor<float, R, N>>(b);
    tensor<float, M, N> P = transpose(X) * B;
    BOOST_TEST(close_to(P.data(), ref_matmul(xt, b, M, R, N), 1e-5));
    const auto Xd = make<tensor<double, R, M>>(x);
    const auto Bd = make<tensor<double, R, N>>(b);
    tensor<double, dyn, M> xv(R, M);
    for (std::size_t i = 0; i < R * M; ++i) xv.data()[i] = Xd.data()[i];
    const basic_view<const double, shape<axis<anon, dyn>, axis<anon, M>>> v(xv.data(), R);
    tensor<double, M, N> Pd = transpose(v) * Bd;
    BOOST_TEST(close_to(Pd.data(), ref_matmul(xt, b, M, R, N), 1e-13));
  });
  // A transpose large enough to be copied in bands of rows on 2 threads (R2 not a multiple of the 32-row band).
  constexpr std::size_t R2 = 1037, M2 = 70, N2 = 9;
  const dvec x2 = random_values(R2 * M2, 36), b2 = random_values(R2 * N2, 37);
  dvec xt2(M2 * R2);
  for (std::size_t i = 0; i < R2; ++i)
    for (std::size_t j = 0; j < M2; ++j) xt2[j * R2 + i] = x2[i * M2 + j];
  context two;
  two.set_threads(2);
  const auto X2 = make<tensor<float, R2, M2>>(x2);
  const auto B2 = make<tensor<float, R2, N2>>(b2);
  const tensor<float, M2, N2> P2 = evaluate(transpose(X2) * B2, two);
  BOOST_TEST(close_to(P2.data(), ref_matmul(xt2, b2, M2, R2, N2), 1e-5));
}

BOOST_AUTO_TEST_CASE(lhs_expressions) {
  constexpr std::size_t Bn = 2, L = 50, D = 24, H = 4, E = 30;
  const dvec x = random_values(Bn * L * D, 40), w1 = random_values(D * D, 41), w2 = random_values(D * E, 42);
  const dvec p1 = ref_matmul(x, w1, Bn * L, D, D), p2 = ref_matmul(p1, w2, Bn * L, D, E);
  for_each_isa([&](simd::isa) {
    const auto X = make<tensor<float, Bn, L, D>>(x);
    const auto W1 = make<tensor<float, D, D>>(w1);
    const auto W2 = make<tensor<float, D, E>>(w2);
    // a projection of a projection: the inner product is A's evaluator, blocked itself
    tensor<float, Bn, L, E> Y = (X * W1) * W2;
    BOOST_TEST(close_to(Y.data(), p2, 1e-5));
    // B an expression too (materialised once)
    tensor<float, Bn, L, E> Y2 = X * (W1 * W2);
    BOOST_TEST(close_to(Y2.data(), p2, 1e-5));
    // merge_heads(split_heads(...)) of a projection, times W2
    tensor<float, Bn, L, E> Y3 = merge_heads(split_heads<H>(X * W1)) * W2;
    BOOST_TEST(close_to(Y3.data(), p2, 1e-5));
    // merge_heads of a tensor (strided reads through its evaluator)
    const tensor<float, Bn, H, L, D / H> S = split_heads<H>(X);
    tensor<float, Bn, L, D> Y4 = merge_heads(S) * W1;
    BOOST_TEST(close_to(Y4.data(), p1, 1e-5));
  });
}

BOOST_AUTO_TEST_CASE(elementwise_chains) {
  constexpr std::size_t M = 70, D = 33, F = 50;
  const dvec x = random_values(M * D, 50), w1 = random_values(D * F, 51), b1 = random_values(F, 52),
             w2 = random_values(F * D, 53), b2 = random_values(D, 54), c = random_values(M * F, 55);
  const dvec xw = ref_matmul(x, w1, M, D, F);
  dvec h(M * F), want1(M * F), want3(M * F);
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < F; ++j) {
      want1[i * F + j] = xw[i * F + j] + b1[j];
      h[i * F + j] = std::tanh(xw[i * F + j] + b1[j]);
      want3[i * F + j] = std::exp(xw[i * F + j] * 0.1) * 2.0 - c[i * F + j];
    }
  dvec want2 = ref_matmul(h, w2, M, F, D);
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < D; ++j) want2[i * D + j] += b2[j];
  for_each_isa([&](simd::isa) {
    const auto X = make<tensor<double, M, D>>(x);
    const auto W1 = make<tensor<double, D, F>>(w1);
    const auto B1 = make<tensor<double, F>>(b1);
    const auto W2 = make<tensor<double, F, D>>(w2);
    const auto B2 = make<tensor<double, D>>(b2);
    const auto Cc = make<tensor<double, M, F>>(c);
    tensor<double, M, F> Y1 = X * W1 + B1;  // X W + b
    BOOST_TEST(close_to(Y1.data(), want1, 1e-13));
    tensor<double, M, D> Y2 = tanh(X * W1 + B1) * W2 + B2;  // a two-layer MLP: a product of a chain of a product
    BOOST_TEST(close_to(Y2.data(), want2, 1e-12));
    tensor<double, M, F> Y3 = exp((X * W1) * 0.1) * 2.0 - Cc;
    BOOST_TEST(close_to(Y3.data(), want3, 1e-12));
  });
}

BOOST_AUTO_TEST_CASE(under_softmax_rows_in_order) {
  constexpr std::size_t Bn = 2, L = 230, Lk = 150, d = 16, dv = 12;
  const dvec q = random_values(Bn * L * d, 60), k = random_values(Bn * Lk * d, 61), v = random_values(Bn * Lk * dv, 62);
  // reference: per item, softmax(Q K^T / 4) V, and the weights
  dvec want_w(Bn * L * Lk), want_o(Bn * L * dv);
  for (std::size_t t = 0; t < Bn; ++t)
    for (std::size_t i = 0; i < L; ++i) {
      double mx = -1e300, sum = 0;
      std::vector<double> s(Lk);
      for (std::size_t j = 0; j < Lk; ++j) {
        double acc = 0;
        for (std::size_t p = 0; p < d; ++p) acc += q[(t * L + i) * d + p] * k[(t * Lk + j) * d + p];
        s[j] = acc / 4;
        mx = std::max(mx, s[j]);
      }
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (std::size_t j = 0; j < Lk; ++j) want_w[(t * L + i) * Lk + j] = s[j] / sum;
      for (std::size_t c = 0; c < dv; ++c) {
        double o = 0;
        for (std::size_t j = 0; j < Lk; ++j) o += s[j] / sum * v[(t * Lk + j) * dv + c];
        want_o[(t * L + i) * dv + c] = o;
      }
    }
  for_each_isa([&](simd::isa i) {
    const auto Q = make<tensor<float, Bn, L, d>>(q);
    const auto K = make<tensor<float, Bn, Lk, d>>(k);
    const auto V = make<tensor<float, Bn, Lk, dv>>(v);
    const auto blocks0 = default_context().gemm_blocks();
    tensor<float, Bn, L, Lk> Wt = softmax(Q * transpose(K) / 4.0f);
    BOOST_TEST(close_to(Wt.data(), want_w, 1e-5));
    // rows in order: each sub-block of the scores computed once (per batch item: ceil(L / MB) of them)
    const std::size_t mb = kd::gemm_ops_for<float>(i).mb;
    BOOST_TEST(default_context().gemm_blocks() - blocks0 == Bn * ((L + mb - 1) / mb));
    // the unfused attention: softmax(...) is the lhs of the second product
    default_context().set_fused(false);
    tensor<float, Bn, L, dv> O = softmax(Q * transpose(K) / 4.0f) * V;
    default_context().set_fused(true);
    BOOST_TEST(close_to(O.data(), want_o, 1e-5));
  });
}

BOOST_AUTO_TEST_CASE(rows_out_of_order) {
  constexpr std::size_t M = 250, K = 21, N = 37, Bn = 3;
  const dvec a = random_values(M * K, 70), b = random_values(K * N, 71), c = random_values(Bn * M * N, 72);
  const dvec p = ref_matmul(a, b, M, K, N);
  for_each_isa([&](simd::isa) {
    const auto A = make<tensor<float, M, K>>(a);
    const auto B = make<tensor<float, K, N>>(b);
    // the evaluator asked for rows in a random order
    auto e = A * B;
    evaluator<decltype(e)> ev(e);
    std::vector<std::size_t> order(M * 2);
    std::iota(order.begin(), order.begin() + M, 0);
    std::iota(order.begin() + M, order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(73));
    bool ok = true;
    for (std::size_t r : order) {
      ev.begin_row(r);
      for (std::size_t j = 0; j < N && ok; ++j)
        ok = std::abs(double(ev.at(j)) - p[r * N + j]) <= 1e-5 * (1 + std::abs(p[r * N + j]));
      if (!ok) BOOST_TEST(ok, "row " << r);
      if (!ok) break;
    }
    // broadcasting: the (M, N) product read as (Bn, M, N): rows 0..M-1 three times
    const auto Cc = make<tensor<float, Bn, M, N>>(c);
    tensor<float, Bn, M, N> R = Cc + A * B;
    dvec want(Bn * M * N);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = c[i] + p[i % (M * N)];
    BOOST_TEST(close_to(R.data(), want, 1e-5));
    // repeat_heads of a product: each key/value head's rows asked for twice in a row
    const auto X = make<tensor<double, 1, 2, 120, K>>(random_values(2 * 120 * K, 74));
    const auto Bd = make<tensor<double, K, N>>(b);
    tensor<double, 1, 4, 120, N> Rh = repeat_heads<2>(X * Bd);
    const dvec px = ref_matmul(dvec(X.data(), X.data() + X.size), b, 240, K, N);
    for (std::size_t h = 0; h < 4; ++h)
      BOOST_TEST(close_to(Rh.data() + h * 120 * N, dvec(px.begin() + (h / 2) * 120 * N, px.begin() + (h / 2 + 1) * 120 * N), 1e-13));
  });
}

BOOST_AUTO_TEST_CASE(axpy_path_kept) {
  // blocked_gemm off, and a constant evaluation: the axpy loop, summed in the order k = 0, 1, ...
  constexpr std::size_t M = 20, K = 30, N = 10;
  const dvec a = random_values(M * K, 80), b = random_values(K * N, 81);
  const auto A = make<tensor<double, M, K>>(a);
  const auto B = make<tensor<double, K, N>>(b);
  context axpy;
  axpy.set_blocked_gemm(false);
  tensor<double, M, N> C = evaluate(A * B, axpy);
  BOOST_TEST(axpy.gemm_blocks() == 0u);
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      double s = 0;  // the axpy loop's order, no contraction (tests build with -ffp-contract=off)
      for (std::size_t p = 0; p < K; ++p) s = s + a[i * K + p] * b[p * N + j];
      BOOST_TEST(C(i, j) == s);
    }
  tensor<double, M, N> C2 = A * B;
  BOOST_TEST(close_to(C2.data(), ref_matmul(a, b, M, K, N), 1e-13));
}

// kernels::gemm_rows, the few-row path (decoding steps, the LM head): on every instruction set, for 1 to 9 rows (groups
// of 4 and the rest), n off the vector widths, k not a multiple of the 4-row step, one matrix B and two, with and
// without a bias: bit for bit the axpy loop's sums (0, then each term rounded, k = 0, 1, ...), on 1 and 2 threads. And
// the product's row evaluator (A an expression, one row a matrix: the LM head's form) takes it, with the same bits.
template <class T>
void few_rows_case(std::size_t rows_per_b, std::size_t nb, std::size_t k, std::size_t n, bool with_bias, simd::isa isa) {
  const dvec ad = random_values(rows_per_b * nb * k, unsigned(7 * k + n)), bd = random_values(nb * k * n, unsigned(k + 3 * n));
  const dvec biasd = random_values(n, 5);
  const std::vector<T> a(ad.begin(), ad.end()), b(bd.begin(), bd.end()), bias(biasd.begin(), biasd.end());
  std::vector<T> want(rows_per_b * nb * n);
  for (std::size_t r = 0; r < rows_per_b * nb; ++r)
    for (std::size_t c = 0; c < n; ++c) {
      T x = 0;
      for (std::size_t p = 0; p < k; ++p) x = x + a[r * k + p] * b[(r / rows_per_b) * k * n + p * n + c];
      if (with_bias) x = x + bias[c];
      want[r * n + c] = x;
    }
  for (unsigned threads : {1u, 2u}) {
    std::vector<T> got(want.size(), T(-7));
    kernels::gemm_rows(a.data(), k, b.data(), nb, k, n, rows_per_b, got.data(), n, with_bias ? bias.data() : nullptr, isa,
                       threads);
    BOOST_TEST(got == want, simd::name(isa) << (sizeof(T) == 4 ? " float" : " double") << " rows " << rows_per_b << " x "
                                            << nb << " k " << k << " n " << n << " threads " << threads);
  }
}

BOOST_AUTO_TEST_CASE(few_rows_bit_for_bit) {
  for (simd::isa isa : simd::supported()) {
    for (std::size_t rows : {1, 2, 3, 4, 5, 9, 15})
      for (std::size_t k : {1, 3, 6, 64})
        for (std::size_t n : {1, 7, 17, 100, 1000}) few_rows_case<float>(rows, 1, k, n, n % 2 == 1, isa);
    few_rows_case<double>(3, 2, 33, 257, true, isa);
    few_rows_case<double>(1, 1, 768, 5000, false, isa);  // (two column spans)
    few_rows_case<float>(2, 3, 40, 600, true, isa);
    few_rows_case<float>(11, 1, 200, 3000, true, isa);  // (column chunks that stay in L2, three groups of rows)
  }
  // The row evaluator: softmax(X) * W for one row of 300 x 4000, the bits of the axpy loop, through the few-row path.
  const dvec x = random_values(300, 91), w = random_values(300 * 4000, 92);
  tensor<float, dyn, 300> X(1);
  tensor<float, 300, 4000> W;
  for (std::size_t i = 0; i < 300; ++i) X(0, i) = float(x[i]);
  for (std::size_t i = 0; i < W.numel(); ++i) W.data()[i] = float(w[i]);
  const tensor<float, dyn, 300> P = softmax(X);
  for (simd::isa isa : simd::supported()) {
    context ctx;
    ctx.set_isa(isa).set_threads(2);
    const tensor<float, dyn, 4000> Y = evaluate(softmax(X) * W, ctx);
    bool same = true;
    for (std::size_t c = 0; c < 4000; ++c) {
      float s = 0;
      for (std::size_t p = 0; p < 300; ++p) s = s + P(0, p) * W(p, c);
      same = same && Y(0, c) == s;
    }
    BOOST_TEST(same, simd::name(isa));
    BOOST_TEST(ctx.gemm_blocks() == 0u);
  }
}

namespace {
// Constant-evaluated products (the axpy loop) of integers, which every path computes exactly.
constexpr tensor<double, 9, 7> ct_product() {
  const auto A = tensor<double, 9, 5>::generate([](auto i, auto j) { return double(int(i * 3 + j * 7) % 11) - 5; });
  const auto B = tensor<double, 5, 7>::generate([](auto i, auto j) { return double(int(i * 5 + j * 2) % 13) - 6; });
  return A * B;
}
constexpr double ct_fraction() {  // the same at fractions: the axpy loop's rounding, in a constant evaluation
  const auto A = tensor<double, 6, 5>::generate([](auto i, auto j) { return double(i + 1) / double(j + 3); });
  const auto B = tensor<double, 5, 4>::generate([](auto i, auto j) { return double(j + 2) / double(i + 7); });
  const tensor<double, 6, 4> C = A * B;
  return C(5, 3);
}
}  // namespace

BOOST_AUTO_TEST_CASE(constant_evaluation_unchanged) {
  constexpr auto ct = ct_product();
  const auto rt = ct_product();
  BOOST_TEST(ct == rt);  // integers: exact on every path
  constexpr double cf = ct_fraction();
  double want = 0;  // the axpy loop's summation, k = 0, 1, ...
  for (std::size_t k = 0; k < 5; ++k) want = want + (6.0 / double(k + 3)) * (5.0 / double(k + 7));
  BOOST_TEST(cf == want);
  double (*volatile f)() = ct_fraction;  // run time, blocked: within a few ulp
  BOOST_TEST(std::abs(f() - cf) <= 8 * eps<double>() * std::abs(cf));
}

BOOST_AUTO_TEST_CASE(scores_never_stored) {
  // softmax(Q K^T) V row by row (fused path off), L = 2048: the scores would be 16 MiB; no allocation
  // may come near it (blocks of MB x L: the scores, then the weights packed as the lhs of the product with V).
  constexpr std::size_t L = 2048, d = 16;
  const auto Q = make<tensor<float, L, d>>(random_values(L * d, 90));
  const auto K = make<tensor<float, L, d>>(random_values(L * d, 91));
  const auto V = make<tensor<float, L, d>>(random_values(L * d, 92));
  for_each_isa([&](simd::isa) {
    tensor<float, L, d> O(uninitialized);
    context rows;  // two threads: blocks of 2 x MB rows of scores at a time
    rows.set_isa(default_context().isa()).set_fused(false).set_threads(2);
    exec::release_cached_memory();  // a block kept from the previous round would be reused unseen
    allocation_hooks::largest_allocation = 0;
    allocation_hooks::tracking = true;
    assign(O, softmax(Q * transpose(K)) * V, rows);
    allocation_hooks::tracking = false;
    BOOST_TEST_MESSAGE("largest allocation " << allocation_hooks::largest_allocation.load() << " bytes; scores " << L * L * sizeof(float));
    BOOST_TEST(allocation_hooks::largest_allocation.load() <= L * L * sizeof(float) / 8);
    BOOST_TEST(std::isfinite(O(L - 1, d - 1)));
  });
}
