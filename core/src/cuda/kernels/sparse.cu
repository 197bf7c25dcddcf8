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
