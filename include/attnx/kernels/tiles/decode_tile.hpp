// attnx decode attention: few query rows against many keys, written once against simd::vec<T, isa_tag>.
//
// Included by flash_attention.hpp once per instruction set, after flash_tile.inc, inside namespace
// attnx::kernels::detail::<isa> (no include guard on purpose). docs/decoding.md, "The decode kernel".
//
// The prefill kernel vectorises over query rows and pads a block to MQ of them; with one to a few rows
// most of its work would be padding. Here the vectors run along the head dimension instead:
//   - a work item is one (batch item, KV head) and a range of keys: every query row that reads that KV
//     head (its query heads x L_q rows, GQA groups included) is computed in one pass over those keys, so
//     K and V are read from memory once per item whatever the group size;
//   - the key range of a (batch item, KV head) is cut into chunks of a fixed number of keys, each producing
//     a partial state per row (running max m, sum of weights l, unnormalised output), merged at the end
//     (kernels::merge_partials); an item is a run of consecutive chunks gone through in one pass, the state
//     handed over at each chunk boundary (restarting the loop at every chunk cost up to 12 points of the read
//     bandwidth: docs/decoding-log.md). Chunks do not depend on the thread count: the results are the same, bit
//     for bit, on any number of threads;
//   - K and V are read in place, in T or as bf16 / f16 converted in registers (KV), never copied;
//   - one row goes through W keys at a time (one_row: one vector of scores, one exp per W keys) where its
//     output fits in registers, else key by key (stream); two to four rows the same way together where d_k and
//     d_v fit (few_rows; three or four rows of 16-bit K and V but at d 128 on AMD Zen 5, and of fp32 ones at d 128
//     except on AMD, four keys at a time, four_rows), and five to eight rows at d 128 in two passes over each
//     block of 256 keys, rows 0-3 then the others (row_passes, through few_rows);
//     more rows through blocks of BK keys whose K and V loads serve four rows at once (blocks).
// Scores follow the same score program as the prefill kernel, step by step in the expression's order, and
// the same special-value rules (a row of -inf gives 0, NaN makes the row NaN, +inf scores share the weight).

template <class T, class KV>
struct decode_kernel {
  using V = simd::vec<T, isa_tag>;
  using R = typename V::reg;
  static constexpr std::size_t W = V::W;
  static constexpr std::size_t BK = 64;                           // keys per block (a multiple of W)
  // Key by key (stream): the K and V rows 8 keys ahead are prefetched (AMD Zen 3, d = 128, one
  // thread, with two accumulators in stream's dot: one fp32 query row 59% -> 76% of the read bandwidth, medians
  // of 5 alternated runs; 16 keys ahead did worse for bf16 / f16 in 5 interleaved repetitions; for fp32, 4 and
  // 16 keys ahead looked worse in single runs, within that machine's noise).
  static constexpr std::size_t prefetch_keys = 8;
  // few_rows' prefetches: none, into L1 prefetch_keys ahead (16-bit rows prefetch_keys_16), or into L2 prefetch_keys_far
  // ahead (see few_rows).
  enum class row_prefetch { none, l1_near, l2_far };
  static constexpr std::size_t prefetch_keys_far = 16;
  // few_rows' L1 prefetch of 16-bit rows (Zen 5): this many keys on (see four_rows_near_keys).
  static constexpr std::size_t prefetch_keys_16 = 24;
  // one_row's second prefetch of 16-bit K and V, into L2 this many keys on (see one_row).
  static constexpr std::size_t one_row_prefetch_keys_l2 = 32;
  // Prefetches rows kj + dist * ks and vj + dist * vs (kb, vb bytes each); Locality 3 into L1, 2 into L2.
  template <int Locality = 3>
  static void prefetch_key(const KV* kj, std::ptrdiff_t ks, const KV* vj, std::ptrdiff_t vs, std::size_t dist, std::size_t kb,
                           std::size_t vb) {
    const char* kp = reinterpret_cast<const char*>(kj + static_cast<std::ptrdiff_t>(dist) * ks);
    const char* vp = reinterpret_cast<const char*>(vj + static_cast<std::ptrdiff_t>(dist) * vs);
    for (std::size_t x = 0; x < kb; x += 64) __builtin_prefetch(kp + x, 0, Locality);
    for (std::size_t x = 0; x < vb; x += 64) __builtin_prefetch(vp + x, 0, Locality);
  }

  static std::size_t round_up(std::size_t n) { return (n + W - 1) / W * W; }

  // Rows per register block: the K and V vectors loaded once serve RB query rows (a last block of one or two
  // rows takes a block of 2). With 16 vector registers (AVX2) the dots take 2 keys at a time and the values 2
  // vectors (4 x 2 accumulators); with 32 (AVX-512), 4 and 4. Four rows per K and V load, not two, halve
  // what the block's loops read from L2 (Zen 3, AVX2, L_q = 4, d = 128, K and V in L2: 89 -> 66 ns per key).
  static constexpr std::size_t RB = 4;
  static constexpr std::size_t NK = sizeof(R) >= 64 ? 4 : 2;  // keys per dots call
  static constexpr std::size_t NV = sizeof(R) >= 64 ? 4 : 2;  // vectors per values pass
  // The item's rows padded to whole register blocks (the padding rows have q = 0 and weigh nothing).
  static std::size_t padded(std::size_t rows) { return (rows + RB - 1) / RB * RB; }

  // Per-thread scratch in elements of T for rows query rows.
  static std::size_t scratch_elems(std::size_t rows, std::size_t dk, std::size_t dv) {
    return padded(rows) * (round_up(dk) + BK + round_up(dv) + 3);
  }

  static R load_kv(const KV* p) {
    if constexpr (std::is_same_v<KV, T>) {
      return V::loadu(p);
    } else if constexpr (std::is_same_v<KV, bf16>) {
      return V::load_bf16(reinterpret_cast<const std::uint16_t*>(p));
    } else {
      return V::load_f16(reinterpret_cast<const std::uint16_t*>(p));
    }
  }
  static T kv_scalar(KV x) { return static_cast<T>(x); }

  // The next block's K and V rows (K first: the dots read it first), brought into L2 a few rows at a time from
  // every loop over the current block, in proportion to the arithmetic done, so that memory is busy for the
  // whole block: a burst of prefetches stalls the core, nothing while the values are summed leaves memory
  // idle, and prefetching into L1 evicts the block being read (Zen 3, one thread, L_q = 4, d = 128, H = 8,
  // L_k = 16384, with the four-row blocks: 38% -> 47% of the read bandwidth, medians of 5 alternated runs).
  struct ahead {
    const char* k = nullptr;
    const char* v = nullptr;
    std::ptrdiff_t ks = 0, vs = 0;                   // row strides in bytes
    std::size_t kb = 0, vb = 0, n = 0;               // bytes per row, rows (of K, then as many of V)
    std::size_t next = 0, owed = 0, rate = 0;        // next: row 0 .. 2n - 1; owed, rate: rows x 2^16 (per unit)
    void start(const KV* kn, std::ptrdiff_t ksr, const KV* vn, std::ptrdiff_t vsr, std::size_t kbytes,
               std::size_t vbytes, std::size_t rows, std::size_t units) {
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

  // out[r * os + j] = q_r . k_j for NR rows at q (stride qs, zero-padded to a multiple of W) and NK keys
  // at k (row stride ks).
  template <std::size_t NR, std::size_t NK>
  static void dots(const T* q, std::size_t qs, const KV* k, std::ptrdiff_t ks, std::size_t dk, T* out, std::size_t os) {
    R acc[NR][NK];
    ATTNX_UNROLL
    for (std::size_t r = 0; r < NR; ++r) {
      ATTNX_UNROLL
      for (std::size_t j = 0; j < NK; ++j) acc[r][j] = V::zero();
    }
    const std::size_t dvec = dk / W * W;
    for (std::size_t d = 0; d < dvec; d += W) {
      R kv[NK];
      ATTNX_UNROLL
      for (std::size_t j = 0; j < NK; ++j) kv[j] = load_kv(k + static_cast<std::ptrdiff_t>(j) * ks + static_cast<std::ptrdiff_t>(d));
      ATTNX_UNROLL
      for (std::size_t r = 0; r < NR; ++r) {
        const R qv = V::load(q + r * qs + d);
        ATTNX_UNROLL
        for (std::size_t j = 0; j < NK; ++j) acc[r][j] = V::fmadd(qv, kv[j], acc[r][j]);
      }
    }
    if constexpr (NR * NK == W) {
      // The NR x NK sums reduced together, lane r NK + j being q_r . k_j (Zen 5, AVX-512, d 128, four rows, K
      // and V in L2: 19.5 -> 17.3 ns per key; from memory no change measured).
      if (dvec == dk) {
        alignas(64) T lanes[W];
        V::store(lanes, V::reduce_lanes(&acc[0][0]));
        ATTNX_UNROLL
        for (std::size_t r = 0; r < NR; ++r) {
          ATTNX_UNROLL
          for (std::size_t j = 0; j < NK; ++j) out[r * os + j] = lanes[r * NK + j];
        }
        return;
      }
    }
    ATTNX_UNROLL
    for (std::size_t r = 0; r < NR; ++r) {
      ATTNX_UNROLL
      for (std::size_t j = 0; j < NK; ++j) {
        T x = V::reduce_add(acc[r][j]);
        const KV* kj = k + static_cast<std::ptrdiff_t>(j) * ks;
        for (std::size_t d = dvec; d < dk; ++d) x += q[r * qs + d] * kv_scalar(kj[d]);
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
  // o_r[c] = alpha_r o_r[c] + sum_j p_r[j] v_j[c] for NR rows (p stride BK, o stride os) and N * W columns.
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
      for (std::size_t c = 0; c < N; ++c) vv[c] = load_kv(vj + c * W);
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
  // The score program after the folded factor, for one score (row r of the item: query i of head h, key j).
  static T program(const score_plan<T>& plan, const std::size_t* limits, std::size_t rows,
                   std::size_t r, std::size_t b, std::size_t h, std::size_t i, std::size_t j, T x) {
    std::size_t li = 0;
    for (std::size_t si = 0; si < plan.n; ++si) {
      const score_step<T>& st = plan.steps[si];
      if (is_limit(st.kind)) {
        const std::size_t lim = limits[(li++) * rows + r];
        if (si >= plan.first && j >= lim) x = st.value;
        continue;
      }
      if (si < plan.first) continue;
      switch (st.kind) {
        case step_kind::multiply: x *= st.value; break;
        case step_kind::divide: x /= st.value; break;
        case step_kind::boolean_mask:
          if (!st.mask.at(b, h, i, j)) x = st.value;
          break;
        case step_kind::additive_mask: x += st.bias.at(b, h, i, j); break;
        default: break;
      }
    }
    return x;
  }

  // One query row, key by key in ggml's loop order: each key's K row and V row are read back to back. The
  // online softmax runs per key (kernels::weight_of): a new maximum rescales the output once, rarely after
  // the first keys. Any d_k, d_v; q from L1, the output in L1. The portable path's loop, and the vector
  // paths' where one_row (below) does not apply: AVX2, or d_k / d_v not whole vectors (on the Zen 5 machine
  // under AVX2, d 128: 90-93% of the read bandwidth from memory, where the groups of one_row without the
  // output in registers reached 56-59%).
  // (Row r of the item's rows: query i of head h.)
  static void stream(const attention_problem<T>& p, const KV* kbase, std::ptrdiff_t ks, const KV* vbase,
                     std::ptrdiff_t vs, const score_plan<T>& plan, std::size_t b, std::size_t h, std::size_t i,
                     std::size_t r, std::size_t rows, std::size_t k0, std::size_t kend, const T* qs, T* os, T& m, T& l,
                     const std::size_t* limits) {
    const std::size_t dkv = p.dk / W * W, dvv = p.dv / W * W;
    const bool plain = plan.n == plan.first;  // nothing after the folded factor
    const std::size_t kb = p.dk * sizeof(KV), vb = p.dv * sizeof(KV);
    for (std::size_t j = k0; j < kend; ++j) {
      const KV* kj = kbase + static_cast<std::ptrdiff_t>(j) * ks;
      const KV* vj = vbase + static_cast<std::ptrdiff_t>(j) * vs;
      if (j + prefetch_keys < kend) prefetch_key(kj, ks, vj, vs, prefetch_keys, kb, vb);
      T x = V::reduce_add(dot<0>(qs, kj, dkv));
      for (std::size_t c = dkv; c < p.dk; ++c) x += qs[c] * kv_scalar(kj[c]);
      x *= plan.folded;
      if (!plain) x = program(plan, limits, rows, r, b, h, i, j, x);
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
      for (std::size_t c = 0; c < dvv; c += W) V::store(os + c, V::fmadd(wv, load_kv(vj + c), V::load(os + c)));
      for (std::size_t c = dvv; c < p.dv; ++c) os[c] += w * kv_scalar(vj[c]);
    }
  }
  // One work item: the rows of (b, KV head g), keys [k0, k1) (k0 a multiple of chunk), K and V the (batch,
  // kv_heads) stacks k and v. Every chunk of chunk keys leaves its state at state + c * rows * (dv + 2) (c: the
  // chunk's index from k0): per row m, l, then dv unnormalised output columns (row stride dv + 2). ends[r]: keys
  // >= ends[r] are skipped for row r (score_plan). buf: scratch_elems(rows, dk, dv) elements. one_row and
  // few_rows go through the whole range in one pass and hand over their state at each chunk boundary
  // (flush; row_passes block by block, its state handed over at the chunk boundaries too); the other paths run
  // chunk by chunk.
  static void run(const attention_problem<T>& p, const score_plan<T>& plan, kv_stack k, kv_stack v, std::size_t b,
                  std::size_t g, std::size_t k0, std::size_t k1, std::size_t chunk, T* buf, const std::size_t* limits,
                  const std::size_t* ends, T* state) {
    constexpr T inf = std::numeric_limits<T>::infinity();
    const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
    const KV* kbase = k.matrix<KV>(b, g);
    const KV* vbase = v.matrix<KV>(b, g);
    const std::ptrdiff_t ks = k.row, vs = v.row;
    const std::size_t group = p.heads / p.kv_heads, rows = group * p.lq, rp = padded(rows);
    const std::size_t dkp = round_up(p.dk), dvp = round_up(p.dv);
    T* qs = buf;                  // rp x dkp
    T* sc = qs + rp * dkp;        // rp x BK
    T* os = sc + rp * BK;         // rp x dvp
    T* ms = os + rp * dvp;        // rp
    T* ls = ms + rp;              // rp
    T* as = ls + rp;              // rp: the rescale factor of the current block
    const auto reset = [&] {
      alg::fill_n(os, rp * dvp, T(0));
      alg::fill_n(ms, rp, -inf);
      alg::fill_n(ls, rp, T(0));
      alg::fill_n(as, rp, T(1));
    };
    // The chunk that ends at key j (or holds key j - 1) is done: its state out, the rows' state reset.
    const auto flush = [&](std::size_t j) {
      T* st = state + (j - 1 - k0) / chunk * rows * (p.dv + 2);
      for (std::size_t r = 0; r < rows; ++r, st += p.dv + 2) {
        st[0] = ms[r];
        st[1] = ls[r];
        alg::copy_n(os + r * dvp, p.dv, st + 2);
      }
      reset();
    };
    alg::fill_n(qs, rp * dkp, T(0));
    reset();
    std::size_t kend = k0;
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t h = g * group + r / p.lq, i = r % p.lq;
      alg::copy_n(p.q.matrix(b, h) + sz(i) * p.q.row, p.dk, qs + r * dkp);
      kend = alg::max(kend, alg::min(k1, ends[r]));
    }
    // The paths without chunk boundaries of their own: chunk by chunk.
    const auto by_chunk = [&](auto&& body) {
      for (std::size_t c0 = k0; c0 < k1; c0 += chunk) {
        const std::size_t c1 = alg::min(c0 + chunk, k1);
        std::size_t ce = c0;
        for (std::size_t r = 0; r < rows; ++r) ce = alg::max(ce, alg::min(c1, ends[r]));
        body(c0, ce);
        flush(c1);
      }
      if (k0 == k1) flush(k0 + 1);  // no keys: the empty state
    };

    if constexpr (W == 1) {  // the portable path: row by row (the vector paths' blocks would only cost compile time)
      by_chunk([&](std::size_t c0, std::size_t ce) {
        for (std::size_t r = 0; r < rows; ++r)
          stream(p, kbase, ks, vbase, vs, plan, b, g * group + r / p.lq, r % p.lq, r, rows, c0, alg::min(ce, ends[r]),
                 qs + r * dkp, os + r * dvp, ms[r], ls[r], limits);
      });
      return;
    } else if (rows == 1) {
      if constexpr (vector_registers >= 32) {  // (not compiled for AVX2, where it never fits)
        if (one_row_fits(p)) {
          one_row_any(p, kbase, ks, vbase, vs, plan, b, g * group, k0, kend, chunk, flush, qs, sc, os, ms[0], ls[0], limits);
          flush(alg::max(kend, k0 + 1));
          return;
        }
      }
      by_chunk([&](std::size_t c0, std::size_t ce) {
        stream(p, kbase, ks, vbase, vs, plan, b, g * group, 0, 0, 1, c0, ce, qs, os, ms[0], ls[0], limits);
      });
    } else {
      if constexpr (vector_registers >= 32 && std::is_same_v<T, float>) {  // (AVX-512, float: see few_rows)
        if (few_rows_fit(p, rows)) {
          few_rows_any(p, kbase, ks, vbase, vs, plan, b, g, k0, k1, kend, chunk, flush, qs, os, ms, ls, limits, ends);
          flush(alg::max(kend, k0 + 1));
          return;
        }
      }
      by_chunk([&](std::size_t c0, std::size_t ce) {
        blocks(p, kbase, ks, vbase, vs, plan, b, g, c0, ce, qs, sc, os, ms, ls, as, limits, ends);
      });
    }
  }

  // ---- one row, W keys at a time ----------------------------------------------------------------------
  // L_q = 1 without GQA, the common decoding step, when d_k is a whole number of vectors and the output row
  // (d_v = 4 or 8 vectors) fits in registers beside W dot sums: 32 vector registers (AVX-512). The keys go in
  // groups of W: the group's W dots reduced into one vector of scores (vec::with_lane_sum, key by key), the
  // score program (the folded factor alone where no later step can touch the group's keys, the scalar
  // program otherwise), the online softmax on that vector (one exp per W keys; the output rescaled when the
  // maximum grows), then the group's V rows weighted. The loop interleaves the next group's dots with this
  // group's values key by key, so that K and V are read as two sequential streams, one row of each in turn.
  // Against the key-by-key loop it replaced (a dot reduced and an exp per key, two keys per iteration; AMD
  // Zen 5, AVX-512, d 128, H 8, one thread, alternated runs): K and V in L2, fp32 15.5 -> 8.3 ns per key, bf16
  // 12.6 -> 6.8; from memory, fp32 75-82% -> 91-102% of the read bandwidth. The order matters as much as the
  // arithmetic there: the same groups with all W dots first and then all W values reached 78-80%, and with
  // d_k a run-time loop count inside the unrolled keys 78-87% (docs/decoding-log.md). The loop over the group's keys
  // stays rolled: unrolled, each load instruction reads a row W rows after its previous one, and the hardware
  // prefetcher no longer keeps up (one bf16 row without software prefetch: 50-61% of the read bandwidth unrolled,
  // 90-100% rolled; the same in a synthetic loop, 53-54% against 97-102%; fp32 rows were not slower unrolled), so
  // the software prefetch that made up for it is gone (few_rows' as well: no measurable difference there).
  // (W sums, at most 8 output vectors and a few temporaries: AVX-512's 32 registers, not AVX2's 16.)
  static constexpr std::size_t vector_registers = sizeof(R) >= 64 ? 32 : 16;
  static bool one_row_fits(const attention_problem<T>& p) { return p.dk % W == 0 && (p.dv == 8 * W || p.dv == 4 * W); }

  // The W dots kdot(key) of the keys at k (row stride ks; keys past n repeat key n - 1) as one vector, lane x the
  // dot with key x, each reduced as one_row's loop reduces it (V::with_lane_sum: the same bits for a group however
  // it is reached, which the split of the keys between threads relies on). DK: d_k / W if fixed, 0 for any d_k (the
  // loop then left to the compiler: an unroll forced over dot's run-time loop fails under clang's sanitizers with
  // "loop not unrolled" warnings).
  template <std::size_t DK, class Dot>
  static R group_dots(const Dot& kdot, const KV* k, std::ptrdiff_t ks, std::size_t n) {
    R s = V::zero();
    const auto row = [&](std::size_t x) { return k + static_cast<std::ptrdiff_t>(alg::min(x, n - 1)) * ks; };
    if constexpr (DK > 0) {
      ATTNX_UNROLL
      for (std::size_t x = 0; x < W; ++x) s = V::with_lane_sum(s, x, kdot(row(x)));
    } else {
      for (std::size_t x = 0; x < W; ++x) s = V::with_lane_sum(s, x, kdot(row(x)));
    }
    return s;
  }
  // q . k over d_k = DK * W (DK 0: dk, any multiple of W) as a vector of partial sums (q aligned, read from L1;
  // with a run-time count two accumulators, the dot being a chain of dk / W dependent FMAs otherwise). Pairs (a
  // fixed d_k, bf16 k): q in the even/odd order of rows_dot.
  template <std::size_t DK, bool Pairs = false>
  static R dot(const T* q, const KV* k, std::size_t dk) {
    static_assert(DK > 0 || !Pairs, "dot: the pair order needs a fixed d_k");
    if constexpr (DK > 0) {
      R a[1];
      rows_dot<1, DK, Pairs>(q, k, a);
      return a[0];
    } else {
      R a0 = V::zero(), a1 = V::zero();
      std::size_t d = 0;
      for (; d + 2 * W <= dk; d += 2 * W) {
        a0 = V::fmadd(V::load(q + d), load_kv(k + d), a0);
        a1 = V::fmadd(V::load(q + d + W), load_kv(k + d + W), a1);
      }
      if (d < dk) a0 = V::fmadd(V::load(q + d), load_kv(k + d), a0);
      return V::add(a0, a1);
    }
  }

  // The dots of NR rows of q (DK W apart) with the key at k (d_k = DK W), each K vector loaded once for all the
  // rows: row r's chain is that of dot<DK>, or with bf16 k and q in four_rows' even/odd order (Pairs; AVX-512 float:
  // per 2 W elements the W at even indices, then the W at odd ones) vectors c and c + 1 against the values at even
  // and odd indices of k's 2 W at c W, widened together (V::load_bf16_pairs). One row or several, through any loop
  // that takes its dots here, the bits are the same.
  template <std::size_t NR, std::size_t DK, bool Pairs>
  ATTNX_INLINE_LAMBDA static void rows_dot(const T* q, const KV* k, R (&a)[NR]) {
    if constexpr (Pairs) {
      static_assert(DK % 2 == 0, "rows_dot: bf16 dots take the vectors of d_k in pairs");
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DK; c += 2) {
        R ke, ko;
        V::load_bf16_pairs(reinterpret_cast<const std::uint16_t*>(k + c * W), ke, ko);
        ATTNX_UNROLL
        for (std::size_t r = 0; r < NR; ++r) {
          const R qe = V::load(q + (r * DK + c) * W), qo = V::load(q + (r * DK + c + 1) * W);
          a[r] = c == 0 ? V::mul(qe, ke) : V::fmadd(qe, ke, a[r]);
          a[r] = V::fmadd(qo, ko, a[r]);
        }
      }
    } else {
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DK; ++c) {
        const R kv = load_kv(k + c * W);
        ATTNX_UNROLL
        for (std::size_t r = 0; r < NR; ++r) {
          const R qv = V::load(q + (r * DK + c) * W);
          a[r] = c == 0 ? V::mul(qv, kv) : V::fmadd(qv, kv, a[r]);
        }
      }
    }
  }
  // x[0, n) (n a multiple of 2 W) into out in that even/odd order (q of four_rows and one_row with bf16 K and V), and
  // back in place (their outputs, before each flush and at the end).
  static void to_pair_order(const T* x, T* out, std::size_t n) {
    for (std::size_t t = 0; t < n; t += 2 * W)
      for (std::size_t i = 0; i < W; ++i) {
        out[t + i] = x[t + 2 * i];
        out[t + W + i] = x[t + 2 * i + 1];
      }
  }
  static void from_pair_order(T* x, std::size_t n) {
    alignas(64) T tmp[2 * W];
    for (std::size_t t = 0; t < n; t += 2 * W) {
      for (std::size_t i = 0; i < W; ++i) {
        tmp[2 * i] = x[t + i];
        tmp[2 * i + 1] = x[t + W + i];
      }
      alg::copy_n(tmp, 2 * W, x + t);
    }
  }

  // q (N values, whole pairs of vectors) in the order the dots read it: with bf16 K (Pairs) a copy in four_rows'
  // even/odd order (to_pair_order), else q itself. Not copyable (p may point into it).
  template <bool Pairs, std::size_t N>
  struct dot_order_q {
    alignas(64) T paired[Pairs ? N : 1];
    const T* p;
    explicit dot_order_q(const T* q) : p(q) {
      if constexpr (Pairs) {
        to_pair_order(q, paired, N);
        p = paired;
      }
    }
    dot_order_q(const dot_order_q&) = delete;
    dot_order_q& operator=(const dot_order_q&) = delete;
  };

  // The online softmax of one row over the scores s[0, n) (n a multiple of W; skipped keys -inf): the scores
  // become their weights, m and l the row's running maximum and sum. Returns the factor by which the row's
  // output so far is to be rescaled. (The blocks and one_row alike.)
  static T online_softmax(T* s, std::size_t n, T& m, T& l) {
    constexpr T inf = std::numeric_limits<T>::infinity();
    R mx = V::set1(-inf);
    for (std::size_t j = 0; j < n; j += W) mx = V::max_keep(V::load(s + j), mx);  // NaN ignored
    const T mo = m;
    T mn = V::reduce_max(mx);
    mn = mn > mo ? mn : mo;
    T alpha = T(1);
    if (mn == inf) [[unlikely]] {  // +inf scores share the weight, everything else weighs 0
      alpha = mo == inf ? T(1) : T(0);
      for (std::size_t j = 0; j < n; ++j) s[j] = s[j] != s[j] ? s[j] : (s[j] == inf ? T(1) : T(0));
    } else {
      const T ref = mn == -inf ? T(0) : mn;  // no visible key yet: weights 2^(-inf) = 0
      if (mn != mo) alpha = math::rt::exp2((mo - ref) * log2e<T>);
      const R rv = V::set1(ref), c = V::set1(log2e<T>);
      for (std::size_t j = 0; j < n; j += W) V::store(s + j, kernel<T>::exp2(V::mul(V::sub(V::load(s + j), rv), c)));
    }
    R sum = V::zero();
    for (std::size_t j = 0; j < n; j += W) sum = V::add(sum, V::load(s + j));
    l = l * alpha + V::reduce_add(sum);
    m = mn;
    return alpha;
  }
  // online_softmax's result for a group of W scores s without the program or the reductions of the maximum,
  // where that is possible; returns whether it was (alpha: the factor for the row's output). No visible key
  // (live 0): weights 0, m and l unchanged. A whole group (live W, no step after the folded factor) with the
  // row's reference m finite and no score above m + margin (NaN scores included): weights 2^((s - m) log2 e), m
  // kept (margin 0: online_softmax bit for bit; above 0 the reference lags the maximum, weights up to
  // 2^(margin log2 e)). A whole group before any visible key with a finite maximum mx: m = mx, alpha 0, as
  // online_softmax.
  static ATTNX_FORCE_INLINE bool weigh_quick(R s, std::size_t live, bool whole, T margin, T* w, T& m, T& l,
                                             T& alpha) {
    constexpr T inf = std::numeric_limits<T>::infinity();
    if (live == 0) {
      V::store(w, V::zero());
      alpha = T(1);
      return true;
    }
    if (!whole) return false;
    T ref = m;
    if (m > -inf && m < inf && !V::any_above(s, m + margin)) {
      alpha = T(1);
    } else if (m == -inf) {
      ref = V::reduce_max(V::max_keep(s, V::set1(-inf)));
      if (!(ref > -inf && ref < inf)) return false;
      alpha = T(0);
    } else {
      return false;
    }
    const R e = kernel<T>::exp2(V::mul(V::sub(s, V::set1(ref)), V::set1(log2e<T>)));
    V::store(w, e);
    l = l * alpha + V::reduce_add(e);  // a NaN l stays NaN
    m = ref;
    return true;
  }
  // The scores s of one row's keys j0 .. j0 + W - 1 (the first live of them visible; keys below clear need no
  // step after the folded factor): the score program, then the weights into w and the row's m and l. Returns
  // the factor by which the row's output is to be rescaled. (Row r of the item's rows: query i of head h.)
  static T weigh(const score_plan<T>& plan, const std::size_t* limits, std::size_t rows, std::size_t r, std::size_t b,
                 std::size_t h, std::size_t i, std::size_t j0, std::size_t live, std::size_t clear, R s, T* w, T& m,
                 T& l) {
    constexpr T inf = std::numeric_limits<T>::infinity();
    // The scalar program (-inf past the row's end and the last key) unless the group is clear of steps after the
    // folded factor or takes them vectorised (masks, biases: vector_program).
    const bool scalar =
        (live < W || j0 + W > clear) && !(plan.programmed && live == W && vector_program(plan, limits, rows, r, b, h, i, j0, s));
    if (T alpha; weigh_quick(s, live, !scalar, T(0), w, m, l, alpha)) return alpha;
    V::store(w, s);
    if (scalar) {
      const bool plain = plan.n == plan.first;
      for (std::size_t x = 0; x < W; ++x)
        w[x] = x >= live ? -inf : plain ? w[x] : program(plan, limits, rows, r, b, h, i, j0 + x, w[x]);
    }
    return online_softmax(w, W, m, l);
  }

  // The score program after the folded factor on a whole group of row r (keys j0 .. j0 + W - 1, query i of head h)
  // below every limit of the row, vectorised: program()'s bits, key by key (a boolean mask's fill or the score, a
  // bias added, a factor multiplied or divided). False, s unchanged, when the group reaches one of the row's
  // limits (program() key by key then). A boolean mask's W flags and a bias's W values are read at once when they
  // are contiguous (else gathered one by one). Against program() key by key (AMD Zen 5, harness, H 8, d 128, L_k
  // 16384, one thread, an additive bias (H, 1, L_k)): docs/decoding-log.md, thirty-first session.
  static bool vector_program(const score_plan<T>& plan, const std::size_t* limits, std::size_t rows, std::size_t r,
                             std::size_t b, std::size_t h, std::size_t i, std::size_t j0, R& s) {
    for (std::size_t li = 0; li < plan.n_limits; ++li)
      if (j0 + W > limits[li * rows + r]) return false;
    // The group's W elements from p (col apart): p itself when contiguous, else gathered into a.
    const auto group = [](const auto* p, std::ptrdiff_t col, auto* a) {
      if (col == 1) return p;
      for (std::size_t k = 0; k < W; ++k) a[k] = p[static_cast<std::ptrdiff_t>(k) * col];
      return static_cast<decltype(p)>(a);
    };
    R x = s;
    for (std::size_t si = plan.first; si < plan.n; ++si) {
      const score_step<T>& st = plan.steps[si];
      switch (st.kind) {
        case step_kind::multiply: x = V::mul(x, V::set1(st.value)); break;
        case step_kind::divide: x = V::div(x, V::set1(st.value)); break;
        case step_kind::boolean_mask: {
          bool a[W];
          x = V::where_flags(group(&st.mask.at(b, h, i, j0), st.mask.col, a), x, V::set1(st.value));
          break;
        }
        case step_kind::additive_mask: {
          T a[W];
          x = V::add(x, V::loadu(group(&st.bias.at(b, h, i, j0), st.bias.col, a)));
          break;
        }
        default: break;  // a limit: the group is below it
      }
    }
    s = x;
    return true;
  }
  // The keys of row r (of rows) below which no step after the folded factor can change a score, for one_row
  // and few_rows: up to rend (the row's end) when all that follows the folded factor is limit steps, and below
  // every limit (kend is already below them when they are skipped); none when anything else follows.
  static std::size_t clear_below(const score_plan<T>& plan, const std::size_t* limits, std::size_t rows, std::size_t r,
                                 std::size_t rend) {
    if (plan.programmed) return 0;
    std::size_t clear = rend;
    for (std::size_t li = 0; li < plan.n_limits; ++li) clear = alg::min(clear, limits[li * rows + r]);
    return clear;
  }
  // Keys [k0, kend) of the one row (query 0 of head h) with d_k = DK * W (DK 0: any multiple of W) and
  // d_v = DV * W; q at qs, the output (zero on entry) at os, w: W elements of scratch. At every multiple of
  // chunk keys past k0 (below kend) the output goes to os and flush(j) hands the state over (and resets os, m
  // and l); the last chunk's output is left at os.
  // pf (16-bit K and V only): each key, the K and V rows prefetch_keys on are prefetched into L1 (one_row_any: on
  // CPUs other than AMD's; a run-time flag, not a second instantiation, which took the float kernels' text from
  // 1206869 to 1339394 bytes: docs/decoding-log.md, seventeenth session). On the Intel Xeon of 2026-11-27 (family 6,
  // model 207; one core reads 12-15 GB/s), H 8,
  // L_k 16384, one thread, g++ 12 -O2, binaries alternated, medians of 5: one bf16 row 141-144% of the fp32 read
  // floor without, 175-176% with (16 or 32 keys on 165-175%, into L2 163-169%, non-temporal 117-118%), f16
  // 154-157% -> 180-181%; two threads 27.0 -> 21.4-23.1 ns per key (bf16), 24.5 -> 19.3-19.9 (f16); with K and V
  // in L2 0.5 ns per key more (15-16, 13-14 ns). Not for fp32 rows (95-96% -> 99% there, met without). Off on AMD,
  // whose figures were measured without the prefetch (Zen 4 and Zen 5: one 16-bit row at 1.8-2.7x the fp32 speed);
  // there the loop now tests the flag at every key, which was not measured on AMD.
  // With the same flag each key also prefetches the rows one_row_prefetch_keys_l2 (32) keys on into L2: both
  // prefetches together, not either alone (same Xeon, a new boot, 2026-11-28, harness as above, each 16-bit round
  // timed in alternation with fp32, binaries alternated three times): bf16 paired with fp32 1.85-1.93x ->
  // 1.95-2.05x, f16 1.87-1.91x -> 2.00-2.07x, bf16 on two threads 1.80-1.83x -> 1.98-2.12x; into L2 24 to 96 keys
  // on the same within the noise; into L2 alone 1.79-1.86x (175-181% of the fp32 floor against 198-202% with both)
  // (docs/decoding-log.md, twentieth session). fp32 rows with both: 95-101% -> 100-106% of the floor on one thread,
  // 92-101% against 94-100% on two (noise; not taken).
  template <std::size_t DK, std::size_t DV, class Flush>
  static void one_row(const attention_problem<T>& p, const KV* kbase, std::ptrdiff_t ks, const KV* vbase,
                      std::ptrdiff_t vs, const score_plan<T>& plan, std::size_t b, std::size_t h, std::size_t k0,
                      std::size_t kend, std::size_t chunk, const Flush& flush, const T* qs, T* w, T* os, T& m, T& l,
                      const std::size_t* limits, bool pf) {
    const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
    const std::size_t clear = clear_below(plan, limits, 1, 0, kend);  // keys taking the folded factor alone
    const R fv = V::set1(plan.folded);
    // bf16 K and V at a fixed d_k and d_v: widened 2 W values at a time as in four_rows (V::load_bf16_pairs), q and
    // the outputs in its even/odd order, the outputs put back in order at every flush and at the end. Intel Xeon
    // model 207, harness (H 8, d 128, one thread, g++ 12 -O2, binaries alternated): with K and V in L2 16.1-16.4 ->
    // 13.2 ns per key; from memory 160-186% -> 186-197% of the fp32 read floor (three alternations).
    constexpr bool pairs = std::is_same_v<KV, bf16> && DK > 0 && DK % 2 == 0 && DV % 2 == 0;
    const dot_order_q<pairs, DK * W> qd(qs);
    const auto kdot = [&](const KV* k) ATTNX_INLINE_LAMBDA { return dot<DK, pairs>(qd.p, k, p.dk); };
    const auto out_in_order = [&] {
      if constexpr (pairs) from_pair_order(os, DV * W);
    };
    R o[DV];
    ATTNX_UNROLL
    for (std::size_t c = 0; c < DV; ++c) o[c] = V::zero();
    const auto rescale = [&](T a) {
      if (a == T(1)) return;
      const R av = V::set1(a);
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DV; ++c) o[c] = V::mul(o[c], av);
    };
    const auto add_value = [&](const KV* vx, T wx) {
      const R wv = V::set1(wx);
      if constexpr (pairs) {
        ATTNX_UNROLL
        for (std::size_t c = 0; c < DV; c += 2) {
          R ve, vo;
          V::load_bf16_pairs(reinterpret_cast<const std::uint16_t*>(vx + c * W), ve, vo);
          o[c] = V::fmadd(wv, ve, o[c]);
          o[c + 1] = V::fmadd(wv, vo, o[c + 1]);
        }
      } else {
        ATTNX_UNROLL
        for (std::size_t c = 0; c < DV; ++c) o[c] = V::fmadd(wv, load_kv(vx + c * W), o[c]);
      }
    };
    // The weights of the group at j0 (its scores computed apart).
    const auto weigh_apart = [&](std::size_t j0) {
      const std::size_t n = alg::min(W, kend - j0);
      rescale(weigh(plan, limits, 1, 0, b, h, 0, j0, n, clear, V::mul(group_dots<DK>(kdot, kbase + sz(j0) * ks, ks, n), fv), w, m, l));
    };
    std::size_t boundary = k0 + chunk;
    // Before the group at jn is weighed: at a chunk boundary, the chunk's state out.
    const auto at_boundary = [&](std::size_t jn) {
      if (jn != boundary || jn >= kend) return;
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DV; ++c) {
        V::store(os + c * W, o[c]);
        o[c] = V::zero();
      }
      out_in_order();
      flush(jn);
      boundary += chunk;
    };
    if (k0 < kend) weigh_apart(k0);
    for (std::size_t j0 = k0; j0 < kend; j0 += W) {
      const std::size_t jn = j0 + W, live = alg::min(W, kend - j0);
      const KV* vg = vbase + sz(j0) * vs;
      if (jn + W <= kend) {  // this group's values with the next (whole) group's dots
        const KV* kn = kbase + sz(jn) * ks;
        // Rolled: each load instruction then reads the next row of its stream at every pass, which the hardware
        // prefetcher follows; unrolled over the W keys (each load a row W rows on) it does not (docs/decoding-log.md).
        // Each key's dot is reduced at once into lane x of s, in a register: the W dots kept as vectors and
        // reduced together (V::reduce_lanes) went through the stack, one 64-byte store per key, and read at 82-86%
        // of the bandwidth where this reads at 84-95% (AMD Zen 4, one fp32 row, d 128, H 8, L_k 16384, one thread,
        // six alternated pairs; "Fourteenth session" in docs/decoding-log.md).
        R s = V::zero();
        ATTNX_NOUNROLL
        for (std::size_t x = 0; x < W; ++x) {
          s = V::with_lane_sum(s, x, kdot(kn + sz(x) * ks));
          if (sizeof(KV) < sizeof(T) && pf) {
            const std::size_t kb = p.dk * sizeof(KV), vb = DV * W * sizeof(KV);
            if (jn + x + prefetch_keys < kend) prefetch_key(kn + sz(x) * ks, ks, vg + sz(x) * vs, vs, prefetch_keys, kb, vb);
            if (jn + x + one_row_prefetch_keys_l2 < kend)
              prefetch_key<2>(kn + sz(x) * ks, ks, vg + sz(x) * vs, vs, one_row_prefetch_keys_l2, kb, vb);
          }
          add_value(vg + sz(x) * vs, w[x]);
        }
        at_boundary(jn);
        rescale(weigh(plan, limits, 1, 0, b, h, 0, jn, W, clear, V::mul(s, fv), w, m, l));
      } else {
        for (std::size_t x = 0; x < live; ++x) add_value(vg + sz(x) * vs, w[x]);
        at_boundary(jn);
        if (jn < kend) weigh_apart(jn);
      }
    }
    ATTNX_UNROLL
    for (std::size_t c = 0; c < DV; ++c) V::store(os + c * W, o[c]);
    out_in_order();
  }
  // one_row with DK and DV from p.
  template <class Flush>
  static void one_row_any(const attention_problem<T>& p, const KV* kbase, std::ptrdiff_t ks, const KV* vbase,
                          std::ptrdiff_t vs, const score_plan<T>& plan, std::size_t b, std::size_t h, std::size_t k0,
                          std::size_t kend, std::size_t chunk, const Flush& flush, const T* qs, T* w, T* os, T& m,
                          T& l, const std::size_t* limits) {
    const bool pf = decode_family() == 0;  // (16-bit K and V: prefetched except on AMD, see one_row)
    const auto go = [&](auto dk_c, auto dv_c) {
      one_row<decltype(dk_c)::value, decltype(dv_c)::value>(p, kbase, ks, vbase, vs, plan, b, h, k0, kend, chunk, flush, qs,
                                                            w, os, m, l, limits, pf);
    };
    const auto by_dk = [&](auto dv_c) {
      if (p.dk == 8 * W) return go(std::integral_constant<std::size_t, 8>{}, dv_c);
      if (p.dk == 4 * W) return go(std::integral_constant<std::size_t, 4>{}, dv_c);
      return go(std::integral_constant<std::size_t, 0>{}, dv_c);
    };
    if (p.dv == 8 * W) return by_dk(std::integral_constant<std::size_t, 8>{});
    return by_dk(std::integral_constant<std::size_t, 4>{});
  }

  // ---- a few rows, one pass over the keys --------------------------------------------------------------
  // Two to RB rows (L_q 2 to 4, or a GQA group of up to 4 query heads) with whole-vector d_k and d_v of 4 or 8
  // vectors, on AVX-512, in float: one_row's loop for all the rows at once. The keys go in groups of W; while
  // this group's V rows are weighted, the next group's dots (every row's, each K vector loaded once) are
  // computed key by key, so that K and V are read as two sequential streams, one row of each in turn. The
  // outputs of the first RV rows stay in registers (RV x d_v / W of them, at most 24: three rows at d_v 128, of
  // which g++ 12 keeps all but one vector in registers); those of the other rows are updated in L1 (load, FMA,
  // store per vector). Three rows in registers instead of two, four rows from memory (Zen 5, d 128, H 8, L_k
  // 16384, one thread, alternated binaries): g++ 12 66-69% -> 69-79% of the read bandwidth, K and V in L2 15.0
  // -> 14.0 ns per key; three rows 60-66% -> 75-76%; four bf16 rows 70-71% -> 74-76%; clang 14 (with its
  // lambdas forced inline, ATTNX_INLINE_LAMBDA: without, it kept every output in memory) 60-82% -> 73-76%. Each V
  // vector is pinned to a register once loaded: with -O3 -march=native g++ 12 had read it again as a memory
  // operand of every row's FMA, and the three-row form read at 53-57% against 67-69% for two rows; pinned, 71-75%
  // (and 72-74% at -O2); bench_decode (-O3 -march=native), four fp32 rows on one thread 77-83% -> 76-86%.
  // Against the blocks it replaced for these shapes
  // (AMD Zen 5, d 128, H 8, L_k 16384, one thread, from memory, alternated binaries): four rows 51-55% ->
  // 69-73% of the read bandwidth, two 59% -> 84%, three 52% -> 64%; bench_decode, four rows: 71-75% on one
  // thread, 92-97% on two. Measured on the way (docs/decoding-log.md): every output in registers is impossible (4 x
  // 8 vectors), and going through each group twice, half of the output columns (or half of the rows) at a
  // time, read memory at 30-63%: the hardware prefetcher keeps up with rows read whole and in order, and with
  // little else.
  // (Its call in run is compiled for AVX-512 and float only. Three or four rows of 16-bit K and V take four_rows,
  // below, instead, but at d 128 on AMD Zen 5, and so do three or four fp32 rows at d 128 on CPUs other than AMD's:
  // few_rows_any.)
  // few_rows' weights are taken against a reference maximum per row that moves only when a group's score
  // exceeds it by more than lazy_margin (so a weight is at most 2^8; the state (m, l, output) is exact for any
  // reference, and the merge and the final division take it as it is), and the group's weighing is inline, with
  // the outputs kept in registers, except when a row needs the full program (a rescale, a masked or partial
  // group, +inf, no visible key yet): that row goes through weigh, out of line, the outputs stored around the
  // call. Before, every group called weigh for every row (g++ kept it out of line, so all the outputs in
  // registers went to memory and back at each group), and the maximum moved at every new one: the state starts
  // again at each chunk boundary (every 512 keys), and with iid scores a new maximum is expected in about 4 of a
  // chunk's 32 groups per row (the harmonic number H_32), each a rescale and a scalar exponential. AMD Zen 4,
  // bench_decode (d 128, H 8 and 32, L_k 4096-65536), binaries alternated, medians of 3 runs: four fp32 rows on
  // one thread 75-83% -> 75-89% of the read bandwidth, on two threads 67-84% -> 89-92%; four f16 rows against
  // fp32 1.35-1.51x -> 1.44-1.60x, bf16 unchanged (1.36-1.50x). Without any softmax at all (weights = scores,
  // not a result) four fp32 rows read at 81-96%: the ceiling of what weighing differently can give there. The
  // margin costs V 2^8 of float's range (outputs within 2^-8 of the largest float can overflow where the exact
  // maximum would not) and changes the last bits of the results against the exact maximum; the results stay the
  // same for any number of threads (every chunk is computed alike). Groups under a mask or bias (any step after
  // the folded factor but limits) take weigh as before.
  static constexpr T lazy_margin = T(8) / log2e<T>;
  // The rows of few_rows and four_rows (NR of them; rows r >= the item's rows are padding and see no key) and the
  // weighing of a group that both loops share: each row's end (rend), the keys below which it takes the folded
  // factor alone (clear), its head (hs) and query (is) for the score program.
  template <std::size_t NR>
  struct few_rows_set {
    const score_plan<T>& plan;
    const std::size_t* limits;
    std::size_t rows, b;
    std::size_t rend[NR], clear[NR], hs[NR], is[NR];
    std::size_t r0;  // the work item's row of this set's row 0
    few_rows_set(const attention_problem<T>& p, const score_plan<T>& pl, const std::size_t* lim, const std::size_t* ends,
                 std::size_t bi, std::size_t g, std::size_t k1, std::size_t first_row = 0)
        : plan(pl), limits(lim), rows((p.heads / p.kv_heads) * p.lq), b(bi), r0(first_row) {
      const std::size_t group = rows / p.lq;
      for (std::size_t r = 0; r < NR; ++r) {
        const std::size_t ra = r0 + r;
        const bool real = ra < rows;
        rend[r] = real ? alg::min(k1, ends[ra]) : 0;
        clear[r] = real ? clear_below(plan, limits, rows, ra, rend[r]) : 0;
        hs[r] = g * group + (real ? ra / p.lq : 0);
        is[r] = real ? ra % p.lq : 0;
      }
    }
    // The group at j0: each row's scores sv[r] = reduce(r) x the folded factor, its live keys live[r], and
    // weigh_quick (margin lazy_margin) for every row it settles, inline; returns the rows left for full (a bit each).
    // Under masks or biases (plan.programmed, where clear is 0) a whole group below the row's limits takes the
    // program vectorised and weigh_quick with margin 0: the bits of full (weigh), without going out of line.
    template <class Reduce>
    ATTNX_FORCE_INLINE unsigned quick(std::size_t j0, R fv, const Reduce& reduce, std::size_t* live, R* sv, T (*w)[W],
                                      T* alpha, T* ms, T* ls) const {
      unsigned slow = 0;
      ATTNX_UNROLL
      for (std::size_t r = 0; r < NR; ++r) {
        live[r] = rend[r] > j0 ? alg::min(W, rend[r] - j0) : 0;
        sv[r] = live[r] ? V::mul(reduce(r), fv) : V::zero();
        R x = sv[r];  // (sv[r] kept for full)
        const bool whole = live[r] == W && (j0 + W <= clear[r] ||
                                            (plan.programmed && vector_program(plan, limits, rows, r0 + r, b, hs[r], is[r], j0, x)));
        if (!weigh_quick(x, live[r], whole, plan.programmed ? T(0) : lazy_margin, w[r], ms[r], ls[r], alpha[r])) [[unlikely]]
          slow |= 1u << r;
      }
      return slow;
    }
    // Row r of the group at j0 through the whole score program (weigh, out of line); returns its rescale factor.
    T full(std::size_t r, std::size_t j0, std::size_t live, R sv, T* w, T& m, T& l) const {
      return weigh(plan, limits, rows, r0 + r, b, hs[r], is[r], j0, live, clear[r], sv, w, m, l);
    }
  };
  // Rows [r0, r1) of the outputs at os (row stride DV * W), each multiplied by alpha[r] unless that is 1 (few_rows'
  // rows kept in L1, all of four_rows').
  template <std::size_t DV>
  static ATTNX_FORCE_INLINE void rescale_rows(T* os, std::size_t r0, std::size_t r1, const T* alpha) {
    for (std::size_t r = r0; r < r1; ++r) {
      if (alpha[r] == T(1)) continue;
      const R a = V::set1(alpha[r]);
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DV; ++c) V::store(os + (r * DV + c) * W, V::mul(V::load(os + (r * DV + c) * W), a));
    }
  }
  // Two to four rows at d_k and d_v of 4 or 8 vectors; five to eight rows at d 128 in two passes over each block of
  // the keys (row_passes: rows 0-3, then the others). (A GQA group of 8 at L_q 1, of 4 at L_q 2, speculative
  // decoding's few draft tokens.) Until the thirty-fourth session five to eight rows ran as eight (zero padding rows)
  // in one pass, fp32 rows with three rows' outputs in registers and 16-bit rows with the values added by columns;
  // against the blocks before it (AMD Zen 5, d 128, H 8, L_k 16384, one thread, from memory, g++ 12 -O2, harness, ns
  // per key and head): fp32 L_q 5 53-59 -> 41-45, L_q 8 57-62 -> 43-49; 16-bit L_q 8 36-39 -> 29-31. Sixteen rows
  // this way spill (L_q 16: 74-76 -> 119-144 ns, 1.6-1.9x). Measured on the way (eight rows in one pass): two keys per
  // step no faster in L2 (32.7 against 31.9 ns); the prefetches: none 50-57 ns, into L2 16 keys on 42-45, into L1 8
  // keys on 40-43 (docs/decoding-log.md).
  static bool few_rows_fit(const attention_problem<T>& p, std::size_t rows) {
    if (rows > RB) return rows <= 2 * RB && p.dk == 8 * W && p.dv == 8 * W;
    return rows >= 2 && (p.dk == 8 * W || p.dk == 4 * W) && (p.dv == 8 * W || p.dv == 4 * W);
  }
  // The item's rows (NR: 2, 3 at d_k = d_v = 8 W, else 4 with zero padding rows; 1 to 4 for row_passes' second
  // pass) over keys [k0, kend) with d_k = DK * W and d_v = DV * W; q at qs (row stride DK * W), the outputs at os
  // (row stride DV * W; zero on entry, or a pass's state to go on from), ms / ls the rows' running max and sum; the
  // rows are the work item's rows r0, r0 + 1, ... (rows past its last are padding). ends, limits: as in run.
  // Prefetches go up to pf_end (kend when less).
  // Three rows at d 128 run as three, all their outputs in registers, no padding row's arithmetic: against four
  // with a zero row (AMD Zen 4, H 8, L_k 16384, one thread, g++ 12 -O2, harness, three alternated runs) fp32
  // 76-80% -> 87-89% of the floor (27.0 -> 22.3 ns per key with K and V in L2); not measured on Zen 5, where
  // three rows as four with the L1 prefetch below read at 84%. Other head sizes keep the zero row: three-row
  // instantiations for all four pairs of d_k and d_v took the float kernels' translation unit (g++ 12 -O2) from 31
  // to 36-37 s and 1.16 to 1.38 MB of code; for d 128 alone 30.5 -> 31.4 s and 1.16 -> 1.22 MB.
  template <std::size_t NR, std::size_t DK, std::size_t DV, row_prefetch PF, class Flush>
  static void few_rows(const attention_problem<T>& p, const KV* kbase, std::ptrdiff_t ks, const KV* vbase,
                       std::ptrdiff_t vs, const score_plan<T>& plan, std::size_t b, std::size_t g, std::size_t k0,
                       std::size_t k1, std::size_t kend, std::size_t chunk, const Flush& flush, const T* qs, T* os,
                       T* ms, T* ls, const std::size_t* limits, const std::size_t* ends, std::size_t r0 = 0,
                       std::size_t pf_end = 0) {
    constexpr std::size_t RV = 24 / DV < NR ? 24 / DV : NR;  // rows whose outputs stay in registers
    // Four fp32 rows at d_k and d_v 128, the heaviest loop: each key, the whole K and V rows prefetch_keys on are
    // prefetched into L1, one line of each per turn of a rolled loop (Zen 5, H 8, L_k 16384, one thread,
    // binaries alternated, medians of 7 rounds): g++ 12 -O2 72-77% -> 81-86% of the read bandwidth, -O3
    // -march=native 71-74% -> 80-82%, clang 14 72% -> 83%; three rows 76% -> 84%; bench_decode (four rows, one
    // thread, H 8 and 32, L_k 4096 to 65536, alternated binaries, five runs) 84% -> 88% on average over the
    // cells, though single full runs after it (81-87%) overlap those before (81-85%). The form matters and
    // why is not established (docs/decoding-log.md): the same 16 prefetches unrolled did nothing (61-80%, 67-81%
    // without; prefetch_key's form, K's lines then V's, among them), nor a rolled loop that g++ compiled with
    // indexed addresses (73-76%), nor an out-of-line function (74-76%), nor the prefetches before the dots
    // (70-73%). Not for two fp32 rows (91% -> 86-88%). Three and four 16-bit rows (at d 128 on Zen 5, where they
    // take few_rows) gain from the same prefetch further on, 24 keys (prefetch_keys_16; see four_rows_near_keys),
    // where 8 keys on did nothing (docs/decoding-log.md, seventh session: four bf16 rows 71-78% -> 67-75%, f16
    // 70-75% -> 67-73%).
    // Also tried: one line per row (60-62%), half of each row (59-63%), into L2 (76-78%), 12 to 24 keys on
    // (75-84%).
    // On AMD Zen 4 (family 0x19; AVX-512 on 256-bit units, 24 GB/s on one core) the same prefetches are a loss
    // and prefetches into L2 further ahead a large gain (H 8, L_k 16384, one thread, g++ 12 -O2, binaries
    // alternated, medians of 5): into L1 8 keys on 44-48% of the read bandwidth, none 51-59%, into L2 16 keys on
    // 62-84%, 12 keys 71-74%, 24 keys 68-74%, 32 keys 69-74%, 8 keys 67-70%, 64 keys 61-65%. So few_rows_any
    // takes the L1 form on Zen 5 (family 0x1a), where it was measured, and the L2 form elsewhere. (Four 16-bit
    // rows on Zen 4: no gain at any distance into L1 or L2, 42-67% with against 54-69% without; one fp32 row: none
    // either, 66-83% against 72-84%.) The two forms cost a second instantiation of this function: the float
    // kernels' translation unit (examples/support/kernels_float.cpp, g++ 12 -O2) 23.8-26.0 -> 26.4-26.9 s, its
    // code 1002 -> 1018 KB. On CPUs other than AMD's, three and four fp32 rows at d 128 take four_rows instead
    // (see four_rows_prefetch_keys).
    constexpr bool pf = PF != row_prefetch::none;
    constexpr bool far = PF == row_prefetch::l2_far;
    constexpr std::size_t pf_keys = far ? prefetch_keys_far : sizeof(KV) < sizeof(T) ? prefetch_keys_16 : prefetch_keys;
    constexpr std::size_t dkp = DK * W, dvp = DV * W;
    const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
    const few_rows_set<NR> rs(p, plan, limits, ends, b, g, k1, r0);
    if (pf_end < kend) pf_end = kend;  // (prefetches stop there: a pass over a block of the keys goes on past kend)
    const R fv = V::set1(plan.folded);
    alignas(64) T w[NR][W];  // the current group's weights
    T alpha[NR];             // the factor for each row's output before the current group is added
    // The next group's dots: one vector of partial sums per row and key (acc[r W + x]), or with four rows (quad) one
    // per key, reduce_quad of the four rows' (acc[x]), one store a key instead of four; weigh_all transposes them back
    // (V::transpose_quads) and finishes with reduce_quads: reduce_lanes' bits. Against the four stores (AMD Zen 5,
    // harness, g++ 12 -O2, one thread, binaries alternated): K and V in L2 (H 1, L_k 2048) fp32 16.9-17.4 ->
    // 14.6-15.5 ns a key, bf16 12.5-12.7 -> 12.0-12.2, f16 12.4-12.9 -> 12.0-12.4; from memory (H 8, L_k 16384,
    // seven alternations) no change: fp32 81-89% -> 84-87% of the read bandwidth, bf16 79-86% -> 80-85%, f16
    // 80-86% -> 80-84%. The float kernels' code 1349794 -> 1332862 bytes.
    constexpr bool quad = NR == 4;
    static_assert(!quad || W == 16, "few_rows: four rows' dots in quads need 16 lanes");
    R acc[quad ? W : NR * W];
    const auto keep_dots = [&](std::size_t x, const R* a) ATTNX_INLINE_LAMBDA {
      if constexpr (quad) {
        acc[x] = V::reduce_quad(a);
      } else {
        ATTNX_UNROLL
        for (std::size_t r = 0; r < NR; ++r) acc[r * W + x] = a[r];
      }
    };
    R o[RV ? RV : 1][DV];
    // bf16 K: the dots in four_rows' form (q in the even/odd order, K widened 2 W values at a time: rows_dot), so
    // that three or four bf16 rows give the same bits whichever of the two loops the CPU's tuning takes (but for the
    // sign of a zero output, as with fp32 rows: see four_rows_prefetch_keys).
    constexpr bool pairs = std::is_same_v<KV, bf16>;
    const dot_order_q<pairs, NR * dkp> qd(qs);
    ATTNX_UNROLL
    for (std::size_t r = 0; r < RV; ++r) {
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DV; ++c) o[r][c] = V::load(os + r * dvp + c * W);  // (zero but in block passes)
    }
    const auto weigh_all = [&](std::size_t j0) ATTNX_INLINE_LAMBDA {
      std::size_t live[NR];
      R sv[NR];
      R qd4[quad ? NR : 1][4];  // (quad) row r's reduce_quad for keys 4k to 4k + 3: qd4[r][k]
      if constexpr (quad) {
        ATTNX_UNROLL
        for (std::size_t k = 0; k < 4; ++k) {
          R d[4];
          V::transpose_quads(acc + 4 * k, d);
          ATTNX_UNROLL
          for (std::size_t r = 0; r < NR; ++r) qd4[r][k] = d[r];
        }
      }
      const auto dots = [&](std::size_t r) ATTNX_INLINE_LAMBDA {
        if constexpr (quad) return V::reduce_quads(qd4[r]);
        else return V::reduce_lanes(acc + r * W);
      };
      const unsigned slow = rs.quick(j0, fv, dots, live, sv, w, alpha, ms, ls);  // the rows weigh_quick did not settle
      if (slow) [[unlikely]] {  // weigh out of line: the outputs in registers stored around it, not live across
        ATTNX_UNROLL
        for (std::size_t r = 0; r < RV; ++r) {
          ATTNX_UNROLL
          for (std::size_t c = 0; c < DV; ++c) V::store(os + r * dvp + c * W, o[r][c]);
        }
        for (std::size_t r = 0; r < NR; ++r)
          if (slow >> r & 1u) alpha[r] = rs.full(r, j0, live[r], sv[r], w[r], ms[r], ls[r]);
        ATTNX_UNROLL
        for (std::size_t r = 0; r < RV; ++r) {
          ATTNX_UNROLL
          for (std::size_t c = 0; c < DV; ++c) o[r][c] = V::load(os + r * dvp + c * W);
        }
      }
    };
    const auto dots_apart = [&](std::size_t j0) ATTNX_INLINE_LAMBDA {  // keys past kend repeat the last
      const std::size_t n = alg::min(W, kend - j0);
      for (std::size_t x = 0; x < W; ++x) {
        const KV* kx = kbase + sz(j0 + alg::min(x, n - 1)) * ks;
        R a[NR];
        rows_dot<NR, DK, pairs>(qd.p, kx, a);
        keep_dots(x, a);
      }
      weigh_all(j0);
    };
    const auto rescale = [&]() ATTNX_INLINE_LAMBDA {  // the outputs in registers, then those in L1
      ATTNX_UNROLL
      for (std::size_t r = 0; r < RV; ++r) {
        if (alpha[r] == T(1)) continue;
        const R a = V::set1(alpha[r]);
        ATTNX_UNROLL
        for (std::size_t c = 0; c < DV; ++c) o[r][c] = V::mul(o[r][c], a);
      }
      rescale_rows<DV>(os, RV, NR, alpha);
    };
    // Key x of the group at vg, weighted into every row's output.
    const auto add_value = [&](const KV* vg, std::size_t x) ATTNX_INLINE_LAMBDA {
      const KV* vx = vg + sz(x) * vs;
      R wv[NR];
      ATTNX_UNROLL
      for (std::size_t r = 0; r < NR; ++r) wv[r] = V::set1(w[r][x]);
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DV; ++c) {
        R vv = load_kv(vx + c * W);
#if defined(__GNUC__)
        // Loaded once: g++ 12 with -march=native otherwise reads it again as a memory operand of every row's FMA.
        __asm__("" : "+v"(vv));
#endif
        ATTNX_UNROLL
        for (std::size_t r = 0; r < RV; ++r) o[r][c] = V::fmadd(wv[r], vv, o[r][c]);
        ATTNX_UNROLL
        for (std::size_t r = RV; r < NR; ++r) V::store(os + r * dvp + c * W, V::fmadd(wv[r], vv, V::load(os + r * dvp + c * W)));
      }
    };
    // While key x of the group at kx's (key jx) is dotted: the whole K row pf_keys further on and the V row pf_keys
    // after key x of the group at vg prefetched, one line of each per turn of a rolled loop (the form that was
    // measured; see above).
    const auto prefetch_rows = [&](std::size_t jx, const KV* kx, const KV* vg, std::size_t x) ATTNX_INLINE_LAMBDA {
      if constexpr (pf)
        if (jx + pf_keys < pf_end) {
          const char* kp = reinterpret_cast<const char*>(kx + sz(pf_keys) * ks);
          const char* vp = reinterpret_cast<const char*>(vg + sz(x + pf_keys) * vs);
          int n = static_cast<int>(dkp * sizeof(KV) / 64);
#if defined(__GNUC__)
          __asm__("" : "+r"(n));  // a loop, not 16 prefetches in a row (see above)
#endif
          ATTNX_NOUNROLL
          for (int l = 0; l < n; ++l, kp += 64, vp += 64) {
            __builtin_prefetch(kp, 0, far ? 2 : 3);
            __builtin_prefetch(vp, 0, far ? 2 : 3);
          }
        }
    };
    std::size_t boundary = k0 + chunk;
    // Before the group at jn is weighed: at a chunk boundary, the chunk's state out (flush: as in one_row).
    const auto at_boundary = [&](std::size_t jn) ATTNX_INLINE_LAMBDA {
      if (jn != boundary || jn >= kend) return;
      ATTNX_UNROLL
      for (std::size_t r = 0; r < RV; ++r) {
        ATTNX_UNROLL
        for (std::size_t c = 0; c < DV; ++c) {
          V::store(os + r * dvp + c * W, o[r][c]);
          o[r][c] = V::zero();
        }
      }
      flush(jn);
      boundary += chunk;
    };
    if (k0 < kend) dots_apart(k0);
    for (std::size_t j0 = k0; j0 < kend; j0 += W) {
      const std::size_t jn = j0 + W;
      const KV* vg = vbase + sz(j0) * vs;
      rescale();
      if (jn + W <= kend) {  // this group's values with the next (whole) group's dots
        const KV* kn = kbase + sz(jn) * ks;
        for (std::size_t x = 0; x < W; ++x) {
          const KV* kx = kn + sz(x) * ks;
          const T* q = qd.p;
#if defined(__GNUC__)
          __asm__("" : "+r"(q));  // q read by the FMAs from L1: in registers it would push the outputs out
#endif
          R a[NR];
          rows_dot<NR, DK, pairs>(q, kx, a);
          prefetch_rows(jn + x, kx, vg, x);
          add_value(vg, x);
#if defined(__GNUC__)
          // One statement joining the key's dots and values: g++ 12 otherwise splits the loop in two (all 16
          // dots, then all 16 values: loop distribution), the order this loop exists to avoid.
          __asm__("" : "+v"(a[0]) : "v"(o[0][0]));
#endif
          keep_dots(x, a);
        }
        at_boundary(jn);
        weigh_all(jn);
      } else {
        const std::size_t nv = alg::min(W, kend - j0);
        for (std::size_t x = 0; x < nv; ++x) add_value(vg, x);
        at_boundary(jn);
        if (jn < kend) dots_apart(jn);
      }
    }
    ATTNX_UNROLL
    for (std::size_t r = 0; r < RV; ++r) {
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DV; ++c) V::store(os + r * dvp + c * W, o[r][c]);
    }
  }
  // ---- three or four rows, keys four at a time ----------------------------------------------------------
  // Three or four rows (NR) of 16-bit K and V (bf16, f16) with d_k and d_v of 4 or 8 vectors but at d 128 on AMD
  // Zen 5 (few_rows there: see four_rows_near_keys), and of fp32 K and V at d 128 on CPUs other than AMD's (see
  // four_rows_prefetch_keys), on AVX-512, in float; three rows as three at
  // d 128, as four with a zero row otherwise (see few_rows; three against four with
  // the zero row, AMD Zen 4, H 8, L_k 16384, one thread, g++ 12 -O2, harness, three alternated runs: bf16 150-178%
  // -> 169-192% of the fp32 floor, f16 156-182% -> 182-206%; in L2 23.1 -> 19.3 and 23.5 -> 21.0 ns per key).
  // The same pass as few_rows (this group's values with the next group's dots, the same weighing against a
  // lagging reference), but each step takes four keys:
  //   - the dots of four rows x four keys share every K vector and every q vector: per vector of d_k, 4 K and 4 q
  //     loads for 16 FMAs (few_rows: 1 K and 4 q loads for 4 FMAs), each step's 16 dot vectors reduced to four
  //     (vec::reduce_quad; reduce_quads at the end of the group gives reduce_lanes' bits);
  //   - the values of four keys go into each output vector between one load and one store in L1 (every output
  //     lives in L1, the step's 16 weights in registers): 4 V loads, 4 output loads and stores for 16 FMAs.
  // Counted in the source: about 36 loads and 9 stores per key instead of about 60 and 12, for the same 64 FMAs.
  // The K and V rows of a step are read across the four rows a vector at a time, an order the hardware prefetcher
  // does not follow
  // (AMD Zen 4: without software prefetch 34% of the read bandwidth for four fp32 rows, where few_rows' rows read
  // whole reach 51-59%), so each step prefetches into L2 the K and V lines four_rows_prefetch_keys on, a line per
  // vector of the step's loads (spread: the same prefetches in a burst after the step, four fp32 rows read at 46-48%
  // against 69-74%).
  // AMD Zen 4 (d 128, H 8, L_k 16384, one thread, g++ 12 -O2, harness, medians of 5 rounds, three alternated
  // runs): four bf16 rows 104-112% -> 136-163% of the fp32 read floor (36-38 -> 26-28 ns per key), four f16 rows
  // 104-112% -> 130-149%; with K and V in L2 27.3 -> 24.1 ns per key (bf16). bench_decode (one thread, H 8 and 32,
  // L_k 16384 and 65536, binaries alternated three times): 16-bit four rows paired with fp32 1.17-1.70x -> 1.68-2.03x.
  // Prefetch distance: 24, 32 and 48 keys the same within the noise, none 104-114%, K only 83-88%, V only 62-75%
  // (bf16). For fp32 K and V on AMD Zen 4 it was no faster from memory (69-74% of the floor, as few_rows, though
  // 29.8 -> 23.8 ns per key in L2; bench_decode 57-75% against 69-78% on one thread), so fp32 keeps few_rows (and
  // its prefetches) on AMD (docs/decoding-log.md, tenth session). On the Intel Xeon of the seventeenth to nineteenth
  // sessions (family 6 model 207) it is faster: d 128, H 8, L_k 16384, one thread, g++ 12 -O2, harness, binaries
  // alternated six times, four fp32 rows 81-86% -> 85-87% of the floor (few_rows with its L2 prefetch 16 keys on;
  // better in every pair), three rows 76-82% -> 87-96% (four alternations); in L2 four rows 40-42 -> 30-36 ns per
  // key, three 27-35 -> 30-38; two threads the same within the noise. So three and four fp32 rows at d 128 take
  // four_rows on every CPU but AMD's (few_rows_any; decode_family); the bits are the same either way (the same dot
  // chains, reduce_quads giving reduce_lanes' bits, the values added key by key in order), but for the sign of a
  // zero output: a short last step adds its padding slots as 0 x 0, which turns an output of -0 into +0 where
  // few_rows leaves it (reached only through a rescale by 0 of a negative output). test_decode compares the bits
  // under every tuning. Prefetch distance for fp32 on that Xeon: 16, 24, 32, 48, 64 keys within the noise.
  // fp32 rows (so far taken only off AMD) also prefetch each step's K and V rows prefetch_keys (8) on into L1, whole
  // rows after the step, besides the L2 prefetch 32 keys on (as one 16-bit row does; the same Xeon on a new boot,
  // 2026-11-28, four fp32 rows, harness, eleven alternations on one thread: 82-92% -> 85-97% of the floor, mean 87
  // -> 90%, better in nine; two threads, three: 81-84% -> 84-85%). Four bf16 rows with it: 150-169% -> 146-158% of
  // the fp32 floor, so 16-bit rows keep the L2 prefetch alone.
  // bf16 K and V are widened 2 W values at a time (V::load_bf16_pairs: one 64-byte load, a shift for the values at
  // even indices, an AND for those at odd ones) instead of W at a time (a widening and a shift per vector): half
  // the vector operations of the conversions (counted in the source). q and the outputs are
  // kept in the same even/odd order (the outputs put back in order before each flush and at the end), and the
  // item's first group (dots_apart) takes the same FMA chain (rows_dot), so that the bits do not depend on where a
  // thread's run of chunks starts. AMD Zen 4, d 128, H 8, L_k 16384, one thread, harness, binaries alternated: four bf16
  // rows with K and V in L2 24.5 -> 23.8 ns per key (g++ 12 -O2), 26.5 -> 24.1 (-O3 -march=native); three rows
  // 19.6 -> 18.4 (-O2); from memory four rows 140-150% -> 147-161% of the fp32 floor (-O2, three alternations),
  // 134-146% -> 132-154% (-O3 -march=native, four: one round at 132% in a noisy minute). f16 has no such form
  // (vcvtph2ps is already one operation per W values).
  static constexpr std::size_t four_rows_prefetch_keys = 32;
  // 16-bit K and V: each line also prefetched into L1 this many keys on, beside its L2 prefetch and next to it in the
  // step (one prefetcht0 per line read). From memory, the step waited on its K and V loads (in `perf`, sampled
  // on the cpu clock: 36% of the step's samples on the 64 widening loads, 10% with K and V in L2), so lines the
  // L2 prefetch 32 keys on had asked for were not all there yet. The Intel Xeon of the twentieth to twenty-fifth
  // sessions (family 6 model 207), d 128, H 8, L_k 16384, g++ 12 -O2, harness, binaries alternated, paired with
  // fp32 in each: one thread bf16 1.773-1.777x -> 1.843-1.863x (four alternations), f16 1.784-1.795x ->
  // 1.848-1.888x (two); two threads bf16 1.733-1.774x -> 1.768-1.844x (five), f16 1.662-1.731x -> 1.781-1.831x
  // (four). Into L2 as well instead (8 or 16 keys on) or into L1 4 or 16 keys on: between the two (1.70-1.87x).
  // (Whole rows into L1 after each step, as fp32 rows do, had been a loss: 150-169% -> 146-158% of the fp32 floor.)
  // Not measured on Zen 4, where 16-bit rows take four_rows too (the L1 prefetches of few_rows' time, whole rows,
  // were no gain there for four 16-bit rows).
  // On AMD Zen 5 (family 0x1a) three and four 16-bit rows at d_k = d_v = 128 take few_rows instead, with its L1
  // prefetch prefetch_keys_16 (24) keys on (below); other head sizes were not measured there and keep four_rows. The
  // two loops cost the same with K and V in L2 (bf16 12.7 ns a key, f16 12.4-12.9), but from memory few_rows,
  // which reads each K and V row whole and in order, keeps up and four_rows, reading four rows a vector at a time,
  // does not (2026-11-29, EPYC family 0x1a, one core reading 35-41 GB/s; d 128, H 8, L_k 16384, one thread, g++ 12
  // -O2, harness, paired with fp32 in each round, medians of 9-11 rounds): four_rows bf16 1.33-1.69x, f16
  // 1.63-1.79x; few_rows without prefetch bf16 1.81-1.95x, f16 1.91-1.99x (with whole rows into L1 8 keys on
  // 1.81 / 1.92x, into L2 16 keys on 1.83 / 1.85x). Nor did four_rows gain enough from other prefetches there (far
  // prefetch only, into L1 or non-temporal, 16-48 keys on: -0.02 to +0.28x; the lines in row order: nothing).
  // bench_decode, four 16-bit rows paired, one run before and four after: one thread 1.28-1.69x -> 1.80-1.96x, two
  // 1.72-1.84x -> 1.84-2.06x.
  // The prefetch 24 keys on (2026-11-29 evening, the same boot, harness, paired with fp32 in each round, against
  // none in the same run): one thread, H 8, L_k 16384, four rows, bf16 1.83-1.99x -> 2.03-2.12x, f16 1.91-1.95x ->
  // 2.04-2.05x (two runs; three more in ns a key: bf16 -2 to -8%, f16 -5 to -9%); H 32: bf16 1.84-1.87x ->
  // 1.94-1.97x, f16 1.82-1.83x -> 1.95-1.96x; L_k 65536: bf16 1.88-1.98x -> 1.96-2.04x, f16 1.89-1.95x ->
  // 2.00-2.09x; three rows: bf16 2.04-2.10x -> 2.06-2.16x, f16 2.06-2.07x -> 2.14-2.17x. Two threads: where the
  // two cores read fast (fp32 16.6 ns a key) bf16 1.81x -> 1.98x, f16 1.72x -> 1.94x; where they read at the
  // floor (22-23 ns) about the same (bf16 1.99-2.00x -> 1.94-2.02x, f16 1.99-2.01x -> 1.98-2.00x; H 32, L_k
  // 65536 1.89-1.94x -> 1.89-1.97x). 16 keys on about the same, 8 or 12 keys none (8: 1.94 / 1.91x against 1.98 /
  // 1.91x), 32 about the same as 24. Its cost with K and V in cache (H 1, L_k 2048, in L2; H 8, L_k 512 and 2048,
  // in L3): 11.9-13.2 -> 12.9-13.9 ns a key, 5-8%. One 16-bit row on Zen 5 was no better with prefetches (one_row's
  // Intel ones, 8 or 24 keys on: bf16 1.69-1.81x, f16 1.75-1.76x against 1.97-2.01x and 1.93-1.95x without; into
  // L1 alone 16-24 keys on: bf16 1.82-1.91x, f16 1.87-1.88x).
  // few_rows takes bf16 dots in this loop's form (rows_dot), so the bits are those of four_rows (but for the sign
  // of a zero output, as with fp32 rows). The four more instantiations of few_rows (three and four rows, bf16 and
  // f16): the float kernels' translation unit (examples/support/kernels_float.cpp, g++ 12 -O2) 26.6-28.6 ->
  // 30.4-30.9 s, its code 1275 -> 1367 KB.
  static constexpr std::size_t four_rows_near_keys = 8;
  template <std::size_t NR, std::size_t DK, std::size_t DV, class Flush>
  static void four_rows(const attention_problem<T>& p, const KV* kbase, std::ptrdiff_t ks, const KV* vbase,
                        std::ptrdiff_t vs, const score_plan<T>& plan, std::size_t b, std::size_t g, std::size_t k0,
                        std::size_t k1, std::size_t kend, std::size_t chunk, const Flush& flush, const T* qs, T* os,
                        T* ms, T* ls, const std::size_t* limits, const std::size_t* ends) {
    constexpr std::size_t S = 4;  // keys per step (NR: 3 or 4 rows)
    constexpr std::size_t pf_keys = four_rows_prefetch_keys;
    constexpr bool near = sizeof(KV) < sizeof(T);  // 16-bit K and V: each line also into L1 near_keys on
    constexpr std::size_t near_keys = four_rows_near_keys;
    constexpr std::size_t dkp = DK * W, dvp = DV * W;
    const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
    const few_rows_set<NR> rs(p, plan, limits, ends, b, g, k1);
    const R fv = V::set1(plan.folded);
    alignas(64) T w[NR][W];  // the current group's weights
    T alpha[NR];
    R part[NR][W / S];       // the next group's dots, reduce_quad of each step's four
    // bf16 K and V are widened 2 W values at a time into their even- and odd-indexed values (load_bf16_pairs); q and
    // the outputs follow that order (per 2 W elements: the W even-indexed, then the W odd-indexed), and the outputs
    // are put back in order before every flush and at the end (see the comment above four_rows_prefetch_keys).
    constexpr bool pairs = std::is_same_v<KV, bf16>;
    const dot_order_q<pairs, NR * dkp> qd(qs);
    const T* qm = qd.p;
    const auto in_order = [&]() ATTNX_INLINE_LAMBDA {
      if constexpr (pairs) from_pair_order(os, NR * dvp);
    };
    const auto weigh_all = [&](std::size_t j0) ATTNX_INLINE_LAMBDA {
      std::size_t live[NR];
      R sv[NR];
      const auto dots = [&](std::size_t r) ATTNX_INLINE_LAMBDA { return V::reduce_quads(part[r]); };
      const unsigned slow = rs.quick(j0, fv, dots, live, sv, w, alpha, ms, ls);
      for (std::size_t r = 0; slow && r < NR; ++r)
        if (slow >> r & 1u) [[unlikely]] alpha[r] = rs.full(r, j0, live[r], sv[r], w[r], ms[r], ls[r]);
    };
    // The dots of keys kx .. kx + 3 (rows ks apart) for every row, into part[.][s]; the same rows at kpf prefetched
    // (and with 16-bit K those at kpn into L1).
    const auto dots4 = [&](const KV* kx, std::size_t s, const T* q, const KV* kpf, const KV* kpn) ATTNX_INLINE_LAMBDA {
      R a[NR][S];
      if constexpr (pairs) {  // vectors c and c + 1 of q against the even and odd values of each key's 2 W
        ATTNX_UNROLL
        for (std::size_t c = 0; c < DK; c += 2) {
          R ke[S], ko[S];
          ATTNX_UNROLL
          for (std::size_t j = 0; j < S; ++j)
            V::load_bf16_pairs(reinterpret_cast<const std::uint16_t*>(kx + sz(j) * ks + sz(c * W)), ke[j], ko[j]);
          ATTNX_UNROLL
          for (std::size_t j = 0; j < S; ++j) __builtin_prefetch(kpf + sz(j) * ks + sz(c * W), 0, 2);  // its line
          if constexpr (near) {  // and into L1, nearer
            ATTNX_UNROLL
            for (std::size_t j = 0; j < S; ++j) __builtin_prefetch(kpn + sz(j) * ks + sz(c * W), 0, 3);
          }
          ATTNX_UNROLL
          for (std::size_t r = 0; r < NR; ++r) {
            const R qe = V::load(q + r * dkp + c * W), qo = V::load(q + r * dkp + (c + 1) * W);
            ATTNX_UNROLL
            for (std::size_t j = 0; j < S; ++j) {
              a[r][j] = c == 0 ? V::mul(qe, ke[j]) : V::fmadd(qe, ke[j], a[r][j]);
              a[r][j] = V::fmadd(qo, ko[j], a[r][j]);
            }
          }
        }
        ATTNX_UNROLL
        for (std::size_t r = 0; r < NR; ++r) part[r][s] = V::reduce_quad(a[r]);
        return;
      }
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DK; ++c) {
        R kv[S];
        ATTNX_UNROLL
        for (std::size_t j = 0; j < S; ++j) kv[j] = load_kv(kx + sz(j) * ks + sz(c * W));
        if ((c * W * sizeof(KV)) % 64 == 0) {  // a line of each row
          ATTNX_UNROLL
          for (std::size_t j = 0; j < S; ++j) __builtin_prefetch(kpf + sz(j) * ks + sz(c * W), 0, 2);
          if constexpr (near) {
            ATTNX_UNROLL
            for (std::size_t j = 0; j < S; ++j) __builtin_prefetch(kpn + sz(j) * ks + sz(c * W), 0, 3);
          }
        }
        ATTNX_UNROLL
        for (std::size_t r = 0; r < NR; ++r) {
          const R qv = V::load(q + r * dkp + c * W);
          ATTNX_UNROLL
          for (std::size_t j = 0; j < S; ++j) a[r][j] = c == 0 ? V::mul(qv, kv[j]) : V::fmadd(qv, kv[j], a[r][j]);
        }
      }
      ATTNX_UNROLL
      for (std::size_t r = 0; r < NR; ++r) part[r][s] = V::reduce_quad(a[r]);
    };
    const auto dots_apart = [&](std::size_t j0) ATTNX_INLINE_LAMBDA {  // keys past kend repeat the last
      const std::size_t n = alg::min(W, kend - j0);
      for (std::size_t s = 0; s < W / S; ++s) {
        R a[NR][S];
        ATTNX_UNROLL
        for (std::size_t j = 0; j < S; ++j) {
          const KV* kx = kbase + sz(j0 + alg::min(s * S + j, n - 1)) * ks;
          R d[NR];
          rows_dot<NR, DK, pairs>(qm, kx, d);  // (dots4's chains: the bits do not depend on where a run starts)
          ATTNX_UNROLL
          for (std::size_t r = 0; r < NR; ++r) a[r][j] = d[r];
        }
        ATTNX_UNROLL
        for (std::size_t r = 0; r < NR; ++r) part[r][s] = V::reduce_quad(a[r]);
      }
      weigh_all(j0);
    };
    // Keys x .. x + n - 1 of the group at vg (n <= S) weighted into every row's output; the n rows at vpf (rows vs
    // apart) prefetched, a line per vector loaded, and with 16-bit V the S rows at vpn into L1 unless it is null.
    const auto values = [&](const KV* vg, std::size_t x, std::size_t n, const KV* vpf, const KV* vpn) ATTNX_INLINE_LAMBDA {
      R wv[NR][S];
      ATTNX_UNROLL
      for (std::size_t r = 0; r < NR; ++r) {
        ATTNX_UNROLL
        for (std::size_t j = 0; j < S; ++j) wv[r][j] = V::set1(j < n ? w[r][x + j] : T(0));
      }
      const KV* vx = vg + sz(x) * vs;
      if constexpr (pairs) {  // output vectors c and c + 1 (in the pairs' order) from each key's 2 W values
        ATTNX_UNROLL
        for (std::size_t c = 0; c < DV; c += 2) {
          R ve[S], vo[S];
          ATTNX_UNROLL
          for (std::size_t j = 0; j < S; ++j) {
            if (j < n)
              V::load_bf16_pairs(reinterpret_cast<const std::uint16_t*>(vx + sz(j) * vs + sz(c * W)), ve[j], vo[j]);
            else
              ve[j] = vo[j] = V::zero();  // (a padding slot: weight 0, and 0 x an infinite value is NaN)
          }
          ATTNX_UNROLL
          for (std::size_t j = 0; j < S; ++j) __builtin_prefetch(vpf + sz(j < n ? j : 0) * vs + sz(c * W), 0, 2);
          if (near && vpn) {
            ATTNX_UNROLL
            for (std::size_t j = 0; j < S; ++j) __builtin_prefetch(vpn + sz(j) * vs + sz(c * W), 0, 3);
          }
          ATTNX_UNROLL
          for (std::size_t r = 0; r < NR; ++r) {
            ATTNX_UNROLL
            for (std::size_t h = 0; h < 2; ++h) {
              R o = V::load(os + r * dvp + (c + h) * W);
              ATTNX_UNROLL
              for (std::size_t j = 0; j < S; ++j) o = V::fmadd(wv[r][j], h == 0 ? ve[j] : vo[j], o);
              V::store(os + r * dvp + (c + h) * W, o);
            }
          }
        }
        return;
      }
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DV; ++c) {
        R vv[S];
        ATTNX_UNROLL
        for (std::size_t j = 0; j < S; ++j) {
          vv[j] = load_kv(vx + sz(j < n ? j : 0) * vs + sz(c * W));
          if (j >= n) vv[j] = V::zero();  // (as above)
        }
        if ((c * W * sizeof(KV)) % 64 == 0) {
          ATTNX_UNROLL
          for (std::size_t j = 0; j < S; ++j) __builtin_prefetch(vpf + sz(j < n ? j : 0) * vs + sz(c * W), 0, 2);
          if (near && vpn) {
            ATTNX_UNROLL
            for (std::size_t j = 0; j < S; ++j) __builtin_prefetch(vpn + sz(j) * vs + sz(c * W), 0, 3);
          }
        }
        ATTNX_UNROLL
        for (std::size_t r = 0; r < NR; ++r) {
          R o = V::load(os + r * dvp + c * W);
          ATTNX_UNROLL
          for (std::size_t j = 0; j < S; ++j) o = V::fmadd(wv[r][j], vv[j], o);
          V::store(os + r * dvp + c * W, o);
        }
      }
    };
    std::size_t boundary = k0 + chunk;
    const auto at_boundary = [&](std::size_t jn) ATTNX_INLINE_LAMBDA {
      if (jn != boundary || jn >= kend) return;
      in_order();
      flush(jn);
      boundary += chunk;
    };
    if (k0 < kend) dots_apart(k0);
    for (std::size_t j0 = k0; j0 < kend; j0 += W) {
      const std::size_t jn = j0 + W;
      const KV* vg = vbase + sz(j0) * vs;
      rescale_rows<DV>(os, 0, NR, alpha);
      if (jn + W <= kend) {  // this group's values with the next (whole) group's dots
        const KV* kn = kbase + sz(jn) * ks;
        ATTNX_NOUNROLL
        for (std::size_t s = 0; s < W / S; ++s) {
          const T* q = qm;
#if defined(__GNUC__)
          __asm__("" : "+r"(q));  // q read from L1 at every step, not held in registers across the loop
#endif
          // The rows pf_keys on, or near the item's end its last four keys (no prefetch past them, no test).
          const std::size_t pf_at = alg::min(s * S + pf_keys, kend - jn - S);
          const std::size_t pn_at = alg::min(s * S + near_keys, kend - jn - S);
          dots4(kn + sz(s * S) * ks, s, q, kn + sz(pf_at) * ks, kn + sz(pn_at) * ks);
          values(vg, s * S, S, vg + sz(pf_at) * vs, near ? vg + sz(pn_at) * vs : nullptr);
          if constexpr (sizeof(KV) == sizeof(T)) {  // fp32: the step's rows prefetch_keys on into L1 as well
            if (s * S + prefetch_keys + S <= kend - jn) {
              ATTNX_UNROLL
              for (std::size_t j = 0; j < S; ++j)
                prefetch_key(kn + sz(s * S + j) * ks, ks, vg + sz(s * S + j) * vs, vs, prefetch_keys, dkp * sizeof(KV),
                             dvp * sizeof(KV));
            }
          }
        }
        at_boundary(jn);
        weigh_all(jn);
      } else {
        const std::size_t nv = alg::min(W, kend - j0);
        for (std::size_t x = 0; x < nv; x += S) values(vg, x, alg::min(S, nv - x), vg + sz(x) * vs, nullptr);  // (the rows read)
        at_boundary(jn);
        if (jn < kend) dots_apart(jn);
      }
    }
    in_order();
  }
  // few_rows with NR, DK and DV from the rows and p.
  template <class Flush>
  static void few_rows_any(const attention_problem<T>& p, const KV* kbase, std::ptrdiff_t ks, const KV* vbase,
                           std::ptrdiff_t vs, const score_plan<T>& plan, std::size_t b, std::size_t g, std::size_t k0,
                           std::size_t k1, std::size_t kend, std::size_t chunk, const Flush& flush, const T* qs, T* os,
                           T* ms, T* ls, const std::size_t* limits, const std::size_t* ends) {
    const std::size_t rows = (p.heads / p.kv_heads) * p.lq;
    const auto go = [&](auto nr_c, auto dk_c, auto dv_c) {
      constexpr std::size_t nr = decltype(nr_c)::value, dk = decltype(dk_c)::value, dv = decltype(dv_c)::value;
      const auto with = [&](auto pf_c) {
        few_rows<nr, dk, dv, decltype(pf_c)::value>(p, kbase, ks, vbase, vs, plan, b, g, k0, k1, kend, chunk, flush, qs,
                                                    os, ms, ls, limits, ends);
      };
      using pf_t = row_prefetch;
      const auto four = [&](auto nr_4) ATTNX_INLINE_LAMBDA {  // (generic: instantiated only where called)
        four_rows<decltype(nr_4)::value, dk, dv>(p, kbase, ks, vbase, vs, plan, b, g, k0, k1, kend, chunk, flush, qs, os, ms,
                                                 ls, limits, ends);
      };
      if constexpr (nr >= 3 && dk == 8 && dv == 8 && sizeof(KV) == sizeof(T)) {  // fp32: few_rows on AMD, else four_rows
        const unsigned family = decode_family();
        if (family == 0)
          four(nr_c);
        else if constexpr (nr == 3)
          with(std::integral_constant<pf_t, pf_t::none>{});
        else if (family == 0x1a)
          with(std::integral_constant<pf_t, pf_t::l1_near>{});
        else
          with(std::integral_constant<pf_t, pf_t::l2_far>{});
      } else if constexpr (nr >= 3 && sizeof(KV) < sizeof(T)) {  // three or four 16-bit rows: see four_rows
        // (few_rows on Zen 5 at d 128, where it was measured: see four_rows_near_keys)
        if constexpr (dk == 8 && dv == 8) {
          if (decode_family() == 0x1a) return with(std::integral_constant<pf_t, pf_t::l1_near>{});
        }
        four(nr_c);
      } else {
        with(std::integral_constant<pf_t, pf_t::none>{});
      }
    };
    using c2 = std::integral_constant<std::size_t, 2>;
    using c3 = std::integral_constant<std::size_t, 3>;
    using c4 = std::integral_constant<std::size_t, 4>;
    using c8 = std::integral_constant<std::size_t, 8>;
    const auto by_dv = [&](auto nr_c, auto dk_c) { return p.dv == 8 * W ? go(nr_c, dk_c, c8{}) : go(nr_c, dk_c, c4{}); };
    const auto by_dk = [&](auto nr_c) { return p.dk == 8 * W ? by_dv(nr_c, c8{}) : by_dv(nr_c, c4{}); };
    if (rows <= 2) return by_dk(c2{});
    if (rows == 3 && p.dk == 8 * W && p.dv == 8 * W) return go(c3{}, c8{}, c8{});  // (three rows as three: see few_rows)
    if (rows > 4 && p.dk == 8 * W && p.dv == 8 * W)  // five to eight rows at d 128 (few_rows_fit)
      return row_passes(p, kbase, ks, vbase, vs, plan, b, g, k0, kend, chunk, flush, qs, os, ms, ls, limits, ends);
    return by_dk(c4{});
  }
  // Five to eight rows at d 128, block by block of pass_keys keys: rows 0-3 over the block, reading K and V from
  // memory (few_rows' four-row loop with its prefetches: into L1 on Zen 5, into L2 elsewhere), then the other rows
  // over the same block, from L2 (few_rows for 1 to 4 rows, no prefetch). Each pass goes on from the state the last
  // left (few_rows with a first row r0); the chunks' states are handed over between blocks (a block never crosses a
  // chunk boundary, and each pass's own chunk is the whole pass). The same bits as these rows in one pass (the
  // additions of each output in the same order; every harness case, unmasked and masked). Against one pass as eight
  // rows (AMD Zen 5, d 128, H 8, L_k 16384, from memory, g++ 12 -O2, harness, ns per key and head, binaries
  // alternated; fp32 one pass kept three rows' outputs in registers, 16-bit rows added the values by columns):
  //   one thread  fp32 L_q 5 43.8-43.9 -> 36.3-37.6, L_q 6 42.0 -> 41.9, L_q 7 45.0 -> 45.1, L_q 8 median 44.0 -> 44.3
  //               bf16 L_q 5 29.2-29.4 -> 19.9-20.1, 6 29.3 -> 23.8, 7 30.7 -> 24.3, 8 29.2-29.6 -> 26.4-27.1
  //               f16  L_q 5 27.0-27.6 -> 19.9-20.6, 6 27.8 -> 24.4, 7 28.6 -> 25.0, 8 28.0-28.3 -> 27.1-27.8
  //   two threads fp32 L_q 8 26.2-31.5 -> 26.5-32.2, L_q 5 23.9-28.8 -> 24.1-27.6; bf16 L_q 8 17.1-18.4 -> 16.2-16.6,
  //               L_q 5 16.6-18.2 -> 13.1-13.7
  // Eight fp32 rows cost about the four rows' read plus their arithmetic from L2 either way (four rows from memory
  // 29 ns, in L2 13.5-15); five to seven rows save the padding rows' work, and 16-bit rows, bound by arithmetic in
  // one pass, the column pass's. Not measured on Zen 4 or Intel. The float kernels' translation unit (g++ 12 -O2)
  // 38.3 -> 42.0 s, code 1.88 -> 1.98 MB.
  static constexpr std::size_t pass_keys = 256;
  static_assert(pass_keys % W == 0, "row_passes: blocks of whole groups of keys");
  template <class Flush>
  static void row_passes(const attention_problem<T>& p, const KV* kbase, std::ptrdiff_t ks, const KV* vbase,
                         std::ptrdiff_t vs, const score_plan<T>& plan, std::size_t b, std::size_t g, std::size_t k0,
                         std::size_t kend, std::size_t chunk, const Flush& flush, const T* qs, T* os, T* ms, T* ls,
                         const std::size_t* limits, const std::size_t* ends) {
    const std::size_t rows = (p.heads / p.kv_heads) * p.lq;
    constexpr std::size_t dkp = 8 * W, dvp = 8 * W;
    using pf_t = row_prefetch;
    const bool zen5 = decode_family() == 0x1a;
    // The keys [kb, ke) of rows [r0, r0 + NR) (the set's rows past the work item's are padding).
    const auto pass = [&](auto nr_c, auto pf_c, std::size_t r0, std::size_t kb, std::size_t ke) {
      constexpr std::size_t nr = decltype(nr_c)::value;
      std::size_t e = kb;  // the keys any of these rows sees in the block
      for (std::size_t r = r0; r < alg::min(rows, r0 + nr); ++r) e = alg::max(e, alg::min(ke, ends[r]));
      if (e > kb)  // (its chunk: the whole pass, so that it never flushes)
        few_rows<nr, 8, 8, decltype(pf_c)::value>(p, kbase, ks, vbase, vs, plan, b, g, kb, ke, e, e - kb, flush,
                                                   qs + r0 * dkp, os + r0 * dvp, ms + r0, ls + r0, limits, ends, r0, kend);
    };
    for (std::size_t kb = k0; kb < kend;) {
      const std::size_t cb = k0 + ((kb - k0) / chunk + 1) * chunk;  // the next chunk boundary
      const std::size_t ke = alg::min(alg::min(kb + pass_keys, cb), kend);
      using c4 = std::integral_constant<std::size_t, 4>;
      if (zen5) pass(c4{}, std::integral_constant<pf_t, pf_t::l1_near>{}, 0, kb, ke);
      else pass(c4{}, std::integral_constant<pf_t, pf_t::l2_far>{}, 0, kb, ke);
      constexpr auto none = std::integral_constant<pf_t, pf_t::none>{};
      switch (rows - 4) {
        case 1: pass(std::integral_constant<std::size_t, 1>{}, none, 4, kb, ke); break;
        case 2: pass(std::integral_constant<std::size_t, 2>{}, none, 4, kb, ke); break;
        case 3: pass(std::integral_constant<std::size_t, 3>{}, none, 4, kb, ke); break;
        default: pass(c4{}, none, 4, kb, ke); break;  // (eight: few_rows_fit takes no more)
      }
      if (ke == cb && ke < kend) flush(ke);
      kb = ke;
    }
  }

  // Several rows (L_q > 1, or a GQA group): blocks of BK keys. The dots of RB rows x NK keys share each K
  // load, the rest of the score program and the online softmax run per row vectorised over the keys, and the
  // values are accumulated RB rows at a time sharing each V load; the next block's K and V rows are
  // prefetched (into L2) a few rows at a time from every loop over this block (struct ahead).
  static void blocks(const attention_problem<T>& p, const KV* kbase, std::ptrdiff_t ks, const KV* vbase,
                     std::ptrdiff_t vs, const score_plan<T>& plan, std::size_t b, std::size_t g, std::size_t k0,
                     std::size_t kend, const T* qs, T* sc, T* os, T* ms, T* ls, T* as, const std::size_t* limits,
                     const std::size_t* ends) {
    constexpr T inf = std::numeric_limits<T>::infinity();
    const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
    const std::size_t group = p.heads / p.kv_heads, rows = group * p.lq;
    const std::size_t dkp = round_up(p.dk), dvp = round_up(p.dv);
    const auto live_of = [&](std::size_t r, std::size_t j0, std::size_t nb) {
      return ends[r] > j0 ? alg::min(nb, ends[r] - j0) : std::size_t{0};
    };
    const std::size_t dvec = p.dv / W * W;
    const std::size_t kbytes = p.dk * sizeof(KV), vbytes = p.dv * sizeof(KV);
    ahead pf;
    // f(nr) for the row block at r0: RB rows, or RB / 2 for a last block of at most RB / 2 rows.
    const auto by_block = [&](std::size_t r0, auto&& f) {
      if (rows - r0 > RB / 2)
        f(std::integral_constant<std::size_t, RB>{});
      else
        f(std::integral_constant<std::size_t, RB / 2>{});
    };
    for (std::size_t j0 = k0; j0 < kend; j0 += BK) {
      const std::size_t nb = alg::min(BK, kend - j0), nbp = round_up(nb);
      const KV* kb = kbase + sz(j0) * ks;
      const KV* vb = vbase + sz(j0) * vs;
      {  // the next block's rows, spread over this block's work (a unit: 8 vector FMAs of the dots or values)
        const std::size_t nn = j0 + BK < kend ? alg::min(BK, kend - j0 - BK) : 0;
        const std::size_t units = (rows * nb * ((p.dk + W - 1) / W + (p.dv + W - 1) / W) + 7) / 8;
        pf.start(nn ? kb + sz(BK) * ks : kb, ks, nn ? vb + sz(BK) * vs : vb, vs, kbytes, vbytes, nn, units);
      }
      // Dots, RB rows at a time (keys past a row's end are computed with the block's and dropped below; the
      // padding rows' dots are 0 and their weights set to 0 below).
      for (std::size_t r0 = 0; r0 < rows; r0 += RB) {
        std::size_t n = 0;
        for (std::size_t r = r0; r < alg::min(rows, r0 + RB); ++r) n = alg::max(n, live_of(r, j0, nb));
        by_block(r0, [&](auto nr) { dots_rows<decltype(nr)::value>(qs + r0 * dkp, dkp, kb, ks, p.dk, n, sc + r0 * BK, pf); });
      }
      for (std::size_t r = rows; r < padded(rows); ++r) alg::fill_n(sc + r * BK, BK, T(0));
      // The rest of the score program, row by row, then the online softmax, vectorised over the keys.
      for (std::size_t r = 0; r < rows; ++r) {
        T* s = sc + r * BK;
        const std::size_t h = g * group + r / p.lq, i = r % p.lq;
        const std::size_t live = live_of(r, j0, nb);
        std::size_t j = 0;
        if (plan.first == 1)
          for (j = 0; j < live; ++j) s[j] *= plan.folded;
        std::size_t li = 0;
        for (std::size_t si = 0; si < plan.n; ++si) {
          const score_step<T>& st = plan.steps[si];
          if (is_limit(st.kind)) {
            const std::size_t lim = limits[(li++) * rows + r];
            if (si < plan.first) continue;
            for (j = lim > j0 ? lim - j0 : 0; j < live; ++j) s[j] = st.value;
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
                if (!st.mask.at(b, h, i, j0 + j)) s[j] = st.value;
              break;
            case step_kind::additive_mask:
              for (j = 0; j < live; ++j) s[j] += st.bias.at(b, h, i, j0 + j);
              break;
            default: break;
          }
        }
        // Skipped keys (the score program ends them at -inf: weight 0) and the padding to a whole vector.
        for (j = live; j < nbp; ++j) s[j] = -inf;

        as[r] = online_softmax(s, nbp, ms[r], ls[r]);
      }
      // The values, RB rows sharing each V load.
      for (std::size_t r0 = 0; r0 < rows; r0 += RB) {
        std::size_t n = 0;
        for (std::size_t r = r0; r < alg::min(rows, r0 + RB); ++r) n = alg::max(n, live_of(r, j0, nb));
        by_block(r0, [&](auto nr) { pv_block<decltype(nr)::value>(sc + r0 * BK, n, vb, vs, as + r0, os + r0 * dvp, dvp, dvec, pf); });
      }
      for (std::size_t r = 0; r < rows && dvec < p.dv; ++r) {
        const std::size_t live = live_of(r, j0, nb);
        T* o = os + r * dvp;
        const T* s = sc + r * BK;
        for (std::size_t c = dvec; c < p.dv; ++c) {
          T x = o[c] * as[r];
          for (std::size_t j = 0; j < live; ++j) x += s[j] * kv_scalar(vb[sz(j) * vs + sz(c)]);
          o[c] = x;
        }
      }
    }

  }
};
