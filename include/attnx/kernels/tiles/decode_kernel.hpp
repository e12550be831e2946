// attnx decode kernel: few query rows against many keys, written once against simd::vec<T, isa_tag> (a fragment of
// tiles/attention_tiles.hpp, after decode_ops, decode_general, decode_one_row, decode_four_rows and decode_few_rows).
//
// The prefill kernel vectorises over query rows and pads a block to MQ of them; with one to a few rows most of its
// work would be padding. Here the vectors run along the head dimension instead. A work item is one (batch item, KV
// head) and a run of its keys (impl/decode.hpp cuts them into fixed chunks, each leaving a partial state per row,
// merged at the end: the same bits on any number of threads). K and V are read in place, in T or as bf16 / f16
// converted in registers, never copied. By the item's rows and head size:
//   one row, d_v 4 or 8 vectors (AVX-512)        one_row_loop     (decode_one_row.hpp)
//   two to four rows, five to eight at d 128     few_rows_paths   (decode_few_rows.hpp; four_rows where the tuning says)
//   anything else                                stream (one row), blocks (several)   (decode_general.hpp)
// Scores follow the prefill kernel's score program, step by step in the expression's order, and its special-value
// rules (a row of -inf gives 0, NaN makes the row NaN, +inf scores share the weight).

template <class T, class KV>
struct decode_kernel {
  using general = decode_general<T, KV>;
  using ops = decode_ops<T, KV>;
  using item = decode_item<T, KV>;
  static constexpr std::size_t W = ops::W, BK = general::BK;

  // Per-thread scratch in elements of T for rows query rows.
  static std::size_t scratch_elems(std::size_t rows, std::size_t dk, std::size_t dv) {
    return general::padded(rows) * (ops::round_up(dk) + BK + ops::round_up(dv) + 3);
  }

  // One work item: the rows of (b, KV head g), keys [k0, k1) (k0 a multiple of chunk) of the (batch, kv_heads) stacks
  // k and v; every chunk of chunk keys leaves its state at state + c rows (dv + 2) (decode_rows::flush). buf:
  // scratch_elems(rows, dk, dv) elements; limits and ends as decode_item has them.
  static void run(const attention_problem<T>& p, const score_plan<T>& plan, kv_stack k, kv_stack v, std::size_t b,
                  std::size_t g, std::size_t k0, std::size_t k1, std::size_t chunk, T* buf, const std::size_t* limits,
                  const std::size_t* ends, T* state) {
    const std::size_t rows = (p.heads / p.kv_heads) * p.lq, rp = general::padded(rows);
    const std::size_t dkp = ops::round_up(p.dk), dvp = ops::round_up(p.dv);
    decode_rows<T> rs{};
    rs.qs = buf;                   // rp x dkp
    rs.sc = rs.qs + rp * dkp;      // rp x BK
    rs.os = rs.sc + rp * BK;       // rp x dvp
    rs.ms = rs.os + rp * dvp;      // rp
    rs.ls = rs.ms + rp;            // rp
    rs.as = rs.ls + rp;            // rp
    rs.rows = rows;
    rs.padded = rp;
    rs.dkp = dkp;
    rs.dvp = dvp;
    rs.dv = p.dv;
    rs.states = state;
    rs.k0 = k0;
    rs.chunk = chunk;
    item it{p, plan, decode_tuning_for(decode_family()), k.matrix<KV>(b, g), k.row, v.matrix<KV>(b, g), v.row, b, g, rows,
            k0, k1, chunk, k0, limits, ends};
    alg::fill_n(rs.qs, rp * dkp, T(0));
    rs.reset();
    for (std::size_t r = 0; r < rows; ++r) {
      alg::copy_n(p.q.matrix(b, it.head(r)) + ops::sz(it.query(r)) * p.q.row, p.dk, rs.qs + r * dkp);
      it.kend = alg::max(it.kend, it.end(r));
    }
    if (pass_in_one(it, rs)) {
      rs.flush(alg::max(it.kend, it.k0 + 1));
      return;
    }
    by_chunk(it, rs);
  }

 private:
  // The loops that go through the item in one pass, handing its states over at the chunk boundaries (the caller
  // flushes the last); false where none applies.
  static bool pass_in_one(const item& it, const decode_rows<T>& rs) {
    if constexpr (W > 1 && ops::vector_registers >= 32) {  // (AVX-512: the outputs in registers)
      const attention_problem<T>& p = it.p;
      if (it.rows == 1 && p.dk % W == 0 && (p.dv == 8 * W || p.dv == 4 * W)) {
        one_row(it, rs);
        return true;
      }
      if constexpr (std::is_same_v<T, float>) {  // (few_rows: float's 16 lanes)
        if (few_rows_paths<T, KV>::fit(p, it.rows)) {
          few_rows_paths<T, KV>::run(it, rs);
          return true;
        }
      }
    }
    return false;
  }
  // one_row_loop with d_k and d_v from the problem (d_k 4 or 8 vectors fixed, else any multiple of W).
  static void one_row(const item& it, const decode_rows<T>& rs) {
    const auto go = [&](auto dk, auto dv) { one_row_loop<T, KV, decltype(dk)::value, decltype(dv)::value>(it, rs).run(); };
    const auto by_dk = [&](auto dv) {
      if (it.p.dk == 8 * W) return go(std::integral_constant<std::size_t, 8>{}, dv);
      if (it.p.dk == 4 * W) return go(std::integral_constant<std::size_t, 4>{}, dv);
      return go(std::integral_constant<std::size_t, 0>{}, dv);
    };
    if (it.p.dv == 8 * W) return by_dk(std::integral_constant<std::size_t, 8>{});
    return by_dk(std::integral_constant<std::size_t, 4>{});
  }
  // The other paths, chunk by chunk: one row key by key (every row on the portable path), several rows in blocks.
  static void by_chunk(const item& it, const decode_rows<T>& rs) {
    for (std::size_t c0 = it.k0; c0 < it.k1; c0 += it.chunk) {
      const std::size_t c1 = alg::min(c0 + it.chunk, it.k1);
      std::size_t ce = c0;
      for (std::size_t r = 0; r < it.rows; ++r) ce = alg::max(ce, alg::min(c1, it.ends[r]));
      if (W == 1 || it.rows == 1) {
        for (std::size_t r = 0; r < it.rows; ++r)
          general::stream(it, r, it.head(r), it.query(r), c0, alg::min(ce, it.ends[r]), rs.qs + r * rs.dkp,
                          rs.os + r * rs.dvp, rs.ms[r], rs.ls[r]);
      } else {
        general::blocks(it, rs, c0, ce);
      }
      rs.flush(c1);
    }
    if (it.k0 == it.k1) rs.flush(it.k0 + 1);  // no keys: the empty state
  }
};
