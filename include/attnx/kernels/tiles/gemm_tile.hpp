// attnx GEMM: the register-blocked micro-kernel and the loops around it, written once against the
// vector type and blocking of gemm_shape<T, isa_tag> (gemm.hpp: simd::vec for AVX2 and AVX-512,
// simd::portable_vec for the portable path).
//
// Included by gemm.hpp once per instruction set, inside namespace attnx::kernels::detail::<isa> (which
// defines isa_tag) and that instruction set's target region. No include guard on purpose.
//
// Layouts:
//   A:        row-major, row stride lda, round_up(m, MR) rows (the caller pads the last micro-panel);
//             not packed: the rows of a block are A's own memory, or one contiguous copy of them.
//   B packed: NR-column panels of all k rows: b[q*NR*k + kk*NR + j] (row kk, column q*NR + j);
//             columns past n are zero; 64-byte aligned.
//   C:        row-major, row stride ldc (a multiple of NR), at least round_up(m, MR) rows; 64-byte aligned.

template <class T>
struct gemm {
  using shape = gemm_shape<T, isa_tag>;
  using V = typename shape::vec;
  using R = typename V::reg;
  static constexpr std::size_t W = V::W;
  static constexpr std::size_t MR = shape::MR, NV = shape::NV, NR = NV * W;
  static constexpr std::size_t KC = shape::KC, MB = shape::MB;

  // C[MR x NR] (row stride ldc) = (accumulate ? C : 0) + sum over kk < kc of a[i*lda + kk] * b[kk*NR + j],
  // summed in the order kk = 0, 1, ..., one fused multiply-add per step.
  // NVt < NV: only the first NVt vectors of the tile (the last panel of a narrow N).
  template <std::size_t NVt = NV>
  static void micro(std::size_t kc, const T* a, std::size_t lda, const T* b, T* c, std::size_t ldc, bool accumulate) {
    R acc[MR][NVt];
    if (accumulate) {
      ATTNX_UNROLL
      for (std::size_t i = 0; i < MR; ++i) {
        ATTNX_UNROLL
        for (std::size_t v = 0; v < NVt; ++v) acc[i][v] = V::load(c + i * ldc + v * W);
      }
    } else {
      ATTNX_UNROLL
      for (std::size_t i = 0; i < MR; ++i) {
        ATTNX_UNROLL
        for (std::size_t v = 0; v < NVt; ++v) acc[i][v] = V::zero();
      }
    }
    for (std::size_t kk = 0; kk < kc; ++kk, ++a, b += NR) {
      R bv[NVt];
      ATTNX_UNROLL
      for (std::size_t v = 0; v < NVt; ++v) bv[v] = V::load(b + v * W);
      ATTNX_UNROLL
      for (std::size_t i = 0; i < MR; ++i) {
        const R ai = V::set1(a[i * lda]);
        ATTNX_UNROLL
        for (std::size_t v = 0; v < NVt; ++v) acc[i][v] = V::fmadd(ai, bv[v], acc[i][v]);
      }
    }
    ATTNX_UNROLL
    for (std::size_t i = 0; i < MR; ++i) {
      ATTNX_UNROLL
      for (std::size_t v = 0; v < NVt; ++v) V::store(c + i * ldc + v * W, acc[i][v]);
    }
  }

  // C[m x n] = A[m x k] * B[k x n] (layouts above); C is written for round_up(m, MR) rows and
  // round_up(n, W) columns (the extra ones are never meant to be read): the last panel, when it needs
  // fewer than NV vectors, goes through a micro-kernel of that width.
  // Loop order (BLIS): K in chunks of kc_max, then B panels (one stays in L1/L2 while the MR-row slices
  // of A stream past it), then MR-row slices of A. Each element is summed in the order kk = 0, 1, ...,
  // k - 1 (later chunks continue from the stored partial sum).
  static void block(const T* a, std::size_t lda, const T* bp, std::size_t m, std::size_t k, std::size_t n, T* c,
                    std::size_t ldc, std::size_t kc_max) {
    if (k == 0) {
      for (std::size_t i = 0; i < (m + MR - 1) / MR * MR; ++i)
        for (std::size_t j = 0; j < ldc; ++j) c[i * ldc + j] = T(0);
      return;
    }
    if (kc_max == 0) kc_max = k;
    for (std::size_t pc = 0; pc < k; pc += kc_max) {
      const std::size_t kc = alg::min(kc_max, k - pc);
      for (std::size_t jr = 0; jr < n; jr += NR) {
        const T* b = bp + jr * k + pc * NR;
        const std::size_t nv = alg::min(NV, (n - jr + W - 1) / W);  // vectors holding columns < n
        if (nv == NV) {
          for (std::size_t ir = 0; ir < m; ir += MR) micro(kc, a + ir * lda + pc, lda, b, c + ir * ldc + jr, ldc, pc > 0);
        } else {
          narrow<1>(nv, kc, a + pc, lda, b, c + jr, ldc, m, pc > 0);
        }
      }
    }
  }

  // Rows kk0 .. kk1-1 of B (k x n, row stride ldb) into out, panels of NR columns: out[q*NR*k + kk*NR + j] =
  // B[kk][q*NR + j], zero past column n. (Here, not in plain code, so that it runs at the path's width
  // whatever the translation unit's flags.)
  static void pack(const T* b, std::size_t k, std::size_t n, std::size_t ldb, std::size_t kk0, std::size_t kk1, T* out) {
    // Rows kk0 .. kk1-1 of B into every panel: B is read row by row, in order (the hardware prefetcher
    // follows it; a panel at a time reads 2-4 KB apart and was latency-bound), and the panels are written.
    const std::size_t full = n / NR, tail = n - full * NR;
    for (std::size_t kk = kk0; kk < kk1; ++kk) {
      const T* src = b + kk * ldb;
      T* p = out + kk * NR;
      for (std::size_t q = 0; q < full; ++q, src += NR, p += NR * k) std::memcpy(p, src, NR * sizeof(T));
      if (tail) {
        for (std::size_t j = 0; j < tail; ++j) p[j] = src[j];
        for (std::size_t j = tail; j < NR; ++j) p[j] = T(0);
      }
    }
  }

  // Rows of a computed block out to their destination: dst[r][j] = c[r][j] (+ bias[j]).
  static void store(const T* c, std::size_t ldc, std::size_t m, std::size_t n, T* dst, std::size_t ldd, const T* bias) {
    for (std::size_t r = 0; r < m; ++r) {
      const T* cr = c + r * ldc;
      T* dr = dst + r * ldd;
      if (bias) {
        for (std::size_t j = 0; j < n; ++j) dr[j] = cr[j] + bias[j];
      } else {
        for (std::size_t j = 0; j < n; ++j) dr[j] = cr[j];
      }
    }
  }

  // Few rows (a decoding step's projections): o[r][c0, c1) = sum over kk of a[r][kk] b[kk][c0, c1) (+ bias) for r < m,
  // B (k x n, row stride n) read row by row, in order, once per group of up to 4 rows: each element is 0 plus the
  // terms in the order kk = 0, 1, ..., a rounded multiply and a rounded add each (the row evaluator's axpy, bit for
  // bit). Four rows of B at a time go through each vector of the output (four streams for the prefetcher, and a
  // quarter of the output's loads and stores).
  static void rows(const T* a, std::size_t lda, const T* b, std::size_t k, std::size_t n, std::size_t m, T* o,
                   std::size_t ldo, const T* bias, std::size_t c0, std::size_t c1) {
    for (std::size_t r0 = 0; r0 < m; r0 += 4) {
      const std::size_t rr = alg::min<std::size_t>(4, m - r0);
      const T* ar = a + r0 * lda;
      T* orow = o + r0 * ldo;
      if (rr == 4) rows_group<4>(ar, lda, b, k, n, orow, ldo, c0, c1);
      else if (rr == 3) rows_group<3>(ar, lda, b, k, n, orow, ldo, c0, c1);
      else if (rr == 2) rows_group<2>(ar, lda, b, k, n, orow, ldo, c0, c1);
      else rows_group<1>(ar, lda, b, k, n, orow, ldo, c0, c1);
      if (bias)
        for (std::size_t r = 0; r < rr; ++r)
          for (std::size_t c = c0; c < c1; ++c) orow[r * ldo + c] += bias[c];
    }
  }
  template <std::size_t RR>
  static void rows_group(const T* a, std::size_t lda, const T* b, std::size_t k, std::size_t n, T* o, std::size_t ldo,
                         std::size_t c0, std::size_t c1) {
    using VU = typename shape::vec;
    for (std::size_t r = 0; r < RR; ++r)
      for (std::size_t c = c0; c < c1; ++c) o[r * ldo + c] = T(0);
    std::size_t kk = 0;
    for (; kk + 4 <= k; kk += 4) rows_step<RR, 4, VU>(a + kk, lda, b + kk * n, n, o, ldo, c0, c1);
    for (; kk < k; ++kk) rows_step<RR, 1, VU>(a + kk, lda, b + kk * n, n, o, ldo, c0, c1);
  }
  // o[r][c] += a[r][u] b[u][c] for u < KU in that order, c in [c0, c1).
  template <std::size_t RR, std::size_t KU, class VU>
  static void rows_step(const T* a, std::size_t lda, const T* b, std::size_t n, T* o, std::size_t ldo, std::size_t c0,
                        std::size_t c1) {
    typename VU::reg av[RR][KU];
    T as[RR][KU];
    ATTNX_UNROLL
    for (std::size_t r = 0; r < RR; ++r) {
      ATTNX_UNROLL
      for (std::size_t u = 0; u < KU; ++u) as[r][u] = a[r * lda + u], av[r][u] = VU::set1(as[r][u]);
    }
    constexpr std::size_t WU = VU::W;
    std::size_t c = c0;
    for (; c + WU <= c1; c += WU) {
      typename VU::reg bv[KU];
      ATTNX_UNROLL
      for (std::size_t u = 0; u < KU; ++u) bv[u] = VU::loadu(b + u * n + c);
      ATTNX_UNROLL
      for (std::size_t r = 0; r < RR; ++r) {
        typename VU::reg x = VU::loadu(o + r * ldo + c);
        ATTNX_UNROLL
        for (std::size_t u = 0; u < KU; ++u) x = VU::add(x, VU::mul(av[r][u], bv[u]));
        VU::storeu(o + r * ldo + c, x);
      }
    }
    for (; c < c1; ++c)
      for (std::size_t r = 0; r < RR; ++r) {
        T x = o[r * ldo + c];
        for (std::size_t u = 0; u < KU; ++u) x += as[r][u] * b[u * n + c];
        o[r * ldo + c] = x;
      }
  }

  // The last panel with nv < NV vectors of columns below n: the micro-kernel of that width.
  template <std::size_t NVt>
  static void narrow(std::size_t nv, std::size_t kc, const T* a, std::size_t lda, const T* b, T* c, std::size_t ldc,
                     std::size_t m, bool accumulate) {
    if constexpr (NVt < NV) {
      if (nv != NVt) return narrow<NVt + 1>(nv, kc, a, lda, b, c, ldc, m, accumulate);
      for (std::size_t ir = 0; ir < m; ir += MR) micro<NVt>(kc, a + ir * lda, lda, b, c + ir * ldc, ldc, accumulate);
    }
  }
};
