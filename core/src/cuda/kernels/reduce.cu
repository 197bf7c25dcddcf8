// Reduction kernels of the CUDA backend: reductions over any set of axes (one block per
// output element, a shared-memory tree inside it), arg-reductions and softmax along one axis
// (one thread per line). Op numbers are those of `core/src/cuda/reduce.rs`.

// The kept axes (output index -> input offset) and the reduced axes (position in the reduced
// block -> input offset), at most 8 each. Mirrors `Red` in reduce.rs (repr(C)).
struct Red {
  unsigned long long kshape[8];
  long long kstride[8];
  unsigned long long rshape[8];
  long long rstride[8];
  int kdim;
  int rdim;
};

__device__ __forceinline__ long long red_offset(const unsigned long long* shape,
                                                const long long* stride, int ndim,
                                                unsigned long long i) {
  long long off = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    unsigned long long s = shape[d];
    off += (long long)(i % s) * stride[d];
    i /= s;
  }
  return off;
}

// op: 0 sum, 1 max, 2 min, 3 prod, 4 sum of |x|, 5 sqrt of the sum of squares.
template <typename A> __device__ __forceinline__ A red_combine(A a, A b, int op) {
  switch (op) {
    case 1: return a >= b ? a : b;
    case 2: return a <= b ? a : b;
    case 3: return a * b;
    default: return a + b;
  }
}

template <typename T, typename A>
__device__ void reduce_body(const T* x, A* out, unsigned long long n_out, unsigned long long r,
                            int op, const Red& red, A* sm) {
  unsigned long long o = blockIdx.x;
  if (o >= n_out) return;
  long long base = red_offset(red.kshape, red.kstride, red.kdim, o);
  bool have = false;
  A acc = A(0);
  if (op == 3) acc = A(1);
  for (unsigned long long j = threadIdx.x; j < r; j += blockDim.x) {
    A v = (A)x[base + red_offset(red.rshape, red.rstride, red.rdim, j)];
    if (op == 4) v = v < A(0) ? -v : v;
    if (op == 5) v = v * v;
    if (!have && (op == 1 || op == 2)) {
      acc = v;
      have = true;
    } else {
      acc = red_combine<A>(acc, v, op);
    }
  }
  // Threads that saw nothing hold the identity, except for max / min, which have none: they
  // take the line's first element (r > 0 for max / min, checked by the operator).
  if (!have && (op == 1 || op == 2)) acc = (A)x[base + red_offset(red.rshape, red.rstride, red.rdim, 0)];
  sm[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sm[threadIdx.x] = red_combine<A>(sm[threadIdx.x], sm[threadIdx.x + s], op);
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    A v = sm[0];
    if (op == 5) v = sqrt((double)v);
    out[o] = v;
  }
}

// Block size at most 256 (a power of two), set by the launcher.
#define REDUCE(name, T, A) \
  extern "C" __global__ void name(const T* x, A* out, unsigned long long n_out, \
                                  unsigned long long r, int op, Red red) { \
    __shared__ A sm[256]; \
    reduce_body<T, A>(x, out, n_out, r, op, red, sm); \
  }
REDUCE(reduce_f32, float, float)
REDUCE(reduce_f64, double, double)
// Integer sums are exact in i64; integer max / min stay in their dtype.
REDUCE(reduce_sum_i64, long long, long long)
REDUCE(reduce_sum_i32, int, long long)
REDUCE(reduce_sum_u8, unsigned char, long long)
REDUCE(reduce_ext_i64, long long, long long)
REDUCE(reduce_ext_i32, int, int)
REDUCE(reduce_ext_u8, unsigned char, unsigned char)

// The position of the first maximum (op 0) or minimum (op 1) of every line along the middle
// axis of [outer, n, inner], as i64 laid out [outer, inner].
#define ARG_REDUCE(tn, T) \
  extern "C" __global__ void arg_reduce_##tn(const T* x, long long* out, unsigned long long outer, \
                                             unsigned long long n, unsigned long long inner, \
                                             int op) { \
    unsigned long long lines = outer * inner; \
    for (unsigned long long l = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         l < lines; l += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long o = l / inner, i = l % inner; \
      const T* p = x + o * n * inner + i; \
      T best = p[0]; \
      long long at = 0; \
      for (unsigned long long j = 1; j < n; ++j) { \
        T v = p[j * inner]; \
        if (op == 0 ? (v > best) : (v < best)) { \
          best = v; \
          at = (long long)j; \
        } \
      } \
      out[l] = at; \
    } \
  }
ARG_REDUCE(f32, float)
ARG_REDUCE(f64, double)
ARG_REDUCE(i64, long long)
ARG_REDUCE(i32, int)
ARG_REDUCE(u8, unsigned char)

// argsort by rank: element p of a line along the middle axis of [outer, n, inner] goes to
// output slot rank(p) = the number of elements before it in the CPU's order (by value,
// descending when not `ascending`, values neither less nor greater equal, ties to the lower
// position), written when rank(p) < k. A total order (no NaN) gives every element its own
// slot; the output is [outer, k, inner] i64. O(n) per element: reduce.rs caps n.
#define ARGSORT(tn, T) \
  extern "C" __global__ void argsort_##tn(const T* x, long long* out, unsigned long long outer, \
                                          unsigned long long n, unsigned long long inner, \
                                          unsigned long long k, int ascending) { \
    unsigned long long items = outer * n * inner; \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < items; t += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long i = t % inner, p = (t / inner) % n, o = t / (inner * n); \
      const T* line = x + o * n * inner + i; \
      T v = line[p * inner]; \
      unsigned long long rank = 0; \
      for (unsigned long long q = 0; q < n; ++q) { \
        T w = line[q * inner]; \
        bool less = w < v, greater = w > v; \
        bool before = ascending ? less : greater; \
        if (before || (!less && !greater && q < p)) ++rank; \
      } \
      if (rank < k) out[(o * k + rank) * inner + i] = (long long)p; \
    } \
  }
ARGSORT(f32, float)
ARGSORT(f64, double)
ARGSORT(i64, long long)
ARGSORT(i32, int)
ARGSORT(u8, unsigned char)

// Softmax (op 0) or log-softmax (op 1) of every line along the middle axis; both subtract
// the line's maximum first.
#define SOFTMAX(tn, T) \
  extern "C" __global__ void softmax_##tn(const T* x, T* out, unsigned long long outer, \
                                          unsigned long long n, unsigned long long inner, int op) { \
    unsigned long long lines = outer * inner; \
    for (unsigned long long l = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         l < lines; l += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long o = l / inner, i = l % inner; \
      const T* p = x + o * n * inner + i; \
      T* q = out + o * n * inner + i; \
      T m = p[0]; \
      for (unsigned long long j = 1; j < n; ++j) m = p[j * inner] > m ? p[j * inner] : m; \
      T s = T(0); \
      for (unsigned long long j = 0; j < n; ++j) s += exp(p[j * inner] - m); \
      if (op == 0) { \
        for (unsigned long long j = 0; j < n; ++j) q[j * inner] = exp(p[j * inner] - m) / s; \
      } else { \
        T ls = log(s); \
        for (unsigned long long j = 0; j < n; ++j) q[j * inner] = p[j * inner] - m - ls; \
      } \
    } \
  }
SOFTMAX(f32, float)
SOFTMAX(f64, double)
