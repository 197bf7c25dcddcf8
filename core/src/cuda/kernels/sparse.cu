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
