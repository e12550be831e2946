// attnx pointwise kernels: the activations of kernels/pointwise.hpp in vectors of one instruction set (a fragment:
// impl/pointwise.hpp includes it once per instruction set, inside namespace attnx::kernels::detail::<isa>, after the
// attention tiles, whose exp2 and tanh it uses).

template <class T>
struct pointwise_kernel {
  using V = simd::vec<T, isa_tag>;
  using R = typename V::reg;
  using K = kernel<T>;
  static constexpr std::size_t W = V::W;

  // exp(-x) for x = t (t's sign flipped), and s = 1 / (1 + exp(-t)).
  static R sigmoid_of(R t, R& e) {
    e = K::exp2(V::mul(t, V::set1(-log2e<T>)));
    return V::div(V::set1(T(1)), V::add(V::set1(T(1)), e));
  }
  static R apply(pointwise f, R x) {
    constexpr T c = T(0.79788456080286535588), k = T(0.044715);
    const R one = V::set1(T(1));
    R e;
    switch (f) {
      case pointwise::tanh: return K::tanh(x);
      case pointwise::sigmoid: return sigmoid_of(x, e);
      case pointwise::silu: {
        const R s = sigmoid_of(x, e);
        return not_neg_inf(x, V::mul(x, s), V::zero());
      }
      case pointwise::d_silu: {  // s (1 + x (e s)); 0 where e = exp(-x) overflows (e s would be inf * 0)
        const R s = sigmoid_of(x, e);
        const R r = V::mul(s, V::fmadd(x, V::mul(e, s), one));
        return V::less_or(x, V::set1(-T(std::numeric_limits<T>::max_exponent) * T(0.69314718055994530942)), V::zero(), r);
      }
      case pointwise::gelu_tanh:
      case pointwise::d_gelu_tanh: {
        const R x2 = V::mul(x, x);
        const R u2 = V::mul(V::mul(V::set1(T(2) * c), x), V::fmadd(V::set1(k), x2, one));  // 2u
        const R s = sigmoid_of(u2, e);
        R r, big, small;  // (the values for x >= 10 and NaN, and for x <= -10)
        if (f == pointwise::gelu_tanh) {
          r = V::mul(x, s);
          big = x, small = V::set1(T(-0.0));
        } else {  // s + 2 c x (1 + 3 k x^2) s (e s)
          const R du = V::mul(V::mul(V::set1(T(2) * c), x), V::fmadd(V::set1(T(3) * k), x2, one));
          r = V::fmadd(V::mul(du, s), V::mul(e, s), s);
          big = V::min_pass(one, x), small = V::zero();  // (1 for x >= 10, NaN kept)
        }
        r = V::less_or(V::set1(T(-10)), x, r, small);  // x <= -10 (and NaN): the limit ...
        return V::less_or(x, V::set1(T(10)), r, big);  // ... x >= 10 and NaN: the other, NaN kept
      }
    }
    return x;
  }
  // r where x > -inf (and NaN), z at -inf.
  static R not_neg_inf(R x, R r, R z) { return V::less_or(x, V::set1(std::numeric_limits<T>::lowest()), z, r); }

  static void run(pointwise f, const T* x, T* y, std::size_t n) {
    std::size_t i = 0;
    for (; i + W <= n; i += W) V::storeu(y + i, apply(f, V::loadu(x + i)));
    if (i < n) {
      alignas(64) T tail[W] = {};
      for (std::size_t j = 0; i + j < n; ++j) tail[j] = x[i + j];
      V::store(tail, apply(f, V::load(tail)));
      for (std::size_t j = 0; i + j < n; ++j) y[i + j] = tail[j];
    }
  }
};
