//! Batches and the shared batch-building helpers: rows are copied straight into the CSR
//! buffers of the batch, never densified.

use sparrow_core::NDArray;

use crate::libsvm::Rows;

/// What an iterator does with the rows left over at the end of an epoch (fewer than a batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LastBatch {
    /// Emit a shorter last batch.
    Keep,
    /// Drop the leftover rows.
    Discard,
    /// Fill the last batch with rows from the start of the epoch; `pad` says how many
    /// (MXNet `NDArrayIter(last_batch_handle='pad')`).
    Pad,
    /// Fill the last batch from the start of the next pass and begin the next epoch after
    /// the rows borrowed, so no row is seen twice in a row (MXNet `round_batch=True`, the
    /// default of MXNet's LibSVMIter and of this crate's iterators).
    #[default]
    RoundBatch,
    /// Keep the leftover rows and put them first in the next epoch
    /// (MXNet `last_batch_handle='roll_over'`).
    RollOver,
}

/// One batch: data (CSR for LibSVM, dense or CSR for arrays), label, and how many trailing
/// rows are padding (MXNet `DataBatch.pad`).
#[derive(Debug, Clone)]
pub struct Batch {
    /// `batch x features`.
    pub data: NDArray,
    /// Labels: dense `[batch]`/`[batch, k]`, or CSR `[batch, label_shape]`; `None` when the
    /// source has no labels.
    pub label: Option<NDArray>,
    /// Number of padding rows at the end of the batch.
    pub pad: usize,
}

/// A run of rows `r0..r1` of one parsed piece.
pub(crate) type Seg<'a> = (&'a Rows, usize, usize);

/// Build a `[rows, ncols]` CSR array from row runs (f32 values, i64 indices).
pub(crate) fn csr_from_segs(segs: &[Seg<'_>], ncols: usize) -> crate::Result<NDArray> {
    let rows: usize = segs.iter().map(|s| s.2 - s.1).sum();
    let nnz: usize = segs
        .iter()
        .map(|(p, a, b)| (p.indptr[*b] - p.indptr[*a]) as usize)
        .sum();
    let mut indptr = Vec::with_capacity(rows + 1);
    let mut indices = Vec::with_capacity(nnz);
    let mut values = Vec::with_capacity(nnz);
    indptr.push(0i64);
    for &(p, a, b) in segs {
        let (s, e) = (p.indptr[a] as usize, p.indptr[b] as usize);
        let base = indices.len() as i64 - s as i64;
        indices.extend_from_slice(&p.indices[s..e]);
        values.extend_from_slice(&p.values[s..e]);
        indptr.extend(p.indptr[a + 1..=b].iter().map(|x| x + base));
    }
    csr_array(rows, ncols, indptr, indices, values)
}

/// Wrap CSR parts (valid by construction: sorted unique columns below `ncols`) into an
/// NDArray. The constructor still checks what kernels rely on (O(nnz), small next to parsing):
/// a parser bug then surfaces as an error, not as out-of-bounds reads.
pub(crate) fn csr_array(
    rows: usize,
    ncols: usize,
    indptr: Vec<i64>,
    indices: Vec<i64>,
    values: Vec<f32>,
) -> crate::Result<NDArray> {
    Ok(NDArray::csr_unchecked(
        values,
        indices,
        indptr,
        [rows, ncols],
    )?)
}

/// CSR labels `[rows, ncols]` from the label columns of row runs.
pub(crate) fn csr_labels_from_segs(segs: &[Seg<'_>], ncols: usize) -> crate::Result<NDArray> {
    let rows: usize = segs.iter().map(|s| s.2 - s.1).sum();
    let mut indptr = Vec::with_capacity(rows + 1);
    let mut indices = Vec::new();
    let mut values = Vec::new();
    indptr.push(0i64);
    for &(p, a, b) in segs {
        let (s, e) = (p.label_ptr[a] as usize, p.label_ptr[b] as usize);
        let base = indices.len() as i64 - s as i64;
        indices.extend_from_slice(&p.label_indices[s..e]);
        values.extend_from_slice(&p.labels[s..e]);
        indptr.extend(p.label_ptr[a + 1..=b].iter().map(|x| x + base));
    }
    csr_array(rows, ncols, indptr, indices, values)
}

/// Dense labels from row runs whose rows hold exactly `k` labels each (checked by the caller):
/// shape `[rows]` when `k == 1`, else `[rows, k]`.
pub(crate) fn dense_labels_from_segs(segs: &[Seg<'_>], k: usize) -> NDArray {
    let rows: usize = segs.iter().map(|s| s.2 - s.1).sum();
    let mut v = Vec::with_capacity(rows * k);
    for &(p, a, b) in segs {
        v.extend_from_slice(&p.labels[p.label_ptr[a] as usize..p.label_ptr[b] as usize]);
    }
    dense_labels(v, rows, k)
}

/// Dense labels from `rows * k` values: shape `[rows]` when `k == 1`, else `[rows, k]`.
pub(crate) fn dense_labels(v: Vec<f32>, rows: usize, k: usize) -> NDArray {
    let shape: Vec<usize> = if k == 1 { vec![rows] } else { vec![rows, k] };
    // Both callers build exactly `rows * k` values (the label counts were checked per row
    // before), so the length check cannot fail.
    NDArray::from_vec(v, &shape).expect("dense labels: rows * k values")
}
