//! The csr product `a (m x k) . b (k x n)` of two csr operands: Gustavson's row-by-row
//! algorithm (output row `i` sums row `j` of `b` scaled by `a[i, j]` over the stored `j` of row
//! `i` of `a`) in two passes, as SciPy's `csr_matmat` and the fast SpGEMM libraries run it.
//!
//! 1. Plan: the products of each row (its "flops", the sum of the lengths of the rows of `b` it
//!    reads) give the blocks of rows that run in parallel, cut at equal flops (not equal row
//!    counts), and the accumulator: dense over `n` columns when that fits in a core's L2 (or
//!    the rows are dense enough to fill it), a hash table per row otherwise.
//! 2. Symbolic pass: each row's number of distinct columns, written as row pointers.
//! 3. Numeric pass: the values, written straight into the exact-size output at the row's place
//!    (no per-row or per-block vectors to concatenate), columns ascending.
//!
//! The dense accumulator keeps the values (zero between rows) and a bitmap of the columns
//! reached (a 20,000-column row is 2.5 KB, in L1). A column's place in the sorted row is the
//! number of bits set before it (running popcounts of the bitmap), so a row is written in order
//! without sorting when the bitmap is short beside a sort: a 254-entry row of 20,000 columns
//! sums 313 words where a sort costs ~2,000 comparisons. Longer bitmaps sort the row's columns.
//! Workers take blocks from a shared counter, each with its own accumulator.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rayon::prelude::*;

use super::alloc::{try_zeroed, ZeroBits};
use super::rows::prefetch_row;
use super::sparse::HostParts;
use super::HostElement;
use crate::dtype::Float;
use crate::error::{Error, Result};
use crate::storage::SparseParts;

/// The operator named in errors.
const OP: &str = "dot";
/// How many non-zeros of `a` ahead the rows of `b` are prefetched: they sit at random places
/// of `b`, and waiting for them was half the time before prefetching.
const PREFETCH_AHEAD: usize = 4;
/// Products (plus per-row costs) below which the whole product runs on the calling thread.
const SERIAL_WORK: usize = 1 << 15;
/// Blocks per thread: enough that a slow block does not leave the other threads idle.
const BLOCKS_PER_THREAD: usize = 8;
/// What a row costs beside its products, in products (pointer reads, the row's setup).
const ROW_COST: usize = 8;
/// A dense accumulator at most this large (values, per worker) stays in a core's L2.
const DENSE_BYTES: usize = 1 << 20;
/// Never a dense accumulator larger than this, however dense the rows.
const DENSE_MAX_BYTES: usize = 64 << 20;
/// An empty slot of a hash accumulator (never a column id: the caller keeps `n <= u32::MAX`).
const EMPTY: u32 = u32::MAX;

/// The parts of a csr operand: row pointers (relative to its first value), column ids and
/// values (both from its first value).
type CsrRef<'a, T> = (&'a [i64], &'a [i64], &'a [T]);

/// A column id of `b` as the accumulators read it: the operand's own i64 ids, or a u32 copy
/// (half the bytes to fetch from the random rows of `b`) when the product reads `b`'s entries
/// often enough to pay for the copy.
trait Col: Copy + Send + Sync {
    fn get(self) -> usize;
}

impl Col for i64 {
    #[inline(always)]
    fn get(self) -> usize {
        self as usize
    }
}

impl Col for u32 {
    #[inline(always)]
    fn get(self) -> usize {
        self as usize
    }
}

/// Both operands, as the passes read them.
struct Operands<'a, T, C> {
    a_ptr: &'a [i64],
    /// For each non-zero of `a`, the range of the row of `b` it reads (in `b_cols`, `b_vals`):
    /// read in order, so the random rows of `b` are prefetched from it without first waiting
    /// for `b`'s row pointers, themselves at random places.
    a_rows: &'a [(usize, usize)],
    a_vals: &'a [T],
    b_cols: &'a [C],
    b_vals: &'a [T],
    /// Columns of `b` (and of the product).
    n: usize,
}

impl<T: Float, C: Col> Operands<'_, T, C> {
    /// Calls `f(start, end, a_ij)` with the range of each row of `b` that row `i` of `a` reads,
    /// prefetching the rows a few non-zeros ahead (into the next row of `a` too: a block runs
    /// consecutive rows). `vals`: whether the values of `b` will be read too.
    #[inline(always)]
    fn for_each_b_row(&self, i: usize, vals: bool, mut f: impl FnMut(usize, usize, T)) {
        let (s, e) = (self.a_ptr[i] as usize, self.a_ptr[i + 1] as usize);
        for (p, (&(bs, be), &av)) in self.a_rows[s..e].iter().zip(&self.a_vals[s..e]).enumerate() {
            if let Some(&(ns, ne)) = self.a_rows.get(s + p + PREFETCH_AHEAD) {
                prefetch_row(&self.b_cols[ns..ne]);
                if vals {
                    prefetch_row(&self.b_vals[ns..ne]);
                }
            }
            f(bs, be, av);
        }
    }
}

/// Which accumulator the workers use.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dense,
    Hash,
}

/// A worker's accumulator, reused row after row.
enum Acc<T> {
    /// Values over all `n` columns (zero between rows), a bit per column reached (zero between
    /// rows), the columns a row reached, and the bits set before each bitmap word.
    Dense {
        vals: Vec<T>,
        bits: Vec<u64>,
        touched: Vec<u32>,
        ranks: Vec<u32>,
    },
    /// An open-addressing table (linear probing, `EMPTY` between rows), grown to the largest
    /// row met, and the reached (column, value) pairs to sort.
    Hash {
        keys: Vec<u32>,
        vals: Vec<T>,
        pairs: Vec<(u32, T)>,
    },
}

/// The slot of column `c` in a table of `2^bits` slots (multiplicative hashing: the high bits
/// of the product mix all bits of `c`).
#[inline(always)]
fn slot(c: u32, bits: u32) -> usize {
    ((c as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize
}

/// A table of at least twice `entries` slots (so probes stay short), a power of two.
fn table_bits(entries: usize) -> u32 {
    entries
        .saturating_mul(2)
        .max(8)
        .next_power_of_two()
        .trailing_zeros()
}

impl<T: Float> Acc<T> {
    fn new(kind: Kind, n: usize) -> Self {
        match kind {
            Kind::Dense => Acc::Dense {
                vals: vec![T::zero(); n],
                bits: vec![0; n.div_ceil(64)],
                touched: Vec::new(),
                ranks: vec![0; n.div_ceil(64)],
            },
            Kind::Hash => Acc::Hash {
                keys: Vec::new(),
                vals: Vec::new(),
                pairs: Vec::new(),
            },
        }
    }

    /// The number of distinct columns of row `i` of the product.
    fn count<C: Col>(&mut self, ops: &Operands<'_, T, C>, i: usize, flops: usize) -> usize {
        match self {
            Acc::Dense { bits, .. } => {
                let mut cnt = 0usize;
                ops.for_each_b_row(i, false, |s, e, _| {
                    for &c in &ops.b_cols[s..e] {
                        let c = c.get();
                        let (w, m) = (c >> 6, 1u64 << (c & 63));
                        let old = bits[w];
                        cnt += (old & m == 0) as usize;
                        bits[w] = old | m;
                    }
                });
                // Clear for the next row: the whole bitmap when it is short beside the row's
                // products, else only the words the row set.
                if bits.len() <= 2 * flops {
                    bits.fill(0);
                } else {
                    ops.for_each_b_row(i, false, |s, e, _| {
                        for &c in &ops.b_cols[s..e] {
                            bits[c.get() >> 6] = 0;
                        }
                    });
                }
                cnt
            }
            Acc::Hash { keys, .. } => {
                let tb = table_bits(flops.min(ops.n));
                let size = 1usize << tb;
                if keys.len() < size {
                    keys.resize(size, EMPTY);
                }
                let (table, mask) = (&mut keys[..size], size - 1);
                let mut cnt = 0usize;
                ops.for_each_b_row(i, false, |s, e, _| {
                    for &c in &ops.b_cols[s..e] {
                        let c = c.get() as u32;
                        let mut h = slot(c, tb);
                        loop {
                            let k = table[h];
                            if k == c {
                                break;
                            }
                            if k == EMPTY {
                                table[h] = c;
                                cnt += 1;
                                break;
                            }
                            h = (h + 1) & mask;
                        }
                    }
                });
                table.fill(EMPTY);
                cnt
            }
        }
    }

    /// Row `i` of the product into `idx` and `vals` (as long as the row's count), columns
    /// ascending; `flops`: the row's products.
    #[inline(always)]
    fn fill<C: Col>(
        &mut self,
        ops: &Operands<'_, T, C>,
        (i, flops): (usize, usize),
        idx: &mut [i64],
        out: &mut [T],
    ) {
        let nnz = idx.len();
        match self {
            Acc::Dense {
                vals,
                bits,
                touched,
                ranks,
            } => {
                let (acc, bits) = (&mut vals[..], &mut bits[..]);
                if touched.len() <= flops {
                    touched.resize(flops + 1, 0);
                }
                // Every product appends its column and counts it only if new (no branch to
                // mispredict: about half the columns of a row are new at random places).
                let list = &mut touched[..];
                let mut len = 0;
                ops.for_each_b_row(i, true, |s, e, av| {
                    for (&c, &bv) in ops.b_cols[s..e].iter().zip(&ops.b_vals[s..e]) {
                        let c = c.get();
                        let (w, m) = (c >> 6, 1u64 << (c & 63));
                        let old = bits[w];
                        bits[w] = old | m;
                        list[len] = c as u32;
                        len += (old & m == 0) as usize;
                        acc[c] = acc[c] + av * bv;
                    }
                });
                let list = &list[..len];
                // A column's place in the sorted row is the number of bits set before it: the
                // bitmap's running popcounts give it without sorting, when the bitmap is short
                // beside a sort of the row (about nnz log nnz steps).
                if bits.len() <= 2 * nnz * (nnz.ilog2() as usize + 1) {
                    let mut sum = 0u32;
                    for (r, &w) in ranks.iter_mut().zip(bits.iter()) {
                        *r = sum;
                        sum += w.count_ones();
                    }
                    for &c in list {
                        let c = c as usize;
                        let w = c >> 6;
                        let below = bits[w] & ((1u64 << (c & 63)) - 1);
                        let k = (ranks[w] + below.count_ones()) as usize;
                        idx[k] = c as i64;
                        out[k] = acc[c];
                        acc[c] = T::zero();
                    }
                    bits.fill(0);
                } else {
                    let list = &mut touched[..len];
                    list.sort_unstable();
                    for ((&c, o), v) in list.iter().zip(idx.iter_mut()).zip(out.iter_mut()) {
                        let c = c as usize;
                        *o = c as i64;
                        *v = acc[c];
                        acc[c] = T::zero();
                        bits[c >> 6] = 0;
                    }
                }
            }
            Acc::Hash { keys, vals, pairs } => {
                let tb = table_bits(nnz);
                let size = 1usize << tb;
                if keys.len() < size {
                    keys.resize(size, EMPTY);
                    vals.resize(size, T::zero());
                }
                let mask = size - 1;
                ops.for_each_b_row(i, true, |s, e, av| {
                    for (&c, &bv) in ops.b_cols[s..e].iter().zip(&ops.b_vals[s..e]) {
                        let c = c.get() as u32;
                        let mut h = slot(c, tb);
                        loop {
                            let k = keys[h];
                            if k == c {
                                vals[h] = vals[h] + av * bv;
                                break;
                            }
                            if k == EMPTY {
                                keys[h] = c;
                                vals[h] = av * bv;
                                break;
                            }
                            h = (h + 1) & mask;
                        }
                    }
                });
                pairs.clear();
                for (k, &v) in keys[..size].iter_mut().zip(&vals[..size]) {
                    if *k != EMPTY {
                        pairs.push((*k, v));
                        *k = EMPTY;
                    }
                }
                pairs.sort_unstable_by_key(|p| p.0);
                for ((&(c, v), o), w) in pairs.iter().zip(idx.iter_mut()).zip(out.iter_mut()) {
                    *o = c as i64;
                    *w = v;
                }
            }
        }
    }
}

/// Runs `work(acc, block)` for every block, each worker (one per thread, at most one per
/// block) with its own accumulator, taking the next block from a shared counter so that the
/// threads finish together.
fn run_blocks<T: Float>(
    blocks: usize,
    kind: Kind,
    n: usize,
    work: impl Fn(&mut Acc<T>, usize) + Sync,
) {
    let threads = rayon::current_num_threads().min(blocks);
    if threads <= 1 {
        let mut acc = Acc::new(kind, n);
        (0..blocks).for_each(|b| work(&mut acc, b));
        return;
    }
    let next = AtomicUsize::new(0);
    (0..threads).into_par_iter().for_each(|_| {
        let mut acc = Acc::new(kind, n);
        loop {
            let b = next.fetch_add(1, Ordering::Relaxed);
            if b >= blocks {
                break;
            }
            work(&mut acc, b);
        }
    });
}

/// Rows `rows` of the product into their places of `idx` and `vals` (which start at the first
/// row's place), given each row's products and the row pointers.
#[inline(always)]
fn fill_rows<T: Float, C: Col>(
    acc: &mut Acc<T>,
    ops: &Operands<'_, T, C>,
    rows: std::ops::Range<usize>,
    (flops, indptr): (&[usize], &[i64]),
    idx: &mut [i64],
    vals: &mut [T],
) {
    let base = indptr[rows.start];
    for i in rows {
        let (s, e) = ((indptr[i] - base) as usize, (indptr[i + 1] - base) as usize);
        if e > s {
            acc.fill(ops, (i, flops[i]), &mut idx[s..e], &mut vals[s..e]);
        }
    }
}

/// [`fill_rows`] compiled with the popcnt instruction: a column's place in its sorted row
/// is a popcount, about 12 instructions each without it.
///
/// # Safety
/// The CPU must have popcnt.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn fill_rows_popcnt<T: Float, C: Col>(
    acc: &mut Acc<T>,
    ops: &Operands<'_, T, C>,
    rows: std::ops::Range<usize>,
    parts: (&[usize], &[i64]),
    idx: &mut [i64],
    vals: &mut [T],
) {
    fill_rows(acc, ops, rows, parts, idx, vals)
}

/// The first row of each block and `m` last: blocks of about equal products plus row costs.
fn block_bounds(flops: &[usize]) -> Vec<usize> {
    let m = flops.len();
    let total = flops
        .iter()
        .fold(0usize, |t, &f| t.saturating_add(f).saturating_add(ROW_COST));
    let threads = rayon::current_num_threads().max(1);
    let blocks = if total < SERIAL_WORK || threads == 1 {
        1
    } else {
        (threads * BLOCKS_PER_THREAD)
            .min(total / (SERIAL_WORK / 4))
            .max(1)
    };
    let target = total.div_ceil(blocks).max(1);
    let mut bounds = vec![0];
    let mut acc = 0usize;
    for (i, &f) in flops.iter().enumerate() {
        acc = acc.saturating_add(f).saturating_add(ROW_COST);
        if acc >= target && i + 1 < m {
            bounds.push(i + 1);
            acc = 0;
        }
    }
    bounds.push(m);
    bounds
}

/// `a . b` as csr parts, columns ascending in each row; `b` is given with its shape `[k, n]`,
/// `n` at most `u32::MAX` (the caller checks: column ids are kept as u32 in the accumulators).
/// An output too large to count or to allocate is an error.
pub(crate) fn csr_csr_product<T: Float + HostElement + ZeroBits>(
    (a_ptr, a_idx, a_vals): CsrRef<'_, T>,
    ([_, n], b_ptr, b_idx, b_vals): ([usize; 2], &[i64], &[i64], &[T]),
) -> Result<HostParts> {
    let m = a_ptr.len().saturating_sub(1);
    let b_row = |j: i64| (b_ptr[j as usize] as usize, b_ptr[j as usize + 1] as usize);
    let a_rows: Vec<(usize, usize)> = if a_idx.len() < SERIAL_WORK {
        a_idx.iter().map(|&j| b_row(j)).collect()
    } else {
        a_idx
            .par_iter()
            .with_min_len(4096)
            .map(|&j| b_row(j))
            .collect()
    };
    let row_flops = |i: usize| {
        a_rows[a_ptr[i] as usize..a_ptr[i + 1] as usize]
            .iter()
            .fold(0usize, |t, &(s, e)| t.saturating_add(e - s))
    };
    let flops: Vec<usize> = if a_idx.len() < SERIAL_WORK {
        (0..m).map(row_flops).collect()
    } else {
        (0..m)
            .into_par_iter()
            .with_min_len(1024)
            .map(row_flops)
            .collect()
    };
    let total_flops = flops.iter().fold(0usize, |t, &f| t.saturating_add(f));
    // Each product reads its entry of b twice (once per pass): a u32 copy of b's column ids
    // pays for itself when the products are not few beside b's entries.
    if total_flops >= b_idx.len() / 2 {
        let cols: Vec<u32> = if b_idx.len() < SERIAL_WORK {
            b_idx.iter().map(|&c| c as u32).collect()
        } else {
            b_idx
                .par_iter()
                .with_min_len(4096)
                .map(|&c| c as u32)
                .collect()
        };
        product(
            &Operands {
                a_ptr,
                a_rows: &a_rows,
                a_vals,
                b_cols: &cols,
                b_vals,
                n,
            },
            &flops,
            total_flops,
        )
    } else {
        product(
            &Operands {
                a_ptr,
                a_rows: &a_rows,
                a_vals,
                b_cols: b_idx,
                b_vals,
                n,
            },
            &flops,
            total_flops,
        )
    }
}

/// The two passes, given each row's products (`flops`) and their sum.
fn product<T: Float + HostElement + ZeroBits, C: Col>(
    ops: &Operands<'_, T, C>,
    flops: &[usize],
    total_flops: usize,
) -> Result<HostParts> {
    let (m, n) = (flops.len(), ops.n);
    let bounds = block_bounds(flops);
    let blocks = bounds.len() - 1;
    let bytes = n.saturating_mul(std::mem::size_of::<T>());
    let kind =
        if bytes <= DENSE_BYTES || (bytes <= DENSE_MAX_BYTES && total_flops / m.max(1) >= n / 16) {
            Kind::Dense
        } else {
            Kind::Hash
        };

    // Symbolic pass: each row's count at `indptr[i + 1]`, then the running sums.
    let mut indptr: Vec<i64> = try_zeroed(OP, m + 1)?;
    {
        let mut rest = &mut indptr[1..];
        let mut parts = Vec::with_capacity(blocks);
        for w in bounds.windows(2) {
            let (head, tail) = rest.split_at_mut(w[1] - w[0]);
            parts.push(Mutex::new(Some(head)));
            rest = tail;
        }
        run_blocks(blocks, kind, n, |acc, b| {
            let Some(counts) = parts[b].lock().ok().and_then(|mut p| p.take()) else {
                return;
            };
            for (i, c) in (bounds[b]..bounds[b + 1]).zip(counts.iter_mut()) {
                if flops[i] > 0 {
                    *c = acc.count(ops, i, flops[i]) as i64;
                }
            }
        });
    }
    let mut nnz = 0i64;
    for p in indptr.iter_mut().skip(1) {
        nnz = nnz.checked_add(*p).ok_or_else(|| {
            Error::shape(OP, "csr x csr: the product has more than 2^63 non-zeros")
        })?;
        *p = nnz;
    }
    let nnz = nnz as usize;

    // Numeric pass: each block writes its rows at their final places.
    let mut idx: Vec<i64> = try_zeroed(OP, nnz)?;
    let mut vals: Vec<T> = try_zeroed(OP, nnz)?;
    crate::sys::advise_huge_pages(idx.as_mut_ptr() as *mut u8, nnz * 8);
    crate::sys::advise_huge_pages(vals.as_mut_ptr() as *mut u8, nnz * std::mem::size_of::<T>());
    {
        let (mut ri, mut rv) = (&mut idx[..], &mut vals[..]);
        let mut parts = Vec::with_capacity(blocks);
        for w in bounds.windows(2) {
            let len = (indptr[w[1]] - indptr[w[0]]) as usize;
            let (hi, ti) = ri.split_at_mut(len);
            let (hv, tv) = rv.split_at_mut(len);
            parts.push(Mutex::new(Some((hi, hv))));
            (ri, rv) = (ti, tv);
        }
        let indptr = &indptr;
        run_blocks(blocks, kind, n, |acc, b| {
            let Some((bi, bv)) = parts[b].lock().ok().and_then(|mut p| p.take()) else {
                return;
            };
            let rows = bounds[b]..bounds[b + 1];
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("popcnt") {
                // SAFETY: the CPU has the popcnt instruction (checked just above).
                unsafe { fill_rows_popcnt(acc, ops, rows, (flops, indptr), bi, bv) };
                return;
            }
            fill_rows(acc, ops, rows, (flops, indptr), bi, bv);
        });
    }
    Ok(SparseParts {
        indptr: Some(Arc::new(indptr)),
        indices: Arc::new(idx),
        values: T::into_buffer(vals),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::dtype::Element;

    /// splitmix64: the test matrices' randomness.
    fn mix(x: u64) -> u64 {
        let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A csr `rows x cols` with up to `per_row` entries a row (every fifth row empty), column
    /// ids unsorted and possibly repeated (a repeated column's values add up), values in
    /// [-1, 1): what `csr_unchecked` accepts.
    fn messy(
        rows: usize,
        cols: usize,
        per_row: usize,
        seed: u64,
    ) -> (Vec<i64>, Vec<i64>, Vec<f64>) {
        let (mut ptr, mut idx, mut vals) = (vec![0i64], Vec::new(), Vec::new());
        let mut s = seed << 32;
        for r in 0..rows {
            if cols > 0 && r % 5 != 3 {
                s += 1;
                let len = (mix(s) % (per_row as u64 + 1)) as usize;
                for _ in 0..len {
                    s += 1;
                    let h = mix(s);
                    idx.push((h % cols as u64) as i64);
                    vals.push((h >> 11) as f64 / (1u64 << 52) as f64 - 1.0);
                }
            }
            ptr.push(idx.len() as i64);
        }
        (ptr, idx, vals)
    }

    /// Row by row, the product's columns (every column a product reaches, even if its sum
    /// is zero) and their values, in f64.
    fn reference(
        (ap, ai, av): (&[i64], &[i64], &[f64]),
        (bp, bi, bv): (&[i64], &[i64], &[f64]),
    ) -> Vec<BTreeMap<i64, f64>> {
        (0..ap.len() - 1)
            .map(|r| {
                let mut row = BTreeMap::new();
                for p in ap[r] as usize..ap[r + 1] as usize {
                    let j = ai[p] as usize;
                    for q in bp[j] as usize..bp[j + 1] as usize {
                        *row.entry(bi[q]).or_insert(0.0) += av[p] * bv[q];
                    }
                }
                row
            })
            .collect()
    }

    /// The kernel's product of `a . b` (`b` with `n` columns) in `T` against the reference,
    /// on a pool of `threads` threads.
    fn check<T: Float + HostElement + ZeroBits>(
        a: &(Vec<i64>, Vec<i64>, Vec<f64>),
        b: &(Vec<i64>, Vec<i64>, Vec<f64>),
        n: usize,
        threads: usize,
        tol: f64,
    ) {
        let cast = |v: &[f64]| -> Vec<T> { v.iter().map(|&x| T::from_f64(x)).collect() };
        let (av, bv) = (cast(&a.2), cast(&b.2));
        let k = b.0.len() - 1;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let p = pool
            .install(|| csr_csr_product::<T>((&a.0, &a.1, &av), ([k, n], &b.0, &b.1, &bv)))
            .unwrap();
        let ptr = p.indptr.unwrap();
        let vals = T::slice(&p.values).unwrap();
        // The reference of the operands as the kernel saw them (cast to T).
        let up = |v: &[T]| -> Vec<f64> { v.iter().map(|&x| Element::to_f64(x)).collect() };
        let want = reference((&a.0, &a.1, &up(&av)), (&b.0, &b.1, &up(&bv)));
        assert_eq!(ptr.len(), want.len() + 1, "row pointers");
        for (r, row) in want.iter().enumerate() {
            let (s, e) = (ptr[r] as usize, ptr[r + 1] as usize);
            let cols: Vec<i64> = row.keys().copied().collect();
            assert_eq!(
                &p.indices[s..e],
                &cols[..],
                "row {r}'s columns ({threads} threads)"
            );
            for (q, (&c, &w)) in (s..e).zip(row) {
                let got = Element::to_f64(vals[q]);
                assert!(
                    (got - w).abs() <= tol * (1.0 + w.abs()),
                    "row {r} column {c}: {got} vs {w} ({threads} threads)"
                );
            }
        }
    }

    #[test]
    fn matches_the_reference_on_messy_operands() {
        // (m, k, n, entries per row of a and of b): tiny and empty operands (0 rows, 0 inner,
        // 0 columns), small products on the calling thread, products large enough for many
        // blocks, a bitmap long beside the rows (the sort path), and columns past the dense
        // accumulator's size (the hash accumulator).
        for (case, &(m, k, n, pa, pb)) in [
            (0usize, 5usize, 7usize, 3usize, 3usize),
            (4, 0, 7, 3, 3),
            (6, 5, 0, 3, 3),
            (1, 1, 1, 2, 2),
            (13, 9, 11, 4, 5),
            (3000, 300, 500, 16, 12),
            (300, 200, 200_000, 6, 4),
            (400, 300, 3_000_000, 10, 8),
            (50, 40, 2_000_000, 200, 300),
        ]
        .iter()
        .enumerate()
        {
            let a = messy(m, k, pa, 2 * case as u64 + 1);
            let b = messy(k, n, pb, 2 * case as u64 + 2);
            for threads in [1, 2, 3] {
                check::<f64>(&a, &b, n, threads, 1e-12);
                check::<f32>(&a, &b, n, threads, 1e-5);
            }
        }
    }

    #[test]
    fn dense_rows_use_the_whole_bitmap() {
        // Rows that reach most columns: every bit of the bitmap set, values summed from many
        // products each.
        let full = |rows: usize, cols: usize| -> (Vec<i64>, Vec<i64>, Vec<f64>) {
            let ptr = (0..=rows).map(|r| (r * cols) as i64).collect();
            let idx = (0..rows * cols).map(|q| (q % cols) as i64).collect();
            let vals = (0..rows * cols).map(|q| (q % 7) as f64 - 3.0).collect();
            (ptr, idx, vals)
        };
        check::<f32>(&full(70, 130), &full(130, 129), 129, 2, 1e-5);
        check::<f64>(&full(3, 64), &full(64, 64), 64, 1, 1e-12);
    }
}
