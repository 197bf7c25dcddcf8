//! Tables sharded across the workers, driven by the [`Trainer`]: Gluon's row_sparse weight on
//! a distributed store (`Parameter(stype='row_sparse')`, `row_sparse_data(row_ids)` before the
//! forward, `trainer.step` after the backward), with MXNet's server-side slicing of large
//! arrays done by the workers themselves.
//!
//! A table is a key of the trainer's store made with [`KVStore::init_sharded`]: each worker
//! holds only its block of rows ([`shard_range`](crate::shard_range)) and the optimizer state
//! of those rows. Each step a worker pulls the rows its batch reads
//! ([`Trainer::pull_rows`] / [`Trainer::pull_rows_for`]), computes with them as a leaf of the
//! autograd graph, and `step` pushes their gradient to the rows' owners, who merge the
//! workers' rows and update them with the trainer's optimizer (lazily where it is lazy), with
//! the step's `rescale_grad` and learning rate like every other key. No worker ever holds the
//! whole table, so a table larger than one machine's memory trains.

use std::collections::HashMap;
use std::path::Path;

use serde_json::json;
use sparrow_core::{sparse, DType, Error, NDArray, Result, SType};

use super::Trainer;
use crate::optimizer::State;
use crate::persist;

/// The metadata key of a table shard file: the table's name, shape and this shard's rows.
const TABLE_META: &str = "table";
/// The tensor of a table shard file holding the shard's rows.
const ROWS_TENSOR: &str = "table.rows";

/// A table made with [`Trainer::add_sharded_table`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableId(usize);

/// One sharded table: its key in the store and the rows pulled for the step in progress.
pub(super) struct Table {
    key: usize,
    name: String,
    shape: Vec<usize>,
    dtype: DType,
    /// The row ids pulled this step (sorted, unique), their values (the leaf whose gradient
    /// the step pushes) and the id of the gradient array they had when pulled: a backward
    /// replaces it, so the same id at the step means no backward reached the rows.
    pulled: Option<(Vec<i64>, NDArray, Option<u64>)>,
    /// A state loaded ([`Trainer::load_table`]) before the optimizer went to the store, given
    /// to the store with it.
    pending: Option<State>,
}

impl Trainer {
    /// Add a table of `shape` (at least 2-d, rows first) that lives in the store split by
    /// rows across the workers. `shard(lo, hi)` gives this worker's rows `lo..hi` as a dense
    /// `[hi - lo, shape[1..]...]` array (draw them from a seed of your own: no worker ever
    /// sees the others'). Needs update on the store ([`Trainer::set_kvstore_update`]), since
    /// a row's owner runs its update. Collective: every worker adds the same tables in the
    /// same order, before its first step.
    ///
    /// Per step: [`Trainer::pull_rows`] (or [`Trainer::pull_rows_for`] for a csr batch) once
    /// per table before the forward, then the usual record / backward / `step(batch_size)`.
    /// A worker whose batch needs no rows of a table pushes none (the owners still count the
    /// update, as for every other key). The table's rows and optimizer states stay in the
    /// workers' stores: [`Trainer::save_states`] covers the parameters, and
    /// [`Trainer::save_table`] / [`Trainer::load_table`] each worker's shard of a table.
    ///
    /// ```text
    /// let mut trainer = Trainer::new(params, Adam::new(0.01))?
    ///     .with_kvstore_update(Box::new(dist_sync(timeout)?))?;
    /// let emb = trainer.add_sharded_table("first.weight", &[features, 128], |lo, hi| {
    ///     rng.uniform(-0.07, 0.07, &[hi - lo, 128], DType::F32)
    /// })?;
    /// // per batch (x: csr over `features` columns):
    /// let (xc, rows) = trainer.pull_rows_for(emb, &x)?;      // x . table == xc . rows
    /// let loss = autograd::record(|| loss_fn.forward(&rest.forward(&xc.dot(&rows)?)?, &y))?;
    /// loss.backward()?;
    /// trainer.step(batch_size)?;                             // rows' gradient to their owners
    /// ```
    pub fn add_sharded_table(
        &mut self,
        name: &str,
        shape: &[usize],
        shard: impl FnOnce(usize, usize) -> Result<NDArray>,
    ) -> Result<TableId> {
        const OP: &str = "Trainer::add_sharded_table";
        if !self.update_on_kvstore {
            return Err(Error::arg(
                OP,
                format!(
                    "table '{name}': a sharded table is updated by its rows' owners, in the \
                     store: call Trainer::set_kvstore_update first"
                ),
            ));
        }
        self.check_not_handed(OP)?;
        let key = self.params.len() + self.tables.len();
        let kv = self.kvstore.as_mut().ok_or_else(|| {
            Error::arg(
                OP,
                format!("table '{name}': update on kvstore without a store"),
            )
        })?;
        let rows = *shape
            .first()
            .ok_or_else(|| Error::shape(OP, format!("table '{name}': a table is at least 2-d")))?;
        let (lo, hi) = crate::shard_range(rows, kv.rank(), kv.num_workers());
        let value = match shard(lo, hi) {
            Ok(v) => v,
            Err(e) => {
                // The collective still runs, with a shard it refuses, so that every worker
                // fails here instead of waiting for this one.
                let _ = kv.init_sharded(key, shape, &NDArray::zeros(&[0], DType::F32)?);
                return Err(Error::arg(
                    OP,
                    format!("table '{name}': making rows {lo}..{hi}: {e}"),
                ));
            }
        };
        kv.init_sharded(key, shape, &value)
            .map_err(|e| Error::arg(OP, format!("table '{name}': {e}")))?;
        self.tables.push(Table {
            key,
            name: name.to_string(),
            shape: shape.to_vec(),
            dtype: value.dtype(),
            pulled: None,
            pending: None,
        });
        Ok(TableId(self.tables.len() - 1))
    }

    /// The rows `row_ids` (any order, repeats ignored) of a sharded table, fetched from their
    /// owners: returns the sorted distinct ids and their rows (dense, one row per id), a
    /// leaf whose gradient the next `step` pushes to the owners (Gluon's
    /// `param.row_sparse_data(row_ids)`). Collective. One pull per table per step: a second
    /// would leave the first one's gradient behind, so it is an error.
    pub fn pull_rows(&mut self, table: TableId, row_ids: &[i64]) -> Result<(Vec<i64>, NDArray)> {
        const OP: &str = "Trainer::pull_rows";
        let t = self.table(OP, table)?;
        if t.pulled.is_some() {
            return Err(Error::arg(
                OP,
                format!(
                    "table '{}' was already pulled this step: pull every id it needs at once, \
                     then step",
                    t.name
                ),
            ));
        }
        let (key, shape, dtype) = (t.key, t.shape.clone(), t.dtype);
        let kv = self
            .kvstore
            .as_mut()
            .ok_or_else(|| Error::arg(OP, "a sharded table without a store"))?;
        let out = NDArray::zeros_stype(&shape, dtype, SType::RowSparse)?;
        kv.row_sparse_pull(key, std::slice::from_ref(&out), row_ids)?;
        let (ids, rows) = out.row_sparse_parts()?;
        // The rows' values are a handle of their own: the leaf the gradient comes to.
        rows.attach_grad();
        let before = rows.grad().map(|g| g.id());
        let t = &mut self.tables[table.0];
        t.pulled = Some((ids.clone(), rows.clone(), before));
        Ok((ids, rows))
    }

    /// For a csr batch `x` over the table's rows as its columns: `x` renumbered to the
    /// columns it uses and those rows pulled ([`Trainer::pull_rows`]), so that `x . table ==
    /// xc . rows` (the first layer of the sparse tutorial's model on a sharded table).
    pub fn pull_rows_for(&mut self, table: TableId, x: &NDArray) -> Result<(NDArray, NDArray)> {
        const OP: &str = "Trainer::pull_rows_for";
        let t = self.table(OP, table)?;
        let dims = x.dims();
        if x.stype() != SType::Csr || dims.len() != 2 || dims[1] != t.shape[0] {
            return Err(Error::shape(
                OP,
                format!(
                    "table '{}' has {} rows, so the batch is a csr array with {} columns; got \
                     {:?} {:?}",
                    t.name,
                    t.shape[0],
                    t.shape[0],
                    x.stype(),
                    dims
                ),
            ));
        }
        let (cols, xc) = sparse::compact_columns(x)?;
        let (_, rows) = self.pull_rows(table, &cols)?;
        Ok((xc, rows))
    }

    /// Write this worker's shard of `table` to `path`: its rows and their optimizer state, in
    /// the optimizer-state file format (safetensors, every array and the metadata
    /// checksummed, written atomically), with the table's name and shape and the shard's
    /// rows `lo..hi` in the metadata. Not collective: each worker writes its own file (name
    /// them by rank), at the same step as the others and as [`Trainer::save_states`].
    pub fn save_table(&self, table: TableId, path: impl AsRef<Path>) -> Result<()> {
        const OP: &str = "Trainer::save_table";
        let t = self.table(OP, table)?;
        let kv = self
            .kvstore
            .as_ref()
            .ok_or_else(|| Error::arg(OP, "a sharded table without a store"))?;
        let (lo, hi, rows) = kv.table_shard(t.key)?;
        let state = if self.handed {
            kv.optimizer_state(t.key).cloned()
        } else {
            t.pending.clone()
        };
        let meta = json!({
            "name": t.name,
            "shape": t.shape,
            "lo": lo,
            "hi": hi,
            "rank": kv.rank(),
            "workers": kv.num_workers(),
        });
        let extra = persist::Extra {
            tensors: vec![(ROWS_TENSOR.to_string(), rows)],
            meta: vec![(TABLE_META.to_string(), meta.to_string())],
        };
        let optimizer = self.optimizer();
        persist::save_states_with(
            path.as_ref(),
            optimizer.name(),
            optimizer.options().num_update,
            std::slice::from_ref(&t.name),
            std::slice::from_ref(&state),
            &extra,
        )
        .map_err(|e| Error::arg(OP, format!("table '{}': {e}", t.name)))
    }

    /// Load this worker's shard of `table` from a file [`Trainer::save_table`] wrote by the
    /// worker that owned the same rows (same rank, as many workers): [`Trainer::load_table_from`]
    /// with that one file.
    pub fn load_table(&mut self, table: TableId, path: impl AsRef<Path>) -> Result<()> {
        self.load_table_from(table, &[path.as_ref()])
    }

    /// Load this worker's shard of `table` from the shard files [`Trainer::save_table`] wrote,
    /// by any number of workers: the rows this worker owns now are taken from the files whose
    /// rows overlap them (the others' headers alone are read), with their optimizer states
    /// (every state array is per row, so it is cut and joined as the rows are). The rows
    /// replace the shard's in the store, the state this worker's (before the first step it
    /// waits in the trainer and goes to the store with the optimizer). The files must be of a
    /// table of the same name, shape and dtype, saved with the same optimizer kind, and cover
    /// this worker's rows once; anything else is an error naming the file. Not collective.
    /// Each file read is read whole (about three times its rows' bytes at the peak).
    pub fn load_table_from<P: AsRef<Path>>(&mut self, table: TableId, paths: &[P]) -> Result<()> {
        const OP: &str = "Trainer::load_table";
        let t = self.table(OP, table)?;
        let (key, name, shape) = (t.key, t.name.clone(), t.shape.clone());
        let kv = self
            .kvstore
            .as_ref()
            .ok_or_else(|| Error::arg(OP, "a sharded table without a store"))?;
        let (rank, workers) = (kv.rank(), kv.num_workers());
        let (lo, hi, rows) = kv.table_shard(key)?;
        let fail = |path: &Path, what: String| {
            Error::arg(OP, format!("table '{name}', {}: {what}", path.display()))
        };
        // Which files hold which of this worker's rows, from their headers.
        let mut parts = Vec::new();
        let mut seen = Vec::with_capacity(paths.len());
        for path in paths {
            let path = path.as_ref();
            let meta = persist::read_meta(path).map_err(|e| fail(path, e.to_string()))?;
            let (f_lo, f_hi) = table_range(&meta, &name, &shape)
                .map_err(|what| fail(path, format!("{what}; this worker owns rows {lo}..{hi} of '{name}' {shape:?} (worker {rank} of {workers})")))?;
            seen.push(format!("{f_lo}..{f_hi} ({})", path.display()));
            let (a, b) = (f_lo.max(lo), f_hi.min(hi));
            if a < b {
                parts.push((a, b, f_lo, f_hi, path));
            }
        }
        parts.sort_by_key(|p| p.0);
        let mut next = lo;
        for &(a, b, _, _, path) in &parts {
            if a != next {
                let what = if a < next {
                    "holds rows another file gave"
                } else {
                    "leaves a gap"
                };
                return Err(fail(
                    path,
                    format!("{what}: rows {next}..{a} of this worker's {lo}..{hi}"),
                ));
            }
            next = b;
        }
        if next != hi {
            return Err(Error::arg(
                OP,
                format!(
                    "table '{name}': this worker owns rows {lo}..{hi} (worker {rank} of \
                     {workers}), and rows from {next} on are in none of the files; they hold \
                     rows {}",
                    seen.join(", ")
                ),
            ));
        }
        let optimizer = self.optimizer();
        let state_dtype = if crate::optimizer::uses_master(optimizer.options(), rows.dtype()) {
            DType::F32
        } else {
            rows.dtype()
        };
        let mut values = Vec::with_capacity(parts.len());
        let mut states: Vec<Option<State>> = Vec::with_capacity(parts.len());
        let mut num_update = 0;
        for &(a, b, f_lo, f_hi, path) in &parts {
            let mut f_shape = rows.shape();
            f_shape[0] = f_hi - f_lo;
            let shapes = HashMap::from([(
                0,
                (
                    optimizer.state_shape(&f_shape),
                    f_shape.clone(),
                    state_dtype,
                ),
            )]);
            let (n, mut st, (_, mut extras)) = persist::load_states_with(
                path,
                optimizer.name(),
                std::slice::from_ref(&name),
                &shapes,
                &[ROWS_TENSOR],
            )
            .map_err(|e| fail(path, e.to_string()))?;
            num_update = n;
            let v = extras
                .pop()
                .ok_or_else(|| fail(path, "no rows in the file".into()))?;
            if v.shape() != f_shape || v.dtype() != rows.dtype() {
                return Err(fail(
                    path,
                    format!(
                        "rows {:?} {}, the table's {f_lo}..{f_hi} are {f_shape:?} {}",
                        v.shape(),
                        v.dtype().name(),
                        rows.dtype().name()
                    ),
                ));
            }
            let cut = |x: &NDArray| -> Result<NDArray> {
                if (a, b) == (f_lo, f_hi) {
                    return Ok(x.clone());
                }
                x.slice_axis(0, Some((a - f_lo) as i64), Some((b - f_lo) as i64), 1)
            };
            values.push(cut(&v)?);
            let s = st.pop().flatten();
            states.push(match s {
                Some(mut s) => {
                    for (slot, arr) in &mut s.arrays {
                        if arr.shape().first() != Some(&(f_hi - f_lo)) {
                            return Err(fail(
                                path,
                                format!(
                                    "state slot {slot} {:?} is not one row per table row",
                                    arr.shape()
                                ),
                            ));
                        }
                        *arr = cut(arr)?;
                    }
                    Some(s)
                }
                None => None,
            });
        }
        let value = join_rows(&values)?;
        let state = join_states(&states).map_err(|what| {
            Error::arg(
                OP,
                format!("table '{name}': the files' optimizer states {what}"),
            )
        })?;
        // The store's own array: every holder of the shard sees the loaded rows.
        rows.assign(&value);
        if self.handed {
            if let Some(s) = state {
                let kv = self
                    .kvstore
                    .as_mut()
                    .ok_or_else(|| Error::arg(OP, "a sharded table without a store"))?;
                kv.set_optimizer_state(key, s)?;
            }
        } else {
            self.tables[table.0].pending = state;
        }
        self.optimizer_mut().options_mut().num_update = num_update;
        Ok(())
    }

    /// Give the table states loaded before the first step to the store (with the optimizer).
    pub(super) fn load_tables_into_store(&mut self) -> Result<()> {
        let Some(kv) = self.kvstore.as_mut() else {
            return Ok(());
        };
        for t in &mut self.tables {
            if let Some(s) = t.pending.take() {
                kv.set_optimizer_state(t.key, s)?;
            }
        }
        Ok(())
    }

    /// The table `id` names, or an error naming `op`.
    fn table(&self, op: &'static str, id: TableId) -> Result<&Table> {
        self.tables
            .get(id.0)
            .ok_or_else(|| Error::arg(op, format!("no table {}", id.0)))
    }

    /// The step's push of every table's pulled rows' gradient, in table order on every
    /// worker. A table not pulled this step pushes no rows; so does one whose pulled rows got
    /// no gradient, and that is then an error (after the pushes, so the other workers are not
    /// left waiting in a collective) unless stale gradients are ignored.
    pub(super) fn push_tables(&mut self) -> Result<()> {
        const OP: &str = "Trainer::step";
        let Some(kv) = self.kvstore.as_mut() else {
            return Ok(());
        };
        let mut stale = Vec::new();
        for t in &mut self.tables {
            let pulled = t.pulled.take();
            let was_pulled = pulled.is_some();
            let fresh = pulled.and_then(|(ids, rows, before)| {
                rows.grad()
                    .filter(|g| Some(g.id()) != before)
                    .map(|g| (ids, g))
            });
            let (ids, grad) = match fresh {
                // A dense leaf's gradient is dense; anything else is made so.
                Some((ids, g)) if g.stype() == SType::Dense => (ids, g),
                Some((ids, g)) => (ids, g.tostype(SType::Dense)?),
                None => {
                    if was_pulled {
                        stale.push(t.name.clone());
                    }
                    (Vec::new(), empty_rows(t)?)
                }
            };
            let g = NDArray::row_sparse_from_arrays(&grad, ids, &t.shape)?;
            kv.push(t.key, std::slice::from_ref(&g))
                .map_err(|e| Error::arg(OP, format!("table '{}': {e}", t.name)))?;
        }
        if !stale.is_empty() && !self.ignore_stale_grad {
            return Err(Error::arg(
                OP,
                format!(
                    "tables {stale:?}: their pulled rows have no gradient (no backward since the \
                     pull), so this worker pushed none; set_ignore_stale_grad(true) to allow it"
                ),
            ));
        }
        Ok(())
    }
}

/// The rows `lo..hi` a table shard file holds, from its metadata, if it is a shard of the table
/// `name` of `shape` (else what differs).
fn table_range(
    meta: &HashMap<String, String>,
    name: &str,
    shape: &[usize],
) -> std::result::Result<(usize, usize), String> {
    let saved: serde_json::Value = meta
        .get(TABLE_META)
        .and_then(|m| serde_json::from_str(m).ok())
        .ok_or("no table metadata (not a file of save_table)")?;
    let range = (saved["lo"].as_u64(), saved["hi"].as_u64());
    let same = saved["name"] == json!(name) && saved["shape"] == json!(shape);
    match range {
        (Some(lo), Some(hi)) if same && lo <= hi && hi as usize <= shape[0] => {
            Ok((lo as usize, hi as usize))
        }
        _ => Err(format!(
            "the file holds rows {}..{} of {} {} (worker {} of {})",
            saved["lo"],
            saved["hi"],
            saved["name"],
            saved["shape"],
            saved["rank"],
            saved["workers"]
        )),
    }
}

/// Rows from several files, in order, as one array (the one itself when there is one).
fn join_rows(parts: &[NDArray]) -> Result<NDArray> {
    match parts {
        [one] => Ok(one.clone()),
        _ => NDArray::concat(&parts.iter().collect::<Vec<_>>(), 0),
    }
}

/// The optimizer states of consecutive row ranges as one: their arrays joined by rows; the
/// update count and scalars must agree (they are per table, not per row).
fn join_states(parts: &[Option<State>]) -> std::result::Result<Option<State>, String> {
    if parts.iter().all(Option::is_none) {
        return Ok(None);
    }
    let states: Vec<&State> = parts
        .iter()
        .map(Option::as_ref)
        .collect::<Option<_>>()
        .ok_or("are missing in some files")?;
    let first = states[0];
    if states
        .iter()
        .any(|s| s.t != first.t || s.scalars != first.scalars)
    {
        return Err("differ in their update counts or scalars".into());
    }
    let mut out = first.clone();
    if states.len() == 1 {
        return Ok(Some(out));
    }
    for (slot, arr) in &mut out.arrays {
        let pieces = states
            .iter()
            .map(|s| s.arrays.iter().find(|(n, _)| n == slot).map(|(_, a)| a))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| format!("lack slot {slot} in some files"))?;
        *arr = NDArray::concat(&pieces, 0).map_err(|e| e.to_string())?;
    }
    Ok(Some(out))
}

/// No rows of a table: `[0, shape[1..]...]`.
fn empty_rows(t: &Table) -> Result<NDArray> {
    let mut shape = t.shape.clone();
    shape[0] = 0;
    NDArray::zeros(&shape, t.dtype)
}
