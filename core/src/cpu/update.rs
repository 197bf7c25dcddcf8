//! The loop every update operator shares: walk the weight (and its state arrays) in spans
//! that line up with the gradient, in parallel, without copying anything.
//!
//! A kernel sees `(weight span, gradient span, state spans)`; the gradient span is `None` where
//! the gradient is implicitly zero (rows absent from a row_sparse gradient in standard mode).
//! - dense gradient: fixed-size chunks of the flat arrays;
//! - row_sparse gradient, lazy: exactly the gradient's rows — nothing else is read or written;
//! - row_sparse gradient, standard: every row, runs of absent rows merged into one span.

use std::sync::Arc;

use rayon::prelude::*;

use super::CpuStorage;
use crate::error::{Error, Result};
use crate::storage::GradRef;
use crate::{Float, SType};

/// Elements per parallel task: large enough to amortise scheduling, small enough to balance.
const CHUNK: usize = 16 * 1024;
/// Below this many elements the update runs on the calling thread.
const PAR_MIN: usize = 128 * 1024;

/// How many row updates ahead the lazy row_sparse path prefetches weight and state rows.
const PREFETCH_AHEAD: usize = 4;

/// Hint the cache to load `len` elements at `base + start` (no effect off x86_64). Prefetching
/// never faults, so the only requirement is that the address arithmetic stays in bounds, which
/// the caller guarantees by passing a row id checked against the weight's rows.
#[inline(always)]
fn prefetch_span<T>(base: *mut T, start: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let bytes = len * std::mem::size_of::<T>();
        // SAFETY: `start + len` lies within the allocation (checked row id); a prefetch of a
        // valid address has no side effects.
        unsafe {
            let p = base.add(start) as *const i8;
            let mut off = 0;
            while off < bytes {
                _mm_prefetch(p.add(off), _MM_HINT_T0);
                off += 64;
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (base, start, len);
}

/// A raw pointer that may cross threads. Safety rests on the driver handing every task a
/// disjoint range of rows/elements (row_sparse indices are checked to be sorted and unique).
#[derive(Clone, Copy)]
struct Ptr<T>(*mut T);
unsafe impl<T> Send for Ptr<T> {}
unsafe impl<T> Sync for Ptr<T> {}
impl<T> Ptr<T> {
    /// # Safety
    /// `start + len` must lie within the allocation and no other live slice may overlap.
    #[allow(clippy::mut_from_ref)]
    unsafe fn span<'a>(&self, start: usize, len: usize) -> &'a mut [T] {
        std::slice::from_raw_parts_mut(self.0.add(start), len)
    }
    /// Prefetch `len` elements from `start` (a method, so closures capture the `Sync` wrapper
    /// rather than the raw pointer field).
    #[inline(always)]
    fn prefetch(&self, start: usize, len: usize) {
        prefetch_span(self.0, start, len);
    }
}

fn for_each(n_tasks: usize, work: usize, min_len: usize, body: impl Fn(usize) + Sync + Send) {
    if work >= PAR_MIN && n_tasks > 1 {
        (0..n_tasks)
            .into_par_iter()
            .with_min_len(min_len.max(1))
            .for_each(body);
    } else {
        (0..n_tasks).for_each(body);
    }
}

/// Whether row ids are strictly ascending and inside `0..rows`, in one branch-free pass LLVM
/// vectorizes (strictly ascending, then only the ends need a range test): a per-id loop with
/// three tests and an early exit per id was ~7 instructions per row of a lazy row_sparse step.
/// The checks of row ids run this for the common valid case, and look for the first
/// offending id only when it fails.
pub(crate) fn ids_sorted_below(idx: &[i64], rows: usize) -> bool {
    let ascending = idx
        .iter()
        .zip(idx.iter().skip(1))
        .fold(true, |ok, (a, b)| ok & (a < b));
    let in_range = match (idx.first(), idx.last()) {
        (Some(&first), Some(&last)) => first >= 0 && (last as u64) < rows as u64,
        _ => true,
    };
    ascending && in_range
}

/// Check a row_sparse gradient's row ids: sorted, unique, inside `0..rows`.
pub(crate) fn check_row_ids(op: &'static str, idx: &[i64], rows: usize) -> Result<()> {
    if ids_sorted_below(idx, rows) {
        return Ok(());
    }
    // Find the first offending id for the message.
    let mut prev: i64 = -1;
    for (i, &r) in idx.iter().enumerate() {
        if r <= prev || r < 0 || r as u64 >= rows as u64 {
            return Err(Error::index(
                op,
                format!(
                    "row_sparse gradient row id {r} at position {i} is out of order, repeated \
                     or outside 0..{rows}"
                ),
            ));
        }
        prev = r;
    }
    Ok(())
}

/// A gradient as typed host slices, checked against the weight (see [`host_grad`]).
pub(crate) enum HostGrad<'a, T> {
    /// As many values as the weight.
    Dense(&'a [T]),
    /// Sorted unique row ids inside the weight's rows and `idx.len() * row_len` values.
    RowSparse {
        /// Row ids.
        idx: &'a [i64],
        /// The stored rows.
        vals: &'a [T],
        /// Elements per row (the weight's too).
        row_len: usize,
    },
}

/// The gradient's typed values, checked for the spans written from them: a dense one holds
/// the weight's `n` values; a row_sparse one `rows x row_len` of them, rows as long as the
/// weight's (`n` values in `rows` rows), and ids sorted, unique and inside `0..rows`. The
/// operators check shapes before they get here, but the raw spans below must not depend on a
/// check made elsewhere, and a row_sparse array built unchecked may hold fewer values than its
/// shape says.
#[inline]
pub(crate) fn host_grad<'a, T: Float>(
    op: &'static str,
    grad: GradRef<'a, CpuStorage, Arc<Vec<i64>>>,
    n: usize,
    rows: usize,
    dtype_err: impl Fn() -> Error,
) -> Result<HostGrad<'a, T>> {
    match grad {
        GradRef::Dense(g) => {
            let g = g.as_slice::<T>().ok_or_else(dtype_err)?;
            if g.len() != n {
                return Err(Error::shape(op, "gradient size differs from the weight's"));
            }
            Ok(HostGrad::Dense(g))
        }
        GradRef::RowSparse {
            indices,
            values,
            row_len: rl,
        } => {
            let k = indices.len();
            let gd = values.as_slice::<T>().ok_or_else(dtype_err)?;
            if gd.len() != k * rl {
                return Err(Error::format(
                    SType::RowSparse,
                    format!("{k} rows of {rl} need {} values, got {}", k * rl, gd.len()),
                ));
            }
            if rows * rl != n {
                return Err(Error::shape(
                    op,
                    format!("gradient rows of {rl} values, the weight's {rows} rows hold {n}"),
                ));
            }
            check_row_ids(op, indices, rows)?;
            Ok(HostGrad::RowSparse {
                idx: indices,
                vals: gd,
                row_len: rl,
            })
        }
    }
}

/// Run `f` over matching spans of the weight `w` (`rows` rows), the gradient and the `N`
/// `states` (each `w.len()` elements, distinct buffers), in place. `lazy` selects the
/// row_sparse semantics (ignored for a dense gradient).
pub(crate) fn apply_chunks<T, const N: usize, F>(
    w: &mut [T],
    rows: usize,
    grad: &HostGrad<'_, T>,
    states: [&mut [T]; N],
    lazy: bool,
    f: F,
) where
    T: Float,
    F: Fn(&mut [T], Option<&[T]>, [&mut [T]; N]) + Sync + Send,
{
    let n = w.len();
    let wp = Ptr(w.as_mut_ptr());
    let sp = states.map(|s| Ptr(s.as_mut_ptr()));
    // SAFETY (all `span` calls below): every task receives a range of its own; ranges come from
    // disjoint chunks or from sorted unique row ids checked in `host_grad`, and lie inside
    // `0..n`, the length of the weight and of every state (checked by the caller).
    let spans =
        |start: usize, len: usize| unsafe { (wp.span(start, len), sp.map(|p| p.span(start, len))) };

    match *grad {
        HostGrad::Dense(g) => {
            let tasks = n.div_ceil(CHUNK);
            for_each(tasks, n, 1, |c| {
                let s = c * CHUNK;
                let e = (s + CHUNK).min(n);
                let (w, st) = spans(s, e - s);
                f(w, Some(&g[s..e]), st);
            });
        }
        HostGrad::RowSparse {
            idx,
            vals: gd,
            row_len: rl,
        } => {
            let k = idx.len();
            if rl == 0 {
                return;
            }
            if lazy {
                // The forward pass of the same step read these weight rows, but they are prefetched
                // again anyway: skipping that when they should still be in L2 saved ~3.8K
                // instructions per tutorial step in the VM's fast state, and cost ~15% of the step
                // in its slow state (interleaved A/B, 6 pairs: 4.76 vs 4.11 ms per epoch), where
                // the rows no longer are in cache by the time the optimizer runs.
                for_each(k, k * rl, CHUNK / rl, |i| {
                    // The touched rows are scattered over the whole weight, so each one is a
                    // cache miss; ask for the rows a few updates ahead while this one computes.
                    if let Some(&ahead) = idx.get(i + PREFETCH_AHEAD) {
                        let at = ahead as usize * rl;
                        wp.prefetch(at, rl);
                        for p in &sp {
                            p.prefetch(at, rl);
                        }
                    }
                    let row = idx[i] as usize;
                    let (w, st) = spans(row * rl, rl);
                    f(w, Some(&gd[i * rl..(i + 1) * rl]), st);
                });
            } else {
                let per = (CHUNK / rl).max(1);
                let tasks = rows.div_ceil(per);
                for_each(tasks, n, 1, |b| {
                    let r0 = b * per;
                    let r1 = (r0 + per).min(rows);
                    let mut p = idx.partition_point(|&x| (x as usize) < r0);
                    let mut cur = r0;
                    while cur < r1 {
                        if p < k && idx[p] as usize == cur {
                            let (w, st) = spans(cur * rl, rl);
                            f(w, Some(&gd[p * rl..(p + 1) * rl]), st);
                            p += 1;
                            cur += 1;
                        } else {
                            let next = if p < k { (idx[p] as usize).min(r1) } else { r1 };
                            let (w, st) = spans(cur * rl, (next - cur) * rl);
                            f(w, None, st);
                            cur = next;
                        }
                    }
                });
            }
        }
    }
}

/// [`apply_chunks`] for a stateless update whose present-gradient case is `w = f(w, g)` per
/// element (`absent` handles the spans a standard row_sparse update visits without gradient).
/// Updates too small for the thread pool skip the span machinery: a dense gradient is one
/// [`crate::ops::zip_assign`] over the whole weight, a lazy row_sparse one a single
/// [`crate::ops::zip_assign_rows`] call instead of a closure, an AVX2 dispatch and a
/// loop set-up per row. In the sparse tutorial's step that is ~5K instructions fewer for the
/// 100 rows of the first layer and ~0.7K for the five small dense parameters (callgrind).
pub(crate) fn apply_zip<T, F, Z>(
    w: &mut [T],
    rows: usize,
    grad: &HostGrad<'_, T>,
    lazy: bool,
    f: F,
    absent: Z,
) -> Result<()>
where
    T: Float,
    F: Fn(T, T) -> T + Copy + Sync + Send,
    Z: Fn(&mut [T]) + Sync + Send,
{
    match *grad {
        HostGrad::RowSparse { idx, vals, row_len } if lazy && idx.len() * row_len < PAR_MIN => {
            return crate::ops::zip_assign_rows(w, row_len, idx, vals, f);
        }
        HostGrad::Dense(g) if g.len() < PAR_MIN => {
            crate::ops::zip_assign(w, g, f);
            return Ok(());
        }
        _ => {}
    }
    apply_chunks::<T, 0, _>(w, rows, grad, [], lazy, |w, g, []| match g {
        Some(g) => crate::ops::zip_assign(w, g, f),
        None => absent(w),
    });
    Ok(())
}

/// The span loop of a rule whose state holds one value per row (GroupAdaGrad's history):
/// `k(weight row, gradient row, the row's state)` for every row of a dense gradient, for the
/// gradient's rows of a row_sparse one in lazy mode, and for every row in standard mode, the
/// gradient row `None` where it is implicitly zero. Rows are handed out whole (a row's state
/// depends on all of its elements), in parallel when the update is large.
///
/// The caller has checked `state.len() == rows`; the row length is `w.len() / rows`, checked
/// here against the weight and against a row_sparse gradient's rows.
pub(crate) fn apply_rows<T, K>(
    op: &'static str,
    w: &mut [T],
    rows: usize,
    grad: &HostGrad<'_, T>,
    state: &mut [T],
    lazy: bool,
    k: K,
) -> Result<()>
where
    T: Float,
    K: Fn(&mut [T], Option<&[T]>, &mut T) + Sync + Send,
{
    let n = w.len();
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let rl = n / rows;
    if rl * rows != n || state.len() != rows {
        return Err(Error::shape(
            op,
            format!(
                "{n} weight values in {rows} rows with {} row states",
                state.len()
            ),
        ));
    }
    let wp = Ptr(w.as_mut_ptr());
    let sp = Ptr(state.as_mut_ptr());
    // SAFETY (every `row` call below): each task owns the rows it is given (disjoint row
    // blocks, or sorted unique row ids checked in `host_grad`), all inside `0..rows`, and the
    // weight holds `rows * rl` values and the state `rows` (checked above).
    let row = |r: usize| unsafe { (wp.span(r * rl, rl), &mut sp.span(r, 1)[0]) };
    let per = (CHUNK / rl).max(1);
    match *grad {
        HostGrad::Dense(g) => {
            for_each(rows.div_ceil(per), n, 1, |b| {
                for r in b * per..((b + 1) * per).min(rows) {
                    let (w, h) = row(r);
                    k(w, Some(&g[r * rl..(r + 1) * rl]), h);
                }
            });
        }
        HostGrad::RowSparse { idx, vals, row_len } => {
            if row_len != rl {
                return Err(Error::shape(
                    op,
                    format!("gradient rows of {row_len} values, the weight's of {rl}"),
                ));
            }
            let gk = idx.len();
            if lazy {
                for_each(gk, gk * rl, per, |i| {
                    let (w, h) = row(idx[i] as usize);
                    k(w, Some(&vals[i * rl..(i + 1) * rl]), h);
                });
            } else {
                for_each(rows.div_ceil(per), n, 1, |b| {
                    let (r0, r1) = (b * per, ((b + 1) * per).min(rows));
                    let mut p = idx.partition_point(|&x| (x as usize) < r0);
                    for r in r0..r1 {
                        let (w, h) = row(r);
                        if p < gk && idx[p] as usize == r {
                            k(w, Some(&vals[p * rl..(p + 1) * rl]), h);
                            p += 1;
                        } else {
                            k(w, None, h);
                        }
                    }
                });
            }
        }
    }
    Ok(())
}

/// The span loop of a rule whose `K` states of an element lie side by side in one array
/// (`state[K*j..K*j + K]` belongs to element `j` of the weight): `k(w, g, states)` per element,
/// `g = 0` where the gradient is implicitly zero. One array instead of `K` means one random
/// access per touched row instead of `K` (COCOB's five states: a lazy step over rows scattered
/// through a large table was a cache miss per state per row).
///
/// The caller has checked `state.len() == K * w.len()`.
pub(crate) fn apply_packed<T, const K: usize, F>(
    w: &mut [T],
    rows: usize,
    grad: &HostGrad<'_, T>,
    state: &mut [T],
    lazy: bool,
    k: F,
) where
    T: Float,
    F: Fn(&mut T, T, &mut [T; K]) + Sync + Send,
{
    debug_assert_eq!(state.len(), K * w.len());
    let n = w.len();
    let wp = Ptr(w.as_mut_ptr());
    let sp = Ptr(state.as_mut_ptr());
    // SAFETY (every `spans` call below): each task gets elements `start..start + len` of its
    // own (disjoint chunks, or rows from sorted unique ids checked in `host_grad`) inside
    // `0..n`; the state holds `K * n` values (checked by the caller).
    let spans =
        |start: usize, len: usize| unsafe { (wp.span(start, len), sp.span(K * start, K * len)) };
    let run = |w: &mut [T], g: Option<&[T]>, st: &mut [T]| {
        // Exact chunks of `K` always convert (the `expect` compiles away).
        let groups = st
            .chunks_exact_mut(K)
            .map(|c| <&mut [T; K]>::try_from(c).expect("a chunk of K states"));
        match g {
            Some(g) => {
                for ((wj, &gj), sj) in w.iter_mut().zip(g).zip(groups) {
                    k(wj, gj, sj);
                }
            }
            None => {
                for (wj, sj) in w.iter_mut().zip(groups) {
                    k(wj, T::zero(), sj);
                }
            }
        }
    };
    match *grad {
        HostGrad::Dense(g) => {
            for_each(n.div_ceil(CHUNK), K * n, 1, |c| {
                let s = c * CHUNK;
                let e = (s + CHUNK).min(n);
                let (w, st) = spans(s, e - s);
                run(w, Some(&g[s..e]), st);
            });
        }
        HostGrad::RowSparse {
            idx,
            vals: gd,
            row_len: rl,
        } => {
            let nk = idx.len();
            if rl == 0 {
                return;
            }
            if lazy {
                for_each(nk, K * nk * rl, CHUNK / rl, |i| {
                    // As in `apply_chunks`: the rows are scattered, so fetch a few ahead.
                    if let Some(&ahead) = idx.get(i + PREFETCH_AHEAD) {
                        let at = ahead as usize * rl;
                        wp.prefetch(at, rl);
                        sp.prefetch(K * at, K * rl);
                    }
                    let row = idx[i] as usize;
                    let (w, st) = spans(row * rl, rl);
                    run(w, Some(&gd[i * rl..(i + 1) * rl]), st);
                });
            } else {
                let per = (CHUNK / rl).max(1);
                for_each(rows.div_ceil(per), K * n, 1, |b| {
                    let (r0, r1) = (b * per, ((b + 1) * per).min(rows));
                    let mut p = idx.partition_point(|&x| (x as usize) < r0);
                    let mut cur = r0;
                    while cur < r1 {
                        if p < nk && idx[p] as usize == cur {
                            let (w, st) = spans(cur * rl, rl);
                            run(w, Some(&gd[p * rl..(p + 1) * rl]), st);
                            p += 1;
                            cur += 1;
                        } else {
                            let next = if p < nk {
                                (idx[p] as usize).min(r1)
                            } else {
                                r1
                            };
                            let (w, st) = spans(cur * rl, (next - cur) * rl);
                            run(w, None, st);
                            cur = next;
                        }
                    }
                });
            }
        }
    }
}

/// Elementwise form of [`apply_chunks`]: `k(w, g, states)` per element, `g = 0` where the
/// gradient is implicitly zero.
pub(crate) fn apply_elementwise<T, const N: usize, K>(
    w: &mut [T],
    rows: usize,
    grad: &HostGrad<'_, T>,
    states: [&mut [T]; N],
    lazy: bool,
    k: K,
) where
    T: Float,
    K: Fn(&mut T, T, [&mut T; N]) + Sync + Send,
{
    apply_chunks::<T, N, _>(w, rows, grad, states, lazy, |w, g, mut st| match g {
        Some(g) => {
            for (j, (wj, &gj)) in w.iter_mut().zip(g).enumerate() {
                k(wj, gj, st.each_mut().map(|s| &mut s[j]));
            }
        }
        None => {
            for (j, wj) in w.iter_mut().enumerate() {
                k(wj, T::zero(), st.each_mut().map(|s| &mut s[j]));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::check_row_ids;

    #[test]
    fn row_ids_must_ascend_strictly_inside_the_weight() {
        for ok in [&[][..], &[0], &[4], &[0, 1, 2], &[1, 3, 4]] {
            assert!(check_row_ids("t", ok, 5).is_ok(), "{ok:?}");
        }
        // (ids, position named in the error)
        let bad: [(&[i64], usize); 7] = [
            (&[5], 0),
            (&[-1, 2], 0),
            (&[0, 2, 2], 2),
            (&[0, 3, 1], 2),
            (&[2, 1], 1),
            (&[0, 1, 9], 2),
            (&[0, 4, 3, 9], 2),
        ];
        for (ids, pos) in bad {
            let e = check_row_ids("t", ids, 5).unwrap_err().to_string();
            assert!(e.contains(&format!("at position {pos}")), "{ids:?}: {e}");
        }
    }
}
