//! Convolution and pooling on CUDA ([`ConvOps`]): `kernels/conv.cu` plus cuBLAS.
//!
//! A convolution is the CPU's im2col + GEMM (`cpu/conv.rs`), per batch entry: `im2col`
//! unrolls the entry into its column matrix `(in_channels * taps, out_plane)` in device
//! memory, each group's product goes to cuBLAS (`linalg::gemm_acc`), and the data gradient
//! folds its column matrix back with `col2im`, a gather (each input element sums the column
//! elements read from it), so no atomics. A 1x1 kernel with stride 1 and no padding uses the
//! input as its own column matrix. The weight gradient accumulates every entry's product in
//! place (cuBLAS's beta = 1).
//!
//! Pooling is one thread per output element; max pooling's backward recomputes each window's
//! first largest element and adds its gradient there atomically (overlapping windows can share
//! it); average pooling's backward is a gather over the windows covering each input element.

use cudarc::cublas::Gemm;
use cudarc::driver::{CudaSlice, DeviceRepr, PushKernelArg};

use super::elementwise::{float_only, kname, same_dtype, typed};
use super::launch::{driver_err, grid};
use super::linalg::{gemm_acc, BlasElement};
use super::storage::{CudaElement, CudaStorage};
use crate::error::{Error, Result};
use crate::storage::{ConvGeom, ConvOps, MatMul, PoolGeom, PoolKind};

/// A convolution's geometry for the kernels. Mirrors `struct ConvDims` in conv.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ConvDims {
    in_channels: u64,
    input: [u64; 3],
    kernel: [u64; 3],
    output: [u64; 3],
    stride: [u64; 3],
    pad: [u64; 3],
    dilation: [u64; 3],
}

// SAFETY: plain `repr(C)` integers, laid out as the kernel's struct.
unsafe impl DeviceRepr for ConvDims {}

fn u64s(a: [usize; 3]) -> [u64; 3] {
    a.map(|v| v as u64)
}

impl ConvDims {
    fn of(g: &ConvGeom) -> ConvDims {
        ConvDims {
            in_channels: g.in_channels as u64,
            input: u64s(g.input),
            kernel: u64s(g.kernel),
            output: u64s(g.output),
            stride: u64s(g.stride),
            pad: u64s(g.pad),
            dilation: u64s(g.dilation),
        }
    }
}

/// A pooling's geometry for the kernels. Mirrors `struct PoolDims` in conv.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct PoolDims {
    planes: u64,
    input: [u64; 3],
    kernel: [u64; 3],
    output: [u64; 3],
    stride: [u64; 3],
    pad: [u64; 3],
    kind: i32,
    include_pad: i32,
}

// SAFETY: plain `repr(C)` integers, laid out as the kernel's struct.
unsafe impl DeviceRepr for PoolDims {}

impl PoolDims {
    fn of(g: &PoolGeom) -> PoolDims {
        let (kind, include_pad) = match g.kind {
            PoolKind::Max => (0, 0),
            PoolKind::Avg { count_include_pad } => (1, i32::from(count_include_pad)),
        };
        PoolDims {
            planes: g.planes as u64,
            input: u64s(g.input),
            kernel: u64s(g.kernel),
            output: u64s(g.output),
            stride: u64s(g.stride),
            pad: u64s(g.pad),
            kind,
            include_pad,
        }
    }
}

/// An error unless `got` is `want` elements: the geometry and the buffers disagree (the
/// operator checks this; a call that slipped past it stops here, not out of bounds).
fn check_len(op: &'static str, what: &str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::shape(
            op,
            format!("{what} has {got} elements, the geometry needs {want}"),
        ))
    }
}

/// Whether the input is its own column matrix (1x1 kernel, stride 1, no padding).
fn is_pointwise(g: &ConvGeom) -> bool {
    g.kernel.iter().all(|&k| k == 1) && g.stride.iter().all(|&s| s == 1) && g.pad == [0; 3]
}

/// Elements of one entry's column matrix.
fn col_len(g: &ConvGeom) -> usize {
    g.in_channels * g.taps() * g.out_plane()
}

/// Unroll batch entry `n` of `x` into `col`.
fn im2col<T: CudaElement>(
    st: &CudaStorage,
    x: &CudaSlice<T>,
    n: usize,
    col: &mut CudaSlice<T>,
    g: &ConvGeom,
) -> Result<()> {
    const OP: &str = "convolution";
    let total = col_len(g);
    if total == 0 {
        return Ok(());
    }
    let f = st.dev.function("conv.cu", kname("im2col", T::SUFFIX))?;
    let (x_off, dims) = ((n * g.in_channels * g.in_plane()) as u64, ConvDims::of(g));
    let mut l = st.dev.stream.launch_builder(&f);
    l.arg(x).arg(&x_off).arg(col).arg(&dims);
    // SAFETY: x holds batch x in_channels x in_plane elements (checked by the caller), so the
    // entry's reads from x_off stay inside it; col holds in_channels * taps * out_plane.
    unsafe { l.launch(grid(total)) }.map_err(driver_err(OP))?;
    Ok(())
}

/// Fold `col` into batch entry `n` of `dx` (every element of the entry written).
fn col2im<T: CudaElement>(
    st: &CudaStorage,
    col: &CudaSlice<T>,
    dx: &mut CudaSlice<T>,
    n: usize,
    g: &ConvGeom,
) -> Result<()> {
    const OP: &str = "convolution data gradient";
    let total = g.in_channels * g.in_plane();
    if total == 0 {
        return Ok(());
    }
    let f = st.dev.function("conv.cu", kname("col2im", T::SUFFIX))?;
    let (dx_off, dims) = ((n * total) as u64, ConvDims::of(g));
    let mut l = st.dev.stream.launch_builder(&f);
    l.arg(col).arg(dx).arg(&dx_off).arg(&dims);
    // SAFETY: dx holds batch entries of in_channels x in_plane (allocated by the caller), col
    // in_channels * taps * out_plane; the kernel reads col only at positions conv_target finds
    // inside the output.
    unsafe { l.launch(grid(total)) }.map_err(driver_err(OP))?;
    Ok(())
}

fn conv_t<T: BlasElement>(
    x: &CudaStorage,
    w: &CudaStorage,
    bias: Option<&CudaStorage>,
    g: &ConvGeom,
) -> Result<CudaStorage>
where
    cudarc::cublas::CudaBlas: Gemm<T>,
{
    const OP: &str = "convolution";
    let (xs, ws) = (typed::<T>(OP, x)?, typed::<T>(OP, w)?);
    check_len(OP, "the input", xs.len(), g.x_len())?;
    check_len(OP, "the weight", ws.len(), g.w_len())?;
    let bs = match bias {
        Some(b) => {
            let bs = typed::<T>(OP, b)?;
            check_len(OP, "the bias", bs.len(), g.out_channels)?;
            Some(bs)
        }
        None => None,
    };
    let mut y = CudaStorage::alloc::<T>(&x.dev, OP, g.y_len())?;
    let p = g.out_plane();
    let (cin_g, cout_g) = (g.in_channels / g.groups, g.out_channels / g.groups);
    let kg = cin_g * g.taps();
    let (xe, ye) = (g.in_channels * g.in_plane(), g.out_channels * p);
    let pointwise = is_pointwise(g);
    let mut col = CudaStorage::alloc::<T>(&x.dev, OP, if pointwise { 0 } else { col_len(g) })?;
    let mm = MatMul {
        m: cout_g,
        n: p,
        k: kg,
        ta: false,
        tb: false,
    };
    for n in 0..g.batch {
        if !pointwise {
            im2col(x, xs, n, &mut col, g)?;
        }
        for gi in 0..g.groups {
            let y_off = n * ye + gi * cout_g * p;
            if pointwise {
                gemm_acc(
                    x,
                    ws,
                    gi * cout_g * kg,
                    xs,
                    n * xe + gi * kg * p,
                    &mut y,
                    y_off,
                    &mm,
                    false,
                )?;
            } else {
                gemm_acc(
                    x,
                    ws,
                    gi * cout_g * kg,
                    &col,
                    gi * kg * p,
                    &mut y,
                    y_off,
                    &mm,
                    false,
                )?;
            }
        }
    }
    if let Some(bs) = bs {
        let total = g.y_len();
        if total > 0 {
            let f = x.dev.function("conv.cu", kname("conv_bias", T::SUFFIX))?;
            let (n64, p64, c64) = (total as u64, p as u64, g.out_channels as u64);
            let mut l = x.dev.stream.launch_builder(&f);
            l.arg(&mut y).arg(bs).arg(&n64).arg(&p64).arg(&c64);
            // SAFETY: y holds batch x out_channels x p elements, the bias out_channels (checked
            // above), and (i / p) % out_channels is below out_channels.
            unsafe { l.launch(grid(total)) }.map_err(driver_err(OP))?;
        }
    }
    Ok(x.with(y))
}

fn conv_data_grad_t<T: BlasElement>(
    dy: &CudaStorage,
    w: &CudaStorage,
    g: &ConvGeom,
) -> Result<CudaStorage>
where
    cudarc::cublas::CudaBlas: Gemm<T>,
{
    const OP: &str = "convolution data gradient";
    let (dys, ws) = (typed::<T>(OP, dy)?, typed::<T>(OP, w)?);
    check_len(OP, "the head gradient", dys.len(), g.y_len())?;
    check_len(OP, "the weight", ws.len(), g.w_len())?;
    let mut dx = CudaStorage::alloc::<T>(&dy.dev, OP, g.x_len())?;
    let p = g.out_plane();
    let (cin_g, cout_g) = (g.in_channels / g.groups, g.out_channels / g.groups);
    let kg = cin_g * g.taps();
    let (xe, ye) = (g.in_channels * g.in_plane(), g.out_channels * p);
    let pointwise = is_pointwise(g);
    let mut col = CudaStorage::alloc::<T>(&dy.dev, OP, if pointwise { 0 } else { col_len(g) })?;
    // dcol_g (kg x p) = w_g^T . dy_g, w_g stored (cout_g, kg).
    let mm = MatMul {
        m: kg,
        n: p,
        k: cout_g,
        ta: true,
        tb: false,
    };
    for n in 0..g.batch {
        for gi in 0..g.groups {
            let (w_off, dy_off) = (gi * cout_g * kg, n * ye + gi * cout_g * p);
            if pointwise {
                gemm_acc(
                    dy,
                    ws,
                    w_off,
                    dys,
                    dy_off,
                    &mut dx,
                    n * xe + gi * kg * p,
                    &mm,
                    false,
                )?;
            } else {
                gemm_acc(
                    dy,
                    ws,
                    w_off,
                    dys,
                    dy_off,
                    &mut col,
                    gi * kg * p,
                    &mm,
                    false,
                )?;
            }
        }
        if !pointwise {
            col2im(dy, &col, &mut dx, n, g)?;
        }
    }
    Ok(dy.with(dx))
}

fn conv_weight_grad_t<T: BlasElement>(
    x: &CudaStorage,
    dy: &CudaStorage,
    g: &ConvGeom,
) -> Result<CudaStorage>
where
    cudarc::cublas::CudaBlas: Gemm<T>,
{
    const OP: &str = "convolution weight gradient";
    let (xs, dys) = (typed::<T>(OP, x)?, typed::<T>(OP, dy)?);
    check_len(OP, "the input", xs.len(), g.x_len())?;
    check_len(OP, "the head gradient", dys.len(), g.y_len())?;
    // Zeros, so every entry's product adds into it (beta = 1), entries in batch order.
    let mut dw = CudaStorage::alloc::<T>(&x.dev, OP, g.w_len())?;
    let p = g.out_plane();
    let (cin_g, cout_g) = (g.in_channels / g.groups, g.out_channels / g.groups);
    let kg = cin_g * g.taps();
    let (xe, ye) = (g.in_channels * g.in_plane(), g.out_channels * p);
    let pointwise = is_pointwise(g);
    let mut col = CudaStorage::alloc::<T>(&x.dev, OP, if pointwise { 0 } else { col_len(g) })?;
    // dw_g (cout_g x kg) += dy_g (cout_g x p) . col_g^T, col_g stored (kg, p).
    let mm = MatMul {
        m: cout_g,
        n: kg,
        k: p,
        ta: false,
        tb: true,
    };
    for n in 0..g.batch {
        if !pointwise {
            im2col(x, xs, n, &mut col, g)?;
        }
        for gi in 0..g.groups {
            let (dy_off, dw_off) = (n * ye + gi * cout_g * p, gi * cout_g * kg);
            if pointwise {
                gemm_acc(
                    x,
                    dys,
                    dy_off,
                    xs,
                    n * xe + gi * kg * p,
                    &mut dw,
                    dw_off,
                    &mm,
                    true,
                )?;
            } else {
                gemm_acc(
                    x,
                    dys,
                    dy_off,
                    &col,
                    gi * kg * p,
                    &mut dw,
                    dw_off,
                    &mm,
                    true,
                )?;
            }
        }
    }
    Ok(x.with(dw))
}

fn pool_t<T: CudaElement>(x: &CudaStorage, g: &PoolGeom) -> Result<CudaStorage> {
    const OP: &str = "pooling";
    let xs = typed::<T>(OP, x)?;
    check_len(OP, "the input", xs.len(), g.planes * g.in_plane())?;
    let total = g.planes * g.out_plane();
    let mut y = CudaStorage::alloc::<T>(&x.dev, OP, total)?;
    if total > 0 {
        let f = x.dev.function("conv.cu", kname("pool", T::SUFFIX))?;
        let dims = PoolDims::of(g);
        let mut l = x.dev.stream.launch_builder(&f);
        l.arg(xs).arg(&mut y).arg(&dims);
        // SAFETY: x holds planes x in_plane elements (checked above), y planes x out_plane;
        // every window is clipped to the input plane.
        unsafe { l.launch(grid(total)) }.map_err(driver_err(OP))?;
    }
    Ok(x.with(y))
}

fn pool_grad_t<T: CudaElement>(
    x: &CudaStorage,
    dy: &CudaStorage,
    g: &PoolGeom,
) -> Result<CudaStorage> {
    const OP: &str = "pooling backward";
    let (xs, dys) = (typed::<T>(OP, x)?, typed::<T>(OP, dy)?);
    let (ip, op) = (g.in_plane(), g.out_plane());
    check_len(OP, "the input", xs.len(), g.planes * ip)?;
    check_len(OP, "the head gradient", dys.len(), g.planes * op)?;
    let mut dx = CudaStorage::alloc::<T>(&x.dev, OP, g.planes * ip)?;
    if g.planes * ip == 0 || op == 0 {
        return Ok(x.with(dx));
    }
    let dims = PoolDims::of(g);
    match g.kind {
        PoolKind::Max => {
            let f = x
                .dev
                .function("conv.cu", kname("pool_max_grad", T::SUFFIX))?;
            let mut l = x.dev.stream.launch_builder(&f);
            l.arg(xs).arg(dys).arg(&mut dx).arg(&dims);
            // SAFETY: as `pool_t`; dx (zeros) holds planes x in_plane, dy planes x out_plane,
            // and each argmax is a position inside its own plane.
            unsafe { l.launch(grid(g.planes * op)) }.map_err(driver_err(OP))?;
        }
        PoolKind::Avg { .. } => {
            let f = x
                .dev
                .function("conv.cu", kname("pool_avg_grad", T::SUFFIX))?;
            let mut l = x.dev.stream.launch_builder(&f);
            l.arg(dys).arg(&mut dx).arg(&dims);
            // SAFETY: the kernel reads dy only at output positions below the output size of
            // the element's own plane and writes each of the planes x in_plane elements once.
            unsafe { l.launch(grid(g.planes * ip)) }.map_err(driver_err(OP))?;
        }
    }
    Ok(x.with(dx))
}

impl ConvOps for CudaStorage {
    fn conv(&self, w: &Self, bias: Option<&Self>, g: &ConvGeom) -> Result<Self> {
        same_dtype("convolution", self, w)?;
        if let Some(b) = bias {
            same_dtype("convolution", self, b)?;
        }
        float_only!(self, "convolution", T => conv_t::<T>(self, w, bias, g))
    }
    fn conv_data_grad(&self, w: &Self, g: &ConvGeom) -> Result<Self> {
        same_dtype("convolution data gradient", self, w)?;
        float_only!(self, "convolution data gradient", T => conv_data_grad_t::<T>(self, w, g))
    }
    fn conv_weight_grad(&self, dy: &Self, g: &ConvGeom) -> Result<Self> {
        same_dtype("convolution weight gradient", self, dy)?;
        float_only!(self, "convolution weight gradient", T => conv_weight_grad_t::<T>(self, dy, g))
    }
    fn pool(&self, g: &PoolGeom) -> Result<Self> {
        float_only!(self, "pooling", T => pool_t::<T>(self, g))
    }
    fn pool_grad(&self, dy: &Self, g: &PoolGeom) -> Result<Self> {
        same_dtype("pooling backward", self, dy)?;
        float_only!(self, "pooling backward", T => pool_grad_t::<T>(self, dy, g))
    }
}
