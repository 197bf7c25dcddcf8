//! The CPU's reduction family ([`ReduceOps`]): folds over axes, arg-reductions, softmax and
//! the sort order along an axis. The operator variant is matched once, outside the loops, so
//! each arm runs its own monomorphized fold.
//!
//! Two fold strategies are kept because each is the fast one for its callers: [`fold_axes`]
//! (float sums: contiguous trailing segments, whole-row folds for leading axes, an odometer
//! otherwise) and [`reduce_axes`] (one axis at a time over the `[outer, n, inner]` view, so no
//! input is ever transposed or copied; a full reduction is one parallel fold over the flat
//! buffer, which is what lets `sum`/`argmax` of a 2^31-element u8 array run without a copy).

use std::cmp::Ordering;

use rayon::prelude::*;

use super::elementwise::PAR_THRESHOLD;
use super::{with_buffer, CpuStorage, HostElement};
use crate::dtype::{Element, Float};
use crate::error::{Error, Result};
use crate::float_dispatch;
use crate::ops::axis::{reduced_shape, split3};
use crate::storage::{ArgReduceOp, ReduceOp, ReduceOps, SoftmaxOp};

/// [`fold_axes`] written into `out` (the kept elements), for the axis patterns whose order
/// does not depend on the thread pool: everything on one thread (below [`PAR_THRESHOLD`]),
/// trailing axes (one sequential fold per output) and leading axes (rows folded in order).
/// Other patterns are an error (the planner gives them no planned form).
pub(crate) fn fold_axes_to<T: Copy + Send + Sync>(
    src: &[T],
    shape: &[usize],
    axes: &[usize],
    init: T,
    f: impl Fn(T, T) -> T + Sync + Send,
    out: &mut [T],
) -> Result<()> {
    let nd = shape.len();
    let n = src.len();
    let out_n = out.len();
    if out_n == 1 && n < PAR_THRESHOLD {
        out[0] = src.iter().fold(init, |a, &b| f(a, b));
        return Ok(());
    }
    let trailing = axes
        .iter()
        .enumerate()
        .all(|(i, &a)| a == nd - axes.len() + i);
    if trailing && !axes.is_empty() && out_n > 1 {
        let seg: usize = axes.iter().map(|&a| shape[a]).product();
        if seg == 0 {
            out.fill(init);
            return Ok(());
        }
        let red = |c: &[T]| c.iter().fold(init, |a, &b| f(a, b));
        if n >= PAR_THRESHOLD {
            out.par_iter_mut()
                .zip(src.par_chunks(seg))
                .for_each(|(o, c)| *o = red(c));
        } else {
            for (o, c) in out.iter_mut().zip(src.chunks(seg)) {
                *o = red(c);
            }
        }
        return Ok(());
    }
    let leading = axes.iter().enumerate().all(|(i, &a)| a == i);
    if leading && !axes.is_empty() && out_n > 1 {
        out.fill(init);
        for row in src.chunks_exact(out_n) {
            for (o, &x) in out.iter_mut().zip(row) {
                *o = f(*o, x);
            }
        }
        return Ok(());
    }
    Err(Error::arg(
        "sum",
        format!("no planned form sums axes {axes:?} of {shape:?}"),
    ))
}

/// Generic fold over `axes`: returns the values in keepdims layout (row-major over the kept
/// dims). `init` is the identity of `f`.
pub(crate) fn fold_axes<T: Copy + Send + Sync>(
    src: &[T],
    shape: &[usize],
    axes: &[usize],
    init: T,
    f: impl Fn(T, T) -> T + Sync + Send,
) -> Vec<T> {
    let nd = shape.len();
    let n = src.len();
    let kshape = reduced_shape(shape, axes, true);
    let out_n: usize = kshape.iter().product();
    if out_n == 1 {
        if n >= PAR_THRESHOLD {
            return vec![src
                .par_chunks(4096)
                .map(|c| c.iter().fold(init, |a, &b| f(a, b)))
                .reduce(|| init, &f)];
        }
        return vec![src.iter().fold(init, |a, &b| f(a, b))];
    }
    // Fast path: reducing only trailing axes -> contiguous segments.
    let trailing = axes
        .iter()
        .enumerate()
        .all(|(i, &a)| a == nd - axes.len() + i);
    if trailing && !axes.is_empty() {
        let seg: usize = axes.iter().map(|&a| shape[a]).product();
        if seg == 0 {
            return vec![init; out_n];
        }
        let red = |c: &[T]| c.iter().fold(init, |a, &b| f(a, b));
        return if n >= PAR_THRESHOLD {
            src.par_chunks(seg).map(red).collect()
        } else {
            src.chunks(seg).map(red).collect()
        };
    }
    // Fast path: reducing only leading axes (a bias gradient sums over the batch) -> fold whole
    // rows of the kept trailing block into the output, a vectorizable zip per row. Same
    // accumulation order as the odometer below, so results are bit-identical.
    let leading = axes.iter().enumerate().all(|(i, &a)| a == i);
    if leading && !axes.is_empty() && out_n > 0 {
        let mut out = vec![init; out_n];
        for row in src.chunks_exact(out_n) {
            for (o, &x) in out.iter_mut().zip(row) {
                *o = f(*o, x);
            }
        }
        return out;
    }
    // General path: odometer over the input, accumulating into the kept position.
    let mut ostride = vec![0usize; nd];
    let mut s = 1;
    for i in (0..nd).rev() {
        if !axes.contains(&i) {
            ostride[i] = s;
            s *= shape[i];
        }
    }
    let mut out = vec![init; out_n];
    let mut idx = vec![0usize; nd];
    let mut pos = 0usize;
    for &x in src {
        out[pos] = f(out[pos], x);
        for d in (0..nd).rev() {
            idx[d] += 1;
            pos += ostride[d];
            if idx[d] < shape[d] {
                break;
            }
            pos -= ostride[d] * shape[d];
            idx[d] = 0;
        }
    }
    out
}

/// Fold `src` viewed as `[outer, n, inner]` along the middle axis into `[outer, inner]`.
fn fold_axis<T, A>(
    src: &[T],
    (outer, n, inner): (usize, usize, usize),
    init: A,
    fold: &(impl Fn(A, T) -> A + Sync),
    combine: &(impl Fn(A, A) -> A + Sync),
) -> Vec<A>
where
    T: Copy + Sync,
    A: Copy + Send + Sync,
{
    if outer * inner == 1 {
        // Whole-buffer reduction: parallel chunked fold, then combine the partials.
        if src.len() >= PAR_THRESHOLD {
            let parts: Vec<A> = src
                .par_chunks(1 << 16)
                .map(|c| c.iter().fold(init, |a, &x| fold(a, x)))
                .collect();
            return vec![parts.into_iter().fold(init, combine)];
        }
        return vec![src.iter().fold(init, |a, &x| fold(a, x))];
    }
    let mut out = vec![init; outer * inner];
    let block = |(o, dst): (usize, &mut [A])| {
        let base = o * n * inner;
        for k in 0..n {
            let row = &src[base + k * inner..base + (k + 1) * inner];
            for (d, &x) in dst.iter_mut().zip(row) {
                *d = fold(*d, x);
            }
        }
    };
    if src.len() >= PAR_THRESHOLD && outer > 1 {
        out.par_chunks_mut(inner).enumerate().for_each(block);
    } else {
        out.chunks_mut(inner).enumerate().for_each(block);
    }
    out
}

/// Reduce over `axes` (sorted, unique): the first axis folds elements, later axes combine
/// partial results. Returns the values in keepdims layout.
fn reduce_axes<T, A>(
    src: &[T],
    shape: &[usize],
    axes: &[usize],
    init: A,
    fold: impl Fn(A, T) -> A + Sync,
    combine: impl Fn(A, A) -> A + Sync,
) -> Vec<A>
where
    T: Copy + Sync,
    A: Copy + Send + Sync,
{
    if axes.len() == shape.len() {
        return fold_axis(src, (1, src.len(), 1), init, &fold, &combine);
    }
    if axes.is_empty() {
        return src.iter().map(|&x| fold(init, x)).collect();
    }
    let mut cur_shape = shape.to_vec();
    let last = axes[axes.len() - 1];
    let mut acc = fold_axis(src, split3(&cur_shape, last), init, &fold, &combine);
    cur_shape[last] = 1;
    for &ax in axes[..axes.len() - 1].iter().rev() {
        acc = fold_axis(&acc, split3(&cur_shape, ax), init, &combine, &combine);
        cur_shape[ax] = 1;
    }
    acc
}

/// Max (`max`) or min over `ax`, any dtype; ties keep the earlier value.
fn typed_minmax<T: Element>(s: &[T], shape: &[usize], ax: &[usize], max: bool) -> Vec<T> {
    let pick = move |a: T, b: T| if (b > a) == max && b != a { b } else { a };
    // The identity is the first element; empty reductions are rejected before this point.
    reduce_axes(
        s,
        shape,
        ax,
        None,
        move |a: Option<T>, x| Some(a.map_or(x, |a| pick(a, x))),
        move |a, b| match (a, b) {
            (Some(a), Some(b)) => Some(pick(a, b)),
            (a, None) => a,
            (None, b) => b,
        },
    )
    .into_iter()
    .map(|v| v.unwrap_or_default())
    .collect()
}

/// A float reduction of `op` (the float-only variants, and max/min).
fn typed_float<T: Float>(s: &[T], shape: &[usize], ax: &[usize], r: ReduceOp) -> Vec<T> {
    let z = T::zero();
    match r {
        ReduceOp::Prod => reduce_axes(s, shape, ax, T::one(), |a, x| a * x, |a, b| a * b),
        ReduceOp::L1 => reduce_axes(s, shape, ax, z, |a, x: T| a + x.abs(), |a, b| a + b),
        ReduceOp::L2 => reduce_axes(s, shape, ax, z, |a, x: T| a + x * x, |a, b| a + b)
            .into_iter()
            .map(|v| v.sqrt())
            .collect(),
        ReduceOp::Max | ReduceOp::Min => typed_minmax(s, shape, ax, r == ReduceOp::Max),
        ReduceOp::Sum => fold_axes(s, shape, ax, z, |a, b| a + b),
    }
}

/// The i64 position of the max (`max`) or min of every line along the middle axis.
fn arg_kernel<T: Element>(
    src: &[T],
    (outer, n, inner): (usize, usize, usize),
    max: bool,
) -> Vec<i64> {
    // (value, index) pairs; `better` keeps the earlier index on ties.
    let better = move |a: (T, usize), b: (T, usize)| {
        let wins = if max { b.0 > a.0 } else { b.0 < a.0 };
        if wins || (b.0 == a.0 && b.1 < a.1) {
            b
        } else {
            a
        }
    };
    if outer * inner == 1 {
        let best = if src.len() >= PAR_THRESHOLD {
            src.par_chunks(1 << 16)
                .enumerate()
                .map(|(c, ch)| {
                    let base = c << 16;
                    ch.iter()
                        .enumerate()
                        .fold((ch[0], base), |acc, (j, &x)| better(acc, (x, base + j)))
                })
                .reduce_with(better)
                .expect("non-empty")
        } else {
            src.iter()
                .enumerate()
                .fold((src[0], 0), |acc, (j, &x)| better(acc, (x, j)))
        };
        return vec![best.1 as i64];
    }
    let mut out = vec![0i64; outer * inner];
    let block = |(o, dst): (usize, &mut [i64])| {
        let base = o * n * inner;
        let mut best: Vec<T> = src[base..base + inner].to_vec();
        for k in 1..n {
            let row = &src[base + k * inner..base + (k + 1) * inner];
            for ((b, d), &x) in best.iter_mut().zip(dst.iter_mut()).zip(row) {
                if if max { x > *b } else { x < *b } {
                    *b = x;
                    *d = k as i64;
                }
            }
        }
    };
    if src.len() >= PAR_THRESHOLD && outer > 1 {
        out.par_chunks_mut(inner).enumerate().for_each(block);
    } else {
        out.chunks_mut(inner).enumerate().for_each(block);
    }
    out
}

/// Softmax (or log-softmax) of every line along the middle axis of `[outer, n, inner]`.
fn softmax_kernel<T: Float>(src: &[T], dims: (usize, usize, usize), log: bool) -> Vec<T> {
    let mut out = vec![T::zero(); src.len()];
    softmax_kernel_into(src, dims, log, &mut out);
    out
}

/// The loops of [`softmax_kernel`] writing into `out` (of `src`'s length; every element is
/// written), so a planned graph's buffer holds the operator's bits.
fn softmax_kernel_into<T: Float>(
    src: &[T],
    (outer, n, inner): (usize, usize, usize),
    log: bool,
    out: &mut [T],
) {
    if src.is_empty() {
        return;
    }
    let block = |(o, dst): (usize, &mut [T])| {
        let s = &src[o * n * inner..(o + 1) * n * inner];
        for i in 0..inner {
            let mut m = T::neg_infinity();
            for k in 0..n {
                m = m.max(s[k * inner + i]);
            }
            let mut sum = T::zero();
            for k in 0..n {
                let e = (s[k * inner + i] - m).exp();
                dst[k * inner + i] = e;
                sum = sum + e;
            }
            if log {
                let lse = sum.ln();
                for k in 0..n {
                    dst[k * inner + i] = s[k * inner + i] - m - lse;
                }
            } else {
                for k in 0..n {
                    dst[k * inner + i] = dst[k * inner + i] / sum;
                }
            }
        }
    };
    if src.len() >= PAR_THRESHOLD && outer > 1 {
        out.par_chunks_mut(n * inner).enumerate().for_each(block);
    } else {
        out.chunks_mut(n * inner).enumerate().for_each(block);
    }
}

/// The order sort, argsort and topk use: by value (NaN equal to everything), descending when
/// not `ascending`.
fn value_order<T: Element>(a: T, b: T, ascending: bool) -> Ordering {
    let o = a.partial_cmp(&b).unwrap_or(Ordering::Equal);
    if ascending {
        o
    } else {
        o.reverse()
    }
}

/// Up to this `k`, a top-k keeps its winners in a sorted list of `k` while it scans a line,
/// instead of listing the line's `n` positions (16 GiB for a line of 2^31).
const SMALL_K: usize = 64;

/// The `k < n` first positions of `0..n` under `by` (a total order), in order, found in one
/// scan with `O(k)` memory: most elements lose against the current `k`-th and cost one
/// comparison.
fn select_small(n: usize, k: usize, by: impl Fn(&usize, &usize) -> Ordering) -> Vec<usize> {
    let mut best: Vec<usize> = Vec::with_capacity(k + 1);
    for p in 0..n {
        if best.len() == k {
            match best.last() {
                Some(last) if by(&p, last) == Ordering::Less => {
                    best.pop();
                }
                _ => continue,
            }
        }
        let at = best.partition_point(|q| by(q, &p) == Ordering::Less);
        best.insert(at, p);
    }
    best
}

/// For every line along the middle axis of `[outer, n, inner]`, the positions of its `k` first
/// elements in sorted order, laid out as `[outer, k, inner]`. Ties go to the lower position,
/// which makes the order total, so the unstable sorts below give the stable result.
fn argsort_kernel<T: Element>(
    src: &[T],
    (outer, n, inner): (usize, usize, usize),
    k: usize,
    ascending: bool,
) -> Vec<i64> {
    let mut out = vec![0i64; outer * k * inner];
    if out.is_empty() {
        return out;
    }
    let block = |(o, dst): (usize, &mut [i64])| {
        let s = &src[o * n * inner..(o + 1) * n * inner];
        let mut idx: Vec<usize> = Vec::new();
        for i in 0..inner {
            let key = |p: usize| s[p * inner + i];
            let by = |a: &usize, b: &usize| value_order(key(*a), key(*b), ascending).then(a.cmp(b));
            if inner == 1 && k == n {
                // A whole contiguous line: sorted in the output itself, with no second list.
                for (j, d) in dst.iter_mut().enumerate() {
                    *d = j as i64;
                }
                dst.sort_unstable_by(|a, b| by(&(*a as usize), &(*b as usize)));
                continue;
            }
            if k < n && k <= SMALL_K {
                for (j, p) in select_small(n, k, by).into_iter().enumerate() {
                    dst[j * inner + i] = p as i64;
                }
                continue;
            }
            idx.clear();
            idx.extend(0..n);
            if k < n {
                // Partial selection first, then order the k winners.
                idx.select_nth_unstable_by(k, by);
                idx.truncate(k);
            }
            idx.sort_unstable_by(by);
            for (j, &p) in idx.iter().enumerate() {
                dst[j * inner + i] = p as i64;
            }
        }
    };
    if src.len() >= PAR_THRESHOLD && outer > 1 {
        out.par_chunks_mut(k * inner).enumerate().for_each(block);
    } else {
        out.chunks_mut(k * inner).enumerate().for_each(block);
    }
    out
}

/// Every line along the middle axis of `[outer, n, inner]` sorted (stable), values only: what
/// `sort` returns when no gradient needs the positions, without the 8 bytes of position per
/// element that the argsort route holds.
fn sort_lines<T: Element>(
    src: &[T],
    (outer, n, inner): (usize, usize, usize),
    ascending: bool,
) -> Vec<T> {
    let mut out = src.to_vec();
    if out.is_empty() {
        return out;
    }
    let cmp = |a: &T, b: &T| value_order(*a, *b, ascending);
    let block = |(o, dst): (usize, &mut [T])| {
        if inner == 1 {
            dst.sort_by(cmp);
            return;
        }
        let s = &src[o * n * inner..(o + 1) * n * inner];
        let mut line: Vec<T> = Vec::with_capacity(n);
        for i in 0..inner {
            line.clear();
            line.extend((0..n).map(|p| s[p * inner + i]));
            line.sort_by(cmp);
            for (p, &v) in line.iter().enumerate() {
                dst[p * inner + i] = v;
            }
        }
    };
    if src.len() >= PAR_THRESHOLD && outer > 1 {
        out.par_chunks_mut(n * inner).enumerate().for_each(block);
    } else {
        out.chunks_mut(n * inner).enumerate().for_each(block);
    }
    out
}

impl CpuStorage {
    /// See [`Storage::sort_values`](crate::storage::Storage::sort_values).
    pub(crate) fn sort_values(&self, dims: (usize, usize, usize), ascending: bool) -> CpuStorage {
        with_buffer!(self, s => HostElement::into_buffer(sort_lines(s.as_slice(), dims, ascending)))
    }
}

/// Exact widening to i64 for the integer sum (f64 would lose i64 values past 2^53).
trait AsI64: Copy {
    fn as_i64(self) -> i64;
}
macro_rules! as_i64 {
    ($($t:ty),*) => {$(impl AsI64 for $t { #[inline] fn as_i64(self) -> i64 { self as i64 } })*};
}
as_i64!(f32, f64, i64, i32, u8);
// Half arrays take the float path; these exist because `with_buffer!` instantiates every dtype.
impl AsI64 for half::f16 {
    fn as_i64(self) -> i64 {
        self.to_f64() as i64
    }
}
impl AsI64 for half::bf16 {
    fn as_i64(self) -> i64 {
        self.to_f64() as i64
    }
}

impl ReduceOps for CpuStorage {
    fn reduce(&self, shape: &[usize], axes: &[usize], op: ReduceOp) -> Result<Self> {
        crate::cpu::half::via_f32!(x = self => x.reduce(shape, axes, op));
        let dtype = self.dtype();
        match op {
            // Integer sums accumulate exactly in i64 whatever the element type.
            ReduceOp::Sum if !dtype.is_float() => Ok(i64::into_buffer(with_buffer!(self, s => {
                reduce_axes(s.as_slice(), shape, axes, 0i64, |acc, x| acc.wrapping_add(x.as_i64()), |p, q| p.wrapping_add(q))
            }))),
            // Max and min only compare, so every dtype has them.
            ReduceOp::Max | ReduceOp::Min if !dtype.is_float() => Ok(with_buffer!(self, s => {
                HostElement::into_buffer(typed_minmax(s.as_slice(), shape, axes, op == ReduceOp::Max))
            })),
            _ => Ok(float_dispatch!(dtype, op.name(), T => {
                T::into_buffer(typed_float(T::slice(self).unwrap(), shape, axes, op))
            })),
        }
    }

    fn arg_reduce(&self, dims: (usize, usize, usize), op: ArgReduceOp) -> Result<Self> {
        Ok(i64::into_buffer(with_buffer!(self, s => {
            arg_kernel(s.as_slice(), dims, op == ArgReduceOp::Max)
        })))
    }

    fn softmax(&self, dims: (usize, usize, usize), op: SoftmaxOp) -> Result<Self> {
        crate::cpu::half::via_f32!(x = self => x.softmax(dims, op));
        Ok(float_dispatch!(self.dtype(), op.name(), T => {
            T::into_buffer(softmax_kernel(T::slice(self).unwrap(), dims, op == SoftmaxOp::LogSoftmax))
        }))
    }

    fn softmax_into(
        &self,
        dims: (usize, usize, usize),
        op: SoftmaxOp,
        out: &mut Self,
    ) -> Result<()> {
        if self.dtype() != out.dtype() {
            return Err(Error::dtype_mismatch(op.name(), self.dtype(), out.dtype()));
        }
        float_dispatch!(self.dtype(), op.name(), T => {
            let src = T::slice(self).unwrap();
            let dst = out.writable::<T>(op.name())?.unwrap();
            if dst.len() != src.len() {
                return Err(Error::shape(
                    op.name(),
                    format!("output buffer holds {} elements, the input {}", dst.len(), src.len()),
                ));
            }
            softmax_kernel_into(src, dims, op == SoftmaxOp::LogSoftmax, dst)
        });
        Ok(())
    }

    fn argsort(&self, dims: (usize, usize, usize), k: usize, ascending: bool) -> Result<Self> {
        Ok(i64::into_buffer(with_buffer!(self, s => {
            argsort_kernel(s.as_slice(), dims, k, ascending)
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::fold_axes;

    #[test]
    fn leading_axes_fast_path_matches_a_direct_sum() {
        // (3, 4, 5): reduce axis 0, then axes 0 and 1 (the row-fold fast path), checked
        // against explicit loops; and a zero-sized kept dim.
        let shape = [3usize, 4, 5];
        let src: Vec<f64> = (0..60).map(|i| (i * 7 % 11) as f64 - 3.5).collect();
        let at = |a: usize, b: usize, c: usize| src[(a * 4 + b) * 5 + c];
        let s0 = fold_axes(&src, &shape, &[0], 0.0, |a, b| a + b);
        for b in 0..4 {
            for c in 0..5 {
                assert_eq!(s0[b * 5 + c], (0..3).map(|a| at(a, b, c)).sum::<f64>());
            }
        }
        let s01 = fold_axes(&src, &shape, &[0, 1], 0.0, |a, b| a + b);
        assert_eq!(s01.len(), 5);
        for (c, &got) in s01.iter().enumerate() {
            let want: f64 = (0..3)
                .flat_map(|a| (0..4).map(move |b| (a, b)))
                .map(|(a, b)| at(a, b, c))
                .sum();
            assert_eq!(got, want);
        }
        assert!(fold_axes::<f64>(&[], &[2, 0], &[0], 0.0, |a, b| a + b).is_empty());
    }
}
