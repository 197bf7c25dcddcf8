//! The CUDA dense-product family ([`LinalgOps`]): products through cuBLAS, the fused Dense
//! layer and loss kernels in `kernels/linalg.cu`.
//!
//! cuBLAS is column-major and our operands are row-major. A row-major `(r, c)` matrix is the
//! column-major `(c, r)` matrix with leading dimension `c`, its transpose; so the row-major
//! `C = op(A) op(B)` is computed as the column-major `C^T = op(B)^T op(A)^T`: B first, the
//! result's dimensions swapped, each operand's transpose flag kept.

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{Gemm, GemmConfig};
use cudarc::driver::CudaSlice;
use cudarc::driver::PushKernelArg;

use super::elementwise::{float_error, float_only, kname, same_dtype, typed};
use super::launch::{driver_err, grid};
use super::storage::{read_ptr, write_ptr, CudaElement, CudaStorage};
use crate::error::{Error, Result};
use crate::ops::fused::FusedAct;
use crate::storage::{LinalgOps, MatMul};

/// An element type cuBLAS multiplies.
pub(super) trait BlasElement: CudaElement
where
    cudarc::cublas::CudaBlas: Gemm<Self>,
{
    /// 1 and 0 of the type (alpha and beta).
    const ONE: Self;
    const ZERO: Self;
}
impl BlasElement for f32 {
    const ONE: f32 = 1.0;
    const ZERO: f32 = 0.0;
}
impl BlasElement for f64 {
    const ONE: f64 = 1.0;
    const ZERO: f64 = 0.0;
}

fn op_of(t: bool) -> cublasOperation_t {
    if t {
        cublasOperation_t::CUBLAS_OP_T
    } else {
        cublasOperation_t::CUBLAS_OP_N
    }
}

fn dim(op: &'static str, v: usize) -> Result<i32> {
    i32::try_from(v)
        .map_err(|_| Error::shape(op, format!("dimension {v} exceeds cuBLAS's int range")))
}

/// `out[c_off..] = a[a_off..] . b[b_off..]` as `mm` describes, through cuBLAS.
#[allow(clippy::too_many_arguments)]
fn gemm_into<T: BlasElement>(
    x: &CudaStorage,
    a: &CudaSlice<T>,
    a_off: usize,
    b: &CudaSlice<T>,
    b_off: usize,
    out: &mut CudaSlice<T>,
    c_off: usize,
    mm: &MatMul,
) -> Result<()>
where
    cudarc::cublas::CudaBlas: Gemm<T>,
{
    gemm_acc(x, a, a_off, b, b_off, out, c_off, mm, false)
}

/// `out[c_off..] (+)= a[a_off..] . b[b_off..]` as `mm` describes, through cuBLAS: added to the
/// output's values when `accumulate` (cuBLAS's beta = 1), written over them otherwise.
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm_acc<T: BlasElement>(
    x: &CudaStorage,
    a: &CudaSlice<T>,
    a_off: usize,
    b: &CudaSlice<T>,
    b_off: usize,
    out: &mut CudaSlice<T>,
    c_off: usize,
    mm: &MatMul,
    accumulate: bool,
) -> Result<()>
where
    cudarc::cublas::CudaBlas: Gemm<T>,
{
    const OP: &str = "dot";
    if mm.m == 0 || mm.n == 0 || mm.k == 0 {
        // Nothing to add; a written product over an empty inner dimension is the zeros every
        // caller's freshly allocated output already holds.
        return Ok(());
    }
    let (a_len, b_len, c_len) = (mm.m * mm.k, mm.k * mm.n, mm.m * mm.n);
    if a_off + a_len > a.len() || b_off + b_len > b.len() || c_off + c_len > out.len() {
        return Err(Error::shape(
            OP,
            "a product's operand is shorter than its dimensions",
        ));
    }
    let cfg = GemmConfig {
        transa: op_of(mm.tb),
        transb: op_of(mm.ta),
        m: dim(OP, mm.n)?,
        n: dim(OP, mm.m)?,
        k: dim(OP, mm.k)?,
        alpha: T::ONE,
        lda: dim(OP, mm.b_cols())?,
        ldb: dim(OP, mm.a_cols())?,
        beta: if accumulate { T::ONE } else { T::ZERO },
        ldc: dim(OP, mm.n)?,
    };
    let blas = x.dev.blas()?;
    let av = a.slice(a_off..a_off + a_len);
    let bv = b.slice(b_off..b_off + b_len);
    let mut cv = out.slice_mut(c_off..c_off + c_len);
    // SAFETY: the views hold exactly the elements the dimensions and leading dimensions
    // address (checked above); cuBLAS runs on the device's stream.
    unsafe { blas.gemm(cfg, &bv, &av, &mut cv) }
        .map_err(|e| crate::cuda::driver::cuda_error(OP, format!("cuBLAS: {e}")))
}

fn matmul_t<T: BlasElement>(
    x: &CudaStorage,
    rhs: &CudaStorage,
    mm: &MatMul,
    offsets: &[(usize, usize)],
) -> Result<CudaStorage>
where
    cudarc::cublas::CudaBlas: Gemm<T>,
{
    let (a, b) = (typed::<T>("dot", x)?, typed::<T>("dot", rhs)?);
    let per = mm.m * mm.n;
    // Written over by the products, except over an empty inner dimension (zeros).
    let mut out = if mm.k > 0 {
        CudaStorage::alloc_overwritten::<T>(&x.dev, "dot", per * offsets.len())?
    } else {
        CudaStorage::alloc::<T>(&x.dev, "dot", per * offsets.len())?
    };
    for (i, &(ao, bo)) in offsets.iter().enumerate() {
        gemm_into(x, a, ao, b, bo, &mut out, i * per, mm)?;
    }
    Ok(x.with(out))
}

fn act_code(act: Option<FusedAct>) -> i32 {
    match act {
        None => -1,
        Some(FusedAct::Sigmoid) => 0,
        Some(FusedAct::Tanh) => 1,
        Some(FusedAct::Relu) => 2,
    }
}

/// Launch `name_T` over `n` items with the arguments `args` pushes.
macro_rules! launch {
    ($x:expr, $name:expr, $t:ty, $n:expr, |$l:ident| $args:block) => {{
        let f = $x
            .dev
            .function("linalg.cu", kname($name, <$t as CudaElement>::SUFFIX))?;
        let mut $l = $x.dev.stream.launch_builder(&f);
        $args;
        // SAFETY: each fused kernel reads and writes `n` elements of buffers the operator
        // sized (`n` each, `units` for a bias or column sums), as the caller checks.
        unsafe { $l.launch(grid($n)) }.map_err(driver_err($name))?;
    }};
}

fn bias_act_t<T: CudaElement>(
    y: &CudaStorage,
    bias: &CudaStorage,
    units: usize,
    act: Option<FusedAct>,
) -> Result<CudaStorage> {
    let n = typed::<T>("bias_act", y)?.len();
    let mut out = y.with(CudaStorage::alloc_overwritten::<T>(&y.dev, "bias_act", n)?);
    // A handle on the same buffer (no copy: it is only read).
    bias_act_to::<T>(&mut y.clone(), bias, units, act, Some(&mut out))?;
    Ok(out)
}

/// `act(y + bias)` into `out` (same length as `y`), or over `y` itself when `out` is `None`
/// (the kernel's one thread per element reads it before writing it).
fn bias_act_to<T: CudaElement>(
    y: &mut CudaStorage,
    bias: &CudaStorage,
    units: usize,
    act: Option<FusedAct>,
    out: Option<&mut CudaStorage>,
) -> Result<()> {
    const OP: &str = "bias_act";
    let bs = typed::<T>(OP, bias)?;
    let n = typed::<T>(OP, y)?.len();
    if units == 0 || bs.len() != units || n % units != 0 {
        return Err(Error::shape(
            OP,
            format!("{n} values for a bias of {}", bs.len()),
        ));
    }
    let dev = y.dev.clone();
    let (src, dst) = match out {
        Some(o) => {
            let src = read_ptr(typed::<T>(OP, y)?, &dev);
            let os = o.make_mut::<T>(OP)?;
            if os.len() != n {
                return Err(Error::shape(
                    OP,
                    format!("{n} values into a buffer of {}", os.len()),
                ));
            }
            (src, write_ptr(os, &dev))
        }
        None => {
            let p = write_ptr(y.make_mut::<T>(OP)?, &dev);
            (p, p)
        }
    };
    if n > 0 {
        let (n64, u64_, code) = (n as u64, units as u64, act_code(act));
        let f = dev.function("linalg.cu", kname(OP, T::SUFFIX))?;
        let mut l = dev.stream.launch_builder(&f);
        l.arg(&src)
            .arg(bs)
            .arg(&dst)
            .arg(&n64)
            .arg(&u64_)
            .arg(&code);
        // SAFETY: `bias_act_T(const T* y, const T* bias, T* out, u64 n, u64 units, int)`
        // reads `n` values at `src` and `units` of the bias, and writes `n` at `dst`: buffers
        // of those lengths (checked above), the output borrowed mutably.
        unsafe { l.launch(grid(n)) }.map_err(driver_err(OP))?;
    }
    Ok(())
}

/// `out = a . b` as `mm` describes, into `out` (m x n elements).
fn matmul_into_t<T: BlasElement>(
    x: &CudaStorage,
    rhs: &CudaStorage,
    mm: &MatMul,
    out: &mut CudaStorage,
) -> Result<()>
where
    cudarc::cublas::CudaBlas: Gemm<T>,
{
    const OP: &str = "dot";
    let (a, b) = (typed::<T>(OP, x)?, typed::<T>(OP, rhs)?);
    let c = out.make_mut::<T>(OP)?;
    if c.len() != mm.m * mm.n {
        return Err(Error::shape(
            OP,
            format!(
                "a ({}, {}) product into a buffer of {}",
                mm.m,
                mm.n,
                c.len()
            ),
        ));
    }
    if mm.k == 0 && !c.is_empty() {
        // An empty inner dimension writes nothing through cuBLAS: the product is zeros.
        return x.dev.stream.memset_zeros(c).map_err(driver_err(OP));
    }
    gemm_into(x, a, 0, b, 0, c, 0, mm)
}

fn column_sums_t<T: CudaElement>(g: &CudaStorage, units: usize) -> Result<CudaStorage> {
    let gs = typed::<T>("bias_act backward", g)?;
    if units == 0 || gs.len() % units != 0 {
        return Err(Error::shape(
            "bias_act backward",
            format!("{} values in rows of {units}", gs.len()),
        ));
    }
    let rows = gs.len() / units;
    let mut out = CudaStorage::alloc_overwritten::<T>(&g.dev, "bias_act backward", units)?;
    let (r64, u64_) = (rows as u64, units as u64);
    launch!(g, "column_sums", T, units, |l| {
        l.arg(gs).arg(&mut out).arg(&r64).arg(&u64_);
    });
    Ok(g.with(out))
}

fn act_grad_t<T: CudaElement>(
    g: &CudaStorage,
    y: &CudaStorage,
    act: FusedAct,
) -> Result<CudaStorage> {
    let (gs, ys) = (
        typed::<T>("bias_act backward", g)?,
        typed::<T>("bias_act backward", y)?,
    );
    let n = gs.len();
    if ys.len() != n {
        return Err(Error::shape(
            "bias_act backward",
            format!("{n} gradients for {} outputs", ys.len()),
        ));
    }
    let mut out = CudaStorage::alloc_overwritten::<T>(&g.dev, "bias_act backward", n)?;
    if n > 0 {
        let (n64, code) = (n as u64, act_code(Some(act)));
        launch!(g, "act_grad", T, n, |l| {
            l.arg(gs).arg(ys).arg(&mut out).arg(&n64).arg(&code);
        });
    }
    Ok(g.with(out))
}

fn act_derivative_t<T: CudaElement>(y: &CudaStorage, act: FusedAct) -> Result<CudaStorage> {
    let ys = typed::<T>("bias_act backward", y)?;
    let n = ys.len();
    let mut out = CudaStorage::alloc_overwritten::<T>(&y.dev, "bias_act backward", n)?;
    if n > 0 {
        let (n64, code) = (n as u64, act_code(Some(act)));
        launch!(y, "act_derivative", T, n, |l| {
            l.arg(ys).arg(&mut out).arg(&n64).arg(&code);
        });
    }
    Ok(y.with(out))
}

const BCE: &str = "SigmoidBinaryCrossEntropyLoss";

fn sigmoid_bce_t<T: CudaElement>(x: &CudaStorage, z: &CudaStorage) -> Result<CudaStorage> {
    let (xs, zs) = (typed::<T>(BCE, x)?, typed::<T>(BCE, z)?);
    let n = xs.len();
    if zs.len() != n {
        return Err(Error::shape(
            BCE,
            format!("{n} logits for {} labels", zs.len()),
        ));
    }
    let mut out = CudaStorage::alloc_overwritten::<T>(&x.dev, BCE, n)?;
    if n > 0 {
        let n64 = n as u64;
        launch!(x, "sigmoid_bce", T, n, |l| {
            l.arg(xs).arg(zs).arg(&mut out).arg(&n64);
        });
    }
    Ok(x.with(out))
}

fn sigmoid_bce_grad_t<T: CudaElement>(
    g: &CudaStorage,
    x: &CudaStorage,
    z: &CudaStorage,
    need_dz: bool,
) -> Result<(CudaStorage, Option<CudaStorage>)> {
    let (gs, xs, zs) = (
        typed::<T>(BCE, g)?,
        typed::<T>(BCE, x)?,
        typed::<T>(BCE, z)?,
    );
    let n = gs.len();
    if xs.len() != n || zs.len() != n {
        return Err(Error::shape(
            BCE,
            format!(
                "{n} gradients for {} logits and {} labels",
                xs.len(),
                zs.len()
            ),
        ));
    }
    let mut dx = CudaStorage::alloc_overwritten::<T>(&g.dev, BCE, n)?;
    // Without `need_dz` the kernel never writes `dz`; a one-element buffer stands in.
    let mut dz = CudaStorage::alloc::<T>(&g.dev, BCE, if need_dz { n } else { 1 })?;
    if n > 0 {
        let (n64, nd) = (n as u64, i32::from(need_dz));
        launch!(g, "sigmoid_bce_grad", T, n, |l| {
            l.arg(gs)
                .arg(xs)
                .arg(zs)
                .arg(&mut dx)
                .arg(&mut dz)
                .arg(&n64)
                .arg(&nd);
        });
    }
    Ok((g.with(dx), need_dz.then(|| g.with(dz))))
}

impl LinalgOps for CudaStorage {
    fn matmul_into(&self, rhs: &Self, mm: &MatMul, out: &mut Self) -> Result<()> {
        same_dtype("dot", self, rhs)?;
        same_dtype("dot", self, out)?;
        match self.dtype() {
            crate::DType::F32 => matmul_into_t::<f32>(self, rhs, mm, out),
            crate::DType::F64 => matmul_into_t::<f64>(self, rhs, mm, out),
            _ => Err(float_error("dot", self)),
        }
    }
    fn bias_act_in_place(
        &mut self,
        bias: &Self,
        units: usize,
        act: Option<FusedAct>,
    ) -> Result<()> {
        same_dtype("bias_act", self, bias)?;
        float_only!(self, "bias_act", T => bias_act_to::<T>(self, bias, units, act, None))
    }
    fn bias_act_into(
        &self,
        bias: &Self,
        units: usize,
        act: Option<FusedAct>,
        out: &mut Self,
    ) -> Result<()> {
        same_dtype("bias_act", self, bias)?;
        same_dtype("bias_act", self, out)?;
        // A handle on the same buffer (no copy: it is only read).
        let mut y = self.clone();
        float_only!(self, "bias_act", T => bias_act_to::<T>(&mut y, bias, units, act, Some(out)))
    }
    fn matmul(&self, rhs: &Self, mm: &MatMul) -> Result<Self> {
        self.batched_matmul(rhs, mm, &[(0, 0)])
    }

    fn batched_matmul(&self, rhs: &Self, mm: &MatMul, offsets: &[(usize, usize)]) -> Result<Self> {
        same_dtype("dot", self, rhs)?;
        match self.dtype() {
            crate::DType::F32 => matmul_t::<f32>(self, rhs, mm, offsets),
            crate::DType::F64 => matmul_t::<f64>(self, rhs, mm, offsets),
            _ => Err(float_error("dot", self)),
        }
    }

    fn bias_act(&self, bias: &Self, units: usize, act: Option<FusedAct>) -> Result<Self> {
        same_dtype("bias_act", self, bias)?;
        float_only!(self, "bias_act", T => bias_act_t::<T>(self, bias, units, act))
    }

    fn bias_act_grad(&self, out: &Self, units: usize, act: FusedAct) -> Result<(Self, Self)> {
        same_dtype("bias_act backward", self, out)?;
        float_only!(self, "bias_act backward", T => {
            let gp = act_grad_t::<T>(self, out, act)?;
            let db = column_sums_t::<T>(&gp, units)?;
            Ok((gp, db))
        })
    }

    fn act_derivative(&self, act: FusedAct) -> Result<Self> {
        float_only!(self, "bias_act backward", T => act_derivative_t::<T>(self, act))
    }

    fn column_sums(&self, units: usize) -> Result<Self> {
        float_only!(self, "bias_act backward", T => column_sums_t::<T>(self, units))
    }

    fn sigmoid_bce(&self, z: &Self) -> Result<Self> {
        same_dtype(BCE, self, z)?;
        float_only!(self, BCE, T => sigmoid_bce_t::<T>(self, z))
    }

    fn sigmoid_bce_grad(&self, x: &Self, z: &Self, need_dz: bool) -> Result<(Self, Option<Self>)> {
        same_dtype(BCE, self, x)?;
        same_dtype(BCE, self, z)?;
        float_only!(self, BCE, T => sigmoid_bce_grad_t::<T>(self, x, z, need_dz))
    }
}
