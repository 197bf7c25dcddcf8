//! The CUDA update family ([`UpdateOps`]): `kernels/update.cu`, one kernel per dtype whose
//! rule number selects MXNet's formula. Ported rules: `sgd_update`, `sgd_mom_update`,
//! `signsgd_update`, `adam_update`, `adamw_update`, `adagrad_update`, each over a dense
//! gradient or a row_sparse one (lazy: only its rows; standard: the gradient made dense on the
//! device first, so absent rows see a zero gradient). The other rules return the
//! not-ported error. Global-norm clipping's two passes run as a reduction and a scale.

use std::ops::Range;

use cudarc::driver::{CudaSlice, DeviceRepr, PushKernelArg};

use super::elementwise::{float_error, kname, typed};
use super::index::CudaIndex;
use super::launch::{driver_err, grid, not_ported};
use super::storage::{CudaElement, CudaStorage};
use crate::error::{Error, Result};
use crate::storage::{
    ElementwiseOps, GradRef, LayoutOps, Map, ReduceOp, ReduceOps, UpdateOps, UpdateRule,
    UpdateScalars,
};
use crate::{DType, Device};

/// The scalars of one update for the kernel. Mirrors `struct UpdateParams` in update.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct UpdateParams {
    lr: f64,
    wd: f64,
    rg: f64,
    clip: f64,
    h0: f64,
    h1: f64,
    h2: f64,
    has_clip: i32,
    rule: i32,
}

// SAFETY: plain `repr(C)` numbers, laid out as the kernel's struct.
unsafe impl DeviceRepr for UpdateParams {}

/// The kernel's rule number, its hyper-parameters and state count, or `None` for a rule
/// without a CUDA kernel.
fn rule_code(rule: &UpdateRule) -> Option<(i32, [f64; 3], usize)> {
    Some(match *rule {
        UpdateRule::Sgd => (0, [0.0; 3], 0),
        UpdateRule::SgdMom { momentum } => (1, [momentum, 0.0, 0.0], 1),
        UpdateRule::SignSgd => (2, [0.0; 3], 0),
        UpdateRule::Adam {
            beta1,
            beta2,
            epsilon,
        } => (3, [beta1, beta2, epsilon], 2),
        UpdateRule::AdamW {
            beta1,
            beta2,
            epsilon,
        } => (4, [beta1, beta2, epsilon], 2),
        UpdateRule::AdaGrad { epsilon } => (5, [epsilon, 0.0, 0.0], 1),
        _ => return None,
    })
}

/// A gradient as the kernel reads it: borrowed (dense, or a lazy row_sparse one's stored
/// rows with their ids), or made dense on the device (the standard row_sparse mode).
enum KernelGrad<'a, T> {
    /// Values, row ids when sparse, elements to update, elements per row.
    Borrowed(&'a CudaSlice<T>, Option<&'a CudaSlice<i64>>, usize, usize),
    /// A dense gradient of the weight's size.
    Owned(CudaSlice<T>),
}

/// The error of an update operand on another device than the weight.
fn check_device(op: &'static str, w: &CudaStorage, ordinal: usize) -> Result<()> {
    if ordinal != w.ordinal() {
        return Err(Error::device_mismatch(
            op,
            w.device(),
            Device::Cuda(ordinal),
        ));
    }
    Ok(())
}

fn prepare_grad<'a, T: CudaElement>(
    w: &CudaStorage,
    op: &'static str,
    rows: usize,
    grad: GradRef<'a, CudaStorage, CudaIndex>,
    lazy: bool,
) -> Result<KernelGrad<'a, T>> {
    let n = w.len();
    match grad {
        GradRef::Dense(g) => {
            check_device(op, w, g.ordinal())?;
            let gs = typed::<T>(op, g)?;
            if gs.len() != n {
                return Err(Error::shape(op, "gradient size differs from the weight's"));
            }
            Ok(KernelGrad::Borrowed(gs, None, n, 1))
        }
        GradRef::RowSparse {
            indices,
            values,
            row_len,
        } => {
            check_device(op, w, values.ordinal())?;
            check_device(op, w, indices.ordinal())?;
            let gs = typed::<T>(op, values)?;
            let k = indices.host.len();
            if gs.len() != k * row_len {
                return Err(Error::format(
                    crate::SType::RowSparse,
                    format!(
                        "{k} rows of {row_len} need {} values, got {}",
                        k * row_len,
                        gs.len()
                    ),
                ));
            }
            if rows * row_len != n {
                return Err(Error::shape(
                    op,
                    format!("gradient rows of {row_len} values, the weight's {rows} rows hold {n}"),
                ));
            }
            // The kernels index the weight by these ids: sorted, unique, inside the weight
            // (checked on their host copy).
            crate::cpu::update::check_row_ids(op, &indices.host, rows)?;
            if lazy {
                return Ok(KernelGrad::Borrowed(
                    gs,
                    Some(indices.dev.as_ref()),
                    k * row_len,
                    row_len,
                ));
            }
            // Standard mode: every row updates, absent ones with a zero gradient.
            let mut dense = CudaStorage::alloc::<T>(&w.dev, op, n)?;
            if k * row_len > 0 {
                let f = w
                    .dev
                    .function("update.cu", kname("scatter_rows", T::SUFFIX))?;
                let (items, r64) = ((k * row_len) as u64, row_len as u64);
                let mut l = w.dev.stream.launch_builder(&f);
                l.arg(gs)
                    .arg(indices.dev.as_ref())
                    .arg(&mut dense)
                    .arg(&items)
                    .arg(&r64);
                // SAFETY: ids checked above to lie inside the weight's rows; `dense` holds them.
                unsafe { l.launch(grid(k * row_len)) }.map_err(driver_err(op))?;
            }
            Ok(KernelGrad::Owned(dense))
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn update_t<T: CudaElement>(
    w: &mut CudaStorage,
    rows: usize,
    grad: GradRef<'_, CudaStorage, CudaIndex>,
    states: &mut [&mut CudaStorage],
    sc: &UpdateScalars,
    rule: &UpdateRule,
    lazy: bool,
) -> Result<()> {
    let op = rule.name();
    let Some((code, h, nstates)) = rule_code(rule) else {
        return Err(not_ported(op, w.ordinal()));
    };
    if states.len() != nstates {
        return Err(Error::arg(
            op,
            format!("expects {nstates} state arrays, got {}", states.len()),
        ));
    }
    let n = w.len();
    for s in states.iter() {
        check_device(op, w, s.ordinal())?;
        if s.dtype() != T::DTYPE || s.len() != n {
            return Err(Error::shape(
                op,
                "states must match the weight's dtype and size",
            ));
        }
    }
    let g = prepare_grad::<T>(w, op, rows, grad, lazy)?;
    let (gs, ids, items, row_len) = match &g {
        KernelGrad::Borrowed(v, i, items, rl) => (*v, *i, *items, *rl),
        KernelGrad::Owned(v) => (v, None, n, 1),
    };
    if items == 0 {
        return Ok(());
    }
    let p = UpdateParams {
        lr: sc.lr,
        wd: sc.wd,
        rg: sc.rescale_grad,
        clip: sc.clip.unwrap_or(0.0),
        h0: h[0],
        h1: h[1],
        h2: h[2],
        has_clip: i32::from(sc.clip.is_some()),
        rule: code,
    };
    let dev = w.dev.clone();
    let f = dev.function("update.cu", kname("update", T::SUFFIX))?;
    let null = 0u64;
    let (items64, rl64, sparse) = (items as u64, row_len as u64, i32::from(ids.is_some()));
    let (first, rest) = states.split_at_mut(states.len().min(1));
    let s0 = match first.first_mut() {
        Some(s) => Some(s.make_mut::<T>(op)?),
        None => None,
    };
    let s1 = match rest.first_mut() {
        Some(s) => Some(s.make_mut::<T>(op)?),
        None => None,
    };
    let ws = w.make_mut::<T>(op)?;
    let mut l = dev.stream.launch_builder(&f);
    l.arg(ws);
    match s0 {
        Some(s) => l.arg(s),
        None => l.arg(&null),
    };
    match s1 {
        Some(s) => l.arg(s),
        None => l.arg(&null),
    };
    l.arg(gs);
    match ids {
        Some(i) => l.arg(i),
        None => l.arg(&null),
    };
    l.arg(&items64).arg(&rl64).arg(&sparse).arg(&p);
    // SAFETY: the weight and its states hold `n` elements (checked above); a dense gradient
    // holds `items = n`, a lazy row_sparse one `items` values whose ids (checked) address rows
    // of the weight; a state pointer the rule does not read is null.
    unsafe { l.launch(grid(items)) }.map_err(driver_err(op))?;
    Ok(())
}

impl UpdateOps for CudaStorage {
    fn update(
        &mut self,
        rows: usize,
        grad: GradRef<'_, Self, CudaIndex>,
        states: &mut [&mut Self],
        scalars: &UpdateScalars,
        rule: &UpdateRule,
        lazy: bool,
    ) -> Result<[f64; 2]> {
        match self.dtype() {
            DType::F32 => update_t::<f32>(self, rows, grad, states, scalars, rule, lazy)?,
            DType::F64 => update_t::<f64>(self, rows, grad, states, scalars, rule, lazy)?,
            _ => return Err(float_error(rule.name(), self)),
        }
        Ok([0.0; 2])
    }

    /// The elements at `range` in f64, reduced to the root of their sum of squares on the
    /// device, squared: accumulated in f64 as the CPU does.
    fn sum_sq_range(&self, range: Range<usize>) -> Result<f64> {
        let n = range.len();
        let part = self.copy_range(range.start, range.end)?.cast(DType::F64)?;
        let norm = part.reduce(&[n], &[0], ReduceOp::L2)?;
        Ok(norm.get_f64(0)?.powi(2))
    }

    fn scale_range(&mut self, range: Range<usize>, factor: f64) -> Result<()> {
        const OP: &str = "clip_global_norm";
        let scaled = self
            .copy_range(range.start, range.end)?
            .map(Map::MulScalar(factor))?;
        fn put<T: CudaElement>(w: &mut CudaStorage, at: usize, part: &CudaStorage) -> Result<()> {
            let src = typed::<T>(OP, part)?;
            if src.is_empty() {
                return Ok(());
            }
            let dev = w.dev.clone();
            let dst = w.make_mut::<T>(OP)?;
            let mut view = dst.slice_mut(at..at + src.len());
            dev.stream
                .memcpy_dtod(src, &mut view)
                .map_err(driver_err(OP))
        }
        match self.dtype() {
            DType::F32 => put::<f32>(self, range.start, &scaled),
            DType::F64 => put::<f64>(self, range.start, &scaled),
            _ => Err(float_error(OP, self)),
        }
    }
}
