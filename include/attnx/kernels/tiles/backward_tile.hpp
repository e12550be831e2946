// attnx fused attention backward: the tile algorithm, written once against simd::vec<T, isa_tag> (a fragment:
// kernels/impl/backward.hpp includes it once per instruction set, inside namespace attnx::kernels::detail::<isa>,
// after the forward's tiles, whose exp2 it shares).
//
// Every product of the backward is one register-tile GEMM form, C (+)= A B with A read one broadcast element at a
// time (any strides) and B and C row-major in vectors:
//   S^T  = K Q^T        (keys x queries: A = K rows, B = Q^T packed)    P = 2^(S c - lse log2 e), masked to 0
//   dP^T = V dO^T       (A = V rows, B = dO^T packed)                  dS = s' P o (dP - D)
// (Outside the fast path, the score program runs on the tile of dots first, element by element, as the forward's
// does; a score that a step replaced gets dS = 0: its dP is set to D.)
//   dV  += P^T dO       (A = P^T tile, B = dO rows packed)
//   dK  += dS^T Q       (A = dS^T tile, B = Q rows packed)
//   dQ  += dS K         (A = dS tile read transposed, B = K rows packed)
// The score tiles are key-major with the queries in the lanes, so that the row statistics (lse, D, limits) are
// whole vectors and no product needs a transpose.

template <class T>
struct backward_kernel {
  using V = simd::vec<T, isa_tag>;
  using R = typename V::reg;
  using shape = backward_shape<T, isa_tag>;
  static constexpr std::size_t W = V::W;
  static constexpr std::size_t MR = shape::MR, NR = shape::NR, BQ = shape::BQ, BK = shape::BK;
  static_assert(BQ % (NR * W) == 0, "backward_shape: BQ must be a multiple of NR vectors");

  // Per-thread scratch in elements of T: K and V rows, the two score tiles, dK and dV of one key block.
  static constexpr std::size_t scratch_elems(std::size_t dkp, std::size_t dvp) { return BK * (2 * dkp + 2 * dvp + 2 * BQ); }

  // C[m][n] (+)= sum_t a[m am + t at] b[t ldb + n] for M rows and N vectors of columns.
  template <std::size_t M, std::size_t N, bool Acc>
  static void micro(const T* a, std::ptrdiff_t am, std::ptrdiff_t at, const T* b, std::size_t ldb, std::size_t kt, T* c,
                    std::size_t ldc) {
    R acc[M][N];
    ATTNX_UNROLL
    for (std::size_t m = 0; m < M; ++m) {
      ATTNX_UNROLL
      for (std::size_t n = 0; n < N; ++n) acc[m][n] = Acc ? V::load(c + m * ldc + n * W) : V::zero();
    }
    for (std::size_t t = 0; t < kt; ++t) {
      R bv[N];
      ATTNX_UNROLL
      for (std::size_t n = 0; n < N; ++n) bv[n] = V::load(b + t * ldb + n * W);
      const T* ar = a + static_cast<std::ptrdiff_t>(t) * at;
      ATTNX_UNROLL
      for (std::size_t m = 0; m < M; ++m) {
        const R x = V::set1(ar[static_cast<std::ptrdiff_t>(m) * am]);
        ATTNX_UNROLL
        for (std::size_t n = 0; n < N; ++n) acc[m][n] = V::fmadd(x, bv[n], acc[m][n]);
      }
    }
    ATTNX_UNROLL
    for (std::size_t m = 0; m < M; ++m) {
      ATTNX_UNROLL
      for (std::size_t n = 0; n < N; ++n) V::store(c + m * ldc + n * W, acc[m][n]);
    }
  }
  using micro_fn = void (*)(const T*, std::ptrdiff_t, std::ptrdiff_t, const T*, std::size_t, std::size_t, T*, std::size_t);
  template <bool Acc, std::size_t... I>
  static constexpr std::array<micro_fn, MR * NR> edge_table(std::index_sequence<I...>) {
    return {&micro<I / NR + 1, I % NR + 1, Acc>...};
  }
  // The product over M rows and NV vectors of columns, in MR x NR register tiles (the edges through a table).
  template <bool Acc>
  static void gemm(std::size_t M, std::size_t NV, std::size_t kt, const T* a, std::ptrdiff_t am, std::ptrdiff_t at,
                   const T* b, std::size_t ldb, T* c, std::size_t ldc) {
    static constexpr auto edges = edge_table<Acc>(std::make_index_sequence<MR * NR>{});
    for (std::size_t n0 = 0; n0 < NV; n0 += NR) {
      const std::size_t nn = alg::min(NR, NV - n0);
      for (std::size_t m0 = 0; m0 < M; m0 += MR) {
        const std::size_t mm = alg::min(MR, M - m0);
        const T* am0 = a + static_cast<std::ptrdiff_t>(m0) * am;
        T* c0 = c + m0 * ldc + n0 * W;
        if (mm == MR && nn == NR) micro<MR, NR, Acc>(am0, am, at, b + n0 * W, ldb, kt, c0, ldc);
        else edges[(mm - 1) * NR + nn - 1](am0, am, at, b + n0 * W, ldb, kt, c0, ldc);
      }
    }
  }

  // The score program on a tile of dots (keys x queries), in the expression's order: st becomes the scores; where a
  // step replaced a score (a limit or a boolean mask), dP becomes D, so that dS = P (dP - D) is 0 there.
  [[gnu::noinline]] static void program(const backward_job<T>& J, T* st, T* dpt, const T* dd, std::size_t rows,
                                        std::size_t b, std::size_t h, std::size_t i0, std::size_t j0, std::size_t nb) {
    const attention_problem<T>& p = *J.p;
    const score_plan<T>& plan = *J.plan;
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t i = i0 + r;
      for (std::size_t k = 0; k < nb; ++k) {
        const std::size_t j = j0 + k;
        T x = st[k * BQ + r];
        bool replaced = false;
        for (std::size_t si = 0; si < plan.n; ++si) {
          const score_step<T>& s = plan.steps[si];
          if (s.kind == step_kind::multiply) {
            x *= s.value;
          } else if (s.kind == step_kind::divide) {
            x /= s.value;
          } else if (s.kind == step_kind::additive_mask) {
            x += s.bias.at(b, h, i, j);
          } else if (s.kind == step_kind::linear_bias) {
            x += linear_bias_at(s, p, b, h, i, j);
          } else if (is_limit(s.kind) ? j >= step_limit(s, p, b, i) || j < step_start(s, p, b, i) : !s.mask.at(b, h, i, j)) {
            x = s.value;
            replaced = true;
          }
        }
        st[k * BQ + r] = x;
        if (replaced) dpt[k * BQ + r] = dd[r];
      }
    }
  }

  // One tile: query block blk (rows valid rows from row i0 of (b, h)) against the nb keys at j0 packed in kp, vp.
  // dqa: the block's dQ part, written (first) or added to.
  static void tile(const backward_job<T>& J, const T* blk, std::size_t rows, bool limited, std::size_t b, std::size_t h,
                   std::size_t i0, std::size_t j0, std::size_t nb, const T* kp, const T* vp, T* st, T* dpt, T* dka,
                   T* dva, T* dqa, bool first) {
    const attention_problem<T>& p = *J.p;
    const std::size_t dkp = J.dkp, dvp = J.dvp;
    const T* qt = blk;
    const T* qp = qt + p.dk * BQ;
    const T* dot = qp + BQ * dkp;
    const T* dop = dot + p.dv * BQ;
    const T* nlse = dop + BQ * dvp;
    const T* dd = nlse + BQ;
    const T* lim = dd + BQ;
    gemm<false>(nb, BQ / W, p.dk, kp, static_cast<std::ptrdiff_t>(dkp), 1, qt, BQ, st, BQ);
    gemm<false>(nb, BQ / W, p.dv, vp, static_cast<std::ptrdiff_t>(dvp), 1, dot, BQ, dpt, BQ);
    if (J.general) program(J, st, dpt, dd, rows, b, h, i0, j0, nb);
    const R c = V::set1(J.expo * log2e<T>), sc = V::set1(J.scale);
    for (std::size_t v = 0; v < BQ / W; ++v) {
      const R nl = V::load(nlse + v * W), d = V::load(dd + v * W), l = V::load(lim + v * W);
      for (std::size_t k = 0; k < nb; ++k) {
        T* sx = st + k * BQ + v * W;
        T* dx = dpt + k * BQ + v * W;
        R pr = kernel<T>::exp2(V::fmadd(V::load(sx), c, nl));
        R ds = V::mul(V::mul(pr, V::sub(V::load(dx), d)), sc);
        if (limited) {  // (a blocked key's dS is 0 whatever dP is)
          const T j = static_cast<T>(j0 + k);
          pr = V::below_or(pr, l, j, V::zero());
          ds = V::below_or(ds, l, j, V::zero());
        }
        V::store(sx, pr);
        V::store(dx, ds);
      }
    }
    if (J.masks && !J.general)
      for (std::size_t si = 0; si < J.plan->n; ++si) {
        const score_step<T>& s = J.plan->steps[si];
        if (s.kind != step_kind::boolean_mask) continue;
        for (std::size_t k = 0; k < nb; ++k)
          for (std::size_t r = 0; r < rows; ++r)
            if (!s.mask.at(b, h, i0 + r, j0 + k)) st[k * BQ + r] = dpt[k * BQ + r] = T(0);
      }
    gemm<true>(nb, dvp / W, rows, st, BQ, 1, dop, dvp, dva, dvp);
    gemm<true>(nb, dkp / W, rows, dpt, BQ, 1, qp, dkp, dka, dkp);
    if (first) gemm<false>(rows, dkp / W, nb, dpt, 1, BQ, kp, dkp, dqa, dkp);
    else gemm<true>(rows, dkp / W, nb, dpt, 1, BQ, kp, dkp, dqa, dkp);
  }

  // Work item it: the keys of its chunk, against every query row of its K/V head's query heads.
  static void run_item(const backward_job<T>& J, const backward_item& it, T* scratch) {
    const attention_problem<T>& p = *J.p;
    const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
    const std::size_t dkp = J.dkp, dvp = J.dvp;
    T* kp = scratch;
    T* vp = kp + BK * dkp;
    T* dka = vp + BK * dvp;
    T* dva = dka + BK * dkp;
    T* st = dva + BK * dvp;
    T* dpt = st + BK * BQ;
    T* dqa = J.dq_item(it.index);
    unsigned char* written = J.written(it.index);
    alg::fill_n(written, J.group * J.nqb, static_cast<unsigned char>(0));
    const T* k = p.k.matrix(it.b, it.g);
    const T* v = p.v.matrix(it.b, it.g);
    for (std::size_t j0 = it.j_begin; j0 < it.j_end; j0 += BK) {
      const std::size_t nb = alg::min(BK, it.j_end - j0);
      for (std::size_t j = 0; j < nb; ++j) {
        const T* kr = k + sz(j0 + j) * p.k.row;
        const T* vr = v + sz(j0 + j) * p.v.row;
        alg::copy_n(kr, p.dk, kp + j * dkp);
        alg::fill_n(kp + j * dkp + p.dk, dkp - p.dk, T(0));
        alg::copy_n(vr, p.dv, vp + j * dvp);
        alg::fill_n(vp + j * dvp + p.dv, dvp - p.dv, T(0));
      }
      alg::fill_n(dka, nb * dkp, T(0));
      alg::fill_n(dva, nb * dvp, T(0));
      for (std::size_t hh = 0; hh < J.group; ++hh) {
        const std::size_t h = it.g * J.group + hh;
        for (std::size_t qb = 0; qb < J.nqb; ++qb) {
          const std::size_t* range = J.lim_range + (it.b * J.nqb + qb) * 3;
          if (range[1] <= j0 || range[2] >= j0 + nb) continue;  // every row's keys end before this block or start after it
          const std::size_t i0 = qb * BQ, nbt = alg::min(nb, range[1] - j0);  // (no row reads the keys past nbt)
          unsigned char& w = written[hh * J.nqb + qb];
          tile(J, J.block(it.b, h, qb), alg::min(BQ, p.lq - i0), range[0] < j0 + nbt, it.b, h, i0, j0, nbt, kp, vp, st,
               dpt, dka, dva, dqa + (hh * J.lqp + i0) * dkp, w == 0);
          w = 1;
        }
      }
      T* dko = J.dk_kv(it.b, it.g) + j0 * dkp;
      T* dvo = J.dv_kv(it.b, it.g) + j0 * dvp;
      alg::copy_n(dka, nb * dkp, dko);
      alg::copy_n(dva, nb * dvp, dvo);
    }
  }
};
