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
//!
//! [`KVStore::init_sharded`]: crate::KVStore::init_sharded

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::json;
use sparrow_core::{autograd, sparse, DType, Error, NDArray, Result, SType};
use sparrow_nn::{Parameter, RowSource};

use super::shared_store::{lock, SharedStore};
use super::Trainer;
use crate::optimizer::State;
use crate::persist;
use crate::{KVStore, ProductGrad, ShardedDot};

/// The metadata key of a table shard file: the table's name, shape and this shard's rows.
const TABLE_META: &str = "table";
/// The tensor of a table shard file holding the shard's rows.
const ROWS_TENSOR: &str = "table.rows";

/// A table made with [`Trainer::add_sharded_table`] or [`Trainer::shard_parameter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableId(usize);

/// One sharded table: how to pull its rows, and a state loaded before the first step.
pub(super) struct Table {
    rows: TableRows,
    /// A state loaded ([`Trainer::load_table`]) before the optimizer went to the store, given
    /// to the store with it.
    pending: Option<State>,
}

/// A recorded read of a table in the step in progress, whose gradient the step pushes.
enum Pulled {
    /// Rows pulled from their owners: their sorted distinct ids, their values (the leaf whose
    /// gradient the step pushes) and the id of the gradient array they had when pulled (a
    /// backward replaces it, so the same id at the step means no backward reached the rows).
    Rows {
        ids: Vec<i64>,
        rows: NDArray,
        before: Option<u64>,
    },
    /// A product computed by the owners ([`KVStore::sharded_dot`]): its backward leaves here
    /// what the step's exchange needs ([`ProductSlot`]).
    ///
    /// [`KVStore::sharded_dot`]: crate::KVStore::sharded_dot
    Product(Arc<Mutex<ProductSlot>>),
}

/// A product's backward, finished by the step: the backward only records the product's
/// gradient; the step sends it together with the other parameters' gradients
/// ([`KVStore::pushpull_with_products`]), so a step waits for the other workers once for
/// both, and the owners' gradient of their rows comes back here.
///
/// [`KVStore::pushpull_with_products`]: crate::KVStore::pushpull_with_products
#[derive(Default)]
pub(super) struct ProductSlot {
    /// What the product returned and the gradient of this worker's product, once per
    /// backward through it (a second backward adds up, as a leaf's gradient would).
    pending: Vec<(Arc<ShardedDot>, NDArray)>,
    /// The gradient of this worker's rows, after the step's exchange.
    grad: Option<NDArray>,
}

/// What pulling a table's rows needs: the trainer's store, the table's key and description,
/// and the list of this step's pulls. The trainer's own pulls ([`Trainer::pull_rows`]) and
/// the row source of a sharded [`Parameter`] are this same value.
#[derive(Clone)]
struct TableRows {
    store: SharedStore,
    key: usize,
    name: String,
    shape: Vec<usize>,
    dtype: DType,
    workers: usize,
    pulled: Arc<Mutex<Vec<Pulled>>>,
}

impl TableRows {
    /// Fetch the rows `row_ids` from their owners (collective); with `record`, as a leaf
    /// whose gradient the next step pushes.
    fn pull(&self, row_ids: &[i64], record: bool) -> Result<(Vec<i64>, NDArray)> {
        let out = NDArray::zeros_stype(&self.shape, self.dtype, SType::RowSparse)?;
        lock(&self.store).row_sparse_pull(self.key, std::slice::from_ref(&out), row_ids)?;
        let (ids, rows) = out.row_sparse_parts()?;
        if record {
            // The rows' values are a handle of their own: the leaf the gradient comes to.
            rows.attach_grad();
            let before = rows.grad().map(|g| g.id());
            self.pulls().push(Pulled::Rows {
                ids: ids.clone(),
                rows: rows.clone(),
                before,
            });
        }
        Ok((ids, rows))
    }

    fn pulls(&self) -> std::sync::MutexGuard<'_, Vec<Pulled>> {
        self.pulled.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The gradient of this step's pulls as one row_sparse array (several pulls of the same
    /// rows add up), or `None` when no pull got a gradient; `stale` says whether some pull
    /// got none; `owned` whether every read was a product computed by the owners (so the
    /// gradient holds only this worker's rows, complete: no exchange is needed to apply it).
    fn take_gradient(&self) -> Result<(Option<NDArray>, bool, bool)> {
        let pulls = std::mem::take(&mut *self.pulls());
        let owned = !pulls.is_empty() && pulls.iter().all(|p| matches!(p, Pulled::Product(_)));
        let mut stale = false;
        let mut sum: Option<NDArray> = None;
        for p in pulls {
            let g = match p {
                Pulled::Rows { ids, rows, before } => {
                    let Some(g) = rows.grad().filter(|g| Some(g.id()) != before) else {
                        stale = true;
                        continue;
                    };
                    // A dense leaf's gradient is dense; anything else is made so.
                    let g = if g.stype() == SType::Dense {
                        g
                    } else {
                        g.tostype(SType::Dense)?
                    };
                    NDArray::row_sparse_from_arrays(&g, ids, &self.shape)?
                }
                Pulled::Product(slot) => {
                    let Some(g) = lock_slot(&slot).grad.take() else {
                        stale = true;
                        continue;
                    };
                    g
                }
            };
            sum = Some(match sum {
                None => g,
                Some(s) => sparse::add_grads(&s, &g)?,
            });
        }
        Ok((sum, stale, owned))
    }
}

impl RowSource for TableRows {
    /// Inside `autograd::record` the rows are a leaf whose gradient the trainer's next step
    /// pushes to their owners; outside (an evaluation forward) they are plain values.
    fn pull_rows(&self, ids: &[i64]) -> Result<NDArray> {
        let (got, rows) = self.pull(ids, autograd::is_recording())?;
        if got.len() != ids.len() {
            return Err(Error::arg(
                "Parameter::pull_rows",
                format!(
                    "table '{}': the row ids must be sorted and distinct ({} asked, {} distinct)",
                    self.name,
                    ids.len(),
                    got.len()
                ),
            ));
        }
        Ok(rows)
    }

    /// The owners compute the product ([`KVStore::sharded_dot`]); inside `autograd::record`
    /// its backward records the product's gradient, which the next step sends to the owners
    /// with the other gradients ([`KVStore::pushpull_with_products`]) and whose rows'
    /// gradient it then applies on each owner.
    ///
    /// [`KVStore::sharded_dot`]: crate::KVStore::sharded_dot
    /// [`KVStore::pushpull_with_products`]: crate::KVStore::pushpull_with_products
    fn csr_dot(&self, x: &NDArray) -> Result<NDArray> {
        let named =
            |e: Error| Error::arg("Parameter::csr_dot", format!("table '{}': {e}", self.name));
        let (y, parts) = lock(&self.store).sharded_dot(self.key, x).map_err(named)?;
        if !autograd::is_recording() {
            return Ok(y);
        }
        let slot = Arc::new(Mutex::new(ProductSlot::default()));
        self.pulls().push(Pulled::Product(slot.clone()));
        // The product's input in the graph: the table is not an array here, so a scalar leaf
        // stands for it and gets no gradient; the backward's work is the table's gradient,
        // which the step computes with the owners (see `ProductSlot`).
        let anchor = NDArray::scalar(0f32);
        anchor.attach_grad();
        let parts = Arc::new(parts);
        Ok(autograd::record_op(
            "sharded_dot",
            y,
            &[&anchor],
            move |dy| {
                lock_slot(&slot).pending.push((parts.clone(), dy.clone()));
                Ok(vec![None])
            },
        ))
    }

    fn describe(&self) -> String {
        format!(
            "table '{}' {:?} sharded by rows over {} workers",
            self.name, self.shape, self.workers
        )
    }
}

impl Trainer {
    /// Add a table of `shape` (at least 2-d, rows first) that lives in the store split by
    /// rows across the workers. `shard(lo, hi)` gives this worker's rows `lo..hi` as a dense
    /// `[hi - lo, shape[1..]...]` array (draw them from a seed of your own: no worker ever
    /// sees the others'), which the store keeps as the shard, without a copy
    /// ([`KVStore::init_sharded_shared`]: a file-backed array mapped read-write is then updated
    /// in its file). Needs update on the store ([`Trainer::set_kvstore_update`]), since
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
    ///
    /// [`KVStore::init_sharded_shared`]: crate::KVStore::init_sharded_shared
    pub fn add_sharded_table(
        &mut self,
        name: &str,
        shape: &[usize],
        shard: impl FnOnce(usize, usize) -> Result<NDArray>,
    ) -> Result<TableId> {
        self.add_table("Trainer::add_sharded_table", name, shape, shard)
    }

    /// Make `param` a table sharded by rows across the workers, its rows and optimizer state
    /// in the store as with [`Trainer::add_sharded_table`], this worker's rows taken from the
    /// parameter's weight (initialize it alike on every worker, e.g. with the same seed). The
    /// parameter then holds no weight: its layers read it through the store in their forward.
    /// A [`sparrow_nn::Dense`] on a csr batch ([`Parameter::csr_dot`]) has the rows' owners
    /// compute its product and, from the gradient the backward leaves, their rows' gradient,
    /// which `step` computes with the other gradients' exchange and applies on each owner
    /// ([`KVStore::sharded_dot`], [`KVStore::pushpull_with_products`],
    /// [`KVStore::update_owned`]); an
    /// [`sparrow_nn::Embedding`] ([`Parameter::stage_for_ids`]) pulls the rows a batch reads,
    /// and `step` pushes their gradient to the rows' owners, who update them. So the
    /// single-process training loop runs unchanged: `record(|| loss(net.forward(x)))`,
    /// `backward`, `step`.
    ///
    /// [`KVStore::sharded_dot`]: crate::KVStore::sharded_dot
    /// [`KVStore::pushpull_with_products`]: crate::KVStore::pushpull_with_products
    /// [`KVStore::update_owned`]: crate::KVStore::update_owned
    ///
    /// When the whole weight does not fit one worker, leave the parameter uninitialized and
    /// use [`Trainer::shard_parameter_with`]. The parameter leaves the trainer's list of
    /// replicated parameters if it is there (later parameters' indices move down by one).
    /// Collective, before the first step, in the same order on every worker; needs update on
    /// the store ([`Trainer::set_kvstore_update`]). [`Trainer::save_table`] /
    /// [`Trainer::load_table`] save and load this worker's shard.
    ///
    /// ```text
    /// let mut trainer = Trainer::new(net.collect_params()?.iter().map(|(_, p)| p.clone()),
    ///                                Adam::new(0.01))?
    ///     .with_kvstore_update(Box::new(dist_sync(timeout)?))?;
    /// trainer.shard_parameter(first_layer.weight())?;
    /// // the loop of one process:
    /// let loss = autograd::record(|| loss_fn.forward(&net.forward(&x)?, &y))?;
    /// loss.backward()?;
    /// trainer.step(batch_size)?;
    /// ```
    pub fn shard_parameter(&mut self, param: &Parameter) -> Result<TableId> {
        const OP: &str = "Trainer::shard_parameter";
        let w = param.data().map_err(|e| {
            Error::arg(
                OP,
                format!(
                    "parameter '{}': {e} (shard_parameter_with makes the rows of an \
                     uninitialized one)",
                    param.name()
                ),
            )
        })?;
        self.shard_parameter_from(OP, param, |lo, hi| {
            w.slice_axis(0, Some(lo as i64), Some(hi as i64), 1)
        })
    }

    /// [`Trainer::shard_parameter`] for a parameter whose weight no worker holds whole:
    /// `shard(lo, hi)` gives this worker's rows `lo..hi` (a dense `[hi - lo, shape[1..]...]`
    /// array of the parameter's dtype), as for [`Trainer::add_sharded_table`]. The
    /// parameter's shape must be known; a weight it holds is dropped.
    pub fn shard_parameter_with(
        &mut self,
        param: &Parameter,
        shard: impl FnOnce(usize, usize) -> Result<NDArray>,
    ) -> Result<TableId> {
        self.shard_parameter_from("Trainer::shard_parameter_with", param, shard)
    }

    fn shard_parameter_from(
        &mut self,
        op: &'static str,
        param: &Parameter,
        shard: impl FnOnce(usize, usize) -> Result<NDArray>,
    ) -> Result<TableId> {
        let name = param.name().to_string();
        let shape = param.shape();
        if shape.len() < 2 || shape.contains(&0) {
            return Err(Error::shape(
                op,
                format!(
                    "parameter '{name}' has shape {shape:?}: a sharded table is at least 2-d, \
                     with every dim known"
                ),
            ));
        }
        if param.is_sharded() {
            return Err(Error::arg(
                op,
                format!("parameter '{name}' is already sharded"),
            ));
        }
        let dtype = param.dtype();
        let id = self.add_table(op, &name, &shape, |lo, hi| {
            let rows = shard(lo, hi)?;
            if rows.dtype() != dtype {
                return Err(Error::dtype(
                    op,
                    format!(
                        "rows of dtype {}, the parameter's is {}",
                        rows.dtype().name(),
                        dtype.name()
                    ),
                ));
            }
            Ok(rows)
        })?;
        if let Some(i) = self.params.iter().position(|p| p.same(param)) {
            // Before the first step no key is in the store yet, so the replicated
            // parameters' keys (their indices) may still move.
            self.params.remove(i);
            self.states.remove(i);
            self.consumed.remove(i);
        }
        let source = self.tables[id.0].rows.clone();
        param.set_row_source(Arc::new(source))?;
        Ok(id)
    }

    /// Make a table in the store (collective) and remember it.
    fn add_table(
        &mut self,
        op: &'static str,
        name: &str,
        shape: &[usize],
        shard: impl FnOnce(usize, usize) -> Result<NDArray>,
    ) -> Result<TableId> {
        if !self.update_on_kvstore {
            return Err(Error::arg(
                op,
                format!(
                    "table '{name}': a sharded table is updated by its rows' owners, in the \
                     store: call Trainer::set_kvstore_update first"
                ),
            ));
        }
        self.check_not_handed(op)?;
        // Above every replicated parameter's key and every table's (a sharded parameter
        // leaving the list lowers `params.len()`, not the tables' keys).
        let key = self
            .tables
            .iter()
            .map(|t| t.rows.key + 1)
            .max()
            .unwrap_or(0)
            .max(self.params.len());
        let store = self.kvstore.clone().ok_or_else(|| {
            Error::arg(
                op,
                format!("table '{name}': update on kvstore without a store"),
            )
        })?;
        let mut kv = lock(&store);
        let rows = *shape
            .first()
            .ok_or_else(|| Error::shape(op, format!("table '{name}': a table is at least 2-d")))?;
        let workers = kv.num_workers();
        let (lo, hi) = crate::shard_range(rows, kv.rank(), workers);
        let value = match shard(lo, hi) {
            Ok(v) => v,
            Err(e) => {
                // The collective still runs, with a shard it refuses, so that every worker
                // fails here instead of waiting for this one.
                let _ = kv.init_sharded(key, shape, &NDArray::zeros(&[0], DType::F32)?);
                return Err(Error::arg(
                    op,
                    format!("table '{name}': making rows {lo}..{hi}: {e}"),
                ));
            }
        };
        // The rows were made for the store: it keeps them (one copy of the shard in memory).
        kv.init_sharded_shared(key, shape, &value)
            .map_err(|e| Error::arg(op, format!("table '{name}': {e}")))?;
        drop(kv);
        self.tables.push(Table {
            rows: TableRows {
                store,
                key,
                name: name.to_string(),
                shape: shape.to_vec(),
                dtype: value.dtype(),
                workers,
                pulled: Arc::default(),
            },
            pending: None,
        });
        Ok(TableId(self.tables.len() - 1))
    }

    /// The rows `row_ids` (any order, repeats ignored) of a sharded table, fetched from their
    /// owners: returns the sorted distinct ids and their rows (dense, one row per id), a
    /// leaf whose gradient the next `step` pushes to the owners (Gluon's
    /// `param.row_sparse_data(row_ids)`). Collective. Several pulls in one step (the same
    /// table read twice) push the sum of their gradients.
    pub fn pull_rows(&mut self, table: TableId, row_ids: &[i64]) -> Result<(Vec<i64>, NDArray)> {
        self.table("Trainer::pull_rows", table)?
            .rows
            .pull(row_ids, true)
    }

    /// For a csr batch `x` over the table's rows as its columns: `x` renumbered to the
    /// columns it uses and those rows pulled ([`Trainer::pull_rows`]), so that `x . table ==
    /// xc . rows` (the first layer of the sparse tutorial's model on a sharded table).
    pub fn pull_rows_for(&mut self, table: TableId, x: &NDArray) -> Result<(NDArray, NDArray)> {
        const OP: &str = "Trainer::pull_rows_for";
        let t = self.table(OP, table)?;
        let dims = x.dims();
        let (name, rows) = (&t.rows.name, t.rows.shape[0]);
        if x.stype() != SType::Csr || dims.len() != 2 || dims[1] != rows {
            return Err(Error::shape(
                OP,
                format!(
                    "table '{name}' has {rows} rows, so the batch is a csr array with {rows} \
                     columns; got {:?} {:?}",
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
        let kv = lock(&t.rows.store);
        let (lo, hi, rows) = kv.table_shard(t.rows.key)?;
        let state = if self.handed {
            kv.optimizer_state(t.rows.key).cloned()
        } else {
            t.pending.clone()
        };
        let meta = json!({
            "name": t.rows.name,
            "shape": t.rows.shape,
            "lo": lo,
            "hi": hi,
            "rank": kv.rank(),
            "workers": kv.num_workers(),
        });
        drop(kv);
        let extra = persist::Extra {
            tensors: vec![(ROWS_TENSOR.to_string(), rows)],
            meta: vec![(TABLE_META.to_string(), meta.to_string())],
        };
        let optimizer = self.optimizer();
        persist::save_states_with(
            path.as_ref(),
            optimizer.name(),
            optimizer.options().num_update,
            std::slice::from_ref(&t.rows.name),
            std::slice::from_ref(&state),
            &extra,
        )
        .map_err(|e| Error::arg(OP, format!("table '{}': {e}", t.rows.name)))
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
        let (key, name, shape) = (t.rows.key, t.rows.name.clone(), t.rows.shape.clone());
        let store = t.rows.store.clone();
        let (rank, workers, (lo, hi, rows)) = {
            let kv = lock(&store);
            (kv.rank(), kv.num_workers(), kv.table_shard(key)?)
        };
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
        // The optimizer guard locks the store once it lives there: dropped before the store's
        // next use below.
        let (values, states, num_update) = {
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
            (values, states, num_update)
        };
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
                lock(&store).set_optimizer_state(key, s)?;
            }
        } else {
            self.tables[table.0].pending = state;
        }
        self.optimizer_mut().options_mut().num_update = num_update;
        Ok(())
    }

    /// Give the table states loaded before the first step to the store (with the optimizer).
    pub(super) fn load_tables_into_store(&mut self) -> Result<()> {
        for t in &mut self.tables {
            if let Some(s) = t.pending.take() {
                lock(&t.rows.store).set_optimizer_state(t.rows.key, s)?;
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

    /// The step's exchange of the parameters' gradients (`pushpull_many`), with the gradient
    /// of every product read from a table since the last step (tables in order, each one's
    /// reads in order: the same on every worker) in the same message; each product's
    /// gradient of this worker's rows goes back to its read, for [`Trainer::push_tables`].
    pub(super) fn pushpull_with_tables(
        &self,
        kv: &mut dyn KVStore,
        keys: &[usize],
        grads: &[NDArray],
        out: &[NDArray],
    ) -> Result<()> {
        let mut slots = Vec::new();
        let mut backs = Vec::new();
        for t in &self.tables {
            for p in t.rows.pulls().iter() {
                if let Pulled::Product(slot) = p {
                    for (parts, dy) in std::mem::take(&mut lock_slot(slot).pending) {
                        backs.push((t.rows.key, parts, dy));
                        slots.push(slot.clone());
                    }
                }
            }
        }
        let products: Vec<ProductGrad<'_>> = backs
            .iter()
            .map(|(key, parts, dy)| ProductGrad {
                key: *key,
                parts,
                dy,
            })
            .collect();
        let got = kv.pushpull_with_products(keys, grads, out, &products)?;
        if got.len() != slots.len() {
            return Err(Error::arg(
                "Trainer::step",
                format!(
                    "the '{}' store returned {} gradients for {} products",
                    kv.kind(),
                    got.len(),
                    slots.len()
                ),
            ));
        }
        for (slot, g) in slots.iter().zip(got) {
            let mut s = lock_slot(slot);
            s.grad = Some(match s.grad.take() {
                Some(prev) => sparse::add_grads(&prev, &g)?,
                None => g,
            });
        }
        Ok(())
    }

    /// The step's push of every table's pulled rows' gradient, in table order on every
    /// worker. A table not pulled this step pushes no rows; so does one whose pulled rows got
    /// no gradient, and that is then an error (after the pushes, so the other workers are not
    /// left waiting in a collective) unless stale gradients are ignored.
    pub(super) fn push_tables(&mut self) -> Result<()> {
        const OP: &str = "Trainer::step";
        let mut stale = Vec::new();
        for t in &self.tables {
            let t = &t.rows;
            let (grad, some_stale, owned) = t.take_gradient()?;
            if some_stale {
                stale.push(t.name.clone());
            }
            let g = match grad {
                Some(g) => g,
                None => NDArray::row_sparse_from_arrays(&empty_rows(t)?, Vec::new(), &t.shape)?,
            };
            // A table read only through products (the same layers on every worker) has its
            // gradient complete on each owner already: applied there, with no push.
            let mut store = lock(&t.store);
            let done = if owned {
                store.update_owned(t.key, &g)
            } else {
                store.push(t.key, std::slice::from_ref(&g))
            };
            done.map_err(|e| Error::arg(OP, format!("table '{}': {e}", t.name)))?;
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

fn lock_slot(slot: &Mutex<ProductSlot>) -> std::sync::MutexGuard<'_, ProductSlot> {
    slot.lock().unwrap_or_else(|e| e.into_inner())
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
fn empty_rows(t: &TableRows) -> Result<NDArray> {
    let mut shape = t.shape.clone();
    shape[0] = 0;
    NDArray::zeros(&shape, t.dtype)
}
