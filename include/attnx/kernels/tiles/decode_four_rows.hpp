// attnx decode kernel: three or four rows, keys four at a time (a fragment of tiles/attention_tiles.hpp, once per
// instruction set; taken under AVX-512 in float, where the tuning says: 16-bit K and V, and fp32 K and V at d 128 on
// CPUs whose prefetcher follows its reads).
//
// few_rows' pass (this group's values with the next group's dots, the same weighing), but each step takes four keys:
// the dots of four rows x four keys share every K and every q vector (per vector of d_k, 4 K and 4 q loads for 16
// FMAs), each step's 16 dot vectors reduced to four (vec::reduce_quad; reduce_quads at the group's end gives
// reduce_lanes' bits), and the values of four keys go into each output vector between one load and one store in L1.
// A step reads its K and V rows across the four rows a vector at a time, an order the hardware prefetcher does not
// follow, so each step prefetches into L2 the lines pf_keys on, one per vector it loads (spread over the step: in a
// burst they cost more than they gave); 16-bit rows also prefetch each line into L1 near_keys on, fp32 rows whole
// rows into L1 prefetch_keys on after each step. bf16 K and V are widened 2 W values at a time (V::load_bf16_pairs),
// q and the outputs in that even/odd order. The bits are few_rows' (the same chains, the values added key by key in
// order), but for the sign of a zero output: a short last step adds its padding slots as 0 x 0, which turns -0 into +0.

template <class T, class KV, std::size_t NR, std::size_t DK, std::size_t DV>
struct four_rows_loop : decode_ops<T, KV> {
  using ops = decode_ops<T, KV>;
  using typename ops::R, typename ops::V, typename ops::item;
  using ops::W, ops::sz;
  static constexpr std::size_t S = 4;  // keys per step (NR: 3 or 4 rows)
  static constexpr std::size_t pf_keys = 32, near_keys = 8, prefetch_keys = 8;
  static constexpr bool near = sizeof(KV) < sizeof(T);  // 16-bit K and V: each line also into L1 near_keys on
  static constexpr std::size_t dkp = DK * W, dvp = DV * W;
  static constexpr bool pairs = std::is_same_v<KV, bf16>;

  const item& it;
  const decode_rows<T>& rs;
  const row_set<T, KV, NR> set;
  const R fv;
  const typename ops::template dot_order_q<pairs, NR * dkp> qd;
  std::size_t boundary;
  alignas(64) T w[NR][W];  // the current group's weights
  T alpha[NR];
  R part[NR][W / S];  // the next group's dots, reduce_quad of each step's four

  four_rows_loop(const item& item_, const decode_rows<T>& rows)
      : it(item_), rs(rows), set(item_, 0), fv(V::set1(item_.plan.folded)), qd(rows.qs),
        boundary(item_.k0 + item_.chunk) {}

  ATTNX_FORCE_INLINE void in_order() {
    if constexpr (pairs) ops::from_pair_order(rs.os, NR * dvp);
  }
  ATTNX_FORCE_INLINE void weigh_all(std::size_t j0) {
    std::size_t live[NR];
    R sv[NR];
    const auto dots = [&](std::size_t r) ATTNX_INLINE_LAMBDA { return V::reduce_quads(part[r]); };
    const unsigned slow = set.quick(j0, fv, dots, live, sv, w, alpha, rs.ms, rs.ls);
    for (std::size_t r = 0; slow && r < NR; ++r)
      if (slow >> r & 1u) [[unlikely]] alpha[r] = set.full(r, j0, live[r], sv[r], w[r], rs.ms[r], rs.ls[r]);
  }
  // The dots of keys kx .. kx + 3 for every row into part[.][s]; the same rows at kpf prefetched into L2 (and with
  // 16-bit K those at kpn into L1).
  ATTNX_FORCE_INLINE void dots4(const KV* kx, std::size_t s, const T* q, const KV* kpf, const KV* kpn, std::ptrdiff_t ks) {
    R a[NR][S];
    if constexpr (pairs) {  // vectors c and c + 1 of q against the even and odd values of each key's 2 W
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DK; c += 2) {
        R ke[S], ko[S];
        ATTNX_UNROLL
        for (std::size_t j = 0; j < S; ++j)
          V::load_bf16_pairs(reinterpret_cast<const std::uint16_t*>(kx + sz(j) * ks + sz(c * W)), ke[j], ko[j]);
        prefetch_step_line(kpf, kpn, ks, c);
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
    } else {
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DK; ++c) {
        R kv[S];
        ATTNX_UNROLL
        for (std::size_t j = 0; j < S; ++j) kv[j] = ops::load_kv(kx + sz(j) * ks + sz(c * W));
        if ((c * W * sizeof(KV)) % 64 == 0) prefetch_step_line(kpf, kpn, ks, c);  // a line of each row
        ATTNX_UNROLL
        for (std::size_t r = 0; r < NR; ++r) {
          const R qv = V::load(q + r * dkp + c * W);
          ATTNX_UNROLL
          for (std::size_t j = 0; j < S; ++j) a[r][j] = c == 0 ? V::mul(qv, kv[j]) : V::fmadd(qv, kv[j], a[r][j]);
        }
      }
    }
    ATTNX_UNROLL
    for (std::size_t r = 0; r < NR; ++r) part[r][s] = V::reduce_quad(a[r]);
  }
  // Vector c of the S K rows at kpf prefetched into L2, and with 16-bit K those at kpn into L1.
  ATTNX_FORCE_INLINE static void prefetch_step_line(const KV* kpf, const KV* kpn, std::ptrdiff_t stride, std::size_t c) {
    ATTNX_UNROLL
    for (std::size_t j = 0; j < S; ++j) __builtin_prefetch(kpf + sz(j) * stride + sz(c * W), 0, 2);
    if constexpr (near) {
      ATTNX_UNROLL
      for (std::size_t j = 0; j < S; ++j) __builtin_prefetch(kpn + sz(j) * stride + sz(c * W), 0, 3);
    }
  }
  // The dots of the group at j0 computed apart (keys past kend repeat the last) in dots4's chains, so that the bits do
  // not depend on where a thread's run of chunks starts; then its weights.
  ATTNX_FORCE_INLINE void dots_apart(std::size_t j0) {
    const std::size_t n = alg::min(W, it.kend - j0);
    for (std::size_t s = 0; s < W / S; ++s) {
      R a[NR][S];
      ATTNX_UNROLL
      for (std::size_t j = 0; j < S; ++j) {
        const KV* kx = it.k + sz(j0 + alg::min(s * S + j, n - 1)) * it.ks;
        R d[NR];
        ops::template rows_dot<NR, DK, pairs>(qd.p, kx, d);
        ATTNX_UNROLL
        for (std::size_t r = 0; r < NR; ++r) a[r][j] = d[r];
      }
      ATTNX_UNROLL
      for (std::size_t r = 0; r < NR; ++r) part[r][s] = V::reduce_quad(a[r]);
    }
    weigh_all(j0);
  }
  // Keys x .. x + n - 1 of the group at vg (n <= S) weighted into every row's output; the rows at vpf prefetched into
  // L2, a line per vector loaded, and with 16-bit V the S rows at vpn into L1 unless it is null.
  ATTNX_FORCE_INLINE void values(const KV* vg, std::size_t x, std::size_t n, const KV* vpf, const KV* vpn, T* os,
                                 std::ptrdiff_t vs) {
    R wv[NR][S];
    ATTNX_UNROLL
    for (std::size_t r = 0; r < NR; ++r) {
      ATTNX_UNROLL
      for (std::size_t j = 0; j < S; ++j) wv[r][j] = V::set1(j < n ? w[r][x + j] : T(0));
    }
    const KV* vx = vg + sz(x) * vs;
    if constexpr (pairs) values_pairs(wv, vx, n, vpf, vpn, os, vs);
    else values_plain(wv, vx, n, vpf, vpn, os, vs);
  }
  // Output vectors c and c + 1 (in the pairs' order) from each key's 2 W bf16 values.
  ATTNX_FORCE_INLINE static void values_pairs(const R (&wv)[NR][S], const KV* vx, std::size_t n, const KV* vpf,
                                              const KV* vpn, T* os, std::ptrdiff_t vs) {
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
      prefetch_values_line(vpf, vpn, n, c, vs);
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
  }
  ATTNX_FORCE_INLINE static void values_plain(const R (&wv)[NR][S], const KV* vx, std::size_t n, const KV* vpf,
                                              const KV* vpn, T* os, std::ptrdiff_t vs) {
    ATTNX_UNROLL
    for (std::size_t c = 0; c < DV; ++c) {
      R vv[S];
      ATTNX_UNROLL
      for (std::size_t j = 0; j < S; ++j) {
        vv[j] = ops::load_kv(vx + sz(j < n ? j : 0) * vs + sz(c * W));
        if (j >= n) vv[j] = V::zero();  // (as above)
      }
      if ((c * W * sizeof(KV)) % 64 == 0) prefetch_values_line(vpf, vpn, n, c, vs);
      ATTNX_UNROLL
      for (std::size_t r = 0; r < NR; ++r) {
        R o = V::load(os + r * dvp + c * W);
        ATTNX_UNROLL
        for (std::size_t j = 0; j < S; ++j) o = V::fmadd(wv[r][j], vv[j], o);
        V::store(os + r * dvp + c * W, o);
      }
    }
  }
  // Vector c of the V rows at vpf (the first n; padding slots repeat row 0) into L2, and of the S rows at vpn into L1.
  ATTNX_FORCE_INLINE static void prefetch_values_line(const KV* vpf, const KV* vpn, std::size_t n, std::size_t c,
                                                      std::ptrdiff_t vs) {
    ATTNX_UNROLL
    for (std::size_t j = 0; j < S; ++j) __builtin_prefetch(vpf + sz(j < n ? j : 0) * vs + sz(c * W), 0, 2);
    if (near && vpn) {
      ATTNX_UNROLL
      for (std::size_t j = 0; j < S; ++j) __builtin_prefetch(vpn + sz(j) * vs + sz(c * W), 0, 3);
    }
  }
  ATTNX_FORCE_INLINE void at_boundary(std::size_t jn) {
    if (jn != boundary || jn >= it.kend) return;
    in_order();
    rs.flush(jn);
    boundary += it.chunk;
  }
  // This group's values (at vg) with the next whole group's dots (at kn, key jn on), four keys a step.
  // The item's strides and the outputs in locals: the vector stores may alias any memory, this object's included.
  ATTNX_FORCE_INLINE void steps(const KV* vg, const KV* kn, std::size_t jn) {
    const std::size_t kend = it.kend;
    const std::ptrdiff_t ks = it.ks, vs = it.vs;
    T* const os = rs.os;
    const T* const qp = qd.p;
    ATTNX_NOUNROLL
    for (std::size_t s = 0; s < W / S; ++s) {
      const T* q = qp;
#if defined(__GNUC__)
      __asm__("" : "+r"(q));  // q read from L1 at every step, not held in registers across the loop
#endif
      // The rows pf_keys on, or near the item's end its last four keys (no prefetch past them, no test).
      const std::size_t pf_at = alg::min(s * S + pf_keys, kend - jn - S);
      const std::size_t pn_at = alg::min(s * S + near_keys, kend - jn - S);
      dots4(kn + sz(s * S) * ks, s, q, kn + sz(pf_at) * ks, kn + sz(pn_at) * ks, ks);
      values(vg, s * S, S, vg + sz(pf_at) * vs, near ? vg + sz(pn_at) * vs : nullptr, os, vs);
      if constexpr (sizeof(KV) == sizeof(T)) {  // fp32: the step's rows prefetch_keys on into L1 as well
        if (s * S + prefetch_keys + S <= kend - jn) {
          ATTNX_UNROLL
          for (std::size_t j = 0; j < S; ++j)
            ops::prefetch_key(kn + sz(s * S + j) * ks, ks, vg + sz(s * S + j) * vs, vs, prefetch_keys,
                              dkp * sizeof(KV), dvp * sizeof(KV));
        }
      }
    }
  }
  void run() {
    const std::size_t kend = it.kend;
    if (it.k0 < kend) dots_apart(it.k0);
    for (std::size_t j0 = it.k0; j0 < kend; j0 += W) {
      const std::size_t jn = j0 + W;
      const KV* vg = it.v + sz(j0) * it.vs;
      row_set<T, KV, NR>::template rescale<DV>(rs.os, 0, NR, alpha);
      if (jn + W <= kend) {
        steps(vg, it.k + sz(jn) * it.ks, jn);
        at_boundary(jn);
        weigh_all(jn);
      } else {
        const std::size_t nv = alg::min(W, kend - j0);
        for (std::size_t x = 0; x < nv; x += S) values(vg, x, alg::min(S, nv - x), vg + sz(x) * it.vs, nullptr, rs.os, it.vs);
        at_boundary(jn);
        if (jn < kend) dots_apart(jn);
      }
    }
    in_order();
  }
};
