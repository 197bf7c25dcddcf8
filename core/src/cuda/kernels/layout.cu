// Layout kernels of the CUDA backend: strided copies (broadcast, permute), gathers along an
// axis and their scatter-add adjoints, select by a mask, concat, index_copy, one_hot. Copies
// move elements by size (the bits unchanged), so one kernel serves every dtype of that size;
// adds are float only.
// Axis kernels see an array as [outer, n, inner] around the axis.

#define GRID_LOOP(i, n) \
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < (n); \
       i += (unsigned long long)gridDim.x * blockDim.x)

// The output's shape and, per output axis, the input's element stride (0 along a broadcast
// axis). Mirrors `Strided` in layout.rs (repr(C)).
struct Strided {
  unsigned long long shape[8];
  long long stride[8];
  int ndim;
};

#define COPY_KERNELS(sz, T) \
  extern "C" __global__ void strided_##sz(const T* x, T* out, unsigned long long n, Strided s) { \
    GRID_LOOP(t, n) { \
      unsigned long long i = t; \
      long long off = 0; \
      for (int d = s.ndim - 1; d >= 0; --d) { \
        off += (long long)(i % s.shape[d]) * s.stride[d]; \
        i /= s.shape[d]; \
      } \
      out[t] = x[off]; \
    } \
  } \
  /* out[o, j, i] = x[o, pos[j], i], out laid out [outer, k, inner]. */ \
  extern "C" __global__ void index_select_##sz(const T* x, const long long* pos, T* out, \
                                               unsigned long long outer, unsigned long long n, \
                                               unsigned long long k, unsigned long long inner) { \
    GRID_LOOP(t, outer * k * inner) { \
      unsigned long long i = t % inner, j = (t / inner) % k, o = t / (inner * k); \
      out[t] = x[(o * n + pos[j]) * inner + i]; \
    } \
  } \
  /* out[o, j, i] = x[o, pos[o, j, i], i]. */ \
  extern "C" __global__ void gather_along_##sz(const T* x, const long long* pos, T* out, \
                                               unsigned long long outer, unsigned long long n, \
                                               unsigned long long k, unsigned long long inner) { \
    GRID_LOOP(t, outer * k * inner) { \
      unsigned long long i = t % inner, o = t / (inner * k); \
      out[t] = x[(o * n + pos[t]) * inner + i]; \
    } \
  } \
  /* One part of a concat: src [outer, blk] into out at column `off` of rows of `total` \
     elements (blk = the part's size on the axis times inner). */ \
  extern "C" __global__ void concat_part_##sz(const T* src, T* out, unsigned long long outer, \
                                              unsigned long long blk, unsigned long long total, \
                                              unsigned long long off) { \
    GRID_LOOP(t, outer * blk) { out[(t / blk) * total + off + t % blk] = src[t]; } \
  } \
  /* index_copy's second pass: row j of `src` (row elements) to row pos[j] of `out` when j is \
     that row's last writer (`winner` = j + 1, from index_copy_winner); positions outside 0..rows \
     are skipped (the operator refuses them before). */ \
  extern "C" __global__ void index_copy_##sz(const T* src, const long long* pos, \
                                             const long long* winner, T* out, \
                                             unsigned long long k, unsigned long long row, \
                                             unsigned long long rows) { \
    GRID_LOOP(t, k * row) { \
      unsigned long long j = t / row; \
      long long r = pos[j]; \
      if (r >= 0 && (unsigned long long)r < rows && winner[r] == (long long)j + 1) \
        out[(unsigned long long)r * row + t % row] = src[t]; \
    } \
  } \
  /* out[r, c] = c == idx[r] ? on : off, for idx already in i64 (outside 0..depth: all off). */ \
  extern "C" __global__ void one_hot_##sz(const long long* idx, T* out, unsigned long long n, \
                                          unsigned long long depth, T on, T off) { \
    GRID_LOOP(t, n * depth) { \
      long long i = idx[t / depth]; \
      out[t] = (i >= 0 && (unsigned long long)i == t % depth) ? on : off; \
    } \
  } \
  /* mask ? x : y. */ \
  extern "C" __global__ void select_##sz(const unsigned char* mask, const T* x, const T* y, T* out, \
                                         unsigned long long n) { \
    GRID_LOOP(t, n) { out[t] = mask[t] ? x[t] : y[t]; } \
  }
COPY_KERNELS(b1, unsigned char)
COPY_KERNELS(b4, unsigned int)
COPY_KERNELS(b8, unsigned long long)

// index_copy's first pass: winner[pos[j]] = 1 + the largest j writing that row (the CPU
// copies rows in order, so the last one wins); `winner` starts at zeros. Positions outside 0..rows are
// skipped.
extern "C" __global__ void index_copy_winner(const long long* pos, long long* winner,
                                             unsigned long long k, unsigned long long rows) {
  GRID_LOOP(j, k) {
    long long r = pos[j];
    if (r >= 0 && (unsigned long long)r < rows) atomicMax(&winner[r], (long long)j + 1);
  }
}

#define ADD_KERNELS(tn, T) \
  /* out[o, pos[j], i] += g[o, j, i] into zeros of [outer, n, inner]. */ \
  extern "C" __global__ void index_add_##tn(const T* g, const long long* pos, T* out, \
                                            unsigned long long outer, unsigned long long n, \
                                            unsigned long long k, unsigned long long inner) { \
    GRID_LOOP(t, outer * k * inner) { \
      unsigned long long i = t % inner, j = (t / inner) % k, o = t / (inner * k); \
      atomicAdd(&out[(o * n + pos[j]) * inner + i], g[t]); \
    } \
  } \
  /* out[o, pos[o, j, i], i] += g[o, j, i]. */ \
  extern "C" __global__ void scatter_add_along_##tn(const T* g, const long long* pos, T* out, \
                                                    unsigned long long outer, unsigned long long n, \
                                                    unsigned long long k, unsigned long long inner) { \
    GRID_LOOP(t, outer * k * inner) { \
      unsigned long long i = t % inner, o = t / (inner * k); \
      atomicAdd(&out[(o * n + pos[t]) * inner + i], g[t]); \
    } \
  }
ADD_KERNELS(f32, float)
ADD_KERNELS(f64, double)

// 1 where x is non-zero, as u8.
#define NONZERO(tn, T) \
  extern "C" __global__ void nonzero_##tn(const T* x, unsigned char* out, unsigned long long n) { \
    GRID_LOOP(t, n) { out[t] = x[t] != (T)0 ? 1 : 0; } \
  }
NONZERO(f32, float)
NONZERO(f64, double)
NONZERO(i64, long long)
NONZERO(i32, int)
NONZERO(u8, unsigned char)
