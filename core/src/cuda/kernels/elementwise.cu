// Elementwise kernels of the CUDA backend: unary maps (the `Map` variants, by number), fused
// activation backwards (`MapGrad`), broadcasting binary operators (`BinaryOp`) and
// comparisons (`CmpOp`). Op numbers are those of `core/src/cuda/elementwise.rs`.

#define GRID_LOOP(i, n) \
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < (n); \
       i += (unsigned long long)gridDim.x * blockDim.x)

// NumPy broadcasting: the output's shape and each operand's element strides (0 along a
// broadcast axis), at most 8 axes. Mirrors `Bcast` in elementwise.rs (repr(C)).
struct Bcast {
  unsigned long long shape[8];
  long long xs[8];
  long long ys[8];
  int ndim;
};

__device__ __forceinline__ void bcast_offsets(const Bcast& b, unsigned long long i, long long& ox,
                                              long long& oy) {
  ox = 0;
  oy = 0;
  for (int d = b.ndim - 1; d >= 0; --d) {
    unsigned long long s = b.shape[d];
    unsigned long long c = i % s;
    i /= s;
    ox += (long long)c * b.xs[d];
    oy += (long long)c * b.ys[d];
  }
}

// Overflow-free logistic function: exp of -|x| only.
template <typename T> __device__ __forceinline__ T sigmoid_of(T x) {
  T e = exp(-fabs(x));
  T s = T(1) / (T(1) + e);
  return x >= T(0) ? s : e * s;
}

// log(1 + exp(x)) without overflow.
template <typename T> __device__ __forceinline__ T softplus_of(T x) {
  return x > T(0) ? x + log1p(exp(-x)) : log1p(exp(x));
}

// The activations of `ops::activation` (`ActFn`, numbered as `act_code`): the forward of `x`
// and `g * f'(x)`, with the one parameter `a` (ELU's alpha, Swish's beta).
#define SELU_LAMBDA 1.0507009873554805
#define SELU_ALPHA 1.6732632423543773
#define SQRT_2_OVER_PI 0.7978845608028654
#define GELU_CUBIC 0.044715
#define INV_SQRT_2PI 0.3989422804014327
#define FRAC_1_SQRT_2 0.7071067811865476

template <typename T> __device__ __forceinline__ T act_one(T x, int op, T a) {
  switch (op) {
    case 0: return x > T(0) ? x : a * expm1(x);
    case 1: return x > T(0) ? T(SELU_LAMBDA) * x : T(SELU_LAMBDA * SELU_ALPHA) * expm1(x);
    case 2: return T(0.5) * x * (T(1) + erf(x * T(FRAC_1_SQRT_2)));
    case 3: return T(0.5) * x * (T(1) + tanh(T(SQRT_2_OVER_PI) * (x + T(GELU_CUBIC) * x * x * x)));
    case 4: return x * sigmoid_of(a * x);
    case 5: return x / (T(1) + fabs(x));
    case 6: return -softplus_of(-x);
    case 7: return x * tanh(softplus_of(x));
    default: return x;
  }
}

template <typename T> __device__ __forceinline__ T act_grad_one(T g, T x, int op, T a) {
  switch (op) {
    case 0: return x > T(0) ? g : g * a * exp(x);
    case 1: return x > T(0) ? g * T(SELU_LAMBDA) : g * T(SELU_LAMBDA * SELU_ALPHA) * exp(x);
    case 2:
      return g * (T(0.5) * (T(1) + erf(x * T(FRAC_1_SQRT_2))) +
                  x * T(INV_SQRT_2PI) * exp(T(-0.5) * x * x));
    case 3: {
      T x2 = x * x;
      T t = tanh(T(SQRT_2_OVER_PI) * (x + T(GELU_CUBIC) * x2 * x));
      return g * (T(0.5) * (T(1) + t) +
                  T(0.5) * x * (T(1) - t * t) * T(SQRT_2_OVER_PI) * (T(1) + T(3 * GELU_CUBIC) * x2));
    }
    case 4: {
      T s = sigmoid_of(a * x);
      return g * (s + a * x * s * (T(1) - s));
    }
    case 5: {
      T d = T(1) + fabs(x);
      return g / (d * d);
    }
    case 6: return g * sigmoid_of(-x);
    case 7: {
      T t = tanh(softplus_of(x));
      return g * (t + x * (T(1) - t * t) * sigmoid_of(x));
    }
    default: return g;
  }
}

template <typename T> __device__ __forceinline__ T map_one(T x, int op, T a, T b) {
  switch (op) {
    case 0: return -x;
    case 1: return exp(x);
    case 2: return log(x);
    case 3: return sqrt(x);
    case 4: return x * x;
    case 5: return fabs(x);
    case 6: return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
    case 7: return sigmoid_of(x);
    case 8: return x > T(0) ? x : T(0);
    case 9: return tanh(x);
    case 10: return softplus_of(x);
    case 11: return x > T(0) ? x : a * x;
    case 12: return x + a;
    case 13: return a - x;
    case 14: return x * a;
    case 15: return x / a;
    case 16: return a / x;
    case 17: return pow(x, a);
    case 18: return x >= a ? x : a;
    case 19: return x <= a ? x : a;
    case 20: return fmin(fmax(x, a), b);
    case 21: return (x >= a && x <= b) ? T(1) : T(0);
    case 22: return x > T(0) ? T(1) : a;
    case 23: return sin(x);
    case 24: return cos(x);
    case 25: return tan(x);
    case 26: return asin(x);
    case 27: return atan(x);
    case 28: return sinh(x);
    case 29: return cosh(x);
    case 30: return asinh(x);
    case 31: return atanh(x);
    case 32: return expm1(x);
    case 33: return log1p(x);
    case 34: return cbrt(x);
    case 35: return round(x);
    case 36: return rint(x);
    case 37: return ceil(x);
    case 38: return floor(x);
    case 39: return trunc(x);
    default: return op >= 40 ? act_one(x, op - 40, a) : x;
  }
}

template <typename T> __device__ __forceinline__ T map_grad_one(T g, T s, int op, T a) {
  switch (op) {
    case 0: return g * s * (T(1) - s);
    case 1: return s > T(0) ? g : T(0);
    case 2: return g * (T(1) - s * s);
    case 3: return g * sigmoid_of(s);
    default: return op >= 4 ? act_grad_one(g, s, op - 4, a) : g;
  }
}

template <typename T> __device__ __forceinline__ T binary_one(T p, T q, int op) {
  switch (op) {
    case 0: return p + q;
    case 1: return p - q;
    case 2: return p * q;
    case 3: return p / q;
    case 4: return pow(p, q);
    case 5: return p >= q ? p : q;
    case 6: return p <= q ? p : q;
    default: return p;
  }
}

template <typename T> __device__ __forceinline__ bool cmp_one(T p, T q, int op) {
  switch (op) {
    case 0: return p == q;
    case 1: return p != q;
    case 2: return p > q;
    case 3: return p >= q;
    case 4: return p < q;
    default: return p <= q;
  }
}

#define FLOAT_KERNELS(tn, T) \
  extern "C" __global__ void map_##tn(const T* x, T* y, unsigned long long n, int op, double a, \
                                      double b) { \
    T ta = (T)a, tb = (T)b; \
    GRID_LOOP(i, n) { y[i] = map_one<T>(x[i], op, ta, tb); } \
  } \
  extern "C" __global__ void map_grad_##tn(const T* g, const T* s, T* out, unsigned long long n, \
                                           int op, double a) { \
    T ta = (T)a; \
    GRID_LOOP(i, n) { out[i] = map_grad_one<T>(g[i], s[i], op, ta); } \
  } \
  extern "C" __global__ void zip_##tn(const T* x, const T* y, T* out, unsigned long long n, int op, \
                                      Bcast b, int same) { \
    GRID_LOOP(i, n) { \
      long long ox = (long long)i, oy = (long long)i; \
      if (!same) bcast_offsets(b, i, ox, oy); \
      out[i] = binary_one<T>(x[ox], y[oy], op); \
    } \
  }

FLOAT_KERNELS(f32, float)
FLOAT_KERNELS(f64, double)

#define CMP_KERNELS(tn, T) \
  extern "C" __global__ void compare_##tn(const T* x, const T* y, T* out, unsigned long long n, \
                                          int op, Bcast b, int same) { \
    GRID_LOOP(i, n) { \
      long long ox = (long long)i, oy = (long long)i; \
      if (!same) bcast_offsets(b, i, ox, oy); \
      out[i] = cmp_one<T>(x[ox], y[oy], op) ? (T)1 : (T)0; \
    } \
  } \
  extern "C" __global__ void compare_scalar_##tn(const T* x, T* out, unsigned long long n, int op, \
                                                 double s) { \
    GRID_LOOP(i, n) { out[i] = cmp_one<double>((double)x[i], s, op) ? (T)1 : (T)0; } \
  }

CMP_KERNELS(f32, float)
CMP_KERNELS(f64, double)
CMP_KERNELS(i64, long long)
CMP_KERNELS(i32, int)
CMP_KERNELS(u8, unsigned char)
