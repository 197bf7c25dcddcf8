// Optimizer update kernels of the CUDA backend: MXNet's formulas (as the CPU's
// core/src/cpu/update_rules.rs), in the weight's dtype, over a dense gradient or the stored
// rows of a row_sparse one (lazy mode: only those rows; the standard mode densifies the
// gradient first, update.rs). Rule numbers are those of `core/src/cuda/update.rs`. Each
// formula is written in the CPU's order of operations (NVRTC may still contract a multiply
// and an add into an FMA, so results can differ from the CPU's in the last bits).

// The shared scalars and the rule's own hyper-parameters in f64, rounded to the weight's
// dtype here as the CPU rounds them. Mirrors `UpdateParams` in update.rs (repr(C)).
struct UpdateParams {
  double lr, wd, rg, clip;
  double h[8];
  int has_clip;
  int rule;
  // Rules with a clip of the updated weight (rmsprop, rmspropalex): h[7] when set.
  int has_clip_weights;
  int pad;
};

template <typename T> __device__ __forceinline__ T clip_of(T x, bool on, T c) {
  if (!on) return x;
  return x > c ? c : (x < -c ? -c : x);
}

template <typename T> __device__ __forceinline__ T sign_of(T x) {
  return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
}

// The CPU's `CocobStep::apply`.
template <typename T>
__device__ __forceinline__ void cocob_one(T& w, T g, T* l, T* s, T* r, T* th, T* w0, T lr, T wd,
                                          T rg, bool on, T c, T alpha) {
  const T zero = T(0);
  T h = clip_of(g * rg, on, c) + wd * w;
  if (*l == zero) *w0 = w;
  T a = fabs(h);
  if (a > *l) *l = a;
  // Nothing seen yet: no bet.
  if (*l == zero) return;
  *s = *s + a;
  T won = *r - h * (w - *w0);
  *r = won > zero ? won : zero;
  *th = *th + h;
  T scale = *s + *l > alpha * *l ? *s + *l : alpha * *l;
  w = *w0 - lr * *th / (*l * scale) * (*l + *r);
}

// One element of rule `p.rule`: `st[k]` points at this element's k-th state (null where the
// rule has fewer). `sq`, for lamb's first pass, receives w^2 and u^2 in f64 at `sq[0]` and
// `sq[sq_stride]`.
template <typename T>
__device__ __forceinline__ void update_one(T& w, T g, T* const* st, const UpdateParams& p,
                                           double* sq, unsigned long long sq_stride) {
  const T lr = (T)p.lr, wd = (T)p.wd, rg = (T)p.rg, c = (T)p.clip, one = T(1), zero = T(0);
  const bool on = p.has_clip != 0;
  const bool on_w = p.has_clip_weights != 0;
  T* s0 = st[0];
  T* s1 = st[1];
  T* s2 = st[2];
  switch (p.rule) {
    case 0: {  // sgd
      w = (one - lr * wd) * w - lr * clip_of(rg * g, on, c);
      break;
    }
    case 1: {  // sgd_mom: h0 momentum
      T mu = (T)p.h[0];
      T m = on ? mu * *s0 - lr * wd * w - lr * clip_of(rg * g, on, c) : mu * *s0 - lr * wd * w - lr * rg * g;
      *s0 = m;
      w = w + m;
      break;
    }
    case 2: {  // signsgd
      w = (one - lr * wd) * w - lr * sign_of(g);
      break;
    }
    case 3: {  // adam: h0 beta1, h1 beta2, h2 epsilon
      T b1 = (T)p.h[0], b2 = (T)p.h[1], eps = (T)p.h[2];
      T h = clip_of(g * rg + w * wd, on, c);
      T m = b1 * *s0 + (one - b1) * h;
      T v = b2 * *s1 + (one - b2) * h * h;
      *s0 = m;
      *s1 = v;
      w = w - lr * m / (sqrt(v) + eps);
      break;
    }
    case 4: {  // adamw: as adam, the decay outside the moments
      T b1 = (T)p.h[0], b2 = (T)p.h[1], eps = (T)p.h[2];
      T h = clip_of(g * rg, on, c);
      T m = b1 * *s0 + (one - b1) * h;
      T v = b2 * *s1 + (one - b2) * h * h;
      *s0 = m;
      *s1 = v;
      w = w - lr * (m / (sqrt(v) + eps) + wd * w);
      break;
    }
    case 5: {  // adagrad: h0 epsilon
      T eps = (T)p.h[0];
      T h = clip_of(g * rg, on, c);
      T s = *s0 + h * h;
      *s0 = s;
      T div = h / sqrt(s + eps);
      w = w + (div + w * wd) * -lr;
      break;
    }
    case 6: {  // nag_mom: h0 momentum
      T mu = (T)p.h[0];
      T gr = on ? clip_of(rg * g, on, c) : rg * g;
      T m = mu * *s0;
      w = w - m + (mu + one) * (m - lr * (gr + wd * w));
      m = m - lr * (gr + wd * w);
      *s0 = m;
      break;
    }
    case 7: {  // signum: h0 momentum, h1 wd_lh
      T mu = (T)p.h[0], wd_lh = (T)p.h[1];
      T m = on ? mu * *s0 - (one - mu) * wd * w - (one - mu) * clip_of(rg * g, on, c)
               : mu * *s0 - (one - mu) * wd * w - (one - mu) * rg * g;
      *s0 = m;
      w = (one - lr * wd_lh) * w + lr * sign_of(m);
      break;
    }
    case 8: {  // adamax: h0 beta1, h1 beta2
      T b1 = (T)p.h[0], b2 = (T)p.h[1];
      T h = clip_of(g * rg + wd * w, on, c);
      T m = b1 * *s0 + (one - b1) * h;
      // Rust's max: NaN loses, as fmax.
      T u = fmax(b2 * *s1, fabs(h));
      *s0 = m;
      *s1 = u;
      if (u != zero) w = w - lr * m / u;
      break;
    }
    case 9: {  // nadam: h0..h2 beta1, beta2, epsilon; h3..h5 d_g, d_m, d_v; h6, h7 c_g, c_m
      T b1 = (T)p.h[0], b2 = (T)p.h[1], eps = (T)p.h[2];
      T d_g = (T)p.h[3], d_m = (T)p.h[4], d_v = (T)p.h[5], c_g = (T)p.h[6], c_m = (T)p.h[7];
      T h = clip_of(g * rg + wd * w, on, c);
      T m = b1 * *s0 + (one - b1) * h;
      T v = b2 * *s1 + (one - b2) * h * h;
      *s0 = m;
      *s1 = v;
      T mbar = c_g * (h / d_g) + c_m * (m / d_m);
      w = w - lr * mbar / (sqrt(v / d_v) + eps);
      break;
    }
    case 10: {  // adadelta: h0 rho, h1 epsilon
      T rho = (T)p.h[0], eps = (T)p.h[1];
      T h = clip_of(g * rg, on, c);
      T a = rho * *s0 + (one - rho) * h * h;
      *s0 = a;
      T d = sqrt(*s1 + eps) / sqrt(a + eps) * h;
      *s1 = rho * *s1 + (one - rho) * d * d;
      w = w - (d + wd * w);
      break;
    }
    case 11: {  // rmsprop: h0 gamma1, h1 epsilon, h7 clip_weights
      T g1 = (T)p.h[0], eps = (T)p.h[1], cw = (T)p.h[7];
      T h = clip_of(rg * g + wd * w, on, c);
      T n = (one - g1) * (h * h) + g1 * *s0;
      *s0 = n;
      w = clip_of(w - lr * (h / sqrt(n + eps)), on_w, cw);
      break;
    }
    case 12: {  // rmspropalex: h0 gamma1, h1 gamma2, h2 epsilon, h7 clip_weights
      T g1 = (T)p.h[0], g2 = (T)p.h[1], eps = (T)p.h[2], cw = (T)p.h[7];
      T h = clip_of(rg * g + wd * w, on, c);
      T n = (one - g1) * h * h + g1 * *s0;
      T s = (one - g1) * h + g1 * *s1;
      T d = g2 * *s2 - (lr * h / sqrt(n - s * s + eps));
      *s0 = n;
      *s1 = s;
      *s2 = d;
      w = clip_of(w + d, on_w, cw);
      break;
    }
    case 13: {  // ftrl: h0 lambda1, h1 beta; states z, n
      T l1 = (T)p.h[0], beta = (T)p.h[1];
      T h = clip_of(g * rg, on, c);
      T n0 = *s1;
      T z = *s0 + (h - (sqrt(n0 + h * h) - sqrt(n0)) * w / lr);
      T n = n0 + h * h;
      *s0 = z;
      *s1 = n;
      T act = fabs(z) > l1 ? one : zero;
      w = (sign_of(z) * l1 - z) / ((beta + sqrt(n)) / lr + wd) * act;
      break;
    }
    case 14:    // cocob: h0 alpha; five states
    case 15: {  // cocob_packed: the same step, its states interleaved (update.rs points st)
      cocob_one(w, g, st[0], st[1], st[2], st[3], st[4], lr, wd, rg, on, c, (T)p.h[0]);
      break;
    }
    case 16: {  // ftml: h0 beta1, h1 beta2, h2 epsilon, h3 1 - beta1^t, h4 1 - beta2^t
      T b1 = (T)p.h[0], b2 = (T)p.h[1], eps = (T)p.h[2], c1 = (T)p.h[3], c2 = (T)p.h[4];
      T h = clip_of(rg * g + wd * w, on, c);
      T v = b2 * *s1 + (one - b2) * (h * h);
      *s1 = v;
      T d_t = c1 / lr * (sqrt(v / c2) + eps);
      T z = b1 * *s2 + (one - b1) * h - (d_t - b1 * *s0) * w;
      *s2 = z;
      *s0 = d_t;
      w = -z / d_t;
      break;
    }
    case 17: {  // lamb phase 1: h0..h2 beta1, beta2, epsilon; h3, h4 d1, d2. The weight stays.
      T b1 = (T)p.h[0], b2 = (T)p.h[1], eps = (T)p.h[2], d1 = (T)p.h[3], d2 = (T)p.h[4];
      T h = clip_of(g * rg, on, c);
      T m = b1 * *s0 + (one - b1) * h;
      T v = b2 * *s1 + (one - b2) * h * h;
      *s0 = m;
      *s1 = v;
      double u = (double)((m / d1) / (sqrt(v / d2) + eps) + wd * w);
      double wv = (double)w;
      sq[0] = wv * wv;
      sq[sq_stride] = u * u;
      break;
    }
    case 18: {  // lamb phase 2: h0 epsilon, h1 d1, h2 d2; `p.lr` the trust-ratio rate
      T eps = (T)p.h[0], d1 = (T)p.h[1], d2 = (T)p.h[2];
      T u = (*s0 / d1) / (sqrt(*s1 / d2) + eps) + wd * w;
      w = w - lr * u;
      break;
    }
    default:
      break;
  }
}

// Dense: item i is element i. Lazy row_sparse: item t is element t % row_len of stored row
// t / row_len, which is row ids[t / row_len] of the weight. States unused by a rule are null;
// `packed` (cocob_packed) reads five states per element interleaved in `s0`. `sq` (lamb's
// first pass, else null) holds 2 * items doubles.
#define UPDATE(tn, T) \
  extern "C" __global__ void update_##tn(T* w, T* s0, T* s1, T* s2, T* s3, T* s4, const T* g, \
                                         const long long* ids, unsigned long long items, \
                                         unsigned long long row_len, int sparse, int packed, \
                                         double* sq, UpdateParams p) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < items; t += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long at = sparse ? (unsigned long long)ids[t / row_len] * row_len + t % row_len : t; \
      T* st[5]; \
      if (packed) { \
        for (int k = 0; k < 5; ++k) st[k] = s0 + at * 5 + k; \
      } else { \
        st[0] = s0 ? s0 + at : nullptr; \
        st[1] = s1 ? s1 + at : nullptr; \
        st[2] = s2 ? s2 + at : nullptr; \
        st[3] = s3 ? s3 + at : nullptr; \
        st[4] = s4 ? s4 + at : nullptr; \
      } \
      T wv = w[at]; \
      update_one<T>(wv, g[t], st, p, sq ? sq + t : nullptr, items); \
      w[at] = wv; \
    } \
  } \
  /* group_adagrad: one thread per gradient row (stored row i is weight row ids[i] when \
     sparse), the sum of squares in the CPU's order (eight interleaved partial sums over \
     chunks of eight, added pairwise, then the tail), one history value per row. */ \
  extern "C" __global__ void group_adagrad_##tn(T* w, T* hist, const T* g, const long long* ids, \
                                                unsigned long long grows, \
                                                unsigned long long rl, int sparse, \
                                                UpdateParams p) { \
    const T lr = (T)p.lr, rg = (T)p.rg, c = (T)p.clip, eps = (T)p.h[0], len = (T)(double)rl; \
    const bool on = p.has_clip != 0; \
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         i < grows; i += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long r = sparse ? (unsigned long long)ids[i] : i; \
      const T* gr = g + i * rl; \
      T* wr = w + r * rl; \
      T acc[8]; \
      for (int k = 0; k < 8; ++k) acc[k] = T(0); \
      unsigned long long full = rl / 8 * 8; \
      for (unsigned long long j = 0; j < full; j += 8) { \
        for (int k = 0; k < 8; ++k) { \
          T x = clip_of(gr[j + k] * rg, on, c); \
          acc[k] = acc[k] + x * x; \
        } \
      } \
      T tail = T(0); \
      for (unsigned long long j = full; j < rl; ++j) { \
        T x = clip_of(gr[j] * rg, on, c); \
        tail = tail + x * x; \
      } \
      T ssq = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail; \
      T h = hist[r] + ssq / len; \
      hist[r] = h; \
      T denom = sqrt(h) + eps; \
      for (unsigned long long j = 0; j < rl; ++j) { \
        wr[j] = wr[j] - lr * clip_of(gr[j] * rg, on, c) / denom; \
      } \
    } \
  } \
  /* out[ids[r], j] = vals[r, j] into zeros: a row_sparse gradient made dense. */ \
  extern "C" __global__ void scatter_rows_##tn(const T* vals, const long long* ids, T* out, \
                                               unsigned long long items, \
                                               unsigned long long row_len) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < items; t += (unsigned long long)gridDim.x * blockDim.x) { \
      out[(unsigned long long)ids[t / row_len] * row_len + t % row_len] = vals[t]; \
    } \
  }

UPDATE(f32, float)
UPDATE(f64, double)
