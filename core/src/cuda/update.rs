//! The CUDA update family ([`UpdateOps`]): `kernels/update.cu`, one kernel per dtype whose
//! rule number selects MXNet's formula. Every [`UpdateRule`] is ported, each over a dense
//! gradient or a row_sparse one (lazy: only its rows; standard: the gradient made dense on the
//! device first, so absent rows see a zero gradient). `group_adagrad_update` has its own
//! kernel, one thread per row (its history is one value per row); `cocob_packed_update` reads
//! its five interleaved states through the shared kernel; LAMB's first pass writes each
//! element's `w^2` and `u^2` in f64 and sums them with the reduction kernel. Global-norm
//! clipping's two passes run as a reduction and a scale.

use std::ops::Range;

use cudarc::driver::{CudaSlice, DeviceRepr, PushKernelArg};

use super::elementwise::{float_error, kname, typed};
use super::index::CudaIndex;
use super::launch::{driver_err, grid};
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
    h: [f64; 8],
    has_clip: i32,
    rule: i32,
    has_clip_weights: i32,
    pad: i32,
}

// SAFETY: plain `repr(C)` numbers, laid out as the kernel's struct.
unsafe impl DeviceRepr for UpdateParams {}

/// How a rule's states are laid out: the state array count and each one's length.
#[derive(Clone, Copy, Debug, PartialEq)]
enum StateLayout {
    /// `count` arrays of the weight's size.
    PerElement(usize),
    /// One array of five values per element, interleaved (`cocob_packed_update`).
    Packed5,
    /// One array of one value per row (`group_adagrad_update`).
    PerRow,
}

/// What the kernel needs to know of a rule: its number, hyper-parameters, the state layout,
/// and the learning rate when the rule replaces the shared one (LAMB's second pass).
struct RuleCode {
    code: i32,
    h: [f64; 8],
    states: StateLayout,
    lr: Option<f64>,
}

/// `1 - b^t` in the weight's dtype, as the CPU computes FTML's bias corrections (the power
/// taken in that dtype), exact in the f64 the kernel rounds back.
fn one_minus_pow(dtype: DType, b: f64, t: u64) -> f64 {
    if dtype == DType::F32 {
        f64::from(1.0f32 - (b as f32).powf(t as f64 as f32))
    } else {
        1.0 - b.powf(t as f64)
    }
}

/// The kernel's description of `rule` for a weight of `dtype`. Every [`UpdateRule`] has one.
fn rule_code(rule: &UpdateRule, dtype: DType) -> RuleCode {
    use StateLayout::{Packed5, PerElement, PerRow};
    let hp = |v: &[f64]| {
        let mut h = [0.0; 8];
        h[..v.len()].copy_from_slice(v);
        h
    };
    // The weight clip of the rmsprop rules rides in h[7], its presence in a flag.
    let with_cw = |mut h: [f64; 8], cw: Option<f64>| {
        h[7] = cw.unwrap_or(0.0);
        h
    };
    let (code, h, states, lr) = match *rule {
        UpdateRule::Sgd => (0, hp(&[]), PerElement(0), None),
        UpdateRule::SgdMom { momentum } => (1, hp(&[momentum]), PerElement(1), None),
        UpdateRule::SignSgd => (2, hp(&[]), PerElement(0), None),
        UpdateRule::Adam {
            beta1,
            beta2,
            epsilon,
        } => (3, hp(&[beta1, beta2, epsilon]), PerElement(2), None),
        UpdateRule::AdamW {
            beta1,
            beta2,
            epsilon,
        } => (4, hp(&[beta1, beta2, epsilon]), PerElement(2), None),
        UpdateRule::AdaGrad { epsilon } => (5, hp(&[epsilon]), PerElement(1), None),
        UpdateRule::NagMom { momentum } => (6, hp(&[momentum]), PerElement(1), None),
        UpdateRule::Signum { momentum, wd_lh } => (7, hp(&[momentum, wd_lh]), PerElement(1), None),
        UpdateRule::Adamax { beta1, beta2 } => (8, hp(&[beta1, beta2]), PerElement(2), None),
        UpdateRule::Nadam {
            beta1,
            beta2,
            epsilon,
            d_g,
            d_m,
            d_v,
            c_g,
            c_m,
        } => (
            9,
            hp(&[beta1, beta2, epsilon, d_g, d_m, d_v, c_g, c_m]),
            PerElement(2),
            None,
        ),
        UpdateRule::AdaDelta { rho, epsilon } => (10, hp(&[rho, epsilon]), PerElement(2), None),
        UpdateRule::RmsProp {
            gamma1,
            epsilon,
            clip_weights,
        } => (
            11,
            with_cw(hp(&[gamma1, epsilon]), clip_weights),
            PerElement(1),
            None,
        ),
        UpdateRule::RmsPropAlex {
            gamma1,
            gamma2,
            epsilon,
            clip_weights,
        } => (
            12,
            with_cw(hp(&[gamma1, gamma2, epsilon]), clip_weights),
            PerElement(3),
            None,
        ),
        UpdateRule::Ftrl { lambda1, beta } => (13, hp(&[lambda1, beta]), PerElement(2), None),
        UpdateRule::GroupAdaGrad { epsilon } => (-1, hp(&[epsilon]), PerRow, None),
        UpdateRule::Cocob { alpha } => (14, hp(&[alpha]), PerElement(5), None),
        UpdateRule::CocobPacked { alpha } => (15, hp(&[alpha]), Packed5, None),
        UpdateRule::Ftml {
            beta1,
            beta2,
            epsilon,
            t,
        } => {
            let (c1, c2) = (
                one_minus_pow(dtype, beta1, t),
                one_minus_pow(dtype, beta2, t),
            );
            (
                16,
                hp(&[beta1, beta2, epsilon, c1, c2]),
                PerElement(3),
                None,
            )
        }
        UpdateRule::LambPhase1 {
            beta1,
            beta2,
            epsilon,
            d1,
            d2,
        } => (
            17,
            hp(&[beta1, beta2, epsilon, d1, d2]),
            PerElement(2),
            None,
        ),
        UpdateRule::LambPhase2 {
            epsilon,
            d1,
            d2,
            lr,
        } => (18, hp(&[epsilon, d1, d2]), PerElement(2), Some(lr)),
    };
    RuleCode {
        code,
        h,
        states,
        lr,
    }
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
) -> Result<[f64; 2]> {
    let op = rule.name();
    let rc = rule_code(rule, T::DTYPE);
    let n = w.len();
    let (count, state_len) = match rc.states {
        StateLayout::PerElement(k) => (k, n),
        StateLayout::Packed5 => (1, 5 * n),
        StateLayout::PerRow => (1, rows),
    };
    if states.len() != count {
        return Err(Error::arg(
            op,
            format!("expects {count} state arrays, got {}", states.len()),
        ));
    }
    for s in states.iter() {
        check_device(op, w, s.ordinal())?;
        if s.dtype() != T::DTYPE || s.len() != state_len {
            return Err(Error::shape(
                op,
                format!(
                    "states must match the weight's dtype and hold {state_len} values each, \
                     got {} of {}",
                    s.len(),
                    s.dtype().name()
                ),
            ));
        }
    }
    let p = UpdateParams {
        lr: rc.lr.unwrap_or(sc.lr),
        wd: sc.wd,
        rg: sc.rescale_grad,
        clip: sc.clip.unwrap_or(0.0),
        h: rc.h,
        has_clip: i32::from(sc.clip.is_some()),
        rule: rc.code,
        has_clip_weights: i32::from(matches!(
            *rule,
            UpdateRule::RmsProp {
                clip_weights: Some(_),
                ..
            } | UpdateRule::RmsPropAlex {
                clip_weights: Some(_),
                ..
            }
        )),
        pad: 0,
    };
    if rc.states == StateLayout::PerRow {
        group_adagrad_t::<T>(w, rows, grad, states, &p)?;
        return Ok([0.0; 2]);
    }
    let g = prepare_grad::<T>(w, op, rows, grad, lazy)?;
    let (gs, ids, items, row_len) = match &g {
        KernelGrad::Borrowed(v, i, items, rl) => (*v, *i, *items, *rl),
        KernelGrad::Owned(v) => (v, None, n, 1),
    };
    if items == 0 {
        return Ok([0.0; 2]);
    }
    let dev = w.dev.clone();
    let lamb1 = matches!(rule, UpdateRule::LambPhase1 { .. });
    // LAMB's first pass writes w^2 and u^2 per item in f64, summed below.
    let mut sq = if lamb1 {
        Some(CudaStorage::alloc::<f64>(&dev, op, 2 * items)?)
    } else {
        None
    };
    let f = dev.function("update.cu", kname("update", T::SUFFIX))?;
    let null = 0u64;
    let (items64, rl64, sparse) = (items as u64, row_len as u64, i32::from(ids.is_some()));
    let packed = i32::from(rc.states == StateLayout::Packed5);
    let mut st = states
        .iter_mut()
        .map(|s| s.make_mut::<T>(op))
        .collect::<Result<Vec<_>>>()?;
    let ws = w.make_mut::<T>(op)?;
    let mut l = dev.stream.launch_builder(&f);
    l.arg(ws);
    for s in st.iter_mut() {
        l.arg(&mut **s);
    }
    for _ in count.min(5)..5 {
        l.arg(&null);
    }
    l.arg(gs);
    match ids {
        Some(i) => l.arg(i),
        None => l.arg(&null),
    };
    l.arg(&items64).arg(&rl64).arg(&sparse).arg(&packed);
    match sq.as_mut() {
        Some(b) => l.arg(b),
        None => l.arg(&null),
    };
    l.arg(&p);
    // SAFETY: the weight and its states hold `n` elements (`5 n` packed; checked above); a
    // dense gradient holds `items = n`, a lazy row_sparse one `items` values whose ids
    // (checked) address rows of the weight; a state pointer the rule does not read is null;
    // `sq` holds `2 items` doubles when the rule writes it.
    unsafe { l.launch(grid(items)) }.map_err(driver_err(op))?;
    drop(l);
    match sq {
        Some(b) => {
            let sums = w.with(b).reduce(&[2, items], &[1], ReduceOp::Sum)?;
            Ok([sums.get_f64(0)?, sums.get_f64(1)?])
        }
        None => Ok([0.0; 2]),
    }
}

/// `group_adagrad_update`: one kernel thread per gradient row (a row_sparse gradient's rows
/// only, in either mode: an absent row's zero gradient would leave its weight and history as
/// they are, which the CPU skips too).
fn group_adagrad_t<T: CudaElement>(
    w: &mut CudaStorage,
    rows: usize,
    grad: GradRef<'_, CudaStorage, CudaIndex>,
    states: &mut [&mut CudaStorage],
    p: &UpdateParams,
) -> Result<()> {
    const OP: &str = "group_adagrad_update";
    let n = w.len();
    let g = prepare_grad::<T>(w, OP, rows, grad, true)?;
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let rl = n / rows;
    if rl * rows != n {
        return Err(Error::shape(
            OP,
            format!("{n} weight values in {rows} rows with {rows} row states"),
        ));
    }
    let (gs, ids, grows) = match &g {
        KernelGrad::Borrowed(v, Some(i), items, _) => (*v, Some(*i), items / rl),
        KernelGrad::Borrowed(v, None, _, _) => (*v, None, rows),
        KernelGrad::Owned(v) => (v, None, rows),
    };
    if grows == 0 {
        return Ok(());
    }
    let dev = w.dev.clone();
    let f = dev.function("update.cu", kname("group_adagrad", T::SUFFIX))?;
    let null = 0u64;
    let (grows64, rl64, sparse) = (grows as u64, rl as u64, i32::from(ids.is_some()));
    let [hist] = states else {
        return Err(Error::arg(OP, "expects 1 state array"));
    };
    let hs = hist.make_mut::<T>(OP)?;
    let ws = w.make_mut::<T>(OP)?;
    let mut l = dev.stream.launch_builder(&f);
    l.arg(ws).arg(hs).arg(gs);
    match ids {
        Some(i) => l.arg(i),
        None => l.arg(&null),
    };
    l.arg(&grows64).arg(&rl64).arg(&sparse).arg(p);
    // SAFETY: the weight holds `rows * rl` values and the history `rows` (checked by the
    // caller); the gradient holds `grows` rows of `rl` values, a sparse one's ids checked to
    // lie inside `0..rows`.
    unsafe { l.launch(grid(grows)) }.map_err(driver_err(OP))?;
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
            DType::F32 => update_t::<f32>(self, rows, grad, states, scalars, rule, lazy),
            DType::F64 => update_t::<f64>(self, rows, grad, states, scalars, rule, lazy),
            _ => Err(float_error(rule.name(), self)),
        }
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
