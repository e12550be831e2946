// attnx benchmarks: matrix products through the expression evaluator (kernels/gemm.hpp, docs/gemm.md)
// against the previous axpy row loop, OpenBLAS and Eigen, one thread.
//   projections  C = X W,       X: M x 512, W: 512 x 512, M = B L in {128, 1024, 4096} (the MHA's shapes)
//   scores       S = Q K^T,     Q, K: M x 64, S: M x M, M in {128, 1024, 4096} (as a product on its own:
//                               attnx materialises K^T once, OpenBLAS/Eigen read K transposed)
//   bias         C = X W + b    (the projection as the module writes it: the product inside a chain)
// Implementations (the `impl` field of the name):
//   attnx        the evaluator's blocked path (the best instruction set of this CPU, chosen at run time)
//   attnx_2t     the same on two threads (row blocks split across them; wall time)
//   attnx_avx2   the same with the AVX2 kernel (a context with set_isa(avx2)), when the CPU has it
//   attnx_axpy   a context with blocked_gemm off: one output row at a time, axpy over the rows of B
//   openblas     cblas_sgemm / cblas_dgemm, openblas_set_num_threads(1)
//   eigen        row-major Eigen::Matrix, C.noalias() = A * B (built without OpenMP)
// FLOPS = 2 M K N per iteration (CPU time; wall time for attnx_2t). Run OpenBLAS without OPENBLAS_CORETYPE for its AVX-512 kernel.
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <cblas.h>

#include "attnx/attnx.hpp"

#if __has_include(<Eigen/Core>)
#include <Eigen/Core>
#define ATTNX_BENCH_EIGEN 1
#else
#define ATTNX_BENCH_EIGEN 0
#endif

namespace {

enum class impl { attnx, attnx_2t, attnx_avx2, attnx_axpy, openblas, eigen };
enum class kind { projection, scores, bias };

const char* impl_name(impl i) {
  switch (i) {
    case impl::attnx: return "attnx";
    case impl::attnx_2t: return "attnx_2t";
    case impl::attnx_avx2: return "attnx_avx2";
    case impl::attnx_axpy: return "attnx_axpy";
    case impl::openblas: return "openblas";
    case impl::eigen: return "eigen";
  }
  return "?";
}
const char* kind_name(kind k) { return k == kind::projection ? "projection" : k == kind::scores ? "scores" : "bias"; }

template <class T>
void fill(T* p, std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<T> nd;
  for (std::size_t i = 0; i < n; ++i) p[i] = nd(g);
}

template <class T>
void blas_gemm(bool trans_b, std::size_t m, std::size_t n, std::size_t k, const T* a, const T* b, T* c) {
  const auto M = int(m), N = int(n), K = int(k);
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  const int ldb = trans_b ? K : N;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, M, N, K, 1.0f, a, K, b, ldb, 0.0f, c, N);
  else
    cblas_dgemm(CblasRowMajor, CblasNoTrans, tb, M, N, K, 1.0, a, K, b, ldb, 0.0, c, N);
}

// One product: C (M x N) = A (M x K) * B, B = W (K x N) or K^T (rows of K: N x K). Shapes are template
// arguments (attnx's shapes are compile-time).
template <class T, kind Kind, std::size_t M, std::size_t K, std::size_t N>
void BM_product(benchmark::State& state, impl which) {
  constexpr bool trans = Kind == kind::scores;
  attnx::tensor<T, M, K> A(attnx::uninitialized);
  attnx::tensor<T, (trans ? N : K), (trans ? K : N)> B(attnx::uninitialized);
  attnx::tensor<T, N> bias(attnx::uninitialized);
  attnx::tensor<T, M, N> C(attnx::uninitialized);
  fill(A.data(), A.size, 1);
  fill(B.data(), B.size, 2);
  fill(bias.data(), bias.size, 3);

  if (which == impl::attnx_avx2 && !attnx::simd::cpu_supports(attnx::simd::isa::avx2)) {
    state.SkipWithError("no AVX2 on this CPU");
    return;
  }
  attnx::context ctx;
  ctx.set_blocked_gemm(which != impl::attnx_axpy).set_threads(which == impl::attnx_2t ? 2 : 1);
  if (which == impl::attnx_avx2) ctx.set_isa(attnx::simd::isa::avx2);
  const attnx::context_scope use(ctx);
  openblas_set_num_threads(1);
#if ATTNX_BENCH_EIGEN
  using mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const mat> eA(A.data(), Eigen::Index(M), Eigen::Index(K));
  const Eigen::Map<const mat> eB(B.data(), Eigen::Index(trans ? N : K), Eigen::Index(trans ? K : N));
  const Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>> eb(bias.data(), Eigen::Index(N));
  Eigen::Map<mat> eC(C.data(), Eigen::Index(M), Eigen::Index(N));
#else
  if (which == impl::eigen) {
    state.SkipWithError("built without Eigen");
    return;
  }
#endif

  for (auto _ : state) {
    switch (which) {
      case impl::attnx:
      case impl::attnx_2t:
      case impl::attnx_avx2:
      case impl::attnx_axpy:
        if constexpr (Kind == kind::scores) C = A * attnx::transpose(B);
        else if constexpr (Kind == kind::bias) C = A * B + bias;
        else C = A * B;
        break;
      case impl::openblas:
        if constexpr (Kind == kind::bias) {  // C = bias, then C += A B
          for (std::size_t i = 0; i < M; ++i)
            for (std::size_t j = 0; j < N; ++j) C.data()[i * N + j] = bias.data()[j];
          if constexpr (std::is_same_v<T, float>)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(M), int(N), int(K), 1.0f, A.data(), int(K), B.data(),
                        int(N), 1.0f, C.data(), int(N));
          else
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(M), int(N), int(K), 1.0, A.data(), int(K), B.data(),
                        int(N), 1.0, C.data(), int(N));
        } else {
          blas_gemm<T>(trans, M, N, K, A.data(), B.data(), C.data());
        }
        break;
      case impl::eigen:
#if ATTNX_BENCH_EIGEN
        if constexpr (Kind == kind::scores) eC.noalias() = eA * eB.transpose();
        else if constexpr (Kind == kind::bias) {
          eC.rowwise() = eb;
          eC.noalias() += eA * eB;
        } else eC.noalias() = eA * eB;
#endif
        break;
    }
    benchmark::DoNotOptimize(C.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] = benchmark::Counter(2.0 * double(M) * double(K) * double(N), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["M"] = double(M);
  state.counters["K"] = double(K);
  state.counters["N"] = double(N);
  state.counters["threads"] = which == impl::attnx_2t ? 2 : 1;
  if (which == impl::openblas) state.SetLabel(openblas_get_corename());
  if (which == impl::attnx || which == impl::attnx_2t) state.SetLabel(std::string(attnx::simd::name(ctx.isa())));
}

template <class T, kind Kind, std::size_t M, std::size_t K, std::size_t N>
void add() {
  for (impl i : {impl::attnx, impl::attnx_2t, impl::attnx_avx2, impl::attnx_axpy, impl::openblas, impl::eigen}) {
    const std::string name = std::string("BM_gemm/") + kind_name(Kind) + "/impl:" + impl_name(i) + "/T:" +
                             (sizeof(T) == 4 ? "float" : "double") + "/M:" + std::to_string(M) + "/K:" + std::to_string(K) +
                             "/N:" + std::to_string(N);
    auto* b = benchmark::RegisterBenchmark(name.c_str(), [i](benchmark::State& s) { BM_product<T, Kind, M, K, N>(s, i); });
    b->Unit(benchmark::kMillisecond);
    if (i == impl::attnx_2t) b->UseRealTime();
  }
}

const int registered = [] {
  add<float, kind::projection, 128, 512, 512>();
  add<float, kind::projection, 1024, 512, 512>();
  add<float, kind::projection, 4096, 512, 512>();
  add<float, kind::scores, 128, 64, 128>();
  add<float, kind::scores, 1024, 64, 1024>();
  add<float, kind::scores, 4096, 64, 4096>();
  add<float, kind::bias, 1024, 512, 512>();
  add<double, kind::projection, 1024, 512, 512>();
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
