//! The CUDA elementwise family ([`ElementwiseOps`]): `kernels/elementwise.cu`. Each enum
//! variant becomes an op number the kernel switches on (uniform across a launch, so the
//! branch costs nothing next to the memory traffic).

use cudarc::driver::{CudaSlice, DeviceRepr, PushKernelArg};

use super::driver::CudaDev;
use super::launch::{driver_err, grid, too_many_dims, MAX_DIMS};
use super::storage::{read_ptr, with_cuda, write_ptr, CudaElement, CudaStorage};
use crate::error::{Error, Result};
use crate::ops::{ActFn, BinaryOp};
use crate::storage::{CmpOp, ElementwiseOps, Map, MapGrad};

/// NumPy broadcasting for a kernel: the output shape and each operand's element strides (0
/// along a broadcast axis). Mirrors `struct Bcast` in elementwise.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Bcast {
    shape: [u64; MAX_DIMS],
    xs: [i64; MAX_DIMS],
    ys: [i64; MAX_DIMS],
    ndim: i32,
}

// SAFETY: plain `repr(C)` integers, laid out as the kernel's struct.
unsafe impl DeviceRepr for Bcast {}

/// Row-major strides of `shape` aligned to the right of `out`, 0 where the axis broadcasts.
fn strides_in(shape: &[usize], out: &[usize]) -> Vec<i64> {
    let lead = out.len() - shape.len();
    let mut st = vec![0i64; out.len()];
    let mut acc = 1i64;
    for d in (0..shape.len()).rev() {
        st[lead + d] = if shape[d] == 1 && out[lead + d] != 1 {
            0
        } else {
            acc
        };
        acc *= shape[d] as i64;
    }
    st
}

impl Bcast {
    /// The broadcast of `xs` and `ys` to `out`; `None` when both already have `out`'s shape.
    pub(crate) fn new(
        op: &'static str,
        xs: &[usize],
        ys: &[usize],
        out: &[usize],
    ) -> Result<Option<Bcast>> {
        if xs == out && ys == out {
            return Ok(None);
        }
        if out.len() > MAX_DIMS {
            return Err(too_many_dims(op, out.len()));
        }
        let mut b = Bcast {
            ndim: out.len() as i32,
            ..Default::default()
        };
        for (d, &s) in out.iter().enumerate() {
            b.shape[d] = s as u64;
        }
        b.xs[..out.len()].copy_from_slice(&strides_in(xs, out));
        b.ys[..out.len()].copy_from_slice(&strides_in(ys, out));
        Ok(Some(b))
    }
}

/// The kernel's number and scalar arguments of a [`Map`] (order of `map_one`).
fn map_code(op: Map) -> (i32, f64, f64) {
    match op {
        Map::Neg => (0, 0.0, 0.0),
        Map::Exp => (1, 0.0, 0.0),
        Map::Log => (2, 0.0, 0.0),
        Map::Sqrt => (3, 0.0, 0.0),
        Map::Square => (4, 0.0, 0.0),
        Map::Abs => (5, 0.0, 0.0),
        Map::Sign => (6, 0.0, 0.0),
        Map::Sigmoid => (7, 0.0, 0.0),
        Map::Relu => (8, 0.0, 0.0),
        Map::Tanh => (9, 0.0, 0.0),
        Map::Softrelu => (10, 0.0, 0.0),
        Map::LeakyRelu(a) => (11, a, 0.0),
        Map::AddScalar(a) => (12, a, 0.0),
        Map::RsubScalar(a) => (13, a, 0.0),
        Map::MulScalar(a) => (14, a, 0.0),
        Map::DivScalar(a) => (15, a, 0.0),
        Map::RdivScalar(a) => (16, a, 0.0),
        Map::PowScalar(a) => (17, a, 0.0),
        Map::MaximumScalar(a) => (18, a, 0.0),
        Map::MinimumScalar(a) => (19, a, 0.0),
        Map::Clip(lo, hi) => (20, lo, hi),
        Map::InsideMask(lo, hi) => (21, lo, hi),
        Map::LeakyReluSlope(a) => (22, a, 0.0),
        Map::Sin => (23, 0.0, 0.0),
        Map::Cos => (24, 0.0, 0.0),
        Map::Tan => (25, 0.0, 0.0),
        Map::Arcsin => (26, 0.0, 0.0),
        Map::Arctan => (27, 0.0, 0.0),
        Map::Sinh => (28, 0.0, 0.0),
        Map::Cosh => (29, 0.0, 0.0),
        Map::Arcsinh => (30, 0.0, 0.0),
        Map::Arctanh => (31, 0.0, 0.0),
        Map::Expm1 => (32, 0.0, 0.0),
        Map::Log1p => (33, 0.0, 0.0),
        Map::Cbrt => (34, 0.0, 0.0),
        Map::Round => (35, 0.0, 0.0),
        Map::Rint => (36, 0.0, 0.0),
        Map::Ceil => (37, 0.0, 0.0),
        Map::Floor => (38, 0.0, 0.0),
        Map::Trunc => (39, 0.0, 0.0),
        Map::Act(f) => {
            let (code, a) = act_code(f);
            (40 + code, a, 0.0)
        }
    }
}

/// The number (within the activations) and parameter of an [`ActFn`]: the forward is map
/// `40 + number`, the backward map_grad `4 + number`.
fn act_code(f: ActFn) -> (i32, f64) {
    match f {
        ActFn::Elu(a) => (0, a),
        ActFn::Selu => (1, 0.0),
        ActFn::Gelu => (2, 0.0),
        ActFn::GeluTanh => (3, 0.0),
        ActFn::Swish(b) => (4, b),
        ActFn::Softsign => (5, 0.0),
        ActFn::LogSigmoid => (6, 0.0),
        ActFn::Mish => (7, 0.0),
    }
}

/// The kernel's number and scalar argument of a [`MapGrad`] (order of `map_grad_one`).
fn map_grad_code(op: MapGrad) -> (i32, f64) {
    match op {
        MapGrad::SigmoidFromOutput => (0, 0.0),
        MapGrad::ReluFromInput => (1, 0.0),
        MapGrad::TanhFromOutput => (2, 0.0),
        MapGrad::SoftreluFromInput => (3, 0.0),
        MapGrad::Act(f) => {
            let (code, a) = act_code(f);
            (4 + code, a)
        }
    }
}

pub(super) fn binary_code(op: BinaryOp) -> i32 {
    match op {
        BinaryOp::Add => 0,
        BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 3,
        BinaryOp::Pow => 4,
        BinaryOp::Maximum => 5,
        BinaryOp::Minimum => 6,
    }
}

fn cmp_code(op: CmpOp) -> i32 {
    match op {
        CmpOp::Eq => 0,
        CmpOp::Ne => 1,
        CmpOp::Gt => 2,
        CmpOp::Ge => 3,
        CmpOp::Lt => 4,
        CmpOp::Le => 5,
    }
}

/// The kernel `base_<suffix>` as a static name (kernels are cached by name).
pub(crate) fn kname(base: &'static str, suffix: &str) -> &'static str {
    // Every (base, suffix) pair is a fixed kernel of the sources; interning them once keeps
    // the per-device function cache keyed by `&'static str`.
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashMap<(&'static str, String), &'static str>>> = OnceLock::new();
    let mut m = NAMES
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    m.entry((base, suffix.to_string()))
        .or_insert_with(|| Box::leak(format!("{base}_{suffix}").into_boxed_str()))
}

/// The float error of an operator given another dtype.
pub(crate) fn float_error(op: &'static str, x: &CudaStorage) -> Error {
    Error::dtype(op, format!("needs a float array, got {}", x.dtype().name()))
}

/// Same-dtype check of two operands.
pub(crate) fn same_dtype(op: &'static str, a: &CudaStorage, b: &CudaStorage) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(Error::dtype_mismatch(op, a.dtype(), b.dtype()));
    }
    Ok(())
}

/// The typed slice of an operand known to have dtype `T` (checked by the caller), or an error.
pub(crate) fn typed<'a, T: CudaElement>(
    op: &'static str,
    x: &'a CudaStorage,
) -> Result<&'a CudaSlice<T>> {
    x.slice::<T>()
        .map(|s| s.as_ref())
        .ok_or_else(|| Error::dtype_mismatch(op, x.dtype(), T::DTYPE))
}

fn map_t<T: CudaElement>(x: &CudaStorage, op: Map) -> Result<CudaStorage> {
    let name = op.name();
    let s = typed::<T>(name, x)?;
    let n = s.len();
    // Every element written by the map kernel.
    let mut out = CudaStorage::alloc_overwritten::<T>(&x.dev, name, n)?;
    let (src, dst) = (read_ptr(s, &x.dev), write_ptr(&mut out, &x.dev));
    map_launch::<T>(&x.dev, op, src, dst, n)?;
    Ok(x.with(out))
}

/// The map kernel from the `n` elements at device address `src` to those at `dst`. The same
/// address for both runs in place: the kernel's one thread per element reads it before
/// writing it.
fn map_launch<T: CudaElement>(dev: &CudaDev, op: Map, src: u64, dst: u64, n: usize) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let name = op.name();
    let f = dev.function("elementwise.cu", kname("map", T::SUFFIX))?;
    let (code, a, b) = map_code(op);
    let n64 = n as u64;
    let mut l = dev.stream.launch_builder(&f);
    l.arg(&src).arg(&dst).arg(&n64).arg(&code).arg(&a).arg(&b);
    // SAFETY: `map_T(const T* x, T* y, u64 n, int, double, double)` reads and writes `n`
    // elements at addresses of buffers of `n` the callers hold (the output borrowed mutably).
    unsafe { l.launch(grid(n)) }.map_err(driver_err(name))?;
    Ok(())
}

/// `ops` applied one after the other to `x`, into `out` (`x` itself when `out` is `None`):
/// each map a launch of the eager kernel, so the same bits as the maps one by one.
fn map_chain_t<T: CudaElement>(
    x: &mut CudaStorage,
    ops: &[Map],
    out: Option<&mut CudaStorage>,
) -> Result<()> {
    let Some((first, rest)) = ops.split_first() else {
        return match out {
            Some(o) => o.copy_from(x),
            None => Ok(()),
        };
    };
    let name = first.name();
    let dev = x.dev.clone();
    let dst = match out {
        Some(o) => {
            let s = typed::<T>(name, x)?;
            let src = read_ptr(s, &dev);
            let n = s.len();
            let os = o.make_mut::<T>(name)?;
            if os.len() != n {
                return Err(Error::shape(
                    name,
                    format!("{n} values into a buffer of {}", os.len()),
                ));
            }
            let dst = write_ptr(os, &dev);
            map_launch::<T>(&dev, *first, src, dst, n)?;
            (dst, n)
        }
        None => {
            let s = x.make_mut::<T>(name)?;
            let n = s.len();
            let p = write_ptr(s, &dev);
            map_launch::<T>(&dev, *first, p, p, n)?;
            (p, n)
        }
    };
    for op in rest {
        map_launch::<T>(&dev, *op, dst.0, dst.0, dst.1)?;
    }
    Ok(())
}

fn map_grad_t<T: CudaElement>(
    g: &CudaStorage,
    s: &CudaStorage,
    op: MapGrad,
) -> Result<CudaStorage> {
    let name = op.name();
    let (gs, ss) = (typed::<T>(name, g)?, typed::<T>(name, s)?);
    let n = gs.len();
    if ss.len() != n {
        return Err(Error::shape(
            name,
            format!("{n} gradients for {} saved values", ss.len()),
        ));
    }
    let mut out = CudaStorage::alloc_overwritten::<T>(&g.dev, name, n)?;
    if n > 0 {
        let f = g
            .dev
            .function("elementwise.cu", kname("map_grad", T::SUFFIX))?;
        let ((code, a), n64) = (map_grad_code(op), n as u64);
        let mut l = g.dev.stream.launch_builder(&f);
        l.arg(gs).arg(ss).arg(&mut out).arg(&n64).arg(&code).arg(&a);
        // SAFETY: `map_grad_T(const T* g, const T* s, T* out, u64 n, int, double)` over
        // three buffers of `n` elements (checked above).
        unsafe { l.launch(grid(n)) }.map_err(driver_err(name))?;
    }
    Ok(g.with(out))
}

/// A broadcasting kernel `base_T(x, y, out, n, op, Bcast, same)` of two operands.
#[allow(clippy::too_many_arguments)]
fn broadcast_t<T: CudaElement>(
    name: &'static str,
    base: &'static str,
    x: &CudaStorage,
    xs: &[usize],
    y: &CudaStorage,
    ys: &[usize],
    out: &[usize],
    code: i32,
) -> Result<CudaStorage> {
    let (a, b) = (typed::<T>(name, x)?, typed::<T>(name, y)?);
    let n: usize = out.iter().product();
    let bc = Bcast::new(name, xs, ys, out)?;
    let mut o = CudaStorage::alloc_overwritten::<T>(&x.dev, name, n)?;
    if n > 0 {
        let f = x.dev.function("elementwise.cu", kname(base, T::SUFFIX))?;
        let same = i32::from(bc.is_none());
        let bc = bc.unwrap_or_default();
        let n64 = n as u64;
        let mut l = x.dev.stream.launch_builder(&f);
        l.arg(a)
            .arg(b)
            .arg(&mut o)
            .arg(&n64)
            .arg(&code)
            .arg(&bc)
            .arg(&same);
        // SAFETY: the operator checked that `xs` and `ys` broadcast to `out`; the strides
        // (0 along broadcast axes) keep every read inside `x` and `y`, and `n` outputs are
        // written to a buffer of `n`.
        unsafe { l.launch(grid(n)) }.map_err(driver_err(name))?;
    }
    Ok(x.with(o))
}

fn compare_scalar_t<T: CudaElement>(x: &CudaStorage, s: f64, op: CmpOp) -> Result<CudaStorage> {
    let a = typed::<T>("compare", x)?;
    let n = a.len();
    let mut o = CudaStorage::alloc_overwritten::<T>(&x.dev, "compare", n)?;
    if n > 0 {
        let f = x
            .dev
            .function("elementwise.cu", kname("compare_scalar", T::SUFFIX))?;
        let (code, n64) = (cmp_code(op), n as u64);
        let mut l = x.dev.stream.launch_builder(&f);
        l.arg(a).arg(&mut o).arg(&n64).arg(&code).arg(&s);
        // SAFETY: two buffers of `n` elements.
        unsafe { l.launch(grid(n)) }.map_err(driver_err("compare"))?;
    }
    Ok(x.with(o))
}

/// Dispatch on a float dtype: `$body` with `$t` the element type, else the float error.
macro_rules! float_only {
    ($x:expr, $op:expr, $t:ident => $body:expr) => {
        match $x.dtype() {
            crate::DType::F32 => {
                type $t = f32;
                $body
            }
            crate::DType::F64 => {
                type $t = f64;
                $body
            }
            _ => Err($crate::cuda::elementwise::float_error($op, $x)),
        }
    };
}
pub(crate) use float_only;

impl ElementwiseOps for CudaStorage {
    fn map(&self, op: Map) -> Result<Self> {
        float_only!(self, op.name(), T => map_t::<T>(self, op))
    }

    fn map_into(&self, op: Map, out: &mut Self) -> Result<()> {
        self.map_chain_into(&[op], out)
    }

    fn map_in_place(&mut self, op: Map) -> Result<()> {
        self.map_chain_in_place(&[op])
    }

    fn map_chain_into(&self, ops: &[Map], out: &mut Self) -> Result<()> {
        same_dtype("map chain", self, out)?;
        // A handle on the same buffer (no copy: it is only read).
        let mut x = self.clone();
        float_only!(self, "map chain", T => map_chain_t::<T>(&mut x, ops, Some(out)))
    }

    fn map_chain_in_place(&mut self, ops: &[Map]) -> Result<()> {
        float_only!(self, "map chain", T => map_chain_t::<T>(self, ops, None))
    }

    fn map_grad(&self, saved: &Self, op: MapGrad) -> Result<Self> {
        same_dtype(op.name(), self, saved)?;
        float_only!(self, op.name(), T => map_grad_t::<T>(self, saved, op))
    }

    fn zip(
        &self,
        xs: &[usize],
        y: &Self,
        ys: &[usize],
        out: &[usize],
        op: BinaryOp,
    ) -> Result<Self> {
        same_dtype(op.name(), self, y)?;
        float_only!(self, op.name(), T =>
            broadcast_t::<T>(op.name(), "zip", self, xs, y, ys, out, binary_code(op)))
    }

    fn compare(
        &self,
        xs: &[usize],
        y: &Self,
        ys: &[usize],
        out: &[usize],
        op: CmpOp,
    ) -> Result<Self> {
        same_dtype("compare", self, y)?;
        with_cuda!(&self.buf, _s, T =>
            broadcast_t::<T>("compare", "compare", self, xs, y, ys, out, cmp_code(op)))
    }

    fn compare_scalar(&self, s: f64, op: CmpOp) -> Result<Self> {
        with_cuda!(&self.buf, _s, T => compare_scalar_t::<T>(self, s, op))
    }
}
