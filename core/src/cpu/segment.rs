//! Typed inner kernels shared by the sparse operators: row axpy, row-parallel output filling and
//! the segment gather-sum that builds a row_sparse result (csr^T x dense, embedding backward).

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::gather::{gather_sum_row, segment_rows_f32, PREFETCH_AHEAD};
use super::radix::sort_by_high_half;
use crate::dtype::Float;

/// Work (non-zeros x row length) below which the sparse kernels stay on the calling thread: a
/// rayon fork/join costs ~5-50 us (more when the pool is asleep), which would dominate the
/// tiny products of a training step on a 10-row batch.
pub(crate) const PAR_WORK: usize = 1 << 16;

/// Run `f(row_index, row)` over the `row_len`-sized rows of `out`, in parallel (at least
/// `min_len` rows per task) only when `work` reaches [`PAR_WORK`].
pub(crate) fn for_each_row<T: Send>(
    out: &mut [T],
    row_len: usize,
    min_len: usize,
    work: usize,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    if row_len == 0 {
        return;
    }
    if work >= PAR_WORK {
        out.par_chunks_mut(row_len)
            .with_min_len(min_len.max(1))
            .enumerate()
            .for_each(|(r, o)| f(r, o));
    } else {
        out.chunks_mut(row_len)
            .enumerate()
            .for_each(|(r, o)| f(r, o));
    }
}

/// A new `rows x row_len` vector whose rows are written by `fill(row, out_row)` through
/// [`for_each_row`] (parallel above [`PAR_WORK`]); `fill` must initialise its whole row. Each
/// element is written once, with no zero fill first (that memset was ~17% of csr^T x dense),
/// and large buffers are advised for transparent huge pages, as numpy does, so fresh memory
/// costs one page fault per 2 MiB instead of per 4 KiB.
pub(crate) fn fill_rows<T: Send + 'static>(
    rows: usize,
    row_len: usize,
    min_len: usize,
    work: usize,
    fill: impl Fn(usize, &mut [MaybeUninit<T>]) + Sync + Send,
) -> Vec<T> {
    let n = rows * row_len;
    let mut out: Vec<T> = Vec::with_capacity(n);
    crate::sys::advise_huge_pages(out.as_mut_ptr() as *mut u8, n * std::mem::size_of::<T>());
    for_each_row(
        &mut out.spare_capacity_mut()[..n],
        row_len,
        min_len,
        work,
        fill,
    );
    // SAFETY: for_each_row handed every row of the first n slots to `fill` (row_len == 0 means
    // n == 0), which initialises all of it (its contract); the capacity is n.
    unsafe { out.set_len(n) };
    out
}

/// Below this many keys a comparison sort beats the radix sort's 2048-bucket histograms.
const RADIX_MIN: usize = 512;

/// Sort entry positions by key: returns the sorted unique keys and, for each, the range of
/// `order` holding its entries (`starts` has `uniq.len() + 1` items).
pub(crate) fn group_by_key(keys: &[i64]) -> (Vec<i64>, Vec<usize>, Vec<usize>) {
    let n = keys.len();
    let small = n < (1usize << 32) && keys.iter().all(|&k| (0..(1i64 << 31)).contains(&k));
    let order: Vec<usize> = if small {
        // Pack (key, position) into one u64, positions ascending; a stable sort on the key half
        // then leaves equal keys in position order, so the result is deterministic.
        let mut packed: Vec<u64> = keys
            .iter()
            .enumerate()
            .map(|(e, &k)| ((k as u64) << 32) | e as u64)
            .collect();
        if n >= RADIX_MIN {
            let max = keys.iter().copied().max().unwrap_or(0) as u64;
            sort_by_high_half(&mut packed, 64 - max.leading_zeros());
        } else {
            packed.sort_unstable();
        }
        // The groups from the sorted words themselves, which hold each key beside its position:
        // looking the key up through `order` was a random read per entry (12% of a loader
        // thread's time on 1024-row batches of 40 features, with the sort).
        let mut order = Vec::with_capacity(n);
        let mut uniq = Vec::with_capacity(n);
        let mut starts = Vec::with_capacity(n + 1);
        for (pos, &p) in packed.iter().enumerate() {
            let k = (p >> 32) as i64;
            if uniq.last() != Some(&k) {
                uniq.push(k);
                starts.push(pos);
            }
            order.push((p & 0xFFFF_FFFF) as usize);
        }
        starts.push(n);
        return (uniq, starts, order);
    } else {
        let mut o: Vec<usize> = (0..n).collect();
        o.par_sort_unstable_by_key(|&e| (keys[e], e));
        o
    };
    let mut uniq = Vec::with_capacity(n);
    let mut starts = Vec::with_capacity(n + 1);
    for (pos, &e) in order.iter().enumerate() {
        if uniq.last() != Some(&keys[e]) {
            uniq.push(keys[e]);
            starts.push(pos);
        }
    }
    starts.push(n);
    (uniq, starts, order)
}

/// Sources smaller than this are not prefetched by the segment sum (about an L2 cache).
const PREFETCH_MIN_BYTES: usize = 512 * 1024;

/// Row_sparse segment sum: entry `e` adds `w[e] * src[srow[e]]` (a row of `row_len`) to output
/// row `keys[e]`. Returns the sorted unique keys and their rows. Each output row is written
/// once, by one task (a gather, no atomics, no zero fill), so the work is proportional to the
/// entries, never to the logical number of rows.
pub(crate) fn segment_sum_rows<T: Float>(
    keys: &[i64],
    srow: &[usize],
    w: Option<&[T]>,
    src: &[T],
    row_len: usize,
) -> (Vec<i64>, Vec<T>) {
    let (uniq, starts, order) = group_by_key(keys);
    let out = segment_sum_grouped(&starts, &order, srow, w, src, row_len);
    (uniq, out)
}

/// The summing half of [`segment_sum_rows`], for a grouping computed earlier ([`group_by_key`]
/// over the same keys, possibly on another thread and cached: see `sparse::groups`): output
/// row `g` is the sum over the entries `order[starts[g]..starts[g + 1]]`.
pub(crate) fn segment_sum_grouped<T: Float>(
    starts: &[usize],
    order: &[usize],
    srow: &[usize],
    w: Option<&[T]>,
    src: &[T],
    row_len: usize,
) -> Vec<T> {
    let n = starts.len().saturating_sub(1) * row_len;
    let mut out: Vec<T> = Vec::with_capacity(n);
    crate::sys::advise_huge_pages(out.as_mut_ptr() as *mut u8, n * std::mem::size_of::<T>());
    segment_sum_grouped_to(
        starts,
        order,
        srow,
        w,
        src,
        row_len,
        &mut out.spare_capacity_mut()[..n],
    );
    // SAFETY: `segment_sum_grouped_to` wrote every one of the n elements (its contract).
    unsafe { out.set_len(n) };
    out
}

/// [`segment_sum_grouped`] into `out` (`(starts.len() - 1) * row_len` slots, every one
/// written): the same kernels, so the same bits.
pub(crate) fn segment_sum_grouped_to<T: Float>(
    starts: &[usize],
    order: &[usize],
    srow: &[usize],
    w: Option<&[T]>,
    src: &[T],
    row_len: usize,
    out: &mut [MaybeUninit<T>],
) {
    let groups = starts.len().saturating_sub(1);
    debug_assert_eq!(out.len(), groups * row_len);
    let work = order.len() * row_len;
    if work < PAR_WORK && std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        // A small sum on this thread: the f32 AVX2 loop over all groups, if the CPU has it.
        // SAFETY: T is f32 (checked above), so these casts only rename the element type.
        let done = unsafe {
            let o = std::slice::from_raw_parts_mut(
                out.as_mut_ptr() as *mut MaybeUninit<f32>,
                out.len(),
            );
            let s = std::slice::from_raw_parts(src.as_ptr() as *const f32, src.len());
            let w = w.map(|w| std::slice::from_raw_parts(w.as_ptr() as *const f32, w.len()));
            segment_rows_f32(o, s, row_len, starts, order, srow, w)
        };
        if done {
            return;
        }
    }
    // A source that fits in L2 (the head gradient of a small batch) is read from cache anyway:
    // per-entry prefetch instructions would only cost time there.
    let far = std::mem::size_of_val(src) > PREFETCH_MIN_BYTES;
    let min_len = (4096 / row_len.max(1)).max(1);
    for_each_row(out, row_len, min_len, work, |g, orow| {
        let start = starts[g];
        gather_sum_row(
            orow,
            src,
            starts[g + 1] - start,
            |q| {
                let e = order[start + q];
                (srow[e], w.map_or(T::one(), |w| w[e]))
            },
            // `order` is contiguous across groups, so this also prefetches the next group's.
            |q| {
                let e = *order.get(start + q + PREFETCH_AHEAD).filter(|_| far)?;
                Some(srow[e])
            },
        );
    })
}

/// The row of every stored entry of a csr array, from its indptr.
/// Entries before `indptr[0]` (a row slice's, which shares its parent's entries) get row 0.
/// `indptr` is a checked csr's: it starts at 0 or above and never decreases.
pub(crate) fn entry_rows(indptr: &[i64]) -> Vec<usize> {
    let nnz = *indptr.last().unwrap_or(&0) as usize;
    let first = indptr.first().map_or(0, |&p| p.max(0) as usize).min(nnz);
    // Appended row by row into a vector sized once: a batch's rows hold a few entries each,
    // and a zeroed vector then filled with a call per row cost more than the rows' writes.
    let mut rows = Vec::with_capacity(nnz);
    rows.resize(first, 0);
    for (r, w) in indptr.windows(2).enumerate() {
        rows.extend(std::iter::repeat_n(
            r,
            w[1].saturating_sub(w[0]).max(0) as usize,
        ));
    }
    debug_assert_eq!(rows.len(), nnz, "a checked csr's row pointers");
    rows
}

#[cfg(test)]
mod tests {
    use super::entry_rows;

    /// Every entry's row, empty rows included, and the entries before a slice's first row.
    #[test]
    fn each_entry_gets_its_row() {
        assert_eq!(entry_rows(&[0, 2, 2, 5, 6]), vec![0, 0, 2, 2, 2, 3]);
        assert_eq!(entry_rows(&[0, 0, 0]), Vec::<usize>::new());
        assert_eq!(entry_rows(&[]), Vec::<usize>::new());
        assert_eq!(entry_rows(&[2, 3, 5]), vec![0, 0, 0, 1, 1]);
    }
}
