// Sparse-operator kernels of the CUDA backend: a csr or row_sparse array made dense. Elements
// move by size (any dtype); the output starts as zeros.

// out[r, idx[off + p]] = vals[off + p] for the non-zeros p of row r; one thread per row.
#define DENSIFY(sz, T) \
  extern "C" __global__ void densify_csr_##sz(const long long* indptr, const long long* idx, \
                                              const T* vals, unsigned long long off, T* out, \
                                              unsigned long long rows, unsigned long long cols) { \
    for (unsigned long long r = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         r < rows; r += (unsigned long long)gridDim.x * blockDim.x) { \
      for (long long p = indptr[r]; p < indptr[r + 1]; ++p) out[r * cols + idx[off + p]] = vals[off + p]; \
    } \
  } \
  /* out[ids[r], j] = vals[r, j]. */ \
  extern "C" __global__ void densify_rsp_##sz(const long long* ids, const T* vals, T* out, \
                                              unsigned long long items, \
                                              unsigned long long row_len) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < items; t += (unsigned long long)gridDim.x * blockDim.x) { \
      out[(unsigned long long)ids[t / row_len] * row_len + t % row_len] = vals[t]; \
    } \
  }
DENSIFY(b1, unsigned char)
DENSIFY(b4, unsigned int)
DENSIFY(b8, unsigned long long)

// A dense array made sparse (cast_storage to csr or row_sparse), in two passes: the non-zeros
// of each row counted (typed comparison, as the CPU's: -0.0 counts as zero, NaN does not), the
// host turns the counts into row pointers or row ids, then a csr's column ids and values are
// written in row order.

// counts[r] = non-zeros of row r of x (rows x width); one block per row, its threads striding
// the row and summing in shared memory.
#define SPARSIFY(sfx, T) \
  extern "C" __global__ void row_nnz_##sfx(const T* x, long long* counts, unsigned long long rows, \
                                           unsigned long long width) { \
    __shared__ unsigned long long total; \
    for (unsigned long long r = blockIdx.x; r < rows; r += gridDim.x) { \
      if (threadIdx.x == 0) total = 0; \
      __syncthreads(); \
      unsigned long long n = 0; \
      for (unsigned long long j = threadIdx.x; j < width; j += blockDim.x) n += (x[r * width + j] != (T)0); \
      atomicAdd(&total, n); \
      __syncthreads(); \
      if (threadIdx.x == 0) counts[r] = (long long)total; \
      __syncthreads(); \
    } \
  } \
  /* The non-zeros of row r (rows x cols) at idx / vals from indptr[r], in column order; one \
     thread per row. */ \
  extern "C" __global__ void csr_fill_##sfx(const T* x, const long long* indptr, long long* idx, \
                                            T* vals, unsigned long long rows, \
                                            unsigned long long cols) { \
    for (unsigned long long r = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         r < rows; r += (unsigned long long)gridDim.x * blockDim.x) { \
      long long p = indptr[r]; \
      for (unsigned long long j = 0; j < cols; ++j) { \
        T v = x[r * cols + j]; \
        if (v != (T)0) { idx[p] = (long long)j; vals[p] = v; ++p; } \
      } \
    } \
  }
SPARSIFY(f32, float)
SPARSIFY(f64, double)
SPARSIFY(i32, int)
SPARSIFY(i64, long long)
SPARSIFY(u8, unsigned char)

// Sparse op sparse and sparse op dense. The host works out the result's structure from the
// index arrays' host copies; these kernels combine the values by position.

template <typename T> __device__ __forceinline__ T merge_one(T a, T b, int op) {
  switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: return (T)pow((double)a, (double)b);
    case 5: return a >= b ? a : b;  // ties keep a, as the CPU
    default: return a <= b ? a : b;  // 6: minimum
  }
}

// out[k, j] = a[pa[k], j] op b[pb[k], j] for the `items` result rows (or entries) of `width`
// values; a position of -1 reads 0 (the entry the other side does not store).
// with[p] = vals[off + p] op d[pos[p]] (sparse_left) or d[pos[p]] op vals[off + p].
// scatter: out[pos[p]] = vals[off + p] op d[pos[p]] (sparse_left) or d[pos[p]] op vals[...],
// after scatter_init wrote the rest; positions are distinct.
// The row_sparse forms take positions per stored row: pos[k] * width + j.
#define MERGE(sfx, T) \
  extern "C" __global__ void merge_##sfx(const T* a, const long long* pa, const T* b, \
                                         const long long* pb, T* out, unsigned long long items, \
                                         unsigned long long width, int op) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < items * width; t += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long k = t / width, j = t % width; \
      T x = pa[k] >= 0 ? a[(unsigned long long)pa[k] * width + j] : (T)0; \
      T y = pb[k] >= 0 ? b[(unsigned long long)pb[k] * width + j] : (T)0; \
      out[t] = merge_one<T>(x, y, op); \
    } \
  } \
  extern "C" __global__ void with_dense_##sfx(const T* vals, unsigned long long off, \
                                              const long long* pos, const T* d, T* out, \
                                              unsigned long long n, unsigned long long width, \
                                              int op, int sparse_left) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < n * width; t += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long k = t / width, j = t % width; \
      T s = vals[off + t]; \
      T v = d[(unsigned long long)pos[k] * width + j]; \
      out[t] = sparse_left ? merge_one<T>(s, v, op) : merge_one<T>(v, s, op); \
    } \
  } \
  /* out = (0 op d) (sparse_left) or d: the dense result before the stored entries. */ \
  extern "C" __global__ void scatter_init_##sfx(const T* d, T* out, unsigned long long total, \
                                                int op, int sparse_left) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < total; t += (unsigned long long)gridDim.x * blockDim.x) { \
      out[t] = sparse_left ? merge_one<T>((T)0, d[t], op) : d[t]; \
    } \
  } \
  extern "C" __global__ void scatter_dense_##sfx(const T* vals, unsigned long long off, \
                                                 const long long* pos, const T* d, T* out, \
                                                 unsigned long long n, unsigned long long width, \
                                                 int op, int sparse_left) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < n * width; t += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long k = t / width, j = t % width; \
      unsigned long long at = (unsigned long long)pos[k] * width + j; \
      T s = vals[off + t]; \
      out[at] = sparse_left ? merge_one<T>(s, d[at], op) : merge_one<T>(d[at], s, op); \
    } \
  }
MERGE(f32, float)
MERGE(f64, double)
MERGE(i32, int)
MERGE(i64, long long)
MERGE(u8, unsigned char)

// Stored reductions (sum of a csr array, square_sum of a row_sparse one): group g sums
// v[perm[p]] (or v[p] without perm), or their squares, for p in gptr[g]..gptr[g+1] in that
// order, from `init` (the CPU's: `+0` where it loops over outputs, Rust's float `sum()`'s `-0`
// where it sums an iterator), into out[out_at[g]] (or out[g]); an output position outside 0..out_len is skipped.
// One thread per group: the CPU's order of additions, so the same bits.
#define SEG_SUM(tn, T) \
  extern "C" __global__ void seg_sum_##tn(const T* v, const long long* gptr, \
                                          const long long* perm, const long long* out_at, \
                                          T* out, unsigned long long groups, \
                                          unsigned long long out_len, int square, T init) { \
    for (unsigned long long g = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         g < groups; g += (unsigned long long)gridDim.x * blockDim.x) { \
      T s = init; \
      for (long long p = gptr[g]; p < gptr[g + 1]; ++p) { \
        T x = v[perm ? perm[p] : p]; \
        s = s + (square ? x * x : x); \
      } \
      long long o = out_at ? out_at[g] : (long long)g; \
      if (o >= 0 && (unsigned long long)o < out_len) out[o] = s; \
    } \
  }
SEG_SUM(f32, float)
SEG_SUM(f64, double)

// The gradient of a row_sparse square_sum with respect to its stored values (the CPU's
// `rsp_square_sum_grad`): out[k, e] = 2 * v[k, e] * g[sel], sel the stored row's id (axis 0:
// rows, stored rows), the column e (axis 2: columns) or 0 (axis 3: everything). The caller
// checked that every sel is inside g.
#define SQUARE_SUM_GRAD(tn, T) \
  extern "C" __global__ void square_sum_grad_##tn(const long long* ids, const T* v, const T* g, \
                                                  T* out, unsigned long long k, \
                                                  unsigned long long n, int axis) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < k * n; t += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long r = t / n, e = t % n; \
      long long sel = axis == 0 ? ids[r] : (axis == 2 ? (long long)e : 0); \
      out[t] = T(2) * v[t] * g[sel]; \
    } \
  }
SQUARE_SUM_GRAD(f32, float)
SQUARE_SUM_GRAD(f64, double)
