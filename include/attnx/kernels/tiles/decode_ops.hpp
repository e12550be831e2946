// attnx decode kernel: the work item, the rows' state and the helpers every decode loop shares (loads, dots, the
// score program, the online softmax). A fragment of tiles/attention_tiles.hpp, compiled once per instruction set
// inside namespace attnx::kernels::detail::<isa> (isa_tag). The design: docs/decoding.md, "The decode kernel".

// One work item: the query rows of a (batch item, KV head) over a range of its keys. Every query row that reads the
// KV head (its query heads x L_q: a GQA group shares the pass) is computed in one pass, so K and V are read once.
template <class T, class KV>
struct decode_item {
  const attention_problem<T>& p;
  const score_plan<T>& plan;
  const decode_cpu_tuning& tune;
  const KV* k;  // K and V of (b, g): row j at k + j ks, v + j vs
  std::ptrdiff_t ks;
  const KV* v;
  std::ptrdiff_t vs;
  std::size_t b, g, rows;    // the batch item, the KV head, the query rows that read it
  std::size_t k0, k1;        // keys [k0, k1): a state at every chunk keys from k0 (the last chunk may be shorter)
  std::size_t chunk;
  std::size_t kend;          // no row reads a key at or past it (<= k1)
  const std::size_t* limits;  // limit step s for row r: keys >= limits[s rows + r] blocked, and keys below
                              // limits[(n_limits + s) rows + r] (a key interval's start; 0 for the others)
  const std::size_t* ends;    // row r skips keys >= ends[r]
  // Row r of the item is query query(r) of head head(r).
  std::size_t head(std::size_t r) const noexcept { return g * (p.heads / p.kv_heads) + r / p.lq; }
  std::size_t query(std::size_t r) const noexcept { return r % p.lq; }
  std::size_t end(std::size_t r) const noexcept { return alg::min(k1, ends[r]); }  // row r's keys end here
  std::size_t start(std::size_t li, std::size_t r) const noexcept { return limits[(plan.n_limits + li) * rows + r]; }
};

// The item's rows in the thread's scratch, and the chunks' states: per row the query (qs, dkp apart), the running
// output (os, dvp apart), maximum (ms) and sum (ls). A chunk done leaves per row m, l and dv output columns at
// states + c rows (dv + 2) (c: the chunk's index from k0), then the rows start again (flush).
template <class T>
struct decode_rows {
  T* qs;
  T* sc;  // rows x BK scores (blocks)
  T* os;
  T* ms;
  T* ls;
  T* as;  // the rescale factor of the current block (blocks)
  std::size_t rows, padded, dkp, dvp, dv;
  T* states;
  std::size_t k0, chunk;

  void reset() const noexcept {
    alg::fill_n(os, padded * dvp, T(0));
    alg::fill_n(ms, padded, -std::numeric_limits<T>::infinity());
    alg::fill_n(ls, padded, T(0));
    alg::fill_n(as, padded, T(1));
  }
  // The chunk that holds key j - 1 is done: its state out, the rows started again.
  void flush(std::size_t j) const noexcept {
    T* st = states + (j - 1 - k0) / chunk * rows * (dv + 2);
    for (std::size_t r = 0; r < rows; ++r, st += dv + 2) {
      st[0] = ms[r];
      st[1] = ls[r];
      alg::copy_n(os + r * dvp, dv, st + 2);
    }
    reset();
  }
};

template <class T, class KV>
struct decode_ops {
  using V = simd::vec<T, isa_tag>;
  using R = typename V::reg;
  using item = decode_item<T, KV>;
  static constexpr std::size_t W = V::W;
  // AVX-512's 32 vector registers hold a row's output (up to 8 vectors) beside W dot sums; AVX2's 16 do not.
  static constexpr std::size_t vector_registers = sizeof(R) >= 64 ? 32 : 16;
  static constexpr T inf = std::numeric_limits<T>::infinity();

  static std::size_t round_up(std::size_t n) { return (n + W - 1) / W * W; }
  static std::ptrdiff_t sz(std::size_t x) { return static_cast<std::ptrdiff_t>(x); }

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

  // Prefetches rows kj + dist ks and vj + dist vs (kb, vb bytes each); Locality 3 into L1, 2 into L2.
  template <int Locality = 3>
  static void prefetch_key(const KV* kj, std::ptrdiff_t ks, const KV* vj, std::ptrdiff_t vs, std::size_t dist,
                           std::size_t kb, std::size_t vb) {
    const char* kp = reinterpret_cast<const char*>(kj + static_cast<std::ptrdiff_t>(dist) * ks);
    const char* vp = reinterpret_cast<const char*>(vj + static_cast<std::ptrdiff_t>(dist) * vs);
    for (std::size_t x = 0; x < kb; x += 64) __builtin_prefetch(kp + x, 0, Locality);
    for (std::size_t x = 0; x < vb; x += 64) __builtin_prefetch(vp + x, 0, Locality);
  }

  // ---- the score program ------------------------------------------------------------------------------
  // After the folded factor, for one score x: row r of the item (query i of head h), key j.
  static T program(const item& it, std::size_t r, std::size_t h, std::size_t i, std::size_t j, T x) {
    const score_plan<T>& plan = it.plan;
    std::size_t li = 0;
    for (std::size_t si = 0; si < plan.n; ++si) {
      const score_step<T>& st = plan.steps[si];
      if (is_limit(st.kind)) {
        const std::size_t lim = it.limits[li * it.rows + r], from = it.start(li++, r);
        if (si >= plan.first && (j >= lim || j < from)) x = st.value;
        continue;
      }
      if (si < plan.first) continue;
      switch (st.kind) {
        case step_kind::multiply: x *= st.value; break;
        case step_kind::divide: x /= st.value; break;
        case step_kind::boolean_mask:
          if (!st.mask.at(it.b, h, i, j)) x = st.value;
          break;
        case step_kind::additive_mask: x += st.bias.at(it.b, h, i, j); break;
        case step_kind::linear_bias: x += linear_bias_at(st, it.p, it.b, h, i, j); break;
        case step_kind::tanh: {  // (the vector routine, so that a lone score has the bits of a whole group)
          alignas(64) T lanes[W];
          V::store(lanes, kernel<T>::tanh(V::set1(x)));
          x = lanes[0];
          break;
        }
        default: break;
      }
    }
    return x;
  }
  // The same on a whole group of row r (keys j0 .. j0 + W - 1) below every limit of the row, vectorised, with
  // program()'s bits; false (s unchanged) when the group reaches a limit. A mask's flags and a bias's values are
  // read W at a time where they are contiguous, else gathered.
  static bool vector_program(const item& it, std::size_t r, std::size_t h, std::size_t i, std::size_t j0, R& s) {
    const score_plan<T>& plan = it.plan;
    for (std::size_t li = 0; li < plan.n_limits; ++li)
      if (j0 + W > it.limits[li * it.rows + r] || j0 < it.start(li, r)) return false;
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
          x = V::where_flags(group(&st.mask.at(it.b, h, i, j0), st.mask.col, a), x, V::set1(st.value));
          break;
        }
        case step_kind::additive_mask: {
          T a[W];
          x = V::add(x, V::loadu(group(&st.bias.at(it.b, h, i, j0), st.bias.col, a)));
          break;
        }
        case step_kind::tanh: x = kernel<T>::tanh(x); break;
        case step_kind::linear_bias: {  // linear_bias_at's operations, lane k for key j0 + k
          alignas(64) T js[W];
          for (std::size_t k = 0; k < W; ++k) js[k] = static_cast<T>(j0 + k);
          const R m = V::set1(static_cast<T>(st.slopes[st.n_slopes == 1 ? 0 : h]));
          const R d = V::add(V::sub(V::load(js), V::set1(static_cast<T>(i + bias_keys(st, it.p, it.b)))), V::set1(static_cast<T>(it.p.lq)));
          x = V::add(x, V::mul(m, d));
          break;
        }
        default: break;  // a limit: the group is below it
      }
    }
    s = x;
    return true;
  }
  // The keys of row r below which no step after the folded factor can change a score: up to rend when all that
  // follows the factor is limit steps (below every limit), none when anything else follows.
  static std::size_t clear_below(const item& it, std::size_t r, std::size_t rend) {
    if (it.plan.programmed) return 0;
    std::size_t clear = rend;
    for (std::size_t li = 0; li < it.plan.n_limits; ++li) clear = alg::min(clear, it.limits[li * it.rows + r]);
    return clear;
  }

  // ---- dots -------------------------------------------------------------------------------------------------
  // The dots of NR rows of q (DK W apart) with the key at k (d_k = DK W), each K vector loaded once for all the rows.
  // Pairs (bf16 K, AVX-512 float): per 2 W elements q holds the W at even indices then the W at odd ones, against
  // k's 2 W widened together (V::load_bf16_pairs). Every loop takes its dots here: the same chains, the same bits.
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
  // q . k over d_k = DK W (DK 0: dk, any multiple of W) as a vector of partial sums; with a run-time count two
  // accumulators (one chain of dk / W dependent FMAs otherwise).
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
  // The W dots kdot(key) of the keys at k (keys past n repeat key n - 1) as one vector, lane x the dot with key x,
  // each reduced as one_row's loop reduces it (V::with_lane_sum), so a group has the same bits however it is reached.
  // DK: d_k / W if fixed (the lanes unrolled), 0 for any d_k.
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
  // x[0, n) (n a multiple of 2 W) into out in the even/odd order of Pairs, and back in place.
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
  // q (N values) in the order the dots read it: with Pairs a copy in the even/odd order, else q itself.
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

  // ---- the online softmax -----------------------------------------------------------------------------------
  // One row over the scores s[0, n) (n a multiple of W; skipped keys -inf): the scores become their weights, m and
  // l the row's running maximum and sum. Returns the factor by which the row's output so far is to be rescaled.
  static T online_softmax(T* s, std::size_t n, T& m, T& l) {
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
  // online_softmax's result for a group of W scores s without the program or the maximum's reductions, where that is
  // possible; returns whether it was (alpha: the factor for the row's output). No visible key (live 0): weights 0.
  // A whole group (live W, nothing after the folded factor) against a finite reference m that no score exceeds by
  // more than margin (NaN included): weights 2^((s - m) log2 e), m kept (margin 0: online_softmax's bits; above 0 the
  // reference lags the maximum, weights up to 2^(margin log2 e)). A whole group before any visible key with a finite
  // maximum mx: m = mx, alpha 0.
  static ATTNX_FORCE_INLINE bool weigh_quick(R s, std::size_t live, bool whole, T margin, T* w, T& m, T& l, T& alpha) {
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
  // The scores s of row r's keys j0 .. j0 + W - 1 (the first live of them visible; keys below clear need nothing
  // after the folded factor): the score program, then the weights into w and the row's m and l. Returns the factor
  // by which the row's output is to be rescaled.
  static T weigh(const item& it, std::size_t r, std::size_t h, std::size_t i, std::size_t j0, std::size_t live,
                 std::size_t clear, R s, T* w, T& m, T& l) {
    const bool scalar = (live < W || j0 + W > clear) && !(it.plan.programmed && live == W && vector_program(it, r, h, i, j0, s));
    if (T alpha; weigh_quick(s, live, !scalar, T(0), w, m, l, alpha)) return alpha;
    V::store(w, s);
    if (scalar) {
      const bool plain = it.plan.n == it.plan.first;
      for (std::size_t x = 0; x < W; ++x) w[x] = x >= live ? -inf : plain ? w[x] : program(it, r, h, i, j0 + x, w[x]);
    }
    return online_softmax(w, W, m, l);
  }
};

// The NR rows of a few-rows loop (few_rows, four_rows): the item's rows r0, r0 + 1, ... (those past its last are
// padding and see no key), with each row's end, the keys below which it takes the folded factor alone (clear), its
// head and query, and the weighing of a group the loops share. The weights are taken against a reference maximum
// that moves only when a score exceeds it by more than lazy_margin (a weight is then at most 2^8; the state is exact
// for any reference): a new maximum costs a rescale and a scalar exp, and at each chunk's restart they would come
// often. The margin costs 2^8 of T's range in the outputs and changes last bits against the exact maximum; the
// results stay the same for any number of threads.
template <class T, class KV, std::size_t NR>
struct row_set : decode_ops<T, KV> {
  using ops = decode_ops<T, KV>;
  using typename ops::R;
  using typename ops::V;
  using ops::W;
  static constexpr T lazy_margin = T(8) / log2e<T>;
  const decode_item<T, KV>& it;
  std::size_t r0;  // the item's row of this set's row 0
  std::size_t rend[NR], clear[NR], hs[NR], is[NR];
  row_set(const decode_item<T, KV>& of, std::size_t first_row) : it(of), r0(first_row) {
    for (std::size_t r = 0; r < NR; ++r) {
      const std::size_t ra = r0 + r;
      const bool real = ra < it.rows;
      rend[r] = real ? it.end(ra) : 0;
      clear[r] = real ? ops::clear_below(it, ra, rend[r]) : 0;
      hs[r] = it.head(real ? ra : 0);
      is[r] = real ? it.query(ra) : 0;
    }
  }
  // The group at j0: each row's scores sv[r] = reduce(r) x the folded factor, its live keys live[r], and weigh_quick
  // (margin lazy_margin) for every row it settles, inline; returns the rows left for full (a bit each). Under masks
  // or biases (where clear is 0) a whole group below the row's limits takes the program vectorised and weigh_quick
  // with margin 0: the bits of full, without going out of line.
  template <class Reduce>
  ATTNX_FORCE_INLINE unsigned quick(std::size_t j0, R fv, const Reduce& reduce, std::size_t* live, R* sv, T (*w)[W],
                                    T* alpha, T* ms, T* ls) const {
    const score_plan<T>& plan = it.plan;
    unsigned slow = 0;
    ATTNX_UNROLL
    for (std::size_t r = 0; r < NR; ++r) {
      live[r] = rend[r] > j0 ? alg::min(W, rend[r] - j0) : 0;
      sv[r] = live[r] ? V::mul(reduce(r), fv) : V::zero();
      R x = sv[r];  // (sv[r] kept for full)
      const bool whole = live[r] == W && (j0 + W <= clear[r] ||
                                          (plan.programmed && ops::vector_program(it, r0 + r, hs[r], is[r], j0, x)));
      if (!ops::weigh_quick(x, live[r], whole, plan.programmed ? T(0) : lazy_margin, w[r], ms[r], ls[r], alpha[r]))
          [[unlikely]]
        slow |= 1u << r;
    }
    return slow;
  }
  // Row r of the group at j0 through the whole score program (weigh, out of line); returns its rescale factor.
  T full(std::size_t r, std::size_t j0, std::size_t live, R sv, T* w, T& m, T& l) const {
    return ops::weigh(it, r0 + r, hs[r], is[r], j0, live, clear[r], sv, w, m, l);
  }
  // Rows [ra, rb) of the outputs at os (DV vectors apart), each multiplied by alpha[r] unless that is 1.
  template <std::size_t DV>
  static ATTNX_FORCE_INLINE void rescale(T* os, std::size_t ra, std::size_t rb, const T* alpha) {
    for (std::size_t r = ra; r < rb; ++r) {
      if (alpha[r] == T(1)) continue;
      const R a = V::set1(alpha[r]);
      ATTNX_UNROLL
      for (std::size_t c = 0; c < DV; ++c) V::store(os + (r * DV + c) * W, V::mul(V::load(os + (r * DV + c) * W), a));
    }
  }
};
