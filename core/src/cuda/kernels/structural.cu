// Structural kernels of the CUDA backend: dtype conversion and gathers by position.
// Grid-stride loops: the launcher caps the grid, every thread walks the rest.

#define GRID_LOOP(i, n) \
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < (n); \
       i += (unsigned long long)gridDim.x * blockDim.x)

// `as` semantics through f64, as the CPU's cast: NaN to 0, saturating at the type's bounds.
template <typename T> __device__ T from_double(double v);
template <> __device__ float from_double<float>(double v) { return (float)v; }
template <> __device__ double from_double<double>(double v) { return v; }
template <> __device__ long long from_double<long long>(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775807.0) return 9223372036854775807LL;
  if (v <= -9223372036854775808.0) return (-9223372036854775807LL - 1);
  return (long long)v;
}
template <> __device__ int from_double<int>(double v) {
  if (v != v) return 0;
  if (v >= 2147483647.0) return 2147483647;
  if (v <= -2147483648.0) return (-2147483647 - 1);
  return (int)v;
}
template <> __device__ unsigned char from_double<unsigned char>(double v) {
  if (v != v) return 0;
  if (v >= 255.0) return 255;
  if (v <= 0.0) return 0;
  return (unsigned char)v;
}

template <typename S, typename D>
__device__ void cast_body(const S* x, D* y, unsigned long long n) {
  GRID_LOOP(i, n) { y[i] = from_double<D>((double)x[i]); }
}

#define CAST(sn, S, dn, D) \
  extern "C" __global__ void cast_##sn##_##dn(const S* x, D* y, unsigned long long n) { \
    cast_body<S, D>(x, y, n); \
  }
#define CAST_FROM(sn, S) \
  CAST(sn, S, f32, float) CAST(sn, S, f64, double) CAST(sn, S, i64, long long) \
  CAST(sn, S, i32, int) CAST(sn, S, u8, unsigned char)
CAST_FROM(f32, float)
CAST_FROM(f64, double)
CAST_FROM(i64, long long)
CAST_FROM(i32, int)
CAST_FROM(u8, unsigned char)

// out[i] = x[pos[i]], by element size (the bits move unchanged).
#define GATHER(name, T) \
  extern "C" __global__ void name(const T* x, const long long* pos, T* out, unsigned long long n) { \
    GRID_LOOP(i, n) { out[i] = x[pos[i]]; } \
  }
GATHER(gather_b1, unsigned char)
GATHER(gather_b4, unsigned int)
GATHER(gather_b8, unsigned long long)
