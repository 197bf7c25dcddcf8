//! The csr product `a (m x k) . b (k x n)` of two csr operands (Gustavson's row-by-row
//! algorithm): output row `i` accumulates row `j` of `b` scaled by `a[i, j]` for each stored
//! `j` of row `i` of `a`, in a dense accumulator over `n` columns with a marker per column (so
//! a row costs its products, not `n`), its reached columns then sorted. Rows are split into
//! blocks that run in parallel, each block with its own accumulator, and the blocks' rows are
//! concatenated in order.

use std::sync::Arc;

use rayon::prelude::*;

use super::sparse::HostParts;
use super::HostElement;
use crate::dtype::Float;
use crate::storage::SparseParts;

/// The parts of a csr operand: row pointers (relative to its first value), column ids and
/// values (both from its first value).
type CsrRef<'a, T> = (&'a [i64], &'a [i64], &'a [T]);

/// One block's rows: their lengths, column ids and values, in row order.
struct Block<T> {
    lens: Vec<usize>,
    idx: Vec<i64>,
    vals: Vec<T>,
}

/// `a . b` as csr parts; `b` is given with its shape `[k, n]`.
pub(crate) fn csr_csr_product<T: Float + HostElement>(
    (a_ptr, a_idx, a_vals): CsrRef<'_, T>,
    ([_, n], b_ptr, b_idx, b_vals): ([usize; 2], &[i64], &[i64], &[T]),
) -> HostParts {
    let m = a_ptr.len().saturating_sub(1);
    // Blocks of rows with about the same number of products each would balance better; rows
    // of similar length (the usual case) make equal row counts close enough.
    let threads = rayon::current_num_threads().max(1);
    let block = m.div_ceil(threads * 8).max(256);
    let blocks: Vec<Block<T>> = (0..m.div_ceil(block))
        .into_par_iter()
        .map(|bi| {
            let rows = bi * block..((bi + 1) * block).min(m);
            let mut acc = vec![T::zero(); n];
            // The last row that reached each column (usize::MAX: none yet).
            let mut mark = vec![usize::MAX; n];
            let mut reached: Vec<usize> = Vec::new();
            let mut out = Block {
                lens: Vec::with_capacity(rows.len()),
                idx: Vec::new(),
                vals: Vec::new(),
            };
            for i in rows {
                reached.clear();
                for p in a_ptr[i] as usize..a_ptr[i + 1] as usize {
                    let (j, av) = (a_idx[p] as usize, a_vals[p]);
                    for q in b_ptr[j] as usize..b_ptr[j + 1] as usize {
                        let c = b_idx[q] as usize;
                        let prod = av * b_vals[q];
                        if mark[c] == i {
                            acc[c] = acc[c] + prod;
                        } else {
                            mark[c] = i;
                            acc[c] = prod;
                            reached.push(c);
                        }
                    }
                }
                reached.sort_unstable();
                out.lens.push(reached.len());
                out.idx.extend(reached.iter().map(|&c| c as i64));
                out.vals.extend(reached.iter().map(|&c| acc[c]));
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
