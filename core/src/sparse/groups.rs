//! The column grouping of a csr array, computed once and cached with the array.
//!
//! `dot(csr^T, dense)` (the row_sparse weight gradient of a Dense layer fed csr batches) sums,
//! for every column present in the batch, the rows of the head gradient picked by that column's
//! non-zeros. Finding those groups is a sort of the batch's column ids. On the sparse Gluon
//! tutorial's 10-row batches that sort was ~7% of a training step's instructions, all of it on
//! the training thread, though it depends only on the batch, which a data loader has in hand
//! long before the step. [`NDArray::prepare_csr_transpose`] computes it ahead (`LibSVMIter` does
//! so on its producer thread with `prepare_transpose`), and the backward uses it when present.
//!
//! The cache is keyed by the identity of the csr's shared index arrays and holds clones of them:
//! a later in-place edit through `Arc::make_mut` then copies instead of mutating what the cache
//! describes, and data replaced through `NDArray::write` no longer matches, so a stale grouping
//! is never used.

use std::any::{Any, TypeId};
use std::sync::{Arc, Mutex};

use crate::cpu::segment::{entry_rows, group_by_key};
use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, CsrData};
use crate::storage::IndexStorage;
use crate::{Device, NDArray};

/// A device backend's copy of a grouping, keyed by device and the backend's type for it.
type Upload = (Device, TypeId, Arc<dyn Any + Send + Sync>);

/// The non-zeros of a csr array grouped by column: what `csr^T . dense` needs to write each
/// output row once. Obtained from [`NDArray::csr_column_groups`].
#[derive(Debug)]
pub struct ColumnGroups {
    /// The csr structure this grouping describes (held so it cannot change underneath).
    indptr: IndexStorage,
    indices: IndexStorage,
    offset: usize,
    /// Sorted unique column ids; shared with the row_sparse results built from it.
    pub(crate) uniq: Arc<Vec<i64>>,
    /// Group `g` holds the entries `order[starts[g]..starts[g + 1]]` (`uniq.len() + 1` items).
    pub(crate) starts: Arc<Vec<usize>>,
    /// Entry positions (into this array's non-zeros), grouped by column, ascending within one.
    pub(crate) order: Arc<Vec<usize>>,
    /// The row of every non-zero.
    pub(crate) rows: Arc<Vec<usize>>,
    /// Copies of this grouping that device backends made ([`Self::upload_for`]): a grouping
    /// prepared ahead with its batch is copied to a device once, not at every product.
    uploads: Mutex<Vec<Upload>>,
}

impl ColumnGroups {
    /// Group the non-zeros of `c`.
    // On the host, through `IndexStorage`'s host view: the grouping is a sort that a data
    // loader's thread runs ahead of the step, and the csr products' kernels receive it through
    // the storage seam (`Storage::csr_t_dense`). A device backend would upload it, or group
    // with its own sort kernel.
    pub(crate) fn compute(c: &CsrData) -> ColumnGroups {
        let (uniq, starts, order) = group_by_key(c.indices());
        ColumnGroups::of(c, uniq, starts, order)
    }

    /// The grouping of `c` whose groups are `uniq`, `starts` and `order` (see the fields).
    fn of(c: &CsrData, uniq: Vec<i64>, starts: Vec<usize>, order: Vec<usize>) -> ColumnGroups {
        ColumnGroups {
            indptr: c.indptr.clone(),
            indices: c.indices.clone(),
            offset: c.offset,
            uniq: Arc::new(uniq),
            starts: Arc::new(starts),
            order: Arc::new(order),
            rows: Arc::new(entry_rows(&c.indptr)),
            uploads: Mutex::new(Vec::new()),
        }
    }

    /// This grouping for `c`, the same non-zeros with each column renumbered to its position
    /// among the distinct columns (`sparse::compact_columns`): columns `0..k`, the same groups
    /// (shared, not copied: it is made for every staged batch).
    pub(crate) fn relabelled(&self, c: &CsrData) -> ColumnGroups {
        ColumnGroups {
            indptr: c.indptr.clone(),
            indices: c.indices.clone(),
            offset: c.offset,
            uniq: Arc::new((0..self.uniq.len() as i64).collect()),
            starts: self.starts.clone(),
            order: self.order.clone(),
            rows: self.rows.clone(),
            uploads: Mutex::new(Vec::new()),
        }
    }

    /// The copy of this grouping of type `T` on `device`, made by `make` at the first call and
    /// kept with the grouping (a device backend's own layout of it).
    pub(crate) fn upload_for<T: Any + Send + Sync>(
        &self,
        device: Device,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<T>> {
        let key = TypeId::of::<T>();
        let mut uploads = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
        let found = uploads
            .iter()
            .find(|(d, t, _)| *d == device && *t == key)
            .and_then(|(_, _, v)| v.clone().downcast::<T>().ok());
        if let Some(v) = found {
            return Ok(v);
        }
        let made = Arc::new(make()?);
        uploads.push((device, key, made.clone()));
        Ok(made)
    }

    /// The distinct column ids as an index array on `device` (the row ids of `csr^T . dense`
    /// computed there), copied once per device.
    pub(crate) fn uniq_on(&self, device: Device) -> Result<IndexStorage> {
        if device == Device::Cpu {
            return Ok(IndexStorage::from(self.uniq.clone()));
        }
        let ids = self.upload_for(device, || {
            IndexStorage::from_arc_on(self.uniq.clone(), device)
        })?;
        Ok((*ids).clone())
    }

    /// Whether this grouping describes `c`'s current structure.
    pub(crate) fn matches(&self, c: &CsrData) -> bool {
        Arc::ptr_eq(self.indptr.host_arc(), c.indptr.host_arc())
            && Arc::ptr_eq(self.indices.host_arc(), c.indices.host_arc())
            && self.offset == c.offset
    }

    /// The distinct column ids present, ascending.
    pub fn columns(&self) -> &[i64] {
        &self.uniq
    }

    /// How many non-zeros fall in each of [`Self::columns`].
    pub fn counts(&self) -> impl Iterator<Item = usize> + '_ {
        self.starts.windows(2).map(|w| w[1] - w[0])
    }

    /// Every non-zero's position (among the array's non-zeros, in row order) once, grouped by
    /// column in the order of [`Self::columns`], ascending within a column: what
    /// [`NDArray::set_csr_column_order`] takes.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// [`Self::compute`] from a grouping order made elsewhere, checked against `c` (see
    /// [`NDArray::set_csr_column_order`]).
    fn from_order(c: &CsrData, order: Vec<usize>) -> Result<ColumnGroups> {
        const OP: &str = "set_csr_column_order";
        let idx = c.indices();
        if order.len() != idx.len() {
            return Err(Error::arg(
                OP,
                format!(
                    "the order has {} positions, the array {} non-zeros",
                    order.len(),
                    idx.len()
                ),
            ));
        }
        // One pass: each position's column read once (a position past the non-zeros reads
        // as column -1 and fails the check), the check folded without an exit per position,
        // which compiles to straight-line code (the columns are read at random places, and a
        // loop that branched on each check waited for each read), and the groups as it goes.
        let n = idx.len();
        let (mut uniq, mut starts) = (Vec::with_capacity(n), Vec::with_capacity(n + 1));
        let (mut grouped, mut prev) = (true, None::<(i64, usize)>);
        for (i, &p) in order.iter().enumerate() {
            let col = idx.get(p).copied().unwrap_or(-1);
            // Grouped: columns ascend, and positions ascend within a column.
            let after = prev.is_none_or(|(c0, p0)| (c0 < col) | ((c0 == col) & (p0 < p)));
            grouped &= (p < n) & after;
            if prev.is_none_or(|(c0, _)| c0 != col) {
                uniq.push(col);
                starts.push(i);
            }
            prev = Some((col, p));
        }
        if !grouped {
            let cols: Vec<i64> = order
                .iter()
                .map(|&p| idx.get(p).copied().unwrap_or(-1))
                .collect();
            return Err(Self::order_error(&cols, &order, n));
        }
        // Positions strictly ascend within a column and each names its own column, so none
        // repeats: with as many as there are non-zeros, every one is there.
        starts.push(order.len());
        Ok(ColumnGroups::of(c, uniq, starts, order))
    }

    /// The error of an order that is not a column grouping: its first offending position.
    /// `cols[i]` is the column of `order[i]` (-1 past the `n` non-zeros).
    fn order_error(cols: &[i64], order: &[usize], n: usize) -> Error {
        const OP: &str = "set_csr_column_order";
        for (i, (&col, &p)) in cols.iter().zip(order).enumerate() {
            if p >= n {
                return Error::arg(
                    OP,
                    format!("position {p} (at {i}) is past the {n} non-zeros"),
                );
            }
            if i > 0 {
                let (pc, pp) = (cols[i - 1], order[i - 1]);
                if !(pc < col || (pc == col && pp < p)) {
                    return Error::arg(
                        OP,
                        format!(
                            "not a column grouping at {i}: position {p} (column {col}) after \
                             position {pp} (column {pc}); columns ascend, positions ascend \
                             within a column"
                        ),
                    );
                }
            }
        }
        Error::arg(OP, "not a column grouping")
    }
}

impl NDArray {
    /// For a csr array: group its non-zeros by column now and keep the result with the array,
    /// so a later `dot(x^T, g)` (a sparse Dense layer's weight gradient) skips that sort. Meant
    /// for data-loading threads, which have the next batches in hand before the training thread
    /// needs them. Returns false, doing nothing, for dense and row_sparse arrays. Costs
    /// `~3 x nnz` words of memory for as long as the array lives.
    pub fn prepare_csr_transpose(&self) -> bool {
        let groups = match &*self.read() {
            ArrayData::Csr(c) => Arc::new(ColumnGroups::compute(c)),
            _ => return false,
        };
        *self.column_cache() = Some(groups);
        true
    }

    /// For a csr array: keep `order` as its column grouping, as [`Self::prepare_csr_transpose`]
    /// would, without the sort: every non-zero's position (in row order) once, grouped by
    /// column in ascending column order, positions ascending within a column (see
    /// [`ColumnGroups::order`]). For a caller that has the grouping from elsewhere: a sharded
    /// product's owner merges the workers' prepared groupings of their batches instead of
    /// sorting the batches it assembled from them. Checked in one pass; an order that is not
    /// exactly this array's grouping is an error naming where, and nothing is kept.
    pub fn set_csr_column_order(&self, order: Vec<usize>) -> Result<()> {
        let groups = match &*self.read() {
            ArrayData::Csr(c) => Arc::new(ColumnGroups::from_order(c, order)?),
            other => {
                return Err(Error::stype(
                    "set_csr_column_order",
                    format!("needs a csr array, got {:?}", other.stype()),
                ))
            }
        };
        *self.column_cache() = Some(groups);
        Ok(())
    }

    /// The column grouping cached by [`Self::prepare_csr_transpose`], if this is a csr array and
    /// the grouping still describes its current structure.
    pub fn csr_column_groups(&self) -> Option<Arc<ColumnGroups>> {
        match &*self.read() {
            ArrayData::Csr(c) => self.cached_groups_for(c),
            _ => None,
        }
    }

    /// The cached grouping if it describes `c` (the caller holds `c` from this array's data).
    pub(crate) fn cached_groups_for(&self, c: &CsrData) -> Option<Arc<ColumnGroups>> {
        self.column_cache()
            .as_ref()
            .filter(|g| g.matches(c))
            .cloned()
    }

    pub(crate) fn column_cache(&self) -> std::sync::MutexGuard<'_, Option<Arc<ColumnGroups>>> {
        self.inner
            .column_groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}
