//! The [`KVStore`] trait: MXNet's key-value store, the seam between a [`Trainer`](crate::Trainer)
//! and whatever sums gradients across devices, threads or processes.
//!
//! The trait lives here, in optim, and its implementations (`local`, `dist_sync` over MPI,
//! sharded tables) in the `sparrow-kvstore` crate: the [`Trainer`](crate::Trainer) must name the
//! trait, and a store that updates on the store side (`set_optimizer`) must run an
//! [`Optimizer`]; with the trait in a crate of its own, optim and that crate would need each
//! other. So optim defines what a store is, and `sparrow-kvstore` depends on optim.

use sparrow_core::{NDArray, Result};

use crate::optimizer::{Optimizer, State};

/// The rows `lo..hi` of a `rows`-row table that worker `rank` of `workers` owns when the
/// table is sharded ([`KVStore::init_sharded`]): contiguous blocks, sizes differing by at most
/// one.
pub fn shard_range(rows: usize, rank: usize, workers: usize) -> (usize, usize) {
    let at = |r: usize| (rows as u128 * r as u128 / workers.max(1) as u128) as usize;
    (at(rank), at(rank + 1))
}

/// What [`KVStore::sharded_dot`] keeps for its backward: every worker's batch restricted to
/// the rows of the table this worker owns, as one csr array (the workers' batches one after
/// another, columns counted from this worker's first row), and the first row of each
/// worker's batch in it (one entry per worker, then the total).
#[derive(Debug, Clone)]
pub struct ShardedDot {
    /// The workers' batches on this worker's columns, `[sum of batch rows, shard rows]`.
    pub own: NDArray,
    /// Where each worker's batch starts in `own`, and its row count at the end.
    pub starts: Vec<usize>,
}

/// The backward of one [`KVStore::sharded_dot`], as [`KVStore::pushpull_with_products`]
/// takes it: the table's key, what the product returned, and the gradient of this worker's
/// product (`[batch rows, table columns]`).
#[derive(Debug, Clone, Copy)]
pub struct ProductGrad<'a> {
    /// The sharded table's key.
    pub key: usize,
    /// What [`KVStore::sharded_dot`] returned beside the product.
    pub parts: &'a ShardedDot,
    /// The gradient of this worker's product.
    pub dy: &'a NDArray,
}

/// The error of a sharded-table call on a store that keeps no sharded tables.
fn no_tables(op: &'static str, kind: &str, key: usize) -> sparrow_core::Error {
    sparrow_core::Error::arg(
        op,
        format!("the '{kind}' store keeps no sharded tables (key {key})"),
    )
}

/// A key-value store with MXNet's semantics (`mx.kv.create(...)`).
///
/// Keys are integers (a [`Trainer`](crate::Trainer) uses each parameter's index). Every worker
/// of a store (a thread of a `local` group, a rank of `dist_sync`) calls the collective methods
/// (`init`, `push`, `pushpull`, `barrier`, and `row_sparse_pull` on a sharded table) for the
/// same keys in the same order, as MXNet's synchronous stores require.
///
/// - `init(key, value)`: the key's first value; every worker ends up with worker 0's value (a
///   distributed store broadcasts it, so replicas start equal).
/// - `push(key, values)`: the values (one per device) are summed, then summed over the workers
///   (dense values by an all-reduce, row_sparse values by exchanging their rows only). Without
///   an optimizer the key then holds that sum; with one ([`KVStore::set_optimizer`]) the sum is
///   the gradient of an update of the key's value (update on the store).
/// - `pull(key, out)`: copies the key's value into every `out`.
/// - `row_sparse_pull(key, out, row_ids)`: the rows `row_ids` of the key's value, as row_sparse
///   arrays in `out`.
///
/// Wrong use (an unknown key, a second `init`, a value of another shape, dtype or storage type
/// than the key's) is an error, raised on every worker when a worker's push disagrees with the
/// others', never a hang or a wrong sum.
pub trait KVStore: Send {
    /// The store's type, as MXNet names it (`local`, `dist_sync`).
    fn kind(&self) -> &'static str;

    /// This worker's index in `0..num_workers()`.
    fn rank(&self) -> usize;

    /// How many workers push to this store.
    fn num_workers(&self) -> usize;

    /// Give `key` its first value (worker 0's on every worker). Collective.
    fn init(&mut self, key: usize, value: &NDArray) -> Result<()>;

    /// [`KVStore::init`], but the store keeps `value` itself as this worker's replica of the
    /// key instead of a copy (after setting it to worker 0's value): the store's updates
    /// (with an optimizer set) write into `value`, and a `pull` into `value` copies nothing.
    /// A [`Trainer`](crate::Trainer) that updates on the store inits its weights so, so that
    /// pulling a large weight back after each step costs no copy of it. Writes to `value` by
    /// its other holders reach the store. The default is `init` then `pull` into `value`
    /// (a store that cannot share keeps a copy). Collective.
    fn init_shared(&mut self, key: usize, value: &NDArray) -> Result<()> {
        self.init(key, value)?;
        self.pull(key, std::slice::from_ref(value))
    }

    /// Push `values` (one per device; at least one) to `key`: summed over the values and over
    /// the workers, then stored or applied as a gradient (see the trait's notes). Collective.
    fn push(&mut self, key: usize, values: &[NDArray]) -> Result<()>;

    /// Copy `key`'s value into every array of `out` (each of the key's shape and dtype).
    fn pull(&mut self, key: usize, out: &[NDArray]) -> Result<()>;

    /// `push(key, values)` then `pull(key, out)`; `out` may be `values` themselves.
    fn pushpull(&mut self, key: usize, values: &[NDArray], out: &[NDArray]) -> Result<()> {
        self.push(key, values)?;
        self.pull(key, out)
    }

    /// `pushpull` of several keys at once: `values[i]` is pushed to `keys[i]` and the result
    /// pulled into `out[i]` (MXNet's list form of `pushpull`). A store may sum all keys in a
    /// few collective calls instead of two per key; every worker passes the same keys in the
    /// same order.
    fn pushpull_many(&mut self, keys: &[usize], values: &[NDArray], out: &[NDArray]) -> Result<()> {
        check_many("KVStore::pushpull_many", keys, values, out)?;
        for ((&k, v), o) in keys.iter().zip(values).zip(out) {
            self.pushpull(k, std::slice::from_ref(v), std::slice::from_ref(o))?;
        }
        Ok(())
    }

    /// Make `key` a table of `shape` split by rows across the workers: this worker owns the
    /// rows [`shard_range`]`(shape[0], rank, num_workers)` and `shard` holds them (dense,
    /// those rows' count first); no worker holds the whole table. Pushes to the key are
    /// row_sparse gradients that the rows' owners merge and apply with the store's optimizer
    /// (update on the store); [`KVStore::row_sparse_pull`] fetches rows from their owners.
    /// Collective: every worker calls it with the same key and shape. The default refuses (a
    /// store that cannot shard).
    fn init_sharded(&mut self, key: usize, shape: &[usize], _shard: &NDArray) -> Result<()> {
        Err(sparrow_core::Error::arg(
            "KVStore::init_sharded",
            format!(
                "key {key} ({shape:?}): the '{}' store does not shard tables",
                self.kind()
            ),
        ))
    }

    /// [`KVStore::init_sharded`], but the store keeps `shard` itself as this worker's rows
    /// instead of a copy, as [`KVStore::init_shared`] does for a replicated key: the shard then
    /// takes its memory once, not twice while the call copies it (a worker whose shard fills
    /// most of its memory could not hold two). The store's updates write into `shard`, and
    /// writes to it by its other holders reach the store. The default is `init_sharded` (a
    /// store that cannot share keeps a copy). Collective.
    fn init_sharded_shared(&mut self, key: usize, shape: &[usize], shard: &NDArray) -> Result<()> {
        self.init_sharded(key, shape, shard)
    }

    /// This worker's shard of the sharded table `key` ([`KVStore::init_sharded`]): its rows
    /// `lo..hi` and a handle of them (the store's own array: a value assigned to it is the
    /// store's). Not collective. The default refuses (a store that cannot shard).
    fn table_shard(&self, key: usize) -> Result<(usize, usize, NDArray)> {
        Err(no_tables("KVStore::table_shard", self.kind(), key))
    }

    /// `x . table` for the sharded table `key` ([`KVStore::init_sharded`], 2-d) and a csr batch
    /// `x` with one column per table row, computed by the rows' owners: every worker's batch
    /// goes to every worker, each multiplies the batches' columns it owns by its rows, and
    /// each worker sums the products its batch got from the owners (in owner order). Only the
    /// batches and the `[batch, table columns]` products travel, not the rows, and each
    /// worker reads and writes only its own rows. Returns the product and what
    /// [`KVStore::sharded_dot_backward`] needs. Collective: every worker calls it with the same
    /// key at the same point of its step. The default refuses (a store that cannot shard).
    fn sharded_dot(&mut self, key: usize, x: &NDArray) -> Result<(NDArray, ShardedDot)> {
        let _ = x;
        Err(no_tables("KVStore::sharded_dot", self.kind(), key))
    }

    /// The gradient of this worker's rows of the table `key` from a [`KVStore::sharded_dot`]
    /// whose product got the gradient `dy` (dense, `[batch, table columns]`): every worker's
    /// `dy` goes to every worker, and each computes the gradient of its own rows over all the
    /// workers' batches (row_sparse, the table's shape and row ids, only this worker's rows),
    /// complete: [`KVStore::update_owned`] applies it on this worker alone. Collective, like
    /// the product. The default refuses.
    fn sharded_dot_backward(
        &mut self,
        key: usize,
        parts: &ShardedDot,
        dy: &NDArray,
    ) -> Result<NDArray> {
        let _ = (parts, dy);
        Err(no_tables("KVStore::sharded_dot_backward", self.kind(), key))
    }

    /// [`KVStore::pushpull_many`] and the backward of the sharded products `products` (as
    /// [`KVStore::sharded_dot_backward`] of each, in order) together where the store can: the
    /// products' headers travel with the keys' values and their gradients right after, so a
    /// training step whose only other exchange would be the product's backward waits for the
    /// other workers once instead of twice. Returns each product's gradient of this worker's rows. Collective;
    /// every worker passes the same keys and the same products' keys in the same order. The
    /// default makes the calls one after another.
    fn pushpull_with_products(
        &mut self,
        keys: &[usize],
        values: &[NDArray],
        out: &[NDArray],
        products: &[ProductGrad<'_>],
    ) -> Result<Vec<NDArray>> {
        self.pushpull_many(keys, values, out)?;
        products
            .iter()
            .map(|p| self.sharded_dot_backward(p.key, p.parts, p.dy))
            .collect()
    }

    /// Apply `grad` (row_sparse, the table's shape and row ids, only rows this worker owns) to
    /// this worker's shard of the sharded table `key` with the store's optimizer, as a push
    /// would once the owners had merged the workers' rows, but with no exchange: the gradient
    /// of a [`KVStore::sharded_dot`] is already complete on its owner. Not collective; every
    /// worker calls it where the others would push. The default refuses.
    fn update_owned(&mut self, key: usize, grad: &NDArray) -> Result<()> {
        let _ = grad;
        Err(no_tables("KVStore::update_owned", self.kind(), key))
    }

    /// The rows `row_ids` (any order, repeats ignored) of `key`'s value, as a row_sparse array
    /// assigned to every `out` (each of the key's shape and dtype). Collective on stores whose
    /// rows live on other workers (sharded tables).
    fn row_sparse_pull(&mut self, key: usize, out: &[NDArray], row_ids: &[i64]) -> Result<()>;

    /// Update on the store: from now on a push is the gradient of an update of the key's value
    /// by `optimizer` (the optimizer index of a key is the key; its options' multipliers and
    /// `rescale_grad` apply). A store's optimizer is set once: a second call is an error (the
    /// keys' states belong to the first), and the store keeps the one it has.
    fn set_optimizer(&mut self, optimizer: Box<dyn Optimizer>) -> Result<()>;

    /// Whether an optimizer is set ([`KVStore::set_optimizer`]).
    fn has_optimizer(&self) -> bool;

    /// The optimizer set with [`KVStore::set_optimizer`], if any (a
    /// [`Trainer`](crate::Trainer) that updates on the store reads its learning rate here).
    fn optimizer(&self) -> Option<&(dyn Optimizer + 'static)>;

    /// The optimizer set with [`KVStore::set_optimizer`], mutable: a
    /// [`Trainer`](crate::Trainer) that updates on the store sets each step's `rescale_grad`
    /// and its parameters' multipliers there, and learning-rate changes go there.
    fn optimizer_mut(&mut self) -> Option<&mut (dyn Optimizer + 'static)>;

    /// The optimizer state of `key` kept by this worker's store, once a push has updated the
    /// key (or [`KVStore::set_optimizer_state`] gave it one); `None` on stores that keep no
    /// states here (the default).
    fn optimizer_state(&self, _key: usize) -> Option<&State> {
        None
    }

    /// Replace the optimizer state of `key` (loading saved states in update-on-store mode).
    /// The caller checks the state's arrays against the key (as `Trainer::load_states` does).
    /// Not collective: every worker sets its own replica's. The default refuses.
    fn set_optimizer_state(&mut self, key: usize, _state: State) -> Result<()> {
        Err(sparrow_core::Error::arg(
            "KVStore::set_optimizer_state",
            format!(
                "key {key}: the '{}' store does not take optimizer states",
                self.kind()
            ),
        ))
    }

    /// Wait until every worker has reached the barrier. Collective.
    fn barrier(&mut self) -> Result<()>;

    /// Bytes this worker has handed to its transport to send so far, when the store counts
    /// them (for traffic reports); `None` otherwise.
    fn bytes_sent(&self) -> Option<u64> {
        None
    }

    /// Time this worker has spent inside its transport's collective calls so far (moving
    /// bytes and waiting for the other workers), when the store measures it; `None`
    /// otherwise.
    fn exchange_time(&self) -> Option<std::time::Duration> {
        None
    }
}

/// The lists of [`KVStore::pushpull_many`] must have one value and one output per key, and no
/// key twice.
pub fn check_many(
    op: &'static str,
    keys: &[usize],
    values: &[NDArray],
    out: &[NDArray],
) -> Result<()> {
    if values.len() != keys.len() || out.len() != keys.len() {
        return Err(sparrow_core::Error::arg(
            op,
            format!(
                "{} keys, {} values and {} outputs (one of each per key)",
                keys.len(),
                values.len(),
                out.len()
            ),
        ));
    }
    let mut seen = keys.to_vec();
    seen.sort_unstable();
    if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
        return Err(sparrow_core::Error::arg(
            op,
            format!("key {} is listed twice", w[0]),
        ));
    }
    Ok(())
}
