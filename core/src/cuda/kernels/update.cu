// Optimizer update kernels of the CUDA backend: MXNet's formulas (as the CPU's
// core/src/cpu/update_rules.rs), in the weight's dtype, over a dense gradient or the stored
// rows of a row_sparse one (lazy mode: only those rows; the standard mode densifies the
// gradient first, update.rs). Rule numbers are those of `core/src/cuda/update.rs`.

// The shared scalars and the rule's own hyper-parameters in f64, rounded to the weight's
// dtype here as the CPU rounds them. Mirrors `UpdateParams` in update.rs (repr(C)).
struct UpdateParams {
  double lr, wd, rg, clip;
  double h0, h1, h2;
  int has_clip;
  int rule;
};

template <typename T> __device__ __forceinline__ T clip_of(T x, bool on, T c) {
  if (!on) return x;
  return x > c ? c : (x < -c ? -c : x);
}

template <typename T> __device__ __forceinline__ T sign_of(T x) {
  return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
}

template <typename T>
__device__ __forceinline__ void update_one(T& w, T g, T* s0, T* s1, const UpdateParams& p) {
  const T lr = (T)p.lr, wd = (T)p.wd, rg = (T)p.rg, c = (T)p.clip, one = T(1);
  const bool on = p.has_clip != 0;
  switch (p.rule) {
    case 0: {  // sgd
      w = (one - lr * wd) * w - lr * clip_of(rg * g, on, c);
      break;
    }
    case 1: {  // sgd_mom: h0 momentum
      T mu = (T)p.h0;
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
      T b1 = (T)p.h0, b2 = (T)p.h1, eps = (T)p.h2;
      T h = clip_of(g * rg + w * wd, on, c);
      T m = b1 * *s0 + (one - b1) * h;
      T v = b2 * *s1 + (one - b2) * h * h;
      *s0 = m;
      *s1 = v;
      w = w - lr * m / (sqrt(v) + eps);
      break;
    }
    case 4: {  // adamw: as adam, the decay outside the moments
      T b1 = (T)p.h0, b2 = (T)p.h1, eps = (T)p.h2;
      T h = clip_of(g * rg, on, c);
      T m = b1 * *s0 + (one - b1) * h;
      T v = b2 * *s1 + (one - b2) * h * h;
      *s0 = m;
      *s1 = v;
      w = w - lr * (m / (sqrt(v) + eps) + wd * w);
      break;
    }
    case 5: {  // adagrad: h0 epsilon
      T eps = (T)p.h0;
      T h = clip_of(g * rg, on, c);
      T s = *s0 + h * h;
      *s0 = s;
      T div = h / sqrt(s + eps);
      w = w + (div + w * wd) * -lr;
      break;
    }
    default:
      break;
  }
}

// Dense: item i is element i. Lazy row_sparse: item t is element t % row_len of stored row
// t / row_len, which is row ids[t / row_len] of the weight. States unused by a rule may be
// null.
#define UPDATE(tn, T) \
  extern "C" __global__ void update_##tn(T* w, T* s0, T* s1, const T* g, const long long* ids, \
                                         unsigned long long items, unsigned long long row_len, \
                                         int sparse, UpdateParams p) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < items; t += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long at = sparse ? (unsigned long long)ids[t / row_len] * row_len + t % row_len : t; \
      T wv = w[at]; \
      update_one<T>(wv, g[t], s0 ? s0 + at : nullptr, s1 ? s1 + at : nullptr, p); \
      w[at] = wv; \
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
