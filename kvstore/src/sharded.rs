//! Sharded row_sparse tables: a table and its optimizer state split by rows across the
//! workers. Each push sends every gradient row to the worker that owns it, which merges the
//! workers' rows and updates its shard (lazily, with the store's optimizer); each
//! `row_sparse_pull` asks the owners for the rows a worker needs. No worker holds more than its
//! shard and the rows of its own batches, so a table larger than one machine's memory trains.

use std::ops::Range;

use sparrow_core::{DType, Error, NDArray, Result, SType};
use sparrow_optim::State;

use crate::store::{merge_rows, unknown_key, Slot, SyncStore};
use crate::transport::{poison_parts, Transport};
use crate::wire::{self, Header};

pub use sparrow_optim::shard_range;

/// This worker's part of a sharded table.
pub(crate) struct Shard {
    /// The whole table's shape.
    pub(crate) shape: Vec<usize>,
    pub(crate) dtype: DType,
    /// The rows this worker owns.
    pub(crate) lo: usize,
    pub(crate) hi: usize,
    /// Those rows, dense `[hi - lo, shape[1..]...]`.
    pub(crate) value: NDArray,
    pub(crate) state: Option<State>,
}

impl<T: Transport> SyncStore<T> {
    /// Make `key` a sharded table of `shape` and `dtype`: this worker owns the rows
    /// [`shard_range`]`(shape[0], rank, num_workers)` and `shard` holds them (dense, those
    /// rows' count first). Collective: every worker calls it with the same key, shape and
    /// dtype. Pushes to the key must be row_sparse and need an optimizer on the store
    /// ([`sparrow_optim::KVStore::set_optimizer`]); `row_sparse_pull` fetches rows from
    /// their owners, `pull` the whole table (avoid it for a large one).
    pub fn init_sharded(&mut self, key: usize, shape: &[usize], shard: &NDArray) -> Result<()> {
        self.init_sharded_with(key, shape, shard, false)
    }

    /// [`SyncStore::init_sharded`] keeping `shard` itself as this worker's rows
    /// ([`KVStore::init_sharded_shared`](sparrow_optim::KVStore::init_sharded_shared)).
    pub fn init_sharded_shared(
        &mut self,
        key: usize,
        shape: &[usize],
        shard: &NDArray,
    ) -> Result<()> {
        self.init_sharded_with(key, shape, shard, true)
    }

    fn init_sharded_with(
        &mut self,
        key: usize,
        shape: &[usize],
        shard: &NDArray,
        shared: bool,
    ) -> Result<()> {
        const OP: &str = "KVStore::init_sharded";
        let (rank, n) = (self.transport.rank(), self.transport.size());
        let (lo, hi) = shape
            .first()
            .map(|&rows| shard_range(rows, rank, n))
            .unwrap_or((0, 0));
        let mut want = shape.to_vec();
        if let Some(r) = want.first_mut() {
            *r = hi - lo;
        }
        let local = if self.contains(key) {
            Err(Error::arg(OP, format!("key {key} is already initialized")))
        } else if shape.len() < 2 {
            Err(Error::shape(
                OP,
                format!("key {key}: a sharded table is at least 2-d, got {shape:?}"),
            ))
        } else if shard.stype() != SType::Dense || shard.shape() != want {
            Err(Error::shape(
                OP,
                format!(
                    "key {key}: worker {rank} owns rows {lo}..{hi} of {shape:?}, so its shard is \
                     a dense {want:?} array; got {} {:?}",
                    wire::stype_name(shard.stype()),
                    shard.shape()
                ),
            ))
        } else if shared {
            Ok(shard.clone())
        } else {
            // A copy, as MXNet's init, unless the caller hands its array over; made before
            // the agreement so that a copy this worker cannot allocate fails every worker's call.
            shard.try_copy()
        };
        // The header carries the whole table's shape, which every worker must agree on.
        let mut header = Header::new("init_sharded", key, local.as_ref().map(|_| shard));
        if local.is_ok() {
            header.shape = shape.iter().map(|&d| d as u64).collect();
        }
        self.agree(OP, header, true)?;
        self.slots.insert(
            key,
            Slot::Sharded(Shard {
                shape: shape.to_vec(),
                dtype: shard.dtype(),
                lo,
                hi,
                value: local?,
                state: None,
            }),
        );
        Ok(())
    }

    /// The rows `lo..hi` of a sharded key on this worker (its shard), and a handle of them.
    pub fn shard(&self, key: usize) -> Result<(usize, usize, NDArray)> {
        match self.slots.get(&key) {
            Some(Slot::Sharded(s)) => Ok((s.lo, s.hi, s.value.clone())),
            Some(Slot::Replicated(_)) => Err(Error::arg(
                "KVStore::shard",
                format!("key {key} is replicated, not sharded"),
            )),
            None => Err(unknown_key("KVStore::shard", key)),
        }
    }
}

/// The first of `ids` outside `range`, if any. The common case, none, is one pass without an
/// exit per id (it vectorizes); the offending id is looked for only when there is one.
pub(crate) fn first_outside(ids: &[i64], range: Range<i64>) -> Option<i64> {
    let outside = |i: i64| (i < range.start) | (i >= range.end);
    if ids.iter().fold(false, |bad, &i| bad | outside(i)) {
        ids.iter().copied().find(|&i| outside(i))
    } else {
        None
    }
}

/// Every worker's owner ranges of a `rows`-row table.
fn owners(rows: usize, n: usize) -> Vec<(usize, usize)> {
    (0..n).map(|r| shard_range(rows, r, n)).collect()
}

/// Split sorted `ids` by owner: the index range of `ids` each worker owns.
fn split_ids(ids: &[i64], owners: &[(usize, usize)]) -> Vec<(usize, usize)> {
    owners
        .iter()
        .map(|&(lo, hi)| {
            let a = ids.partition_point(|&i| (i as usize) < lo);
            let b = ids.partition_point(|&i| (i as usize) < hi);
            (a, b)
        })
        .collect()
}

/// A sharded push: each row of the (agreed, row_sparse) local sum goes to its owner; each
/// owner merges what the workers sent in worker order and updates its shard.
pub(crate) fn push<T: Transport>(
    store: &mut SyncStore<T>,
    key: usize,
    local: NDArray,
) -> Result<()> {
    let n = store.transport.size();
    let Some(Slot::Sharded(s)) = store.slots.get(&key) else {
        return Err(unknown_key("KVStore::push", key));
    };
    let shape = s.shape.clone();
    let row: usize = shape[1..].iter().product();
    // Every other owner's rows, one after another in one reused message; this worker's own
    // rows stay here (an empty part to itself).
    let rank = store.transport.rank();
    let mut w = wire::Writer(std::mem::take(&mut store.send));
    w.0.clear();
    let made = local.row_sparse_parts().and_then(|(ids, rows)| {
        let split = split_ids(&ids, &owners(shape[0], n));
        let mut parts = Vec::with_capacity(n);
        for (r, &(a, b)) in split.iter().enumerate() {
            let start = w.0.len();
            if r != rank {
                w.ids(&ids[a..b]).values_range(&rows, a * row..b * row)?;
            }
            parts.push(start..w.0.len());
        }
        Ok((ids, rows, split, parts))
    });
    let (parts, made) = match made {
        Ok((ids, rows, split, parts)) => (parts, Ok((ids, rows, split))),
        // The value was agreed on, so the others are already in this exchange: this worker's
        // error (its rows could not be read) still takes part, and fails every owner's merge.
        Err(e) => (poison_parts(&mut w.0, n), Err(e)),
    };
    let mut recv = std::mem::take(&mut store.recv);
    let got = store.transport.all_to_all_into(&w.0, &parts, &mut recv);
    store.send = w.0;
    let (ids, rows, split) = match made {
        Ok(m) => m,
        Err(e) => {
            store.recv = recv;
            return Err(e);
        }
    };
    let got = got?;
    // The owner's merge, in worker order (its own part in its place), then its ids made local
    // to the shard.
    let (a, b) = split[rank];
    let mut mine = wire::Writer::default();
    mine.ids(&ids[a..b]).values_range(&rows, a * row..b * row)?;
    let slices: Vec<&[u8]> = got
        .iter()
        .enumerate()
        .map(|(r, p)| {
            if r == rank {
                &mine.0[..]
            } else {
                &recv[p.clone()]
            }
        })
        .collect();
    let merged = merge_rows(&slices, local.dtype(), &shape).and_then(|m| m.row_sparse_parts());
    store.recv = recv;
    let (ids, vals) = merged?;
    apply_owned(store, "KVStore::push", key, &ids, &vals)
}

/// [`KVStore::update_owned`](sparrow_optim::KVStore::update_owned): `grad` (row_sparse, the
/// table's shape, only this worker's rows) applied to this worker's shard, no exchange.
pub(crate) fn update_owned<T: Transport>(
    store: &mut SyncStore<T>,
    key: usize,
    grad: &NDArray,
) -> Result<()> {
    const OP: &str = "KVStore::update_owned";
    let Some(Slot::Sharded(s)) = store.slots.get(&key) else {
        return Err(Error::arg(
            OP,
            format!("key {key} is not a sharded table of this store"),
        ));
    };
    if grad.stype() != SType::RowSparse || grad.shape() != s.shape || grad.dtype() != s.dtype {
        return Err(Error::shape(
            OP,
            format!(
                "key {key}: a gradient of the table is a row_sparse {} {:?} array; got {} {} {:?}",
                s.dtype.name(),
                s.shape,
                wire::stype_name(grad.stype()),
                grad.dtype().name(),
                grad.shape()
            ),
        ));
    }
    let (ids, vals) = grad.row_sparse_parts()?;
    apply_owned(store, OP, key, &ids, &vals)
}

/// Update this worker's shard of `key` with the gradient rows `ids` (the table's row ids, all
/// this worker's) and their values, with the store's optimizer.
fn apply_owned<T: Transport>(
    store: &mut SyncStore<T>,
    op: &'static str,
    key: usize,
    ids: &[i64],
    vals: &NDArray,
) -> Result<()> {
    let Some(Slot::Sharded(s)) = store.slots.get(&key) else {
        return Err(unknown_key(op, key));
    };
    let (shape, lo, hi) = (s.shape.clone(), s.lo, s.hi);
    let rows = i64::try_from(lo).unwrap_or(i64::MAX)..i64::try_from(hi).unwrap_or(i64::MAX);
    if let Some(bad) = first_outside(ids, rows) {
        return Err(Error::index(
            op,
            format!("key {key}: row {bad} is outside this worker's rows {lo}..{hi}"),
        ));
    }
    let mut shard_shape = shape;
    shard_shape[0] = hi - lo;
    let local_ids: Vec<i64> = ids.iter().map(|&i| i - lo as i64).collect();
    let grad = NDArray::row_sparse_from_arrays(vals, local_ids, &shard_shape)?;
    let opt = store
        .optimizer
        .as_mut()
        .ok_or_else(|| Error::arg(op, format!("key {key} is sharded: set_optimizer first")))?;
    let Some(Slot::Sharded(s)) = store.slots.get_mut(&key) else {
        return Err(unknown_key(op, key));
    };
    if s.state.is_none() {
        s.state = Some(opt.create_state(key, &s.value)?);
    }
    // Every owner updates every push, rows or not, so update counts (Adam's bias correction)
    // advance as they do for a replicated key.
    opt.update(
        key,
        &s.value,
        &grad,
        s.state.as_mut().expect("created above"),
    )
}

/// The rows `ids` (sorted, unique, in range) of a sharded key, fetched from their owners, as
/// a row_sparse array of the table's shape. Collective: `local` is this worker's error found
/// before the call, if any, which fails the call on every worker.
pub(crate) fn gather_rows<T: Transport>(
    store: &mut SyncStore<T>,
    key: usize,
    ids: &[i64],
    local: Result<()>,
) -> Result<NDArray> {
    const OP: &str = "KVStore::row_sparse_pull";
    let n = store.transport.size();
    let Some(Slot::Sharded(s)) = store.slots.get(&key) else {
        return Err(unknown_key(OP, key));
    };
    let (shape, dtype, lo, value) = (s.shape.clone(), s.dtype, s.lo, s.value.clone());
    // Everyone agrees on the key first, so a worker pulling another key fails everywhere.
    let mut header = Header::new("row_sparse_pull", key, local.as_ref().map(|_| &value));
    if local.is_ok() {
        header.shape = shape.iter().map(|&d| d as u64).collect();
    }
    store.agree(OP, header, true)?;
    // 1. Ask each owner for its rows among `ids`.
    let ranges = split_ids(ids, &owners(shape[0], n));
    let asks: Vec<Vec<u8>> = ranges
        .iter()
        .map(|&(a, b)| {
            let mut w = wire::Writer::default();
            w.ids(&ids[a..b]);
            w.0
        })
        .collect();
    let asked = store.transport.all_to_all(asks)?;
    // 2. Answer every worker with the rows it asked this one for, in one reused message.
    let row: usize = shape[1..].iter().product();
    let mut w = wire::Writer(std::mem::take(&mut store.send));
    w.0.clear();
    let answer = |w: &mut wire::Writer| -> Result<Vec<Range<usize>>> {
        let mut parts = Vec::with_capacity(n);
        for a in &asked {
            let want = wire::Reader::new(a).ids()?;
            let local: Vec<i64> = want.iter().map(|&i| i - lo as i64).collect();
            let rows = value.take_rows(&local)?;
            let start = w.0.len();
            // The rows' bytes alone: the asker knows how many it asked for.
            w.raw_values(&rows, 0..local.len() * row)?;
            parts.push(start..w.0.len());
        }
        Ok(parts)
    };
    // An ask this owner cannot answer fails the answers' exchange on every worker, not this
    // worker alone (the others would wait in it).
    let (parts, failed) = match answer(&mut w) {
        Ok(parts) => (parts, None),
        Err(e) => (poison_parts(&mut w.0, n), Some(e)),
    };
    let mut recv = std::mem::take(&mut store.recv);
    let got = store.transport.all_to_all_into(&w.0, &parts, &mut recv);
    store.send = w.0;
    if let Some(e) = failed {
        store.recv = recv;
        return Err(e);
    }
    let got = got?;
    // 3. Owners' ranges ascend, so their answers concatenate in row-id order.
    let end = got.last().map_or(0, |r| r.end);
    let mut rshape = shape.clone();
    rshape[0] = ids.len();
    let rows = NDArray::from_le_bytes(&recv[..end], dtype, &rshape);
    store.recv = recv;
    NDArray::row_sparse_from_arrays(&rows?, ids.to_vec(), &shape)
}
