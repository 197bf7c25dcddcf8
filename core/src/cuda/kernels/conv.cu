// Convolution and pooling kernels of the CUDA backend. The products of a convolution go to
// cuBLAS (conv.rs); these kernels unroll one batch entry into its column matrix (im2col), fold a
// column matrix back into an input gradient (col2im), add the bias, and pool.
// Spatial dims are always three (1-D and 2-D problems are lifted with leading 1s, as
// `storage::ConvGeom` / `PoolGeom` are). Indices are 64-bit throughout.

#define GRID_LOOP(i, n) \
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < (n); \
       i += (unsigned long long)gridDim.x * blockDim.x)

// Mirrors `ConvDims` in conv.rs.
struct ConvDims {
  unsigned long long in_channels;
  unsigned long long input[3];
  unsigned long long kernel[3];
  unsigned long long output[3];
  unsigned long long stride[3];
  unsigned long long pad[3];
  unsigned long long dilation[3];
};

// Mirrors `PoolDims` in conv.rs. kind: 0 max, 1 average; include_pad: count_include_pad.
struct PoolDims {
  unsigned long long planes;
  unsigned long long input[3];
  unsigned long long kernel[3];
  unsigned long long output[3];
  unsigned long long stride[3];
  unsigned long long pad[3];
  int kind;
  int include_pad;
};

// The input index tap `k` reads for output index `o` along dim `d`, or -1 in the padding
// (the CPU's `source`).
__device__ __forceinline__ long long conv_source(const ConvDims& g, int d, unsigned long long o,
                                                 unsigned long long k) {
  long long i = (long long)(o * g.stride[d] + k * g.dilation[d]) - (long long)g.pad[d];
  return (i >= 0 && i < (long long)g.input[d]) ? i : -1;
}

// The output index whose tap `k` reads input index `i` along dim `d`, or -1 when none does
// (the inverse of conv_source: i + pad - k * dilation must be a non-negative multiple of the
// stride below the output size).
__device__ __forceinline__ long long conv_target(const ConvDims& g, int d, unsigned long long i,
                                                 unsigned long long k) {
  long long num = (long long)(i + g.pad[d]) - (long long)(k * g.dilation[d]);
  if (num < 0 || num % (long long)g.stride[d] != 0) return -1;
  long long o = num / (long long)g.stride[d];
  return o < (long long)g.output[d] ? o : -1;
}

// One window of a pooling along one dim (the CPU's `Span`): the clipped input range [lo, hi)
// and the padded extent, the divisor with count_include_pad.
struct Span {
  long long lo, hi, padded;
};

__device__ __forceinline__ Span pool_span(const PoolDims& g, int d, unsigned long long o) {
  long long start = (long long)(o * g.stride[d]) - (long long)g.pad[d];
  long long end = start + (long long)g.kernel[d];
  long long lim = (long long)(g.input[d] + g.pad[d]);
  if (end > lim) end = lim;
  Span s;
  s.padded = end - start > 0 ? end - start : 0;
  s.lo = start > 0 ? start : 0;
  long long hi = end < (long long)g.input[d] ? end : (long long)g.input[d];
  if (hi < 0) hi = 0;
  s.hi = hi > s.lo ? hi : s.lo;
  return s;
}

__device__ __forceinline__ void pool_window(const PoolDims& g, unsigned long long o, Span* w) {
  unsigned long long ox = o % g.output[2], oy = (o / g.output[2]) % g.output[1],
                     oz = o / (g.output[2] * g.output[1]);
  w[0] = pool_span(g, 0, oz);
  w[1] = pool_span(g, 1, oy);
  w[2] = pool_span(g, 2, ox);
}

__device__ __forceinline__ long long pool_divisor(const PoolDims& g, const Span* w) {
  long long d = g.include_pad ? w[0].padded * w[1].padded * w[2].padded
                              : (w[0].hi - w[0].lo) * (w[1].hi - w[1].lo) * (w[2].hi - w[2].lo);
  return d > 1 ? d : 1;
}

// The plane offset of a window's first largest element (a NaN wins), -1 for an empty window;
// the CPU's `argmax`, in its z, y, x order.
template <typename T>
__device__ __forceinline__ long long pool_argmax(const PoolDims& g, const T* plane, const Span* w) {
  long long best = -1;
  T b = T(0);
  for (long long z = w[0].lo; z < w[0].hi; ++z)
    for (long long y = w[1].lo; y < w[1].hi; ++y) {
      long long row = (z * (long long)g.input[1] + y) * (long long)g.input[2];
      for (long long x = w[2].lo; x < w[2].hi; ++x) {
        T v = plane[row + x];
        if (best < 0 || v > b || (isnan(v) && !isnan(b))) {
          best = row + x;
          b = v;
        }
      }
    }
  return best;
}

#define CONV_KERNELS(tn, T) \
  /* col[r, o] (r = c * taps + tap, o an output position) = the input element tap `tap` of \
     channel c reads for output o, 0 in the padding; x is one entry from x_off. */ \
  extern "C" __global__ void im2col_##tn(const T* x, unsigned long long x_off, T* col, \
                                         ConvDims g) { \
    unsigned long long p = g.output[0] * g.output[1] * g.output[2]; \
    unsigned long long taps = g.kernel[0] * g.kernel[1] * g.kernel[2]; \
    GRID_LOOP(t, g.in_channels * taps * p) { \
      unsigned long long r = t / p, o = t % p; \
      unsigned long long c = r / taps, tap = r % taps; \
      unsigned long long kw = tap % g.kernel[2], kh = (tap / g.kernel[2]) % g.kernel[1], \
                         kd = tap / (g.kernel[2] * g.kernel[1]); \
      unsigned long long ox = o % g.output[2], oy = (o / g.output[2]) % g.output[1], \
                         oz = o / (g.output[2] * g.output[1]); \
      long long iz = conv_source(g, 0, oz, kd), iy = conv_source(g, 1, oy, kh), \
                ix = conv_source(g, 2, ox, kw); \
      T v = T(0); \
      if (iz >= 0 && iy >= 0 && ix >= 0) \
        v = x[x_off + ((c * g.input[0] + iz) * g.input[1] + iy) * g.input[2] + ix]; \
      col[t] = v; \
    } \
  } \
  /* The adjoint of im2col as a gather: dx[c, i] (one entry, from dx_off) = the sum of the \
     column elements read from it, taps in ascending order as the CPU adds them. Every \
     element is written. */ \
  extern "C" __global__ void col2im_##tn(const T* col, T* dx, unsigned long long dx_off, \
                                         ConvDims g) { \
    unsigned long long p = g.output[0] * g.output[1] * g.output[2]; \
    unsigned long long plane = g.input[0] * g.input[1] * g.input[2]; \
    unsigned long long taps = g.kernel[0] * g.kernel[1] * g.kernel[2]; \
    GRID_LOOP(t, g.in_channels * plane) { \
      unsigned long long c = t / plane, i = t % plane; \
      unsigned long long ix = i % g.input[2], iy = (i / g.input[2]) % g.input[1], \
                         iz = i / (g.input[2] * g.input[1]); \
      T s = T(0); \
      for (unsigned long long kd = 0; kd < g.kernel[0]; ++kd) { \
        long long oz = conv_target(g, 0, iz, kd); \
        if (oz < 0) continue; \
        for (unsigned long long kh = 0; kh < g.kernel[1]; ++kh) { \
          long long oy = conv_target(g, 1, iy, kh); \
          if (oy < 0) continue; \
          for (unsigned long long kw = 0; kw < g.kernel[2]; ++kw) { \
            long long ox = conv_target(g, 2, ix, kw); \
            if (ox < 0) continue; \
            unsigned long long r = c * taps + (kd * g.kernel[1] + kh) * g.kernel[2] + kw; \
            s += col[r * p + ((unsigned long long)oz * g.output[1] + oy) * g.output[2] + ox]; \
          } \
        } \
      } \
      dx[dx_off + t] = s; \
    } \
  } \
  /* y[n, c, o] += bias[c] over the whole output (p positions per channel). */ \
  extern "C" __global__ void conv_bias_##tn(T* y, const T* bias, unsigned long long n, \
                                            unsigned long long p, unsigned long long channels) { \
    GRID_LOOP(i, n) { y[i] += bias[(i / p) % channels]; } \
  } \
  /* One thread per output element of every plane. */ \
  extern "C" __global__ void pool_##tn(const T* x, T* y, PoolDims g) { \
    unsigned long long ip = g.input[0] * g.input[1] * g.input[2]; \
    unsigned long long op = g.output[0] * g.output[1] * g.output[2]; \
    GRID_LOOP(t, g.planes * op) { \
      const T* plane = x + (t / op) * ip; \
      Span w[3]; \
      pool_window(g, t % op, w); \
      if (g.kind == 0) { \
        long long a = pool_argmax<T>(g, plane, w); \
        y[t] = a < 0 ? T(__longlong_as_double(0xfff0000000000000ULL)) : plane[a]; \
      } else { \
        T s = T(0); \
        for (long long z = w[0].lo; z < w[0].hi; ++z) \
          for (long long yy = w[1].lo; yy < w[1].hi; ++yy) { \
            long long row = (z * (long long)g.input[1] + yy) * (long long)g.input[2]; \
            for (long long xx = w[2].lo; xx < w[2].hi; ++xx) s += plane[row + xx]; \
          } \
        y[t] = s / T(pool_divisor(g, w)); \
      } \
    } \
  } \
  /* Max pooling's backward: each window's gradient to its first largest element (recomputed \
     from the input), added atomically since overlapping windows may share it; dx zeroed. */ \
  extern "C" __global__ void pool_max_grad_##tn(const T* x, const T* dy, T* dx, PoolDims g) { \
    unsigned long long ip = g.input[0] * g.input[1] * g.input[2]; \
    unsigned long long op = g.output[0] * g.output[1] * g.output[2]; \
    GRID_LOOP(t, g.planes * op) { \
      unsigned long long base = (t / op) * ip; \
      Span w[3]; \
      pool_window(g, t % op, w); \
      long long a = pool_argmax<T>(g, x + base, w); \
      if (a >= 0) atomicAdd(&dx[base + a], dy[t]); \
    } \
  } \
  /* Average pooling's backward as a gather: dx[i] = the sum over the windows covering input i \
     of dy / divisor, windows in ascending order. Every element is written. */ \
  extern "C" __global__ void pool_avg_grad_##tn(const T* dy, T* dx, PoolDims g) { \
    unsigned long long ip = g.input[0] * g.input[1] * g.input[2]; \
    unsigned long long op = g.output[0] * g.output[1] * g.output[2]; \
    GRID_LOOP(t, g.planes * ip) { \
      unsigned long long pl = t / ip, i = t % ip; \
      long long idx[3] = {(long long)(i / (g.input[2] * g.input[1])), \
                          (long long)((i / g.input[2]) % g.input[1]), \
                          (long long)(i % g.input[2])}; \
      /* Windows o along dim d cover i when o * stride - pad <= i < o * stride - pad + kernel. */ \
      long long lo[3], hi[3]; \
      for (int d = 0; d < 3; ++d) { \
        long long s = (long long)g.stride[d], top = idx[d] + (long long)g.pad[d]; \
        long long first = top - (long long)g.kernel[d] + 1; \
        lo[d] = first > 0 ? (first + s - 1) / s : 0; \
        long long last = top / s; \
        hi[d] = last + 1 < (long long)g.output[d] ? last + 1 : (long long)g.output[d]; \
      } \
      T acc = T(0); \
      for (long long oz = lo[0]; oz < hi[0]; ++oz) \
        for (long long oy = lo[1]; oy < hi[1]; ++oy) \
          for (long long ox = lo[2]; ox < hi[2]; ++ox) { \
            unsigned long long o = ((unsigned long long)oz * g.output[1] + oy) * g.output[2] + ox; \
            Span w[3]; \
            pool_window(g, o, w); \
            acc += dy[pl * op + o] / T(pool_divisor(g, w)); \
          } \
      dx[t] = acc; \
    } \
  }

CONV_KERNELS(f32, float)
CONV_KERNELS(f64, double)
