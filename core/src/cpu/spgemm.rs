//! The csr product `a (m x k) . b (k x n)` of two csr operands (Gustavson's row-by-row
//! algorithm): output row `i` accumulates row `j` of `b` scaled by `a[i, j]` for each stored
//! `j` of row `i` of `a`, in a dense accumulator over `n` columns with a marker per column (so
//! a row costs its products, not `n`), its reached columns then sorted. Rows are split into
//! blocks that run in parallel, each block with its own accumulator, and the blocks' rows are
//! concatenated in order.

use std::sync::Arc;

use rayon::prelude::*;

use super::rows::prefetch_row;
use super::sparse::HostParts;
use super::HostElement;
use crate::dtype::Float;
use crate::storage::SparseParts;

/// How many non-zeros of `a` ahead the rows of `b` are prefetched.
const PREFETCH_AHEAD: usize = 4;

/// The parts of a csr operand: row pointers (relative to its first value), column ids and
/// values (both from its first value).
type CsrRef<'a, T> = (&'a [i64], &'a [i64], &'a [T]);

/// One block's rows: their lengths, column ids and values, in row order.
struct Block<T> {
    lens: Vec<usize>,
    idx: Vec<i64>,
    vals: Vec<T>,
}

/// `a . b` as csr parts; `b` is given with its shape `[k, n]`, `n` at most `u32::MAX` (the
/// caller checks: column ids are kept as u32 while a row is assembled, to sort them faster).
pub(crate) fn csr_csr_product<T: Float + HostElement>(
    (a_ptr, a_idx, a_vals): CsrRef<'_, T>,
    ([_, n], b_ptr, b_idx, b_vals): ([usize; 2], &[i64], &[i64], &[T]),
) -> HostParts {
    let m = a_ptr.len().saturating_sub(1);
    // Blocks of rows with about the same number of products each would balance better; rows
    // of similar length (the usual case) make equal row counts close enough.
    let threads = rayon::current_num_threads().max(1);
    let block = m.div_ceil(threads * 8).clamp(256, u32::MAX as usize - 1);
    let blocks: Vec<Block<T>> = (0..m.div_ceil(block))
        .into_par_iter()
        .map(|bi| {
            let rows = bi * block..((bi + 1) * block).min(m);
            // An upper bound of the block's output (its products), reserved once so that the
            // block's vectors never grow by copying.
            let products: usize = a_idx[a_ptr[rows.start] as usize..a_ptr[rows.end] as usize]
                .iter()
                .map(|&j| (b_ptr[j as usize + 1] - b_ptr[j as usize]) as usize)
                .sum();
            let cap = products.min(rows.len().saturating_mul(n));
            let mut acc = vec![T::zero(); n];
            // 1 + the block-local row that last reached each column (0: none yet).
            let mut mark = vec![0u32; n];
            let mut reached: Vec<u32> = Vec::new();
            let mut out = Block {
                lens: Vec::with_capacity(rows.len()),
                idx: Vec::with_capacity(cap),
                vals: Vec::with_capacity(cap),
            };
            for (local, i) in rows.enumerate() {
                let tag = local as u32 + 1;
                reached.clear();
                let (s, e) = (a_ptr[i] as usize, a_ptr[i + 1] as usize);
                for (p, (&j, &av)) in a_idx[s..e].iter().zip(&a_vals[s..e]).enumerate() {
                    // The rows of b that a few non-zeros ahead (into the next row too) will
                    // read, loaded while this one is worked on: they sit at random places of
                    // b, and waiting for them was half the time.
                    if let Some(&jn) = a_idx.get(s + p + PREFETCH_AHEAD) {
                        let (ns, ne) =
                            (b_ptr[jn as usize] as usize, b_ptr[jn as usize + 1] as usize);
                        prefetch_row(&b_idx[ns..ne]);
                        prefetch_row(&b_vals[ns..ne]);
                    }
                    let (bs, be) = (b_ptr[j as usize] as usize, b_ptr[j as usize + 1] as usize);
                    for (&c, &bv) in b_idx[bs..be].iter().zip(&b_vals[bs..be]) {
                        let c = c as usize;
                        let prod = av * bv;
                        if mark[c] == tag {
                            acc[c] = acc[c] + prod;
                        } else {
                            mark[c] = tag;
                            acc[c] = prod;
                            reached.push(c as u32);
                        }
                    }
                }
                reached.sort_unstable();
                out.lens.push(reached.len());
                out.idx.extend(reached.iter().map(|&c| c as i64));
                out.vals.extend(reached.iter().map(|&c| acc[c as usize]));
            }
            out
        })
        .collect();
    let total: usize = blocks.iter().map(|b| b.idx.len()).sum();
    let mut indptr = Vec::with_capacity(m + 1);
    indptr.push(0i64);
    let (mut idx, mut vals) = (Vec::with_capacity(total), Vec::with_capacity(total));
    for b in blocks {
        for len in b.lens {
            let last = *indptr.last().unwrap_or(&0);
            indptr.push(last + len as i64);
        }
        idx.extend_from_slice(&b.idx);
        vals.extend_from_slice(&b.vals);
    }
    SparseParts {
        indptr: Some(Arc::new(indptr)),
        indices: Arc::new(idx),
        values: T::into_buffer(vals),
    }
}
