// The fused kernels of a Dense layer (bias + activation and its backward) and of the sigmoid
// binary cross-entropy loss. Products themselves go to cuBLAS (linalg.rs).
// act: -1 none, 0 sigmoid, 1 tanh, 2 relu (`FusedAct` in linalg.rs).

#define GRID_LOOP(i, n) \
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < (n); \
       i += (unsigned long long)gridDim.x * blockDim.x)

template <typename T> __device__ __forceinline__ T sigmoid_of(T x) {
  T e = exp(-fabs(x));
  T s = T(1) / (T(1) + e);
  return x >= T(0) ? s : e * s;
}

template <typename T> __device__ __forceinline__ T act_of(T v, int act) {
  switch (act) {
    case 0: return sigmoid_of(v);
    case 1: return tanh(v);
    case 2: return v > T(0) ? v : T(0);
    default: return v;
  }
}

// act'(x) written with the output y = act(x).
template <typename T> __device__ __forceinline__ T act_grad_of(T y, int act) {
  switch (act) {
    case 0: return y * (T(1) - y);
    case 1: return T(1) - y * y;
    case 2: return y > T(0) ? T(1) : T(0);
    default: return T(1);
  }
}

#define LINALG_KERNELS(tn, T) \
  extern "C" __global__ void bias_act_##tn(const T* y, const T* bias, T* out, unsigned long long n, \
                                           unsigned long long units, int act) { \
    GRID_LOOP(i, n) { out[i] = act_of<T>(y[i] + bias[i % units], act); } \
  } \
  extern "C" __global__ void act_grad_##tn(const T* g, const T* y, T* out, unsigned long long n, \
                                           int act) { \
    GRID_LOOP(i, n) { out[i] = g[i] * act_grad_of<T>(y[i], act); } \
  } \
  extern "C" __global__ void act_derivative_##tn(const T* y, T* out, unsigned long long n, \
                                                 int act) { \
    GRID_LOOP(i, n) { out[i] = act_grad_of<T>(y[i], act); } \
  } \
  extern "C" __global__ void column_sums_##tn(const T* g, T* out, unsigned long long rows, \
                                              unsigned long long units) { \
    GRID_LOOP(j, units) { \
      T s = T(0); \
      for (unsigned long long r = 0; r < rows; ++r) s += g[r * units + j]; \
      out[j] = s; \
    } \
  } \
  extern "C" __global__ void sigmoid_bce_##tn(const T* x, const T* z, T* out, unsigned long long n) { \
    GRID_LOOP(i, n) { \
      T v = x[i]; \
      out[i] = (v > T(0) ? v : T(0)) - v * z[i] + log1p(exp(-fabs(v))); \
    } \
  } \
  extern "C" __global__ void sigmoid_bce_grad_##tn(const T* g, const T* x, const T* z, T* dx, T* dz, \
                                                   unsigned long long n, int need_dz) { \
    GRID_LOOP(i, n) { \
      dx[i] = g[i] * (sigmoid_of<T>(x[i]) - z[i]); \
      if (need_dz) dz[i] = -g[i] * x[i]; \
    } \
  }

LINALG_KERNELS(f32, float)
LINALG_KERNELS(f64, double)
