// attnx decode kernel: a few rows, one pass over the keys (a fragment of tiles/attention_tiles.hpp, once per
// instruction set; taken under AVX-512 in float).
//
// Two to four rows (L_q 2 to 4, or a GQA group of up to four query heads) with d_k and d_v of 4 or 8 vectors: one_row's
// loop for all the rows at once. While this group's V rows are weighted, the next group's dots (every row's, each K
// vector loaded once, q read from L1) are computed key by key, so that every K and V row is read whole and in order,
// the order the hardware prefetcher keeps up with. The outputs of the first RV rows stay in registers (at most 24
// vectors); the other rows' are updated in L1. Four rows keep one vector of dots a key (reduce_quad of the four
// rows'), transposed back before the group's reductions: the same bits, one store a key instead of four. bf16 dots
// take four_rows' form (rows_dot's pairs), so that three or four bf16 rows have the same bits whichever loop the
// tuning takes. Three rows at d 128 run as three; other head sizes as four with a zero row.
// The prefetch PF of the K and V rows further on (the tuning's choice, by CPU): none, into L1 (l1_near), or into L2
// further ahead (l2_far), one line of each per turn of a rolled loop (the form that reads at the floor; unrolled, or
// in a burst, the same prefetches did nothing).
// Five to eight rows at d 128 run in two passes over each block of pass_keys keys (row_passes): rows 0-3 reading K and
// V from memory, then the others from L2, each pass going on from the state the last left: the same additions in the
// same order as one pass, without the padding rows' work.

template <class T, class KV, std::size_t NR, std::size_t DK, std::size_t DV, row_prefetch PF>
struct few_rows_loop : decode_ops<T, KV> {
  using ops = decode_ops<T, KV>;
  using typename ops::R, typename ops::V, typename ops::item;
  using ops::W, ops::sz;
  static constexpr std::size_t RV = 24 / DV < NR ? 24 / DV : NR;  // rows whose outputs stay in registers
  static constexpr bool pf = PF != row_prefetch::none, far = PF == row_prefetch::l2_far;
  // Prefetch distances: into L2 16 keys on; into L1 8 keys on (16-bit rows 24).
  static constexpr std::size_t pf_keys = far ? 16 : sizeof(KV) < sizeof(T) ? 24 : 8;
  static constexpr std::size_t dkp = DK * W, dvp = DV * W;
  static constexpr bool quad = NR == 4, pairs = std::is_same_v<KV, bf16>;
  static_assert(!quad || W == 16, "few_rows: four rows' dots in quads need 16 lanes");

  const item& it;
  const decode_rows<T>& rs;  // the rows from r0: qs, os, ms, ls of this set's row 0
  const row_set<T, KV, NR> set;
  const std::size_t pf_end;  // prefetches stop here (a pass over a block goes on reading past its end)
  const R fv;
  const typename ops::template dot_order_q<pairs, NR * dkp> qd;
  std::size_t boundary;
  alignas(64) T w[NR][W];  // the current group's weights
  T alpha[NR];             // the factor for each row's output before the current group is added
  R acc[quad ? W : NR * W];  // the next group's dots: per row and key, or (quad) per key the four rows' reduce_quad
  R o[RV ? RV : 1][DV];

  few_rows_loop(const item& item_, const decode_rows<T>& rows, std::size_t r0, std::size_t prefetch_end)
      : it(item_), rs(rows), set(item_, r0), pf_end(prefetch_end < item_.kend ? item_.kend : prefetch_end),
        fv(V::set1(item_.plan.folded)), qd(rows.qs), boundary(item_.k0 + item_.chunk) {
    load_outputs();  // (zero but in block passes)
  }

  ATTNX_FORCE_INLINE void keep_dots(std::size_t x, const R* a) {
    if constexpr (quad) {
      acc[x] = V::reduce_quad(a);
    } else {
      ATTNX_UNROLL
      for (std::size_t r = 0; r < NR; ++r) acc[r * W + x] = a[r];
    }
  }
  ATTNX_FORCE_INLINE void store_outputs() {
    ATTNX_UNROLL
    for (std::size_t r = 0; r < RV; ++r) {
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DV; ++c) V::store(rs.os + r * dvp + c * W, o[r][c]);
    }
  }
  ATTNX_FORCE_INLINE void load_outputs() {
    ATTNX_UNROLL
    for (std::size_t r = 0; r < RV; ++r) {
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DV; ++c) o[r][c] = V::load(rs.os + r * dvp + c * W);
    }
  }
  // The group at j0 weighed from its dots: inline for the rows weigh_quick settles, out of line (the outputs in
  // registers stored around it, not live across the call) for the others.
  ATTNX_FORCE_INLINE void weigh_all(std::size_t j0) {
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
    const unsigned slow = set.quick(j0, fv, dots, live, sv, w, alpha, rs.ms, rs.ls);
    if (slow) [[unlikely]] {
      store_outputs();
      for (std::size_t r = 0; r < NR; ++r)
        if (slow >> r & 1u) alpha[r] = set.full(r, j0, live[r], sv[r], w[r], rs.ms[r], rs.ls[r]);
      load_outputs();
    }
  }
  // The dots of the group at j0 computed apart (keys past kend repeat the last), then its weights.
  ATTNX_FORCE_INLINE void dots_apart(std::size_t j0) {
    const std::size_t n = alg::min(W, it.kend - j0);
    for (std::size_t x = 0; x < W; ++x) {
      const KV* kx = it.k + sz(j0 + alg::min(x, n - 1)) * it.ks;
      R a[NR];
      ops::template rows_dot<NR, DK, pairs>(qd.p, kx, a);
      keep_dots(x, a);
    }
    weigh_all(j0);
  }
  ATTNX_FORCE_INLINE void rescale() {  // the outputs in registers, then those in L1
    ATTNX_UNROLL
    for (std::size_t r = 0; r < RV; ++r) {
      if (alpha[r] == T(1)) continue;
      const R a = V::set1(alpha[r]);
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DV; ++c) o[r][c] = V::mul(o[r][c], a);
    }
    row_set<T, KV, NR>::template rescale<DV>(rs.os, RV, NR, alpha);
  }
  // Key x of the group at vg, weighted into every row's output.
  ATTNX_FORCE_INLINE void add_value(const KV* vg, std::size_t x) {
    const KV* vx = vg + sz(x) * it.vs;
    R wv[NR];
    ATTNX_UNROLL
    for (std::size_t r = 0; r < NR; ++r) wv[r] = V::set1(w[r][x]);
    ATTNX_UNROLL
    for (std::size_t c = 0; c < DV; ++c) {
      R vv = ops::load_kv(vx + c * W);
#if defined(__GNUC__)
      __asm__("" : "+v"(vv));  // loaded once: g++ with -march=native reads it again for every row's FMA otherwise
#endif
      ATTNX_UNROLL
      for (std::size_t r = 0; r < RV; ++r) o[r][c] = V::fmadd(wv[r], vv, o[r][c]);
      ATTNX_UNROLL
      for (std::size_t r = RV; r < NR; ++r) V::store(rs.os + r * dvp + c * W, V::fmadd(wv[r], vv, V::load(rs.os + r * dvp + c * W)));
    }
  }
  // While key x of the group at kx's (key jx) is dotted: the whole K row pf_keys on and the V row pf_keys after key x
  // of the group at vg, one line of each per turn of a rolled loop.
  ATTNX_FORCE_INLINE void prefetch_rows(std::size_t jx, const KV* kx, const KV* vg, std::size_t x) const {
    if constexpr (pf)
      if (jx + pf_keys < pf_end) {
        const char* kp = reinterpret_cast<const char*>(kx + sz(pf_keys) * it.ks);
        const char* vp = reinterpret_cast<const char*>(vg + sz(x + pf_keys) * it.vs);
        int n = static_cast<int>(dkp * sizeof(KV) / 64);
#if defined(__GNUC__)
        __asm__("" : "+r"(n));  // a loop, not 16 prefetches in a row
#endif
        ATTNX_NOUNROLL
        for (int l = 0; l < n; ++l, kp += 64, vp += 64) {
          __builtin_prefetch(kp, 0, far ? 2 : 3);
          __builtin_prefetch(vp, 0, far ? 2 : 3);
        }
      }
  }
  // Before the group at jn is weighed: at a chunk boundary, the chunk's state out.
  ATTNX_FORCE_INLINE void at_boundary(std::size_t jn) {
    if (jn != boundary || jn >= it.kend) return;
    ATTNX_UNROLL
    for (std::size_t r = 0; r < RV; ++r) {
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DV; ++c) {
        V::store(rs.os + r * dvp + c * W, o[r][c]);
        o[r][c] = V::zero();
      }
    }
    rs.flush(jn);
    boundary += it.chunk;
  }
  // This group's values (at vg) with the next whole group's dots (at kn, key jn on), key by key.
  ATTNX_FORCE_INLINE void values_and_next_dots(const KV* vg, const KV* kn, std::size_t jn) {
    for (std::size_t x = 0; x < W; ++x) {
      const KV* kx = kn + sz(x) * it.ks;
      const T* q = qd.p;
#if defined(__GNUC__)
      __asm__("" : "+r"(q));  // q read by the FMAs from L1: in registers it would push the outputs out
#endif
      R a[NR];
      ops::template rows_dot<NR, DK, pairs>(q, kx, a);
      prefetch_rows(jn + x, kx, vg, x);
      add_value(vg, x);
#if defined(__GNUC__)
      // One statement joining the key's dots and values: g++ otherwise splits the loop in two (all the dots, then
      // all the values), the order this loop exists to avoid.
      __asm__("" : "+v"(a[0]) : "v"(o[0][0]));
#endif
      keep_dots(x, a);
    }
  }
  void run() {
    const std::size_t kend = it.kend;
    if (it.k0 < kend) dots_apart(it.k0);
    for (std::size_t j0 = it.k0; j0 < kend; j0 += W) {
      const std::size_t jn = j0 + W;
      const KV* vg = it.v + sz(j0) * it.vs;
      rescale();
      if (jn + W <= kend) {
        values_and_next_dots(vg, it.k + sz(jn) * it.ks, jn);
        at_boundary(jn);
        weigh_all(jn);
      } else {
        const std::size_t nv = alg::min(W, kend - j0);
        for (std::size_t x = 0; x < nv; ++x) add_value(vg, x);
        at_boundary(jn);
        if (jn < kend) dots_apart(jn);
      }
    }
    store_outputs();
  }
};

// The item's rows through few_rows_loop, or five to eight rows at d 128 in passes (row_passes).
template <class T, class KV>
struct few_rows_paths : decode_ops<T, KV> {
  using ops = decode_ops<T, KV>;
  using typename ops::item;
  using ops::W;
  static constexpr std::size_t pass_keys = 256;  // keys per block of row_passes
  static_assert(pass_keys % W == 0, "row_passes: blocks of whole groups of keys");

  // Two to four rows at d_k and d_v of 4 or 8 vectors; five to eight at d 128 (in passes).
  static bool fit(const attention_problem<T>& p, std::size_t rows) {
    if (rows > 4) return rows <= 8 && p.dk == 8 * W && p.dv == 8 * W;
    return rows >= 2 && (p.dk == 8 * W || p.dk == 4 * W) && (p.dv == 8 * W || p.dv == 4 * W);
  }
  template <std::size_t NR, std::size_t DK, std::size_t DV, row_prefetch PF>
  static void rows(const item& it, const decode_rows<T>& rs, std::size_t r0 = 0, std::size_t pf_end = 0) {
    few_rows_loop<T, KV, NR, DK, DV, PF>(it, rs, r0, pf_end).run();
  }
  // Rows [r0, r0 + NR) over keys [kb, ke) (those any of them sees end at e): a pass of row_passes, its chunk the whole
  // pass (it never flushes), the rows' state from r0.
  template <std::size_t NR, row_prefetch PF>
  static void pass(const item& it, const decode_rows<T>& rs, std::size_t r0, std::size_t kb, std::size_t ke) {
    std::size_t e = kb;
    for (std::size_t r = r0; r < alg::min(it.rows, r0 + NR); ++r) e = alg::max(e, alg::min(ke, it.ends[r]));
    if (e == kb) return;
    item part = it;
    part.k0 = kb;
    part.k1 = ke;
    part.kend = e;
    part.chunk = e - kb;
    decode_rows<T> from = rs;
    from.qs += r0 * rs.dkp;
    from.os += r0 * rs.dvp;
    from.ms += r0;
    from.ls += r0;
    rows<NR, 8, 8, PF>(part, from, r0, it.kend);
  }
  // Five to eight rows at d 128, block by block: rows 0-3 from memory (with the tuning's prefetch), then the others
  // from L2; the chunks' states handed over between blocks (a block never crosses a chunk boundary).
  static void row_passes(const item& it, const decode_rows<T>& rs) {
    for (std::size_t kb = it.k0; kb < it.kend;) {
      const std::size_t cb = it.k0 + ((kb - it.k0) / it.chunk + 1) * it.chunk;  // the next chunk boundary
      const std::size_t ke = alg::min(alg::min(kb + pass_keys, cb), it.kend);
      if (it.tune.passes_prefetch == row_prefetch::l1_near) pass<4, row_prefetch::l1_near>(it, rs, 0, kb, ke);
      else pass<4, row_prefetch::l2_far>(it, rs, 0, kb, ke);
      switch (it.rows - 4) {
        case 1: pass<1, row_prefetch::none>(it, rs, 4, kb, ke); break;
        case 2: pass<2, row_prefetch::none>(it, rs, 4, kb, ke); break;
        case 3: pass<3, row_prefetch::none>(it, rs, 4, kb, ke); break;
        default: pass<4, row_prefetch::none>(it, rs, 4, kb, ke); break;  // (eight: fit takes no more)
      }
      if (ke == cb && ke < it.kend) rs.flush(ke);
      kb = ke;
    }
  }
  // NR rows with d_k = DK W and d_v = DV W: the loop the tuning picks.
  template <std::size_t NR, std::size_t DK, std::size_t DV>
  static void rows_tuned(const item& it, const decode_rows<T>& rs) {
    constexpr bool d128 = DK == 8 && DV == 8, kv16 = sizeof(KV) < sizeof(T);
    if constexpr (NR >= 3 && d128 && !kv16) {  // fp32: four keys a step, or few_rows with its prefetch
      if (it.tune.fp32_four_keys) return four_rows_loop<T, KV, NR, DK, DV>(it, rs).run();
      if constexpr (NR == 3) {
        return rows<NR, DK, DV, row_prefetch::none>(it, rs);
      } else {
        if (it.tune.fp32_four_rows_prefetch == row_prefetch::l1_near) return rows<NR, DK, DV, row_prefetch::l1_near>(it, rs);
        return rows<NR, DK, DV, row_prefetch::l2_far>(it, rs);
      }
    } else if constexpr (NR >= 3 && kv16) {  // 16-bit: four_rows, or at d 128 few_rows where the tuning says so
      if constexpr (d128) {
        if (it.tune.kv16_few_rows) return rows<NR, DK, DV, row_prefetch::l1_near>(it, rs);
      }
      return four_rows_loop<T, KV, NR, DK, DV>(it, rs).run();
    } else {
      return rows<NR, DK, DV, row_prefetch::none>(it, rs);
    }
  }
  // The item's rows (fit): NR, d_k and d_v from the problem.
  static void run(const item& it, const decode_rows<T>& rs) {
    const attention_problem<T>& p = it.p;
    using c2 = std::integral_constant<std::size_t, 2>;
    using c3 = std::integral_constant<std::size_t, 3>;
    using c4 = std::integral_constant<std::size_t, 4>;
    using c8 = std::integral_constant<std::size_t, 8>;
    const auto go = [&](auto nr, auto dk, auto dv) { rows_tuned<decltype(nr)::value, decltype(dk)::value, decltype(dv)::value>(it, rs); };
    const auto by_dv = [&](auto nr, auto dk) { return p.dv == 8 * W ? go(nr, dk, c8{}) : go(nr, dk, c4{}); };
    const auto by_dk = [&](auto nr) { return p.dk == 8 * W ? by_dv(nr, c8{}) : by_dv(nr, c4{}); };
    if (it.rows <= 2) return by_dk(c2{});
    if (it.rows == 3 && p.dk == 8 * W && p.dv == 8 * W) return go(c3{}, c8{}, c8{});  // three rows as three at d 128
    if (it.rows > 4) return row_passes(it, rs);
    return by_dk(c4{});
  }
};
