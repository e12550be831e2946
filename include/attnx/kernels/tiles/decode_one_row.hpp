// attnx decode kernel: one row, W keys at a time (a fragment of tiles/attention_tiles.hpp, once per instruction set).
//
// L_q = 1 without GQA, the common decoding step, where d_k is a whole number of vectors and the output row (d_v = 4 or
// 8 vectors) fits in registers beside W dot sums: AVX-512's 32 registers. The keys go in groups of W: each dot reduced
// as it comes into its lane of one vector of scores (vec::with_lane_sum, in registers: nothing stored per key), the
// score program, the online softmax on that vector (one exp per W keys), then the group's V rows weighted. The loop
// interleaves the next group's dots with this group's values key by key, so that K and V are read as two sequential
// streams, one row of each in turn, and it stays rolled: each load instruction then reads the next row of its stream
// at every pass, which the hardware prefetcher follows (unrolled, each load strides W rows and it stops following).
// bf16 K and V at a fixed d_k and d_v are widened 2 W values at a time (V::load_bf16_pairs), q and the output kept in
// that even/odd order and put back in order at every flush and at the end.

template <class T, class KV, std::size_t DK, std::size_t DV>
struct one_row_loop : decode_ops<T, KV> {
  using ops = decode_ops<T, KV>;
  using typename ops::R, typename ops::V, typename ops::item;
  using ops::W, ops::sz;
  // one_row's second prefetch of 16-bit K and V (tuning.kv16_one_row_prefetch), into L2 this many keys on; the first
  // goes into L1 prefetch_keys on.
  static constexpr std::size_t prefetch_keys = 8, prefetch_keys_l2 = 32;
  static constexpr bool pairs = std::is_same_v<KV, bf16> && DK > 0 && DK % 2 == 0 && DV % 2 == 0;

  const item& it;
  const decode_rows<T>& rs;
  T* w;  // the current group's weights (W of them)
  T& m;
  T& l;
  const std::size_t clear;  // keys taking the folded factor alone
  const R fv;
  const bool pf;  // 16-bit K and V prefetched (the tuning)
  const typename ops::template dot_order_q<pairs, DK * W> qd;
  std::size_t boundary;
  R o[DV];

  one_row_loop(const item& item_, const decode_rows<T>& rows)
      : it(item_), rs(rows), w(rows.sc), m(rows.ms[0]), l(rows.ls[0]), clear(ops::clear_below(item_, 0, item_.kend)),
        fv(V::set1(item_.plan.folded)), pf(sizeof(KV) < sizeof(T) && item_.tune.kv16_one_row_prefetch), qd(rows.qs),
        boundary(item_.k0 + item_.chunk) {
    ATTNX_UNROLL
    for (std::size_t c = 0; c < DV; ++c) o[c] = V::zero();
  }

  ATTNX_FORCE_INLINE R kdot(const KV* k) const { return ops::template dot<DK, pairs>(qd.p, k, it.p.dk); }
  ATTNX_FORCE_INLINE void rescale(T a) {
    if (a == T(1)) return;
    const R av = V::set1(a);
    ATTNX_UNROLL
    for (std::size_t c = 0; c < DV; ++c) o[c] = V::mul(o[c], av);
  }
  ATTNX_FORCE_INLINE void add_value(const KV* vx, T wx) {
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
      for (std::size_t c = 0; c < DV; ++c) o[c] = V::fmadd(wv, ops::load_kv(vx + c * W), o[c]);
    }
  }
  // The output in registers to os, in order.
  ATTNX_FORCE_INLINE void store_output() {
    ATTNX_UNROLL
    for (std::size_t c = 0; c < DV; ++c) V::store(rs.os + c * W, o[c]);
    if constexpr (pairs) ops::from_pair_order(rs.os, DV * W);
  }
  // The weights of the group at j0, its scores computed apart (the first group, and a last partial one).
  ATTNX_FORCE_INLINE void weigh_apart(std::size_t j0) {
    const std::size_t n = alg::min(W, it.kend - j0);
    const R s = V::mul(ops::template group_dots<DK>([&](const KV* k) ATTNX_INLINE_LAMBDA { return kdot(k); }, it.k + sz(j0) * it.ks,
                                                    it.ks, n),
                       fv);
    rescale(ops::weigh(it, 0, it.head(0), 0, j0, n, clear, s, w, m, l));
  }
  // Before the group at jn is weighed: at a chunk boundary, the chunk's state out.
  ATTNX_FORCE_INLINE void at_boundary(std::size_t jn) {
    if (jn != boundary || jn >= it.kend) return;
    store_output();
    ATTNX_UNROLL
    for (std::size_t c = 0; c < DV; ++c) o[c] = V::zero();
    rs.flush(jn);
    boundary += it.chunk;
  }
  // This group's values (at vg) with the next whole group's dots (at kn, key jn on), key by key.
  ATTNX_FORCE_INLINE R values_and_next_dots(const KV* vg, const KV* kn, std::size_t jn) {
    R s = V::zero();
    ATTNX_NOUNROLL
    for (std::size_t x = 0; x < W; ++x) {
      s = V::with_lane_sum(s, x, kdot(kn + sz(x) * it.ks));
      if (sizeof(KV) < sizeof(T) && pf) {
        const std::size_t kb = it.p.dk * sizeof(KV), vb = DV * W * sizeof(KV);
        if (jn + x + prefetch_keys < it.kend)
          ops::prefetch_key(kn + sz(x) * it.ks, it.ks, vg + sz(x) * it.vs, it.vs, prefetch_keys, kb, vb);
        if (jn + x + prefetch_keys_l2 < it.kend)
          ops::template prefetch_key<2>(kn + sz(x) * it.ks, it.ks, vg + sz(x) * it.vs, it.vs, prefetch_keys_l2, kb, vb);
      }
      add_value(vg + sz(x) * it.vs, w[x]);
    }
    return s;
  }
  // Keys [k0, kend): a chunk's state handed over at every boundary; the last chunk's output is left at os.
  void run() {
    const std::size_t kend = it.kend;
    if (it.k0 < kend) weigh_apart(it.k0);
    for (std::size_t j0 = it.k0; j0 < kend; j0 += W) {
      const std::size_t jn = j0 + W, live = alg::min(W, kend - j0);
      const KV* vg = it.v + sz(j0) * it.vs;
      if (jn + W <= kend) {
        const R s = values_and_next_dots(vg, it.k + sz(jn) * it.ks, jn);
        at_boundary(jn);
        rescale(ops::weigh(it, 0, it.head(0), 0, jn, W, clear, V::mul(s, fv), w, m, l));
      } else {
        for (std::size_t x = 0; x < live; ++x) add_value(vg + sz(x) * it.vs, w[x]);
        at_boundary(jn);
        if (jn < kend) weigh_apart(jn);
      }
    }
    store_output();
  }
};
