// Sparse-product kernels of the CUDA backend: csr . dense, csr^T . dense as row_sparse (over the
// column grouping, so each output row is written once, in the CPU's order, no atomics),
// csr . W^T and its weight gradient, and the embedding's gather and segment sum.
// A csr's non-zero p of row r (indptr[r] <= p < indptr[r + 1]) is at position off + p of the
// column ids and the values.

// out[r, j] = sum over the row's non-zeros of v * w[col, j]; one thread per (r, j), j fastest
// so a warp reads a row of w contiguously.
#define SPARSE_DOT_KERNELS(tn, T) \
  extern "C" __global__ void csr_dense_##tn(const long long* indptr, const long long* idx, \
                                            const T* vals, unsigned long long off, const T* w, \
                                            T* out, unsigned long long m, unsigned long long n) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < m * n; t += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long r = t / n, j = t % n; \
      T s = T(0); \
      for (long long p = indptr[r]; p < indptr[r + 1]; ++p) s += vals[off + p] * w[idx[off + p] * n + j]; \
      out[t] = s; \
    } \
  } \
  /* out[g, j] = sum over group g's entries e of v[e] * gr[rows[e], j]. */ \
  extern "C" __global__ void csr_t_dense_##tn(const long long* starts, const long long* order, \
                                              const long long* rows, const T* vals, \
                                              unsigned long long off, const T* gr, T* out, \
                                              unsigned long long groups, unsigned long long n) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < groups * n; t += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long g = t / n, j = t % n; \
      T s = T(0); \
      for (long long q = starts[g]; q < starts[g + 1]; ++q) { \
        long long e = order[q]; \
        s += vals[off + e] * gr[rows[e] * n + j]; \
      } \
      out[t] = s; \
    } \
  } \
  /* out[r, u] = sum over the row's non-zeros of v * w[u, col] (w is units x feats). */ \
  extern "C" __global__ void csr_dense_t_##tn(const long long* indptr, const long long* idx, \
                                              const T* vals, unsigned long long off, const T* w, \
                                              T* out, unsigned long long rows, \
                                              unsigned long long units, unsigned long long feats) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < rows * units; t += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long r = t / units, u = t % units; \
      T s = T(0); \
      for (long long p = indptr[r]; p < indptr[r + 1]; ++p) s += vals[off + p] * w[u * feats + idx[off + p]]; \
      out[t] = s; \
    } \
  } \
  /* out[u, col] += v * g[r, u] over every non-zero (atomics: columns repeat across rows). */ \
  extern "C" __global__ void csr_dense_t_grad_##tn(const long long* indptr, const long long* idx, \
                                                   const T* vals, unsigned long long off, \
                                                   const T* g, T* out, unsigned long long rows, \
                                                   unsigned long long units, \
                                                   unsigned long long feats) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < rows * units; t += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long r = t / units, u = t % units; \
      T gv = g[t]; \
      for (long long p = indptr[r]; p < indptr[r + 1]; ++p) \
        atomicAdd(&out[u * feats + idx[off + p]], vals[off + p] * gv); \
    } \
  } \
  /* pos[p] = the place of column idx[off + p] among the sorted stored row ids of a row_sparse \
     operand (binary search), -1 when that row is not stored. One thread per non-zero. */ \
  extern "C" __global__ void rsp_pos_##tn(const long long* idx, unsigned long long off, \
                                          const long long* rows, unsigned long long nrows, \
                                          long long* pos, unsigned long long nnz) { \
    for (unsigned long long p = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         p < nnz; p += (unsigned long long)gridDim.x * blockDim.x) { \
      long long c = idx[off + p], lo = 0, hi = (long long)nrows; \
      while (lo < hi) { \
        long long mid = lo + (hi - lo) / 2; \
        if (rows[mid] < c) lo = mid + 1; else hi = mid; \
      } \
      pos[p] = (lo < (long long)nrows && rows[lo] == c) ? lo : -1; \
    } \
  } \
  /* out[r, j] = sum over the row's non-zeros whose column is a stored row q of w of \
     v * w[q, j] (csr . row_sparse); one thread per (r, j), non-zeros in order. */ \
  extern "C" __global__ void csr_rsp_##tn(const long long* indptr, const long long* pos, \
                                          const T* vals, unsigned long long off, const T* w, \
                                          T* out, unsigned long long m, unsigned long long n) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < m * n; t += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long r = t / n, j = t % n; \
      T s = T(0); \
      for (long long p = indptr[r]; p < indptr[r + 1]; ++p) { \
        long long q = pos[p]; \
        if (q >= 0) s += vals[off + p] * w[q * n + j]; \
      } \
      out[t] = s; \
    } \
  } \
  /* out (m x n) = a (m x k) . x for a csr x of k rows: every non-zero (r, c) of x adds \
     a[i, r] * v into out[i, c]; one thread per (i, r), atomics since rows share columns. \
     A zero a[i, r] adds nothing (the CPU skips it too, so an inf in x stays out). */ \
  extern "C" __global__ void dense_csr_##tn(const long long* indptr, const long long* idx, \
                                            const T* vals, unsigned long long off, const T* a, \
                                            T* out, unsigned long long m, unsigned long long k, \
                                            unsigned long long n) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < m * k; t += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long i = t / k, r = t % k; \
      T av = a[t]; \
      if (av == T(0)) continue; \
      for (long long p = indptr[r]; p < indptr[r + 1]; ++p) \
        atomicAdd(&out[i * n + idx[off + p]], av * vals[off + p]); \
    } \
  } \
  /* out (m x n) = a (m x k) . x^T for a csr x of n rows and k columns: out[i, r] = sum over \
     row r's non-zeros of a[i, c] * v; one thread per (i, r), no atomics. */ \
  extern "C" __global__ void dense_csr_t_##tn(const long long* indptr, const long long* idx, \
                                              const T* vals, unsigned long long off, const T* a, \
                                              T* out, unsigned long long m, unsigned long long k, \
                                              unsigned long long n) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < m * n; t += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long i = t / n, r = t % n; \
      T s = T(0); \
      for (long long p = indptr[r]; p < indptr[r + 1]; ++p) s += a[i * k + idx[off + p]] * vals[off + p]; \
      out[t] = s; \
    } \
  } \
  /* out[slot[e], j] += g[e, j]: the embedding gradient's rows summed by id. */ \
  extern "C" __global__ void segment_sum_##tn(const long long* slot, const T* g, T* out, \
                                              unsigned long long count, unsigned long long dim) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < count * dim; t += (unsigned long long)gridDim.x * blockDim.x) { \
      unsigned long long e = t / dim, j = t % dim; \
      atomicAdd(&out[slot[e] * dim + j], g[t]); \
    } \
  }

SPARSE_DOT_KERNELS(f32, float)
SPARSE_DOT_KERNELS(f64, double)

// out[e, j] = table[ids[e], j], by element size.
#define GATHER_ROWS(name, T) \
  extern "C" __global__ void name(const T* table, const long long* ids, T* out, \
                                  unsigned long long count, unsigned long long dim) { \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         t < count * dim; t += (unsigned long long)gridDim.x * blockDim.x) { \
      out[t] = table[ids[t / dim] * dim + t % dim]; \
    } \
  }
GATHER_ROWS(gather_rows_b1, unsigned char)
GATHER_ROWS(gather_rows_b4, unsigned int)
GATHER_ROWS(gather_rows_b8, unsigned long long)
