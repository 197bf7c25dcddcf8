//! The CUDA reduction family ([`ReduceOps`]): `kernels/reduce.cu`. A reduction over axes runs
//! one block per output element (a shared-memory tree over the reduced elements); arg-
//! reductions and softmax run one thread per line along the axis. `argsort` runs one thread
//! per element, which finds its rank in its line (lines up to `ARGSORT_MAX_LINE` long).

use cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};

use super::driver::cuda_error;
use super::elementwise::{float_error, float_only, kname, typed};
use super::launch::{driver_err, grid, too_many_dims, MAX_DIMS};
use super::storage::{with_cuda, CudaElement, CudaStorage};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::storage::{ArgReduceOp, ReduceOp, ReduceOps, SoftmaxOp};

/// The kept and the reduced axes of a reduction for the kernel. Mirrors `struct Red` in
/// reduce.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Red {
    kshape: [u64; MAX_DIMS],
    kstride: [i64; MAX_DIMS],
    rshape: [u64; MAX_DIMS],
    rstride: [i64; MAX_DIMS],
    kdim: i32,
    rdim: i32,
}

// SAFETY: plain `repr(C)` integers, laid out as the kernel's struct.
unsafe impl DeviceRepr for Red {}

fn op_code(op: ReduceOp) -> i32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Max => 1,
        ReduceOp::Min => 2,
        ReduceOp::Prod => 3,
        ReduceOp::L1 => 4,
        ReduceOp::L2 => 5,
    }
}

/// `(red, outputs, reduced per output)` for `axes` of `shape`.
fn plan(op: &'static str, shape: &[usize], axes: &[usize]) -> Result<(Red, usize, usize)> {
    let mut stride = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        stride[d] = stride[d + 1] * shape[d + 1] as i64;
    }
    let mut red = Red::default();
    let (mut k, mut r, mut n_out, mut n_red) = (0usize, 0usize, 1usize, 1usize);
    for d in 0..shape.len() {
        if axes.contains(&d) {
            if r == MAX_DIMS {
                return Err(too_many_dims(op, shape.len()));
            }
            red.rshape[r] = shape[d] as u64;
            red.rstride[r] = stride[d];
            r += 1;
            n_red *= shape[d];
        } else {
            if k == MAX_DIMS {
                return Err(too_many_dims(op, shape.len()));
            }
            red.kshape[k] = shape[d] as u64;
            red.kstride[k] = stride[d];
            k += 1;
            n_out *= shape[d];
        }
    }
    red.kdim = k as i32;
    red.rdim = r as i32;
    Ok((red, n_out, n_red))
}

/// `kernel(x, out, n_out, r, op, red)` with `x: T` and `out: A`.
fn reduce_t<T: CudaElement, A: CudaElement>(
    x: &CudaStorage,
    kernel: &'static str,
    shape: &[usize],
    axes: &[usize],
    op: ReduceOp,
) -> Result<CudaStorage> {
    let name = op.name();
    let s = typed::<T>(name, x)?;
    let (red, n_out, n_red) = plan(name, shape, axes)?;
    if n_red == 0 && matches!(op, ReduceOp::Max | ReduceOp::Min) {
        return Err(Error::shape(name, "cannot reduce an empty axis"));
    }
    let mut out = CudaStorage::alloc::<A>(&x.dev, name, n_out)?;
    if n_out > 0 {
        let f = x.dev.function("reduce.cu", kernel)?;
        let threads = n_red.next_power_of_two().clamp(32, 256) as u32;
        let cfg = LaunchConfig {
            grid_dim: (n_out as u32, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        if n_out > i32::MAX as usize {
            return Err(Error::shape(
                name,
                format!("{n_out} outputs exceed one CUDA grid"),
            ));
        }
        let (o64, r64, code) = (n_out as u64, n_red as u64, op_code(op));
        let mut l = x.dev.stream.launch_builder(&f);
        l.arg(s)
            .arg(&mut out)
            .arg(&o64)
            .arg(&r64)
            .arg(&code)
            .arg(&red);
        // SAFETY: `red` describes `shape`, whose product is `x`'s length (the operator
        // checked it), so every offset is inside `x`; one block writes each of the `n_out`
        // outputs; blocks of at most 256 threads, the kernel's shared array.
        unsafe { l.launch(cfg) }.map_err(driver_err(name))?;
    }
    Ok(x.with(out))
}

fn arg_reduce_t<T: CudaElement>(
    x: &CudaStorage,
    dims: (usize, usize, usize),
    op: ArgReduceOp,
) -> Result<CudaStorage> {
    let s = typed::<T>("argmax", x)?;
    let (outer, n, inner) = dims;
    if n == 0 {
        return Err(Error::shape("argmax", "cannot reduce an empty axis"));
    }
    let lines = outer * inner;
    let mut out = CudaStorage::alloc::<i64>(&x.dev, "argmax", lines)?;
    if lines > 0 {
        let f = x
            .dev
            .function("reduce.cu", kname("arg_reduce", T::SUFFIX))?;
        let code = match op {
            ArgReduceOp::Max => 0i32,
            ArgReduceOp::Min => 1,
        };
        let (a, b, c) = (outer as u64, n as u64, inner as u64);
        let mut l = x.dev.stream.launch_builder(&f);
        l.arg(s).arg(&mut out).arg(&a).arg(&b).arg(&c).arg(&code);
        // SAFETY: `x` holds `outer * n * inner` elements (the operator's split of its shape);
        // one output per line.
        unsafe { l.launch(grid(lines)) }.map_err(driver_err("argmax"))?;
    }
    Ok(x.with(out))
}

/// The longest line the rank kernel of argsort takes: each element compares itself with its
/// whole line, so the work grows with the square of the length.
const ARGSORT_MAX_LINE: usize = 1 << 16;

/// For every line along the middle axis, the positions of its `k` first elements in the
/// CPU's stable order, by rank (`argsort_*` in reduce.cu).
fn argsort_t<T: CudaElement>(
    x: &CudaStorage,
    dims: (usize, usize, usize),
    k: usize,
    ascending: bool,
) -> Result<CudaStorage> {
    const OP: &str = "argsort";
    let s = typed::<T>(OP, x)?;
    let (outer, n, inner) = dims;
    if k > n || s.len() != outer * n * inner {
        return Err(Error::shape(
            OP,
            format!("{k} of {n} positions per line of [{outer}, {n}, {inner}]"),
        ));
    }
    if n > ARGSORT_MAX_LINE {
        return Err(cuda_error(
            OP,
            format!(
                "no CUDA kernel for argsort of lines longer than {ARGSORT_MAX_LINE} yet (a \
                 line of {n}); move the array to the CPU with to_device(Device::Cpu)"
            ),
        ));
    }
    let mut out = CudaStorage::alloc::<i64>(&x.dev, OP, outer * k * inner)?;
    let items = outer * n * inner;
    if items > 0 && k > 0 {
        let f = x.dev.function("reduce.cu", kname("argsort", T::SUFFIX))?;
        let (a, b, c, d) = (outer as u64, n as u64, inner as u64, k as u64);
        let asc = i32::from(ascending);
        let mut l = x.dev.stream.launch_builder(&f);
        l.arg(s)
            .arg(&mut out)
            .arg(&a)
            .arg(&b)
            .arg(&c)
            .arg(&d)
            .arg(&asc);
        // SAFETY: `x` holds `outer * n * inner` elements (checked above); a rank is below `n`
        // and is written only when below `k`, inside the `outer * k * inner` outputs.
        unsafe { l.launch(grid(items)) }.map_err(driver_err(OP))?;
    }
    Ok(x.with(out))
}

fn softmax_t<T: CudaElement>(
    x: &CudaStorage,
    dims: (usize, usize, usize),
    op: SoftmaxOp,
) -> Result<CudaStorage> {
    let name = op.name();
    let s = typed::<T>(name, x)?;
    let (outer, n, inner) = dims;
    let mut out = CudaStorage::alloc::<T>(&x.dev, name, s.len())?;
    let lines = outer * inner;
    if lines > 0 && n > 0 {
        let f = x.dev.function("reduce.cu", kname("softmax", T::SUFFIX))?;
        let code = match op {
            SoftmaxOp::Softmax => 0i32,
            SoftmaxOp::LogSoftmax => 1,
        };
        let (a, b, c) = (outer as u64, n as u64, inner as u64);
        let mut l = x.dev.stream.launch_builder(&f);
        l.arg(s).arg(&mut out).arg(&a).arg(&b).arg(&c).arg(&code);
        // SAFETY: as `arg_reduce_t`, with `outer * n * inner` outputs.
        unsafe { l.launch(grid(lines)) }.map_err(driver_err(name))?;
    }
    Ok(x.with(out))
}

impl ReduceOps for CudaStorage {
    fn reduce(&self, shape: &[usize], axes: &[usize], op: ReduceOp) -> Result<Self> {
        let name = op.name();
        match (self.dtype(), op) {
            (DType::F32, _) => reduce_t::<f32, f32>(self, "reduce_f32", shape, axes, op),
            (DType::F64, _) => reduce_t::<f64, f64>(self, "reduce_f64", shape, axes, op),
            (DType::I64, ReduceOp::Sum) => {
                reduce_t::<i64, i64>(self, "reduce_sum_i64", shape, axes, op)
            }
            (DType::I32, ReduceOp::Sum) => {
                reduce_t::<i32, i64>(self, "reduce_sum_i32", shape, axes, op)
            }
            (DType::U8, ReduceOp::Sum) => {
                reduce_t::<u8, i64>(self, "reduce_sum_u8", shape, axes, op)
            }
            (DType::I64, ReduceOp::Max | ReduceOp::Min) => {
                reduce_t::<i64, i64>(self, "reduce_ext_i64", shape, axes, op)
            }
            (DType::I32, ReduceOp::Max | ReduceOp::Min) => {
                reduce_t::<i32, i32>(self, "reduce_ext_i32", shape, axes, op)
            }
            (DType::U8, ReduceOp::Max | ReduceOp::Min) => {
                reduce_t::<u8, u8>(self, "reduce_ext_u8", shape, axes, op)
            }
            _ => Err(float_error(name, self)),
        }
    }

    fn arg_reduce(&self, dims: (usize, usize, usize), op: ArgReduceOp) -> Result<Self> {
        with_cuda!(&self.buf, _s, T => arg_reduce_t::<T>(self, dims, op))
    }

    fn softmax(&self, dims: (usize, usize, usize), op: SoftmaxOp) -> Result<Self> {
        float_only!(self, op.name(), T => softmax_t::<T>(self, dims, op))
    }

    fn softmax_into(
        &self,
        dims: (usize, usize, usize),
        op: SoftmaxOp,
        out: &mut Self,
    ) -> Result<()> {
        // The eager kernel, then a copy: a planned buffer gets the same bits (a second device
        // buffer is made and freed, which a captured CUDA graph turns into its own nodes).
        out.copy_from(&self.softmax(dims, op)?)
    }

    fn argsort(&self, dims: (usize, usize, usize), k: usize, ascending: bool) -> Result<Self> {
        with_cuda!(&self.buf, _s, T => argsort_t::<T>(self, dims, k, ascending))
    }
}
