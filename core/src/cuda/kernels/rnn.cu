// The recurrent layers' gate passes (RNN tanh / relu, LSTM, GRU), forward and backward, one
// time step per launch; the recurrent products go to cuBLAS (rnn.rs), which launches the steps
// in order on the device's stream. Equations, gate order and the workspace layout are the
// CPU's (`cpu/rnn.rs`): per (time, example) row of `wu` values,
//   RNN  [h | h_prev], LSTM [i | f | g | o | c_prev | tanh(c) | h_prev],
//   GRU  [r | z | n | W_hn h + b_hn | h_prev].
// mode: 0 rnn_tanh, 1 rnn_relu, 2 lstm, 3 gru. An example's step `step` reads time
// `len - 1 - step` when `reverse`, else `step`; steps at or past its length leave its states
// alone (and its output zero).

#define GRID_LOOP(i, n) \
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < (n); \
       i += (unsigned long long)gridDim.x * blockDim.x)

template <typename T> __device__ __forceinline__ T rnn_sigmoid(T x) {
  T e = exp(-fabs(x));
  T s = T(1) / (T(1) + e);
  return x >= T(0) ? s : e * s;
}

// The row (time * batch + example) step `step` of example r reads, or -1 past its length.
__device__ __forceinline__ long long rnn_row(const long long* lens, unsigned long long r,
                                             unsigned long long step, unsigned long long batch,
                                             int reverse) {
  unsigned long long len = (unsigned long long)lens[r];
  if (step >= len) return -1;
  unsigned long long t = reverse ? len - 1 - step : step;
  return (long long)(t * batch + r);
}

#define RNN_KERNELS(tn, T) \
  /* One forward step: thread (r, j) of batch x hidden. x: (T, N, G*H) input projection, \
     hh: (N, G*H) = h W^T of this step, b: (G*H,), hs / cs: (N, H) states updated in place, \
     ws: workspace, out: (T, N, H). */ \
  extern "C" __global__ void rnn_step_##tn(const T* x, const T* hh, const T* b, T* hs, T* cs, \
                                           T* ws, T* out, const long long* lens, \
                                           unsigned long long step, unsigned long long batch, \
                                           unsigned long long h, unsigned long long wu, \
                                           int mode, int reverse) { \
    unsigned long long gh = (mode == 2 ? 4 : mode == 3 ? 3 : 1) * h; \
    GRID_LOOP(t, batch * h) { \
      unsigned long long r = t / h, j = t % h; \
      long long row = rnn_row(lens, r, step, batch, reverse); \
      if (row < 0) continue; \
      const T* xr = x + row * gh; \
      const T* hr = hh + r * gh; \
      T* wr = ws + row * wu; \
      T hp = hs[t]; \
      T y; \
      if (mode == 0 || mode == 1) { \
        T p = xr[j] + hr[j] + b[j]; \
        y = mode == 1 ? (p > T(0) ? p : T(0)) : tanh(p); \
        wr[j] = y; \
        wr[h + j] = hp; \
      } else if (mode == 2) { \
        T i = rnn_sigmoid<T>(xr[j] + hr[j] + b[j]); \
        T f = rnn_sigmoid<T>(xr[h + j] + hr[h + j] + b[h + j]); \
        T g = tanh(xr[2 * h + j] + hr[2 * h + j] + b[2 * h + j]); \
        T o = rnn_sigmoid<T>(xr[3 * h + j] + hr[3 * h + j] + b[3 * h + j]); \
        T cp = cs[t]; \
        T c = f * cp + i * g; \
        T tc = tanh(c); \
        y = o * tc; \
        wr[j] = i; \
        wr[h + j] = f; \
        wr[2 * h + j] = g; \
        wr[3 * h + j] = o; \
        wr[4 * h + j] = cp; \
        wr[5 * h + j] = tc; \
        wr[6 * h + j] = hp; \
        cs[t] = c; \
      } else { \
        T rg = rnn_sigmoid<T>(xr[j] + hr[j] + b[j]); \
        T z = rnn_sigmoid<T>(xr[h + j] + hr[h + j] + b[h + j]); \
        T hn = hr[2 * h + j] + b[2 * h + j]; \
        T nn = tanh(xr[2 * h + j] + rg * hn); \
        y = (T(1) - z) * nn + z * hp; \
        wr[j] = rg; \
        wr[h + j] = z; \
        wr[2 * h + j] = nn; \
        wr[3 * h + j] = hn; \
        wr[4 * h + j] = hp; \
      } \
      hs[t] = y; \
      out[row * h + j] = y; \
    } \
  } \
  /* One backward step: thread (r, j). g: the packed output's gradient, dh / dc: (N, H) \
     running state gradients, dx: (T, N, G*H) gate gradients of the input projection, drec: \
     (N, G*H) this step's recurrent gate gradients (zero for rows past their length), drec_all: \
     the GRU's per-row copy of drec (null otherwise). */ \
  extern "C" __global__ void rnn_step_grad_##tn(const T* g, const T* ws, T* dh, T* dc, T* dx, \
                                                T* drec, T* drec_all, const long long* lens, \
                                                unsigned long long step, \
                                                unsigned long long batch, unsigned long long h, \
                                                unsigned long long wu, int mode, int reverse) { \
    unsigned long long gates = mode == 2 ? 4 : mode == 3 ? 3 : 1; \
    unsigned long long gh = gates * h; \
    GRID_LOOP(t, batch * h) { \
      unsigned long long r = t / h, j = t % h; \
      long long row = rnn_row(lens, r, step, batch, reverse); \
      T* dr = drec + r * gh; \
      if (row < 0) { \
        for (unsigned long long k = 0; k < gates; ++k) dr[k * h + j] = T(0); \
        continue; \
      } \
      const T* wr = ws + row * wu; \
      T* dxr = dx + row * gh; \
      T dt = dh[t] + g[row * h + j]; \
      if (mode == 0 || mode == 1) { \
        T y = wr[j]; \
        T dp = mode == 1 ? (y > T(0) ? dt : T(0)) : dt * (T(1) - y * y); \
        dxr[j] = dp; \
        dr[j] = dp; \
        dh[t] = T(0); \
      } else if (mode == 2) { \
        T i = wr[j], f = wr[h + j], gg = wr[2 * h + j], o = wr[3 * h + j]; \
        T cp = wr[4 * h + j], tc = wr[5 * h + j]; \
        T dct = dc[t] + dt * o * (T(1) - tc * tc); \
        T di = dct * gg * i * (T(1) - i); \
        T df = dct * cp * f * (T(1) - f); \
        T dg = dct * i * (T(1) - gg * gg); \
        T dO = dt * tc * o * (T(1) - o); \
        dxr[j] = di; \
        dxr[h + j] = df; \
        dxr[2 * h + j] = dg; \
        dxr[3 * h + j] = dO; \
        dr[j] = di; \
        dr[h + j] = df; \
        dr[2 * h + j] = dg; \
        dr[3 * h + j] = dO; \
        dc[t] = dct * f; \
        dh[t] = T(0); \
      } else { \
        T rg = wr[j], z = wr[h + j], nn = wr[2 * h + j], hn = wr[3 * h + j], hp = wr[4 * h + j]; \
        T dn = dt * (T(1) - z); \
        T dz = dt * (hp - nn); \
        T da = dn * (T(1) - nn * nn); \
        T dpr = da * hn * rg * (T(1) - rg); \
        T dpz = dz * z * (T(1) - z); \
        dxr[j] = dpr; \
        dxr[h + j] = dpz; \
        dxr[2 * h + j] = da; \
        dr[j] = dpr; \
        dr[h + j] = dpz; \
        dr[2 * h + j] = da * rg; \
        T* da_all = drec_all + row * gh; \
        da_all[j] = dpr; \
        da_all[h + j] = dpz; \
        da_all[2 * h + j] = da * rg; \
        dh[t] = dt * z; \
      } \
    } \
  } \
  /* dh[r] += dhp[r] for the examples still inside their length at this step. */ \
  extern "C" __global__ void rnn_add_dh_##tn(T* dh, const T* dhp, const long long* lens, \
                                             unsigned long long step, unsigned long long batch, \
                                             unsigned long long h) { \
    GRID_LOOP(t, batch * h) { \
      if (step < (unsigned long long)lens[t / h]) dh[t] += dhp[t]; \
    } \
  } \
  /* dst[i] = src[i * stride + off] for i < n * w, in rows of w: one column block of a \
     strided buffer made contiguous (the workspace's h_prev, the packed output's states). */ \
  extern "C" __global__ void rnn_gather_##tn(const T* src, T* dst, unsigned long long rows, \
                                             unsigned long long w, unsigned long long stride, \
                                             unsigned long long off, unsigned long long dst_off) { \
    GRID_LOOP(i, rows * w) { dst[dst_off + i] = src[(i / w) * stride + off + i % w]; } \
  } \
  /* out[c] = the sum of column c over rows (rows of `cols`), rows in order. */ \
  extern "C" __global__ void rnn_col_sum_##tn(const T* a, T* out, unsigned long long rows, \
                                              unsigned long long cols) { \
    GRID_LOOP(c, cols) { \
      T s = T(0); \
      for (unsigned long long r = 0; r < rows; ++r) s += a[r * cols + c]; \
      out[c] = s; \
    } \
  }

RNN_KERNELS(f32, float)
RNN_KERNELS(f64, double)
