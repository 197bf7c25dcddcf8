//! The CPU kernels of the fused softmax cross-entropy (`ops::fused::softmax_ce_logits` against
//! dense target rows, `softmax_ce_ids` against class ids): each row of `classes` logits is
//! reduced and weighted while it is in cache, once for its loss and once more for its gradient,
//! where the composite (log_softmax, product with the target, sum, negation, and their
//! backwards) passes over the `(rows, classes)` block about ten times and allocates as often.
//!
//! A row's log-probabilities are formed as `log_softmax` forms them (`x - max - ln(sum exp(x -
//! max))`); the loss differs from the composite's only by rounding: the f32 exponentials are
//! the vectorized ones (`cpu::expf`, within 2 ulp) and the sums run in lanes.

use rayon::prelude::*;

use super::elementwise::PAR_THRESHOLD;
use super::{CpuStorage, HostElement};
use crate::dtype::{Element, Float};
use crate::error::{Error, Result};
use crate::float_dispatch;

const OP: &str = "softmax_ce_logits";
const OP_GRAD: &str = "softmax_ce_logits backward";

/// What the rows are scored against: a dense target row each (class distributions, one-hot
/// rows), or one class id each (checked whole and in range before any row reads it).
#[derive(Clone, Copy)]
enum Targets<'a, T> {
    Dense(&'a [T]),
    Ids(&'a [T]),
}

/// One row's target.
#[derive(Clone, Copy)]
enum Row<'a, T> {
    Dense(&'a [T]),
    Id(usize),
}

impl<'a, T: Float> Targets<'a, T> {
    /// The targets of the rows `r` (of `classes` each).
    fn rows(self, r: std::ops::Range<usize>, classes: usize) -> Targets<'a, T> {
        match self {
            Targets::Dense(t) => Targets::Dense(&t[r.start * classes..r.end * classes]),
            Targets::Ids(t) => Targets::Ids(&t[r]),
        }
    }

    /// The target of row `r`.
    #[inline(always)]
    fn row(self, r: usize, classes: usize) -> Row<'a, T> {
        match self {
            Targets::Dense(t) => Row::Dense(&t[r * classes..(r + 1) * classes]),
            Targets::Ids(t) => Row::Id(Element::to_f64(t[r]) as usize),
        }
    }

    /// Elements the targets of `rows` rows hold.
    fn len_for(self, rows: usize, classes: usize) -> usize {
        match self {
            Targets::Dense(_) => rows * classes,
            Targets::Ids(_) => rows,
        }
    }

    fn len(self) -> usize {
        match self {
            Targets::Dense(t) | Targets::Ids(t) => t.len(),
        }
    }
}

/// Every id a whole number in `[0, classes)` (what `check_class_ids` makes sure of; checked
/// again here, since an id is an index into its row).
fn check_ids<T: Float>(op: &'static str, ids: &[T], classes: usize) -> Result<()> {
    let bad = ids.iter().position(|v| {
        let f = Element::to_f64(*v);
        !(f.fract() == 0.0 && f >= 0.0 && f < classes as f64)
    });
    match bad {
        Some(k) => Err(Error::index(
            op,
            format!(
                "class id {} at position {k} is not a whole number in [0, {classes})",
                Element::to_f64(ids[k])
            ),
        )),
        None => Ok(()),
    }
}

/// Lanes of the row reductions: eight independent accumulators, so a row's max and sums
/// compile to SIMD (one accumulator is a chain of dependent adds that cannot).
const L: usize = 8;

/// `f` folded over `x` in [`L`] lanes from `init`, then the lanes and the tail in order (a
/// row shorter than two lanes' worth folds in order: the lanes would cost more than they save).
#[inline(always)]
fn fold_lanes<T: Float>(x: &[T], init: T, f: impl Fn(T, T) -> T) -> T {
    if x.len() < 2 * L {
        return x.iter().fold(init, |a, &v| f(a, v));
    }
    let mut acc = [init; L];
    let chunks = x.chunks_exact(L);
    let tail = chunks.remainder();
    for c in chunks {
        for k in 0..L {
            acc[k] = f(acc[k], c[k]);
        }
    }
    acc.iter().chain(tail).fold(init, |a, &v| f(a, v))
}

/// Elements of a row whose exponentials are written to the stack before they are summed.
const BLOCK: usize = 256;

/// The row's maximum and `sum(exp(x - max))` (exp by [`Float::exp_fast_nonpos`]: every
/// argument is at most 0, and f32 runs it vectorized). The exponentials of each block are
/// mapped into `buf`, then summed in lanes: a loop that maps and sums at once stays scalar.
#[inline(always)]
fn max_and_sum<T: Float>(x: &[T], buf: &mut [T; BLOCK]) -> (T, T) {
    let m = fold_lanes(x, T::neg_infinity(), |a, v| a.max(v));
    let mut s = T::zero();
    for c in x.chunks(BLOCK) {
        let e = &mut buf[..c.len()];
        for (o, &v) in e.iter_mut().zip(c) {
            *o = (v - m).exp_fast_nonpos();
        }
        s = s + fold_lanes(e, T::zero(), |a, v| a + v);
    }
    (m, s)
}

/// `-sum(t * log_softmax(x))` of one row, each log-probability `x - max - ln(sum)` as
/// `log_softmax` forms it.
#[inline(always)]
fn row_loss<T: Float>(x: &[T], t: Row<'_, T>, buf: &mut [T; BLOCK]) -> T {
    let (m, s) = max_and_sum(x, buf);
    let shift = m + s.ln();
    let t = match t {
        Row::Dense(t) => t,
        // The one-hot row's sum has one term.
        Row::Id(i) => return x.get(i).map_or(T::nan(), |&v| -(v - shift)),
    };
    if x.len() < 2 * L {
        let sum = x
            .iter()
            .zip(t)
            .fold(T::zero(), |a, (&v, &w)| a + (v - shift) * w);
        return -sum;
    }
    let mut acc = [T::zero(); L];
    let (xc, tc) = (x.chunks_exact(L), t.chunks_exact(L));
    let tail = xc.remainder().iter().zip(tc.remainder());
    for (a, b) in xc.zip(tc) {
        for k in 0..L {
            acc[k] = acc[k] + (a[k] - shift) * b[k];
        }
    }
    let sum = acc
        .iter()
        .copied()
        .chain(tail.map(|(&v, &w)| (v - shift) * w))
        .fold(T::zero(), |a, v| a + v);
    -sum
}

/// `g * (softmax(x) * sum(t) - t)` of one row into `d`: the exponentials written to `d`
/// first, then scaled in place (a class id's row: `t` one-hot, the same arithmetic).
#[inline(always)]
fn row_grad<T: Float>(x: &[T], t: Row<'_, T>, g: T, d: &mut [T]) {
    let m = fold_lanes(x, T::neg_infinity(), |a, v| a.max(v));
    for (o, &v) in d.iter_mut().zip(x) {
        *o = (v - m).exp_fast_nonpos();
    }
    let s = fold_lanes(d, T::zero(), |a, v| a + v);
    match t {
        Row::Dense(t) => {
            let k = fold_lanes(t, T::zero(), |a, v| a + v) / s;
            for (o, &w) in d.iter_mut().zip(t) {
                *o = g * (*o * k - w);
            }
        }
        Row::Id(i) => {
            let k = T::one() / s;
            let at_id = d.get(i).copied();
            for o in d.iter_mut() {
                *o = g * (*o * k);
            }
            if let (Some(o), Some(e)) = (d.get_mut(i), at_id) {
                *o = g * (e * k - T::one());
            }
        }
    }
}

/// The losses of the rows of `x` and `t` (`classes` each) into `out`, one per row.
#[inline(always)]
fn loss_rows<T: Float>(x: &[T], t: Targets<'_, T>, classes: usize, out: &mut [T]) {
    // The exponentials' stack buffer, made once for all the rows.
    let mut buf = [T::zero(); BLOCK];
    for (r, (o, xr)) in out.iter_mut().zip(x.chunks_exact(classes)).enumerate() {
        *o = row_loss(xr, t.row(r, classes), &mut buf);
    }
}

/// The gradients of the rows of `x` and `t` under `g` (one per row) into `out`.
#[inline(always)]
fn grad_rows<T: Float>(x: &[T], t: Targets<'_, T>, g: &[T], classes: usize, out: &mut [T]) {
    let rows = x.chunks_exact(classes).zip(g).enumerate();
    for (d, (r, (xr, &gr))) in out.chunks_exact_mut(classes).zip(rows) {
        row_grad(xr, t.row(r, classes), gr, d);
    }
}

/// [`loss_rows`] compiled for AVX2 + FMA (8 f32 lanes).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn loss_rows_avx2<T: Float>(x: &[T], t: Targets<'_, T>, classes: usize, out: &mut [T]) {
    loss_rows(x, t, classes, out)
}

/// [`grad_rows`] compiled for AVX2 + FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn grad_rows_avx2<T: Float>(
    x: &[T],
    t: Targets<'_, T>,
    g: &[T],
    classes: usize,
    out: &mut [T],
) {
    grad_rows(x, t, g, classes, out)
}

/// [`loss_rows`] in the widest copy this CPU runs.
fn loss_rows_best<T: Float>(x: &[T], t: Targets<'_, T>, classes: usize, out: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if super::elementwise::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        return unsafe { loss_rows_avx2(x, t, classes, out) };
    }
    loss_rows(x, t, classes, out)
}

/// [`grad_rows`] in the widest copy this CPU runs.
fn grad_rows_best<T: Float>(x: &[T], t: Targets<'_, T>, g: &[T], classes: usize, out: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if super::elementwise::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        return unsafe { grad_rows_avx2(x, t, g, classes, out) };
    }
    grad_rows(x, t, g, classes, out)
}

/// Rows per parallel block: about 8,192 elements of a block.
fn block_rows(classes: usize) -> usize {
    (8192 / classes.max(1)).max(1)
}

/// The operands' lengths against `classes`: the number of rows.
fn rows_of<T: Float>(
    op: &'static str,
    x: usize,
    t: Targets<'_, T>,
    classes: usize,
) -> Result<usize> {
    if classes == 0 || !x.is_multiple_of(classes) || t.len() != t.len_for(x / classes, classes) {
        return Err(Error::shape(
            op,
            format!(
                "logits of {x} and targets of {} elements are not rows of {classes} classes",
                t.len()
            ),
        ));
    }
    if let Targets::Ids(ids) = t {
        check_ids(op, ids, classes)?;
    }
    Ok(x / classes)
}

fn loss_into<T: Float>(x: &[T], t: Targets<'_, T>, classes: usize, out: &mut [T]) -> Result<()> {
    let rows = rows_of(OP, x.len(), t, classes)?;
    if out.len() != rows {
        return Err(Error::shape(
            OP,
            format!("{rows} rows, an output of {}", out.len()),
        ));
    }
    let br = block_rows(classes);
    if x.len() >= PAR_THRESHOLD && rows > br {
        out.par_chunks_mut(br).enumerate().for_each(|(b, o)| {
            let r = b * br..b * br + o.len();
            let k = r.start * classes..r.end * classes;
            loss_rows_best(&x[k], t.rows(r, classes), classes, o);
        });
    } else {
        loss_rows_best(x, t, classes, out);
    }
    Ok(())
}

fn grad_into<T: Float>(
    g: &[T],
    x: &[T],
    t: Targets<'_, T>,
    classes: usize,
    out: &mut [T],
) -> Result<()> {
    let rows = rows_of(OP_GRAD, x.len(), t, classes)?;
    if g.len() != rows || out.len() != x.len() {
        return Err(Error::shape(
            OP_GRAD,
            format!(
                "{rows} rows of {classes} classes, a gradient of {} and an output of {} elements",
                g.len(),
                out.len()
            ),
        ));
    }
    let br = block_rows(classes);
    if x.len() >= PAR_THRESHOLD && rows > br {
        out.par_chunks_mut(br * classes)
            .enumerate()
            .for_each(|(b, o)| {
                let r = b * br..b * br + o.len() / classes;
                let k = r.start * classes..r.end * classes;
                grad_rows_best(&x[k], t.rows(r.clone(), classes), &g[r], classes, o);
            });
    } else {
        grad_rows_best(x, t, g, classes, out);
    }
    Ok(())
}

/// Typed operand of `op`, of the dtype dispatched on.
fn src<'a, T: HostElement>(op: &'static str, x: &'a CpuStorage) -> Result<&'a [T]> {
    T::slice(x).ok_or_else(|| Error::dtype(op, "operands of different dtypes"))
}

/// `out` as `T`.
fn dst<'a, T: HostElement + crate::dtype::Element>(
    op: &'static str,
    out: &'a mut CpuStorage,
) -> Result<&'a mut [T]> {
    out.writable::<T>(op)?
        .ok_or_else(|| Error::dtype(op, "the output buffer is of another dtype"))
}

/// `t` as the targets of `x`'s rows: one class id per row when `ids`, else dense rows.
fn targets<T: Float>(t: &[T], ids: bool) -> Targets<'_, T> {
    if ids {
        Targets::Ids(t)
    } else {
        Targets::Dense(t)
    }
}

impl CpuStorage {
    /// The loss of each row of `classes` logits `self` against targets `t` of the same dtype:
    /// `-sum(t * log_softmax(x))`, one value per row; `t` holds a row of the logits' length
    /// each, or (`ids`) one class id per row, the place of its one-hot row's 1.
    pub(crate) fn softmax_ce(
        &self,
        t: &CpuStorage,
        classes: usize,
        ids: bool,
    ) -> Result<CpuStorage> {
        let mut out = CpuStorage::zeros(self.dtype(), self.len() / classes.max(1));
        self.softmax_ce_into(t, classes, ids, &mut out)?;
        Ok(out)
    }

    /// [`CpuStorage::softmax_ce`] into `out` (one element per row).
    pub(crate) fn softmax_ce_into(
        &self,
        t: &CpuStorage,
        classes: usize,
        ids: bool,
        out: &mut CpuStorage,
    ) -> Result<()> {
        float_dispatch!(self.dtype(), OP, T => {
            let (x, t) = (src::<T>(OP, self)?, src::<T>(OP, t)?);
            loss_into(x, targets(t, ids), classes, dst::<T>(OP, out)?)
        })
    }

    /// The logits' gradient of [`CpuStorage::softmax_ce`] for the head gradient `self` (one
    /// value per row): `g * (softmax(x) * sum(t) - t)` per row.
    pub(crate) fn softmax_ce_grad(
        &self,
        x: &CpuStorage,
        t: &CpuStorage,
        classes: usize,
        ids: bool,
    ) -> Result<CpuStorage> {
        let mut out = CpuStorage::zeros(self.dtype(), x.len());
        self.softmax_ce_grad_into(x, t, classes, ids, &mut out)?;
        Ok(out)
    }

    /// [`CpuStorage::softmax_ce_grad`] into `out` (the logits' length).
    pub(crate) fn softmax_ce_grad_into(
        &self,
        x: &CpuStorage,
        t: &CpuStorage,
        classes: usize,
        ids: bool,
        out: &mut CpuStorage,
    ) -> Result<()> {
        float_dispatch!(self.dtype(), OP_GRAD, T => {
            let (g, xs, ts) = (src::<T>(OP_GRAD, self)?, src::<T>(OP_GRAD, x)?, src::<T>(OP_GRAD, t)?);
            grad_into(g, xs, targets(ts, ids), classes, dst::<T>(OP_GRAD, out)?)
        })
    }
}
