// attnx decode kernel: the loops for any shape (a fragment of tiles/attention_tiles.hpp, once per instruction set).
//   stream: one row, key by key, in ggml's loop order (each key's K row and V row read back to back), the online
//           softmax per key; any d_k, d_v. The portable path, and the vector paths where one_row does not apply
//           (AVX2, or head sizes that are not 4 or 8 vectors).
//   blocks: several rows, blocks of BK keys: the dots of RB rows x NK keys share each K load, the score program and
//           the softmax run per row over the block, the values RB rows at a time share each V load; the next block's
//           rows are prefetched into L2 a few at a time from every loop over this one (struct ahead).
// Both run one chunk at a time (decode_kernel::run hands over the state between chunks).

template <class T, class KV>
struct decode_general : decode_ops<T, KV> {
  using ops = decode_ops<T, KV>;
  using typename ops::R, typename ops::V, typename ops::item;
  using ops::W, ops::sz, ops::inf;
  static constexpr std::size_t BK = 64;  // keys per block (a multiple of W)
  // Rows per register block: the K and V vectors loaded once serve RB rows (a last block of one or two rows takes a
  // block of 2); four rows, not two, halve what the loops read from L2. With 16 vector registers the dots take 2 keys
  // at a time and the values 2 vectors (4 x 2 accumulators); with 32, 4 and 4.
  static constexpr std::size_t RB = 4;
  static constexpr std::size_t NK = sizeof(R) >= 64 ? 4 : 2;  // keys per dots call
  static constexpr std::size_t NV = sizeof(R) >= 64 ? 4 : 2;  // vectors per values pass
  static constexpr std::size_t prefetch_keys = 8;  // stream: the rows this many keys ahead (further did worse)
  // The item's rows padded to whole register blocks (the padding rows have q = 0 and weigh nothing).
  static std::size_t padded(std::size_t rows) { return (rows + RB - 1) / RB * RB; }

  // ---- one row, key by key ------------------------------------------------------------------------------
  // Row r (query i of head h) over keys [j0, j1): q at qs, its output (in L1) at os, its maximum m and sum l.
  static void stream(const item& it, std::size_t r, std::size_t h, std::size_t i, std::size_t j0, std::size_t j1,
                     const T* qs, T* os, T& m, T& l) {
    const attention_problem<T>& p = it.p;
    const std::size_t dkv = p.dk / W * W, dvv = p.dv / W * W;
    const bool plain = it.plan.n == it.plan.first;  // nothing after the folded factor
    const std::size_t kb = p.dk * sizeof(KV), vb = p.dv * sizeof(KV);
    for (std::size_t j = j0; j < j1; ++j) {
      const KV* kj = it.k + sz(j) * it.ks;
      const KV* vj = it.v + sz(j) * it.vs;
      if (j + prefetch_keys < j1) ops::prefetch_key(kj, it.ks, vj, it.vs, prefetch_keys, kb, vb);
      T x = V::reduce_add(ops::template dot<0>(qs, kj, dkv));
      for (std::size_t c = dkv; c < p.dk; ++c) x += qs[c] * ops::kv_scalar(kj[c]);
      x *= it.plan.folded;
      if (!plain) x = ops::program(it, r, h, i, j, x);
      if (x > m) {  // a new maximum (or the first visible key): rescale what the row has so far
        const T a = weight_of(m, x);
        l *= a;
        const R av = V::set1(a);
        for (std::size_t c = 0; c < dvv; c += W) V::store(os + c, V::mul(V::load(os + c), av));
        for (std::size_t c = dvv; c < p.dv; ++c) os[c] *= a;
        m = x;
      }
      const T w = weight_of(x, m);
      l += w;
      const R wv = V::set1(w);
      for (std::size_t c = 0; c < dvv; c += W) V::store(os + c, V::fmadd(wv, ops::load_kv(vj + c), V::load(os + c)));
      for (std::size_t c = dvv; c < p.dv; ++c) os[c] += w * ops::kv_scalar(vj[c]);
    }
  }

  // ---- several rows, blocks of keys ---------------------------------------------------------------------
  // The next block's K and V rows (K first: the dots read it first), brought into L2 a few rows at a time from every
  // loop over the current block, in proportion to the arithmetic done: a burst stalls the core, nothing while the
  // values are summed leaves memory idle, and into L1 they would evict the block being read.
  struct ahead {
    const char* k = nullptr;
    const char* v = nullptr;
    std::ptrdiff_t ks = 0, vs = 0;             // row strides in bytes
    std::size_t kb = 0, vb = 0, n = 0;         // bytes per row, rows (of K, then as many of V)
    std::size_t next = 0, owed = 0, rate = 0;  // next: row 0 .. 2n - 1; owed, rate: rows x 2^16 (per unit)
    void start(const KV* kn, std::ptrdiff_t ksr, const KV* vn, std::ptrdiff_t vsr, std::size_t kbytes, std::size_t vbytes,
               std::size_t rows, std::size_t units) {
      k = reinterpret_cast<const char*>(kn);
      v = reinterpret_cast<const char*>(vn);
      ks = ksr * static_cast<std::ptrdiff_t>(sizeof(KV));
      vs = vsr * static_cast<std::ptrdiff_t>(sizeof(KV));
      kb = kbytes;
      vb = vbytes;
      n = rows;
      next = owed = 0;
      rate = units ? ((2 * rows) << 16) / units + 1 : 0;
    }
    // units of work done: prefetch the whole rows they pay for.
    void tick(std::size_t units) {
      if (next >= 2 * n) return;
      owed += units * rate;
      for (; owed >= (std::size_t{1} << 16) && next < 2 * n; owed -= std::size_t{1} << 16, ++next) {
        const bool on_v = next >= n;
        const std::ptrdiff_t r = static_cast<std::ptrdiff_t>(on_v ? next - n : next);
        const char* p = on_v ? v + r * vs : k + r * ks;
        const std::size_t bytes = on_v ? vb : kb;
        for (std::size_t x = 0; x < bytes; x += 64) __builtin_prefetch(p + x, 0, 2);
      }
    }
  };

  // out[r os + j] = q_r . k_j for NR rows at q (stride qs, zero-padded to a multiple of W) and NK keys at k.
  template <std::size_t NR, std::size_t NKeys>
  static void dots(const T* q, std::size_t qs, const KV* k, std::ptrdiff_t ks, std::size_t dk, T* out, std::size_t os) {
    R acc[NR][NKeys];
    ATTNX_UNROLL
    for (std::size_t r = 0; r < NR; ++r) {
      ATTNX_UNROLL
      for (std::size_t j = 0; j < NKeys; ++j) acc[r][j] = V::zero();
    }
    const std::size_t dvec = dk / W * W;
    for (std::size_t d = 0; d < dvec; d += W) {
      R kv[NKeys];
      ATTNX_UNROLL
      for (std::size_t j = 0; j < NKeys; ++j) kv[j] = ops::load_kv(k + static_cast<std::ptrdiff_t>(j) * ks + static_cast<std::ptrdiff_t>(d));
      ATTNX_UNROLL
      for (std::size_t r = 0; r < NR; ++r) {
        const R qv = V::load(q + r * qs + d);
        ATTNX_UNROLL
        for (std::size_t j = 0; j < NKeys; ++j) acc[r][j] = V::fmadd(qv, kv[j], acc[r][j]);
      }
    }
    if constexpr (NR * NKeys == W) {
      if (dvec == dk) {  // the NR x NK sums reduced together, lane r NK + j being q_r . k_j
        alignas(64) T lanes[W];
        V::store(lanes, V::reduce_lanes(&acc[0][0]));
        ATTNX_UNROLL
        for (std::size_t r = 0; r < NR; ++r) {
          ATTNX_UNROLL
          for (std::size_t j = 0; j < NKeys; ++j) out[r * os + j] = lanes[r * NKeys + j];
        }
        return;
      }
    }
    ATTNX_UNROLL
    for (std::size_t r = 0; r < NR; ++r) {
      ATTNX_UNROLL
      for (std::size_t j = 0; j < NKeys; ++j) {
        T x = V::reduce_add(acc[r][j]);
        const KV* kj = k + static_cast<std::ptrdiff_t>(j) * ks;
        for (std::size_t d = dvec; d < dk; ++d) x += q[r * qs + d] * ops::kv_scalar(kj[d]);
        out[r * os + j] = x;
      }
    }
  }
  // Keys [0, n) for NR rows: NK keys at a time, then one. A unit of work is 8 vector FMAs.
  template <std::size_t NR>
  static void dots_rows(const T* q, std::size_t qs, const KV* k, std::ptrdiff_t ks, std::size_t dk, std::size_t n, T* out,
                        ahead& pf) {
    std::size_t j = 0;
    const std::size_t units = (NR * NK * ((dk + W - 1) / W) + 7) / 8;
    for (; j + NK <= n; j += NK) {
      pf.tick(units);
      dots<NR, NK>(q, qs, k + static_cast<std::ptrdiff_t>(j) * ks, ks, dk, out + j, BK);
    }
    for (; j < n; ++j) dots<NR, 1>(q, qs, k + static_cast<std::ptrdiff_t>(j) * ks, ks, dk, out + j, BK);
  }
  // o_r[c] = alpha_r o_r[c] + sum_j p_r[j] v_j[c] for NR rows (p stride BK, o stride os) and N W columns.
  template <std::size_t NR, std::size_t N>
  static void pv_rows(const T* p, std::size_t nb, const KV* v, std::ptrdiff_t vs, const T* alpha, T* o, std::size_t os,
                      ahead& pf) {
    R acc[NR][N];
    ATTNX_UNROLL
    for (std::size_t r = 0; r < NR; ++r) {
      const R a = V::set1(alpha[r]);
      ATTNX_UNROLL
      for (std::size_t c = 0; c < N; ++c) acc[r][c] = V::mul(V::load(o + r * os + c * W), a);
    }
    for (std::size_t j = 0; j < nb; ++j) {
      if (j % 8 == 0) pf.tick(NR * N);  // 8 keys of NR x N FMAs
      R vv[N];
      const KV* vj = v + static_cast<std::ptrdiff_t>(j) * vs;
      ATTNX_UNROLL
      for (std::size_t c = 0; c < N; ++c) vv[c] = ops::load_kv(vj + c * W);
      ATTNX_UNROLL
      for (std::size_t r = 0; r < NR; ++r) {
        const R pj = V::set1(p[r * BK + j]);
        ATTNX_UNROLL
        for (std::size_t c = 0; c < N; ++c) acc[r][c] = V::fmadd(pj, vv[c], acc[r][c]);
      }
    }
    ATTNX_UNROLL
    for (std::size_t r = 0; r < NR; ++r) {
      ATTNX_UNROLL
      for (std::size_t c = 0; c < N; ++c) V::store(o + r * os + c * W, acc[r][c]);
    }
  }
  // Columns [0, dvec) of NR rows: NV vectors at a time, then one.
  template <std::size_t NR>
  static void pv_block(const T* p, std::size_t nb, const KV* v, std::ptrdiff_t vs, const T* alpha, T* o, std::size_t os,
                       std::size_t dvec, ahead& pf) {
    std::size_t c = 0;
    for (; c + NV * W <= dvec; c += NV * W) pv_rows<NR, NV>(p, nb, v + c, vs, alpha, o + c, os, pf);
    for (; c < dvec; c += W) pv_rows<NR, 1>(p, nb, v + c, vs, alpha, o + c, os, pf);
  }
  // f(nr) for the row block at r0: RB rows, or RB / 2 for a last block of at most RB / 2 rows.
  template <class F>
  static void by_block(std::size_t rows, std::size_t r0, const F& f) {
    if (rows - r0 > RB / 2)
      f(std::integral_constant<std::size_t, RB>{});
    else
      f(std::integral_constant<std::size_t, RB / 2>{});
  }
  // Row r's scores s of the block at j0 (live of them visible): the program after the folded factor, step by step
  // over the block, then -inf for the keys skipped and the padding to nbp.
  static void block_program(const item& it, std::size_t r, std::size_t j0, std::size_t live, std::size_t nbp, T* s) {
    const score_plan<T>& plan = it.plan;
    const std::size_t h = it.head(r), i = it.query(r);
    std::size_t j = 0;
    if (plan.first == 1)
      for (j = 0; j < live; ++j) s[j] *= plan.folded;
    std::size_t li = 0;
    for (std::size_t si = 0; si < plan.n; ++si) {
      const score_step<T>& st = plan.steps[si];
      if (is_limit(st.kind)) {
        const std::size_t lim = it.limits[li * it.rows + r], from = it.start(li++, r);
        if (si < plan.first) continue;
        for (j = lim > j0 ? lim - j0 : 0; j < live; ++j) s[j] = st.value;
        for (j = 0; j < alg::min(live, from > j0 ? from - j0 : 0); ++j) s[j] = st.value;
        continue;
      }
      if (si < plan.first) continue;
      switch (st.kind) {
        case step_kind::multiply:
          for (j = 0; j < live; ++j) s[j] *= st.value;
          break;
        case step_kind::divide:
          for (j = 0; j < live; ++j) s[j] /= st.value;
          break;
        case step_kind::boolean_mask:
          for (j = 0; j < live; ++j)
            if (!st.mask.at(it.b, h, i, j0 + j)) s[j] = st.value;
          break;
        case step_kind::additive_mask:
          for (j = 0; j < live; ++j) s[j] += st.bias.at(it.b, h, i, j0 + j);
          break;
        case step_kind::linear_bias:
          for (j = 0; j < live; ++j) s[j] += linear_bias_at(st, it.p, it.b, h, i, j0 + j);
          break;
        case step_kind::tanh:  // (s holds nbp >= live scores, a whole number of vectors)
          for (j = 0; j < live; j += W) V::storeu(s + j, kernel<T>::tanh(V::loadu(s + j)));
          break;
        default: break;
      }
    }
    for (j = live; j < nbp; ++j) s[j] = -inf;  // skipped keys (the program ends them at -inf) and the padding
  }
  // Keys [j0, kend) of the item's rows in blocks of BK (rs: the rows' state).
  static void blocks(const item& it, const decode_rows<T>& rs, std::size_t k0, std::size_t kend) {
    const attention_problem<T>& p = it.p;
    const std::size_t rows = it.rows, dkp = rs.dkp, dvp = rs.dvp, dvec = p.dv / W * W;
    const auto live_of = [&](std::size_t r, std::size_t j0, std::size_t nb) {
      return it.ends[r] > j0 ? alg::min(nb, it.ends[r] - j0) : std::size_t{0};
    };
    const auto most_live = [&](std::size_t r0, std::size_t j0, std::size_t nb) {
      std::size_t n = 0;
      for (std::size_t r = r0; r < alg::min(rows, r0 + RB); ++r) n = alg::max(n, live_of(r, j0, nb));
      return n;
    };
    ahead pf;
    for (std::size_t j0 = k0; j0 < kend; j0 += BK) {
      const std::size_t nb = alg::min(BK, kend - j0), nbp = ops::round_up(nb);
      const KV* kb = it.k + sz(j0) * it.ks;
      const KV* vb = it.v + sz(j0) * it.vs;
      {  // the next block's rows, spread over this block's work (a unit: 8 vector FMAs of the dots or values)
        const std::size_t nn = j0 + BK < kend ? alg::min(BK, kend - j0 - BK) : 0;
        const std::size_t units = (rows * nb * ((p.dk + W - 1) / W + (p.dv + W - 1) / W) + 7) / 8;
        pf.start(nn ? kb + sz(BK) * it.ks : kb, it.ks, nn ? vb + sz(BK) * it.vs : vb, it.vs, p.dk * sizeof(KV),
                 p.dv * sizeof(KV), nn, units);
      }
      // Dots, RB rows at a time (keys past a row's end are computed with the block's and dropped by block_program;
      // the padding rows' dots are 0 and weigh nothing).
      for (std::size_t r0 = 0; r0 < rows; r0 += RB) {
        const std::size_t n = most_live(r0, j0, nb);
        by_block(rows, r0, [&](auto nr) { dots_rows<decltype(nr)::value>(rs.qs + r0 * dkp, dkp, kb, it.ks, p.dk, n, rs.sc + r0 * BK, pf); });
      }
      for (std::size_t r = rows; r < padded(rows); ++r) alg::fill_n(rs.sc + r * BK, BK, T(0));
      for (std::size_t r = 0; r < rows; ++r) {
        block_program(it, r, j0, live_of(r, j0, nb), nbp, rs.sc + r * BK);
        rs.as[r] = ops::online_softmax(rs.sc + r * BK, nbp, rs.ms[r], rs.ls[r]);
      }
      for (std::size_t r0 = 0; r0 < rows; r0 += RB) {  // the values, RB rows sharing each V load
        const std::size_t n = most_live(r0, j0, nb);
        by_block(rows, r0, [&](auto nr) {
          pv_block<decltype(nr)::value>(rs.sc + r0 * BK, n, vb, it.vs, rs.as + r0, rs.os + r0 * dvp, dvp, dvec, pf);
        });
      }
      for (std::size_t r = 0; r < rows && dvec < p.dv; ++r) {  // the columns past the last whole vector
        const std::size_t live = live_of(r, j0, nb);
        T* o = rs.os + r * dvp;
        const T* s = rs.sc + r * BK;
        for (std::size_t c = dvec; c < p.dv; ++c) {
          T x = o[c] * rs.as[r];
          for (std::size_t j = 0; j < live; ++j) x += s[j] * ops::kv_scalar(vb[sz(j) * it.vs + sz(c)]);
          o[c] = x;
        }
      }
    }
  }
};
