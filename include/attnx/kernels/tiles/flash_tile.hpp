// attnx fused attention: the tile algorithm, written once against simd::vec<T, isa_tag>.
//
// Included by flash_attention.hpp once per instruction set, inside namespace
// attnx::kernels::detail::<isa> (which defines isa_tag) and that instruction set's target region
// (no include guard on purpose). See docs/fused_kernel.md for the algorithm and its numerics.
//
// A query block is MQ = NI*W rows of one (batch, head); a work item is up to G of them, swept
// together over the key blocks. Layout choice: scores are vectorised over *queries*, so
//   - only Q is packed (transposed, as it is: the scale multiplies q . k, never q), once per query block;
//   - K and V are read in place, one broadcast scalar per FMA; nothing is packed per key block;
//   - the row max, row sum and rescale factor of the online softmax are whole vectors
//     (MQ queries), with no horizontal reduction anywhere;
//   - the output tile is kept transposed (value column major) and written out once at the end.
// Scores are kept in natural units (the expression's own values): the score program runs on them in
// the expression's order, and exp(s - m) is computed as 2^((s - m) log2 e), so that no finite score
// (-FLT_MAX included) overflows on the way.

// NI_ query vectors per block: flash_shape::NI, or fewer for the last rows of a problem (run_block).
template <class T, std::size_t NI_ = flash_shape<T, isa_tag>::NI>
struct kernel {
  using V = simd::vec<T, isa_tag>;
  using R = typename V::reg;
  using shape = flash_shape<T, isa_tag>;
  static constexpr std::size_t W = V::W;
  static constexpr std::size_t NI = NI_, NJ = shape::NJ, NC = shape::NC, BC = shape::BC;
  static constexpr std::size_t MQ = NI * W;  // query rows per block

  // A work item is up to G query blocks of one (batch, head), swept together over the key blocks:
  // each key block of K and V is read from memory once and from L2 for the other G-1 blocks.
  static constexpr std::size_t G = 4;

  // Per-thread scratch, in elements of T, carved from one 64-byte aligned block: shared parts,
  // then per query block Q^T, the output tile and the softmax state.
  static constexpr std::size_t scratch_elems(std::size_t dk, std::size_t dv) {
    return MQ * (BC + 2) + G * MQ * (dk + dv + 4);
  }
  // Per query block: the limit and the start of each limit step per row, and the poison flags.
  static constexpr std::size_t block_limits = MQ * (2 * max_score_steps + 1);
  static constexpr std::size_t limit_elems() { return G * block_limits; }

  struct query_block {
    std::size_t i0, rows;  // rows [i0, i0 + rows) of the problem
    std::size_t kskip;     // keys >= kskip may be skipped for every row (score_plan)
    std::size_t kstart;    // keys < kstart may be skipped for every row (a key interval's start)
    bool skipped;          // soft skipping: the rest of the keys has been found to weigh exactly 0
    T* qt;                 // dk x MQ   Q^T
    T* ot;                 // dv x MQ   unnormalised output, transposed
    T* m;                  // MQ        running max of the scores
    T* ml;                 // MQ        round(m log2 e), -inf before any key ...
    T* rr;                 // MQ        ... and the rest: the weights are 2^(st c - (ml + rr)) (softmax_block)
    T* l;                  // MQ        running sum of weights
    std::size_t* limit;    // n_limits x MQ: keys >= limit[s*MQ + r] are blocked by limit step s for row r
    std::size_t* start;    // n_limits x MQ: keys < start[s*MQ + r] are blocked by it (0 but for a key interval)
    std::size_t* poison;   // MQ        row r meets a +inf or NaN bias in the skipped keys
  };
  struct shared {
    T* st;     // BC x MQ   scores of one key block, then their weights
    T* alpha;  // MQ        rescale factor of the current key block
    T* lim;    // MQ        limit relative to the current key block
  };

  // 2^x: x = n + f with n integral, |f| <= 1/2, 2^f by a polynomial, then exact scaling by 2^n.
  // Clamping first makes -inf give exactly 0 and +inf give +inf; NaN passes the clamps and stays NaN.
  static R exp2(R x) {
    using lim_t = std::numeric_limits<T>;
    x = V::min_pass(V::set1(T(lim_t::max_exponent)), x);
    // Below min_exponent - digits - 1 every result rounds to 0; both halves of the scaling
    // exponent stay normal (vec::scale_pow2 may scale in two steps).
    x = V::max_pass(V::set1(T(lim_t::min_exponent - lim_t::digits - 2)), x);
    const R n = V::round_nearest(x);
    const R f = V::sub(x, n);
    constexpr auto& c = exp2_coefficients<T>;
    R p = V::set1(c[c.size() - 1]);
    for (std::size_t i = c.size() - 1; i-- > 0;) p = V::fmadd(p, f, V::set1(c[i]));
    return V::scale_pow2(p, n);
  }
  // tanh x: on |x| < 1/4 the series (tanh_coefficients), above it (1 - e) / (1 + e) with e = exp(-2 |x|) in (0, 0.61]
  // (no cancellation worth a bit); the sign put back. tanh(+-inf) = +-1, NaN stays NaN (exp2 keeps it).
  static R tanh(R x) {
    const R a = V::abs(x);
    const R e = exp2(V::mul(a, V::set1(T(-2) * log2e<T>)));
    const R one = V::set1(T(1));
    const R big = V::div(V::sub(one, e), V::add(one, e));
    const R z = V::mul(a, a);
    constexpr auto& c = tanh_coefficients<T>;
    R p = V::set1(c[c.size() - 1]);
    for (std::size_t i = c.size() - 1; i-- > 0;) p = V::fmadd(p, z, V::set1(c[i]));
    const R small = V::fmadd(V::mul(a, z), p, a);
    return V::copysign(V::less_or(a, V::set1(T(0.25)), small, big), x);
  }
  static void tanh_n(const T* in, T* out, std::size_t n) {
    for (std::size_t i = 0; i < n; i += W) V::store(out + i, tanh(V::load(in + i)));
  }
  // out[i] = 2^in[i] for n a multiple of W (for tests: pointers cross the target boundary, vectors do not).
  static void exp2_n(const T* in, T* out, std::size_t n) {
    for (std::size_t i = 0; i < n; i += W) V::store(out + i, exp2(V::load(in + i)));
  }

  // st[j][*] = factor * sum_d k_j[d] * qt[d][*] for the N keys at k (row stride ks); the raw dots when
  // !Scaled (the fast path, which folds the factor into the exponent instead).
  template <bool Scaled, std::size_t N>
  static void qk(const T* qt, const T* k, std::ptrdiff_t ks, std::size_t dk, T factor, T* st) {
    R acc[N][NI];
    const T* krow[N];
    ATTNX_UNROLL
    for (std::size_t j = 0; j < N; ++j) {
      krow[j] = k + static_cast<std::ptrdiff_t>(j) * ks;
      ATTNX_UNROLL
      for (std::size_t v = 0; v < NI; ++v) acc[j][v] = V::zero();
    }
    for (std::size_t d = 0; d < dk; ++d) {
      R q[NI];
      ATTNX_UNROLL
      for (std::size_t v = 0; v < NI; ++v) q[v] = V::load(qt + d * MQ + v * W);
      ATTNX_UNROLL
      for (std::size_t j = 0; j < N; ++j) {
        const R kb = V::set1(krow[j][d]);
        ATTNX_UNROLL
        for (std::size_t v = 0; v < NI; ++v) acc[j][v] = V::fmadd(kb, q[v], acc[j][v]);
      }
    }
    const R f = V::set1(factor);
    ATTNX_UNROLL
    for (std::size_t j = 0; j < N; ++j) {
      ATTNX_UNROLL
      for (std::size_t v = 0; v < NI; ++v) V::store(st + j * MQ + v * W, Scaled ? V::mul(acc[j][v], f) : acc[j][v]);
    }
  }

  // ot[c][*] = alpha[*] * ot[c][*] + sum_j v_j[c] * pt[j][*] for the N value columns at v.
  template <std::size_t N>
  static void pv(const T* pt, std::size_t nb, const T* v, std::ptrdiff_t vs, const T* alpha, T* ot) {
    R acc[N][NI];
    {
      R a[NI];
      ATTNX_UNROLL
      for (std::size_t i = 0; i < NI; ++i) a[i] = V::load(alpha + i * W);
      ATTNX_UNROLL
      for (std::size_t c = 0; c < N; ++c) {
        ATTNX_UNROLL
        for (std::size_t i = 0; i < NI; ++i) acc[c][i] = V::mul(V::load(ot + c * MQ + i * W), a[i]);
      }
    }
    for (std::size_t j = 0; j < nb; ++j) {
      R p[NI];
      ATTNX_UNROLL
      for (std::size_t i = 0; i < NI; ++i) p[i] = V::load(pt + j * MQ + i * W);
      const T* vj = v + static_cast<std::ptrdiff_t>(j) * vs;
      ATTNX_UNROLL
      for (std::size_t c = 0; c < N; ++c) {
        const R vb = V::set1(vj[c]);
        ATTNX_UNROLL
        for (std::size_t i = 0; i < NI; ++i) acc[c][i] = V::fmadd(vb, p[i], acc[c][i]);
      }
    }
    ATTNX_UNROLL
    for (std::size_t c = 0; c < N; ++c) {
      ATTNX_UNROLL
      for (std::size_t i = 0; i < NI; ++i) V::store(ot + c * MQ + i * W, acc[c][i]);
    }
  }

  // The remainder group (n < NJ keys, n < NC columns) through a table of instantiations.
  template <bool Scaled, std::size_t... N>
  static void qk_tail(std::size_t n, std::index_sequence<N...>, const T* qt, const T* k, std::ptrdiff_t ks,
                      std::size_t dk, T factor, T* st) {
    using fn = void (*)(const T*, const T*, std::ptrdiff_t, std::size_t, T, T*);
    static constexpr fn table[] = {&qk<Scaled, N + 1>...};
    table[n - 1](qt, k, ks, dk, factor, st);
  }
  template <std::size_t... N>
  static void pv_tail(std::size_t n, std::index_sequence<N...>, const T* pt, std::size_t nb, const T* v,
                      std::ptrdiff_t vs, const T* alpha, T* ot) {
    using fn = void (*)(const T*, std::size_t, const T*, std::ptrdiff_t, const T*, T*);
    static constexpr fn table[] = {&pv<N + 1>...};
    table[n - 1](pt, nb, v, vs, alpha, ot);
  }

  // Online softmax over one key block of nb keys, whose scores are factor * st (factor: the fast path's
  // scale, the tile holding raw dots; else 1). Updates m, ml, rr, l, sets alpha and turns st into the
  // weights 2^(st c - ref), c = factor log2 e rounded once, with m the running max of st and ref = ml + rr
  // = m c exactly: ml is its rounding and rr the rest, kept (rr != 0) only where it could matter, |ml| >
  // ref_exact (below, dropping it multiplies every weight of the row by one 2^rr, |rr| < 4, which the final
  // division cancels). One FMA computes st c - ml with a single rounding, and the rescale factors 2^(ref_old
  // - ref_new) use the same stored references as the weights, so the blocks of a row agree.
  static constexpr T ref_exact = T(std::size_t{1} << (std::numeric_limits<T>::digits + 2));

  template <bool Scaled>
  static void softmax_block(const shared& s, const query_block& q, std::size_t nb, T factor) {
    const R f = V::set1(factor), c = V::set1(factor * log2e<T>);
    for (std::size_t i = 0; i < NI; ++i) {
      T* st = s.st + i * W;
      R mb0 = V::set1(-std::numeric_limits<T>::infinity()), mb1 = mb0;
      std::size_t j = 0;
      for (; j + 2 <= nb; j += 2) {  // two chains: the max is latency bound
        mb0 = V::max_keep(V::load(st + j * MQ), mb0);
        mb1 = V::max_keep(V::load(st + (j + 1) * MQ), mb1);
      }
      if (j < nb) mb0 = V::max_keep(V::load(st + j * MQ), mb0);
      const R mo = V::load(q.m + i * W);
      const R mn = V::max_keep(V::max_keep(mb0, mb1), mo);
      const R mu = V::neg_inf_to_zero(mn);  // all keys so far -inf: weights 2^(-inf - 0) = 0
      const R ml = V::mul(mu, c);
      // +inf scores (factor * st may overflow), or a reference that overflows: lane by lane
      if (V::any_pos_inf(Scaled ? V::mul(mn, f) : mn) || V::any_inf(ml)) {
        softmax_lanes(s, q, nb, i, factor);
        continue;
      }
      const R nml = V::sub(V::zero(), ml);
      R sum0 = V::zero(), sum1 = V::zero();
      R rr = V::zero();
      if (!V::any_abs_above(ml, ref_exact)) [[likely]] {
        for (j = 0; j + 2 <= nb; j += 2) {
          const R p0 = exp2(V::fmadd(V::load(st + j * MQ), c, nml));
          const R p1 = exp2(V::fmadd(V::load(st + (j + 1) * MQ), c, nml));
          V::store(st + j * MQ, p0);
          V::store(st + (j + 1) * MQ, p1);
          sum0 = V::add(sum0, p0);
          sum1 = V::add(sum1, p1);
        }
        for (; j < nb; ++j) {
          const R p0 = exp2(V::fmadd(V::load(st + j * MQ), c, nml));
          V::store(st + j * MQ, p0);
          sum0 = V::add(sum0, p0);
        }
      } else {
        rr = V::fma_exact(mu, c, nml);  // exactly mu c - ml
        for (j = 0; j < nb; ++j) {
          const R p0 = exp2(V::sub(V::fma_exact(V::load(st + j * MQ), c, nml), rr));
          V::store(st + j * MQ, p0);
          sum0 = V::add(sum0, p0);
        }
      }
      const R a = exp2(V::add(V::sub(V::load(q.ml + i * W), ml), V::sub(V::load(q.rr + i * W), rr)));
      V::store(s.alpha + i * W, a);  // 0 for a row that saw only -inf so far (ml = -inf)
      V::store(q.l + i * W, V::fmadd(V::load(q.l + i * W), a, V::add(sum0, sum1)));
      V::store(q.m + i * W, mn);
      V::store(q.ml + i * W, V::mul(mn, c));
      V::store(q.rr + i * W, rr);
    }
  }

  // The exponent of a weight, x c - (ml + rr), computed for one lane exactly as softmax_block does it: an
  // exact FMA where the reference is big, else V::fmadd (fused on the vector paths; on the one-lane path
  // whatever the compiler makes of a * b + c, the same there as in softmax_block).
  static T exponent(T x, T c, T ml, T rr, bool big) {
    if (big) return math::rt::fma(x, c, -ml) - rr;
    if constexpr (W == 1) {
      return V::fmadd(x, c, T(0) - ml);
    } else {
      return math::rt::fma(x, c, -ml);
    }
  }

  // Rare path, lane by lane, for a query vector with a special running max (scores y = factor * st):
  //  - a +inf score: the limit of softmax gives every +inf score an equal share and everything else 0;
  //  - a reference m c that overflows (|max score| above about max / log2 e, 2.4e38 in float): the spacing
  //    of floating-point numbers there exceeds 2^100, so exp(y - max) is exactly 1 for y == max and
  //    underflows to 0 for every other y: the weights are 1 for the scores equal to the max, 0 elsewhere;
  //  - the other lanes of the vector take the ordinary formula, as softmax_block computes it.
  static void softmax_lanes(const shared& s, const query_block& q, std::size_t nb, std::size_t iv, T factor) {
    constexpr T inf = std::numeric_limits<T>::infinity();
    const T c = factor * log2e<T>;
    for (std::size_t w = 0; w < W; ++w) {
      const std::size_t r = iv * W + w;
      const T mo = q.m[r];
      T mn = mo;
      for (std::size_t j = 0; j < nb; ++j) {
        const T x = s.st[j * MQ + r];
        mn = x > mn ? x : mn;
      }
      const T top = mn * factor;  // the max score
      const T mu = mn == -inf ? T(0) : mn;
      const T ml = mu * c;
      T a, rr = 0, sum = 0;
      if (top == inf || ml == inf || ml == -inf) {
        a = mo == mn ? T(1) : T(0);
        for (std::size_t j = 0; j < nb; ++j) {
          T& x = s.st[j * MQ + r];
          const T y = x * factor;
          x = y != y ? y : (y == top ? T(1) : T(0));
          sum += x;
        }
      } else {
        const bool big = math::rt::abs(ml) > ref_exact;
        rr = big ? math::rt::fma(mu, c, -ml) : T(0);
        a = math::rt::exp2((q.ml[r] - ml) + (q.rr[r] - rr));
        for (std::size_t j = 0; j < nb; ++j) {
          T& x = s.st[j * MQ + r];
          x = math::rt::exp2(exponent(x, c, ml, rr, big));
          sum += x;
        }
      }
      s.alpha[r] = a;
      q.l[r] = q.l[r] * a + sum;
      q.m[r] = mn;
      q.ml[r] = mn * c;
      q.rr[r] = rr;
    }
  }

  // The tile's scores for keys [j0, j0 + nb) at kb: raw dots (Scaled = false) or times factor.
  template <bool Scaled>
  static void scores(const query_block& q, const T* kb, const attention_problem<T>& p, T factor, std::size_t nb,
                     const shared& s) {
    const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
    std::size_t j = 0;
    for (; j + NJ <= nb; j += NJ) qk<Scaled, NJ>(q.qt, kb + sz(j) * p.k.row, p.k.row, p.dk, factor, s.st + j * MQ);
    if (j < nb)
      qk_tail<Scaled>(nb - j, std::make_index_sequence<NJ - 1>{}, q.qt, kb + sz(j) * p.k.row, p.k.row, p.dk, factor,
                      s.st + j * MQ);
  }

  // The score program after the folded first step, in the expression's order, on keys [j0, j0 + nb).
  static void apply_steps(const attention_problem<T>& p, const score_plan<T>& plan, const shared& s,
                          const query_block& q, std::size_t b, std::size_t h, std::size_t j0, std::size_t nb,
                          unsigned allowing) {
    std::size_t li = 0;
    for (std::size_t si = 0; si < plan.n; ++si) {
      const score_step<T>& st = plan.steps[si];
      if (is_limit(st.kind)) {  // counted from step 0: the limits' scratch rows are in program order
        const std::size_t* limit = q.limit + li * MQ;
        const std::size_t* start = q.start + li++ * MQ;
        if (si < plan.first) continue;
        if (st.kind == step_kind::key_interval) {  // keys below the row's start: as past its limit
          std::size_t hi = 0;
          for (std::size_t r = 0; r < MQ; ++r) hi = alg::max(hi, start[r]);
          if (hi > j0) {
            for (std::size_t r = 0; r < MQ; ++r) s.lim[r] = static_cast<T>(alg::min(nb, start[r] > j0 ? start[r] - j0 : 0));
            const R fill = V::set1(st.value);
            for (std::size_t i = 0; i < NI; ++i) {
              const R from = V::load(s.lim + i * W);
              for (std::size_t j = 0; j < alg::min(nb, hi - j0); ++j) {
                T* x = s.st + j * MQ + i * W;
                V::store(x, V::below_or(fill, from, static_cast<T>(j), V::load(x)));
              }
            }
          }
        }
        // Keys below every row's limit need nothing.
        std::size_t lo = p.lk;
        for (std::size_t r = 0; r < MQ; ++r) lo = alg::min(lo, limit[r]);
        if (lo >= j0 + nb) continue;
        for (std::size_t r = 0; r < MQ; ++r) {
          const std::size_t rel = limit[r] > j0 ? limit[r] - j0 : 0;
          s.lim[r] = static_cast<T>(rel < nb ? rel : nb);
        }
        const R fill = V::set1(st.value);
        for (std::size_t i = 0; i < NI; ++i) {
          const R lim = V::load(s.lim + i * W);
          for (std::size_t j = lo > j0 ? lo - j0 : 0; j < nb; ++j) {
            T* x = s.st + j * MQ + i * W;
            V::store(x, V::below_or(V::load(x), lim, static_cast<T>(j), fill));
          }
        }
        continue;
      }
      if (si < plan.first) continue;
      switch (st.kind) {
        case step_kind::multiply:
        case step_kind::divide: {
          const R f = V::set1(st.value);
          const bool mul = st.kind == step_kind::multiply;
          for (std::size_t j = 0; j < nb; ++j)
            for (std::size_t i = 0; i < NI; ++i) {
              T* x = s.st + j * MQ + i * W;
              V::store(x, mul ? V::mul(V::load(x), f) : V::div(V::load(x), f));
            }
          break;
        }
        case step_kind::boolean_mask:
          if (allowing >> si & 1u) break;  // the mask allows the whole tile
          if (st.blocks.data) {            // by the summary's 8 x 8 blocks: the element test only in mixed ones
            masked_blocks(st, b, h, q, j0, nb, s.st);
            break;
          }
          mask_elements(st, b, h, q.i0, 0, q.rows, j0, 0, nb, s.st);
          break;
        case step_kind::additive_mask:
          for (std::size_t r = 0; r < q.rows; ++r)
            for (std::size_t j = 0; j < nb; ++j) s.st[j * MQ + r] += st.bias.at(b, h, q.i0 + r, j0 + j);
          break;
        case step_kind::linear_bias: {  // linear_bias_at's operations, a vector of rows at a time
          const R m = V::set1(static_cast<T>(st.slopes[st.n_slopes == 1 ? 0 : h])), lq = V::set1(static_cast<T>(p.lq));
          for (std::size_t r = 0; r < MQ; ++r) s.lim[r] = static_cast<T>(q.i0 + r + bias_keys(st, p, b));
          for (std::size_t i = 0; i < NI; ++i) {
            const R t = V::load(s.lim + i * W);
            for (std::size_t j = 0; j < nb; ++j) {
              T* x = s.st + j * MQ + i * W;
              V::store(x, V::add(V::load(x), V::mul(m, V::add(V::sub(V::set1(static_cast<T>(j0 + j)), t), lq))));
            }
          }
          break;
        }
        case step_kind::tanh:
          for (std::size_t j = 0; j < nb; ++j)
            for (std::size_t i = 0; i < NI; ++i) {
              T* x = s.st + j * MQ + i * W;
              V::store(x, tanh(V::load(x)));
            }
          break;
        case step_kind::mask_function:
          if (allowing >> si & 1u) break;  // f allows the whole tile
          [[fallthrough]];
        case step_kind::function:  // the caller's loop over the tile's live rows (key-major: rows contiguous)
          st.fn.apply(st.fn.f, s.st, 1, static_cast<std::ptrdiff_t>(MQ), q.rows, nb, b, h, q.i0, j0, st.value);
          break;
        default: break;
      }
    }
  }

  // How much of the tile (the block's rows, keys [j0, j0 + nb)) a boolean mask allows: the summary that lets a tile
  // it blocks be skipped and one it allows run without the element test. Read once per tile, as each (query block,
  // key block) pair is visited once per call; rows of stride 0 (a mask broadcast over queries) are read once.
  enum class mask_cover { none, some, all };
  static mask_cover cover(const broadcast<const bool>& m, std::size_t b, std::size_t h, const query_block& q,
                          std::size_t j0, std::size_t nb) {
    constexpr std::uint64_t ones = 0x0101010101010101u;  // eight true bools
    std::uint64_t any = 0, every = ones;
    const std::size_t rows = m.row == 0 ? 1 : q.rows;
    for (std::size_t r = 0; r < rows && (every == ones || any == 0); ++r) {
      const bool* x = &m.at(b, h, q.i0 + r, j0);
      std::size_t j = 0;
      if (m.col == 1)  // (contiguous keys: eight at a time)
        for (; j + 8 <= nb; j += 8) {
          std::uint64_t w;
          std::memcpy(&w, x + j, 8);
          any |= w;
          every &= w;
        }
      for (; j < nb; ++j) {
        const std::uint64_t v = x[static_cast<std::ptrdiff_t>(j) * m.col] ? ones : 0;
        any |= v;
        every &= v;
      }
    }
    return every == ones ? mask_cover::all : any != 0 ? mask_cover::some : mask_cover::none;
  }

  // A boolean step on the tile's rows [r0, r1) and keys [c0, c1) (scores st, key-major), element by element.
  static void mask_elements(const score_step<T>& st, std::size_t b, std::size_t h, std::size_t i0, std::size_t r0,
                            std::size_t r1, std::size_t j0, std::size_t c0, std::size_t c1, T* sc) {
    for (std::size_t r = r0; r < r1; ++r)
      for (std::size_t j = c0; j < c1; ++j)
        if (!st.mask.at(b, h, i0 + r, j0 + j)) sc[j * MQ + r] = st.value;
  }
  // A boolean step with its summary: each 8 x 8 block of the tile left alone, filled, or tested element by element.
  static void masked_blocks(const score_step<T>& st, std::size_t b, std::size_t h, const query_block& q, std::size_t j0,
                            std::size_t nb, T* sc) {
    const broadcast<const std::uint8_t>& bl = st.blocks;
    const std::size_t i_last = bl.row == 0 ? 0 : (q.i0 + q.rows - 1) / 8, j_last = bl.col == 0 ? 0 : (j0 + nb - 1) / 8;
    for (std::size_t bi = bl.row == 0 ? 0 : q.i0 / 8; bi <= i_last; ++bi) {
      const std::size_t r0 = bl.row == 0 ? 0 : alg::max(bi * 8, q.i0) - q.i0;
      const std::size_t r1 = bl.row == 0 ? q.rows : alg::min(bi * 8 + 8, q.i0 + q.rows) - q.i0;
      for (std::size_t bj = bl.col == 0 ? 0 : j0 / 8; bj <= j_last; ++bj) {
        const std::size_t c0 = bl.col == 0 ? 0 : alg::max(bj * 8, j0) - j0;
        const std::size_t c1 = bl.col == 0 ? nb : alg::min(bj * 8 + 8, j0 + nb) - j0;
        const std::uint8_t v = bl.at(b, h, bi, bj);
        if (v == 1) {
          mask_elements(st, b, h, q.i0, r0, r1, j0, c0, c1, sc);
        } else if (v == 0) {
          for (std::size_t j = c0; j < c1; ++j)
            for (std::size_t r = r0; r < r1; ++r) sc[j * MQ + r] = st.value;
        }
      }
    }
  }

  // The same from a summary of the mask by 8 x 8 blocks (any tile: the blocks it touches, whole or in part).
  static mask_cover block_cover(const broadcast<const std::uint8_t>& s, std::size_t b, std::size_t h,
                                const query_block& q, std::size_t j0, std::size_t nb) {
    const std::size_t i_first = s.row == 0 ? 0 : q.i0 / 8, i_last = s.row == 0 ? 0 : (q.i0 + q.rows - 1) / 8;
    const std::size_t j_first = s.col == 0 ? 0 : j0 / 8, j_last = s.col == 0 ? 0 : (j0 + nb - 1) / 8;
    bool any = false, every = true;
    for (std::size_t bi = i_first; bi <= i_last; ++bi)
      for (std::size_t bj = j_first; bj <= j_last; ++bj) {
        const std::uint8_t v = s.at(b, h, bi, bj);
        any = any || v != 0;
        every = every && v == 2;
      }
    return every ? mask_cover::all : any ? mask_cover::some : mask_cover::none;
  }

  // Soft skipping: whether every row of the block gives the skipped keys' largest possible score a
  // weight of exactly 0 now (and so forever: the running max only grows).
  [[gnu::noinline]] static bool rest_weighs_nothing(const score_plan<T>& plan, const query_block& q) {
    for (std::size_t r = 0; r < q.rows; ++r) {
      const T m = q.m[r];
      if (!(m == m) || m == -std::numeric_limits<T>::infinity()) return false;
      if (m == std::numeric_limits<T>::infinity()) continue;  // only +inf scores have weight
      const T ml = q.ml[r];
      if (ml == std::numeric_limits<T>::infinity() || ml == -std::numeric_limits<T>::infinity()) return false;
      alignas(64) T x[W], y[W];
      const T e = exponent(plan.skip_final, log2e<T>, ml, q.rr[r], math::rt::abs(ml) > ref_exact);
      for (std::size_t w = 0; w < W; ++w) x[w] = e;
      exp2_n(x, y, W);
      if (y[0] != T(0)) return false;
    }
    return true;
  }

  // ln sum_j exp(s_j) of a finished row: the weights sum to l relative to 2^(ml + rr) (scores: m factor).
  static T row_lse(T m, T ml, T rr, T l, T factor) {
    constexpr T inf = std::numeric_limits<T>::infinity();
    if (l != l) return l;
    if (l == T(0)) return -inf;
    const T top = m * factor;
    if (top == inf) return inf;
    if (ml == inf || ml == -inf) return top + math::rt::log(l);  // the reference overflowed: weights 1 at the max
    return (ml + rr + math::rt::log2(l)) * T(0.693147180559945309417232121458176568L);
  }

  // K or V stored as bf16 / f16 (T = float only): rows [j0, j1) of one matrix (row stride `row`, d values
  // each) into row j of dst (row stride ld, a multiple of W; dst 64-byte aligned), converted in vectors
  // (exact: every 16-bit value is a float).
  static void widen_rows(kv_storage kind, const std::uint16_t* src, std::ptrdiff_t row, std::size_t j0,
                         std::size_t j1, std::size_t d, T* dst, std::size_t ld) {
    if constexpr (std::is_same_v<T, float>) {
      const bool b16 = kind == kv_storage::bf16;
      for (std::size_t j = j0; j < j1; ++j) {
        const std::uint16_t* s = src + static_cast<std::ptrdiff_t>(j) * row;
        T* o = dst + j * ld;
        std::size_t c = 0;
        for (; c + W <= d; c += W) V::store(o + c, b16 ? V::load_bf16(s + c) : V::load_f16(s + c));
        for (; c < d; ++c) o[c] = b16 ? float(bf16::from_bits(s[c])) : f16::to_float(s[c]);
      }
    }
  }

  // One work item: blocks = 1..G query blocks of MQ rows from row i0 of problem (b, h); only the
  // last block of a problem may have fewer rows, and a single block of few rows runs with as few
  // query vectors as it needs (no work on up to (NI-1)*W padding rows).
  // buf: scratch_elems(dk, dv) elements; limits: limit_elems() elements.
  static void run_block(const attention_problem<T>& p, const score_plan<T>& plan, std::size_t b, std::size_t h,
                        std::size_t i0, std::size_t blocks, T* buf, std::size_t* limits) {
    if constexpr (NI > 1) {
      const std::size_t vectors = (alg::min(MQ, p.lq - i0) + W - 1) / W;
      if (blocks == 1 && vectors < NI)
        return run_narrow(vectors, std::make_index_sequence<NI - 1>{}, p, plan, b, h, i0, buf, limits);
    }
    run(p, plan, b, h, i0, blocks, buf, limits);
  }
  template <std::size_t... N>
  static void run_narrow(std::size_t vectors, std::index_sequence<N...>, const attention_problem<T>& p,
                         const score_plan<T>& plan, std::size_t b, std::size_t h, std::size_t i0, T* buf,
                         std::size_t* limits) {
    using fn = void (*)(const attention_problem<T>&, const score_plan<T>&, std::size_t, std::size_t, std::size_t,
                        std::size_t, T*, std::size_t*);
    static constexpr fn table[] = {&kernel<T, N + 1>::run...};
    table[vectors - 1](p, plan, b, h, i0, 1, buf, limits);
  }

  // Query block q's part of the scratch at rest (moved past it), its Q^T, limits, skip point and softmax state;
  // returns the keys it reads (to kskip where the skip is hard, else all).
  static std::size_t start_block(const attention_problem<T>& p, const score_plan<T>& plan, std::size_t b, std::size_t h,
                                 std::size_t i0, query_block& q, T*& rest, std::size_t* limits) {
    const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
    q.i0 = i0;
    q.rows = alg::min(MQ, p.lq - q.i0);
    q.qt = rest;
    q.ot = q.qt + p.dk * MQ;
    q.m = q.ot + p.dv * MQ;
    q.ml = q.m + MQ;
    q.rr = q.ml + MQ;
    q.l = q.rr + MQ;
    rest = q.l + MQ;
    q.limit = limits;
    q.start = q.limit + max_score_steps * MQ;
    q.poison = q.start + max_score_steps * MQ;
    q.skipped = false;
    const T* qp = p.q.matrix(b, h) + sz(q.i0) * p.q.row;
    // Q^T in blocks of W x W (vector loads of W rows, transposed in registers: a column at a time it was W scalar
    // loads per vector stored); the rows and columns past the last whole block element by element, zero rows after.
    const std::size_t rows_w = p.q.row > 0 ? q.rows / W * W : 0, dk_w = p.dk / W * W;
    const auto ld = static_cast<std::size_t>(p.q.row);
    for (std::size_t d = 0; d < dk_w; d += W)
      for (std::size_t r = 0; r < rows_w; r += W) V::transpose(qp + r * ld + d, ld, q.qt + d * MQ + r, MQ);
    for (std::size_t d = 0; d < p.dk; ++d) {
      T* dst = q.qt + d * MQ;
      for (std::size_t r = d < dk_w ? rows_w : 0; r < q.rows; ++r) dst[r] = qp[sz(r) * p.q.row + sz(d)];
      for (std::size_t r = q.rows; r < MQ; ++r) dst[r] = T(0);
    }
    // Limits per step and row (padding rows repeat the last row's), and the skip point.
    q.kskip = 0;
    for (std::size_t li = 0; li < plan.n_limits; ++li) {
      std::size_t* lim = q.limit + li * MQ;
      std::size_t* start = q.start + li * MQ;
      const score_step<T>& st = plan.steps[plan.limits[li]];
      for (std::size_t r = 0; r < MQ; ++r) {
        lim[r] = r < q.rows ? step_limit(st, p, b, q.i0 + r) : lim[q.rows - 1];
        start[r] = r < q.rows ? step_start(st, p, b, q.i0 + r) : start[q.rows - 1];
      }
    }
    q.kstart = p.lk;
    for (std::size_t r = 0; r < q.rows; ++r) {
      std::size_t sk = p.lk, ss = 0;
      for (std::size_t li = 0; li < plan.n_limits; ++li)
        if (plan.skippable[li]) {
          sk = alg::min(sk, q.limit[li * MQ + r]);
          ss = alg::max(ss, q.start[li * MQ + r]);
        }
      q.kskip = alg::max(q.kskip, sk);
      q.kstart = alg::min(q.kstart, plan.skip_starts ? alg::min(ss, sk) : std::size_t{0});
      q.poison[r] = 0;
    }
    alg::fill_n(q.m, MQ, -std::numeric_limits<T>::infinity());
    alg::fill_n(q.ml, MQ, -std::numeric_limits<T>::infinity());
    alg::fill_n(q.rr, MQ, T(0));
    alg::fill_n(q.l, MQ, T(0));
    alg::fill_n(q.ot, p.dv * MQ, T(0));
    return plan.skip_final == -std::numeric_limits<T>::infinity() ? q.kskip : p.lk;
  }
  // The key block at j0 (its K rows at kb, V rows at vb) into query block q.
  static void key_block(const attention_problem<T>& p, const score_plan<T>& plan, const shared& s, query_block& q,
                        std::size_t b, std::size_t h, std::size_t j0, const T* kb, const T* vb) {
    const bool hard = plan.skip_final == -std::numeric_limits<T>::infinity();
    if (hard) {
      if (j0 >= q.kskip || j0 + BC <= q.kstart) return;
    } else if (plan.any_skippable && j0 >= q.kskip) {
      if (q.skipped) return;
      if (rest_weighs_nothing(plan, q)) {
        q.skipped = true;
        return;
      }
    }
    const std::size_t nb = alg::min(BC, (hard ? q.kskip : p.lk) - j0);
    unsigned allowing = 0;  // boolean steps that allow the whole tile (no element test)
    for (std::size_t si = 0; si < plan.n; ++si) {
      const score_step<T>& st = plan.steps[si];
      if (st.kind != step_kind::boolean_mask && st.kind != step_kind::mask_function) continue;
      const mask_cover c = st.kind != step_kind::boolean_mask ? mask_cover(st.fn.cover(st.fn.f, q.rows, nb, b, h, q.i0, j0))
                           : st.blocks.data                   ? block_cover(st.blocks, b, h, q, j0, nb)
                                                              : cover(st.mask, b, h, q, j0, nb);
      if (c == mask_cover::none && (plan.hard_masks >> si & 1u)) return;  // every score -inf: weight exactly 0
      if (c == mask_cover::all) allowing |= 1u << si;
    }
    if (plan.fast)
      scores<false>(q, kb, p, plan.folded, nb, s);
    else
      scores<true>(q, kb, p, plan.folded, nb, s);
    if (plan.n > plan.first) apply_steps(p, plan, s, q, b, h, j0, nb, allowing);
    if (plan.fast)
      softmax_block<true>(s, q, nb, plan.folded);
    else
      softmax_block<false>(s, q, nb, T(1));
    std::size_t col = 0;
    for (; col + NC <= p.dv; col += NC) pv<NC>(s.st, nb, vb + col, p.v.row, s.alpha, q.ot + col * MQ);
    if (col < p.dv)
      pv_tail(p.dv - col, std::make_index_sequence<NC - 1>{}, s.st, nb, vb + col, p.v.row, s.alpha, q.ot + col * MQ);
  }
  // Poison: in the keys skipped outright, an additive step that follows the blocking steps meets -inf + bias; a +inf
  // or NaN bias makes that score, and so the row, NaN.
  static void find_poison(const attention_problem<T>& p, const score_plan<T>& plan, std::size_t b, std::size_t h,
                          const query_block& q) {
    const score_step<T>& add = plan.steps[static_cast<std::size_t>(plan.poison)];
    for (std::size_t r = 0; r < q.rows; ++r)
      for (std::size_t j = q.kskip; j < p.lk; ++j) {
        const T x = add.bias.at(b, h, q.i0 + r, j);
        if (x != x || x == std::numeric_limits<T>::infinity()) {
          q.poison[r] = 1;
          break;
        }
      }
  }
  // The deferred division, in vectors (a row that saw no visible key, l == 0, is 0), then the transposed tile out to
  // the output rows, and the log-sum-exps.
  static void finish_block(const attention_problem<T>& p, const score_plan<T>& plan, std::size_t b, std::size_t h,
                           const query_block& q) {
    const auto sz = [](std::size_t x) { return static_cast<std::ptrdiff_t>(x); };
    for (std::size_t col = 0; col < p.dv; ++col)
      for (std::size_t i = 0; i < NI; ++i) {
        T* x = q.ot + col * MQ + i * W;
        V::store(x, V::div_or_zero(V::load(x), V::load(q.l + i * W)));
      }
    if (p.lse.data) {
      T* lse = p.lse.matrix(b, h) + sz(q.i0) * p.lse.row;
      for (std::size_t r = 0; r < q.rows; ++r)
        lse[sz(r) * p.lse.row] = q.poison[r] ? std::numeric_limits<T>::quiet_NaN()
                                             : row_lse(q.m[r], q.ml[r], q.rr[r], q.l[r], plan.fast ? plan.folded : T(1));
    }
    T* o = p.o.matrix(b, h) + sz(q.i0) * p.o.row;
    for (std::size_t r = 0; r < q.rows; ++r) {
      T* orow = o + sz(r) * p.o.row;
      if (q.poison[r]) {
        alg::fill_n(orow, p.dv, std::numeric_limits<T>::quiet_NaN());
        continue;
      }
      for (std::size_t col = 0; col < p.dv; ++col) orow[col] = q.ot[col * MQ + r];
    }
  }
  // blocks query blocks from row i0 of (b, h), swept together over the key blocks.
  static void run(const attention_problem<T>& p, const score_plan<T>& plan, std::size_t b, std::size_t h,
                  std::size_t i0, std::size_t blocks, T* buf, std::size_t* limits) {
    const std::size_t kvh = h / (p.heads / p.kv_heads);
    const T* k = p.k.matrix(b, kvh);
    const T* v = p.v.matrix(b, kvh);
    const shared s{buf, buf + BC * MQ, buf + BC * MQ + MQ};
    T* rest = buf + MQ * (BC + 2);
    query_block qb[G];
    std::size_t kend = 0;
    for (std::size_t g = 0; g < blocks; ++g)
      kend = alg::max(kend, start_block(p, plan, b, h, i0 + g * MQ, qb[g], rest, limits + g * block_limits));
    std::size_t kbegin = p.lk;  // the key blocks stay where they are without skipping: the same bits
    for (std::size_t g = 0; g < blocks; ++g) kbegin = alg::min(kbegin, qb[g].kstart / BC * BC);
    for (std::size_t j0 = kbegin; j0 < kend; j0 += BC)
      for (std::size_t g = 0; g < blocks; ++g)
        key_block(p, plan, s, qb[g], b, h, j0, k + static_cast<std::ptrdiff_t>(j0) * p.k.row,
                  v + static_cast<std::ptrdiff_t>(j0) * p.v.row);
    const bool hard = plan.skip_final == -std::numeric_limits<T>::infinity();
    for (std::size_t g = 0; g < blocks; ++g) {
      if (plan.poison >= 0 && hard) find_poison(p, plan, b, h, qb[g]);
      finish_block(p, plan, b, h, qb[g]);
    }
  }
};
