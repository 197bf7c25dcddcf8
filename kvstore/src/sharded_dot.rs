//! The product of a csr batch and a sharded table, computed by the rows' owners
//! ([`KVStore::sharded_dot`](sparrow_optim::KVStore::sharded_dot)), and its backward.
//!
//! Pulling the rows a batch reads moves every distinct row the batch uses to the worker (a
//! 128-wide f32 row is 512 bytes) and its gradient back to the owner, and the owner then
//! updates rows it has not touched since the last step. Here the batch's non-zeros go to
//! the owners instead, each owner multiplies the columns it owns by its rows, and only the
//! `[batch, columns]` products come back; in the backward the product's gradient goes to
//! the owners, each computes its own rows' gradient over every worker's batch and applies it
//! itself (`KVStore::update_owned`). Each row is read, differentiated and updated by the one worker that holds
//! it, so the rows' memory traffic is split between the workers instead of repeated.

use std::ops::Range;

use sparrow_core::{sparse, DType, Element, Error, NDArray, Result, SType};
use sparrow_optim::ShardedDot;

use crate::sharded::Shard;
use crate::store::{concat_raw, sum_raw, unknown_key, Slot, SyncStore};
use crate::transport::Transport;
use crate::wire::{check_headers, Header, Plain, Reader, Writer};

const OP: &str = "KVStore::sharded_dot";
const OP_BACK: &str = "KVStore::sharded_dot_backward";

/// The sharded table `key` (2-d), or the error of a key that is not one.
fn table<'a, T: Transport>(
    store: &'a SyncStore<T>,
    op: &'static str,
    key: usize,
) -> Result<&'a Shard> {
    match store.slots.get(&key) {
        Some(Slot::Sharded(s)) if s.shape.len() == 2 => Ok(s),
        Some(Slot::Sharded(s)) => Err(Error::shape(
            op,
            format!(
                "key {key}: a product needs a 2-d table, this one is {:?}",
                s.shape
            ),
        )),
        Some(Slot::Replicated(_)) => Err(Error::arg(
            op,
            format!("key {key} is replicated, not a sharded table"),
        )),
        None => Err(unknown_key(op, key)),
    }
}

/// This worker's header for a call on the table `key`: the table's whole shape and dtype
/// (every worker's must agree), or the error it found before the call.
fn header(op: &str, key: usize, local: &Result<(Vec<usize>, DType)>) -> Header {
    match local {
        Ok((shape, dtype)) => Header {
            op: op.into(),
            key: key as u64,
            dtype: dtype.name().into(),
            stype: "default".into(),
            shape: shape.iter().map(|&d| d as u64).collect(),
            error: String::new(),
        },
        Err(e) => Header::new(op, key, Err(e)),
    }
}

/// Gather every worker's header for a call on the table `key` and, where its call is good,
/// the payload `write` appends: returns where each worker's part lies in the received buffer
/// and that buffer (the store's, to be handed back to `store.recv` once read). A payload that
/// fails to write makes this worker's part a header alone, which the others read as
/// malformed: every worker fails.
fn gather<T: Transport>(
    store: &mut SyncStore<T>,
    op: &str,
    key: usize,
    local: &Result<(Vec<usize>, DType)>,
    write: impl FnOnce(&mut Writer) -> Result<()>,
) -> (Result<Vec<Range<usize>>>, Vec<u8>) {
    let mut w = Writer(std::mem::take(&mut store.send));
    w.0.clear();
    w.bytes(&header(op, key, local).encode());
    if local.is_ok() {
        let at = w.0.len();
        if write(&mut w).is_err() {
            w.0.truncate(at);
        }
    }
    let mut recv = std::mem::take(&mut store.recv);
    let got = store.transport.all_gather_into(&w.0, &mut recv);
    store.send = w.0;
    (got, recv)
}

/// Every worker's header and payload of one gather (each part is a length-prefixed header
/// followed by the payload), the headers checked: a worker that failed before the call, or
/// calls another op or key, fails the call on every worker.
fn gathered<'a>(
    op: &'static str,
    recv: &'a [u8],
    ranges: &[Range<usize>],
) -> Result<Vec<Reader<'a>>> {
    let mut readers = Vec::with_capacity(ranges.len());
    let mut headers = Vec::with_capacity(ranges.len());
    for r in ranges {
        let part = recv.get(r.clone()).ok_or_else(|| {
            Error::arg(
                op,
                format!("malformed gather: part {r:?} of {} bytes", recv.len()),
            )
        })?;
        let mut reader = Reader::new(part);
        headers.push(Header::decode(reader.bytes()?)?);
        readers.push(reader);
    }
    check_headers(op, &headers, true)?;
    Ok(readers)
}

/// The non-zeros of one worker's batch (as the product's message carries it) in the columns
/// `lo..hi`, appended to `own` with the columns counted from `lo`: `indptr` gets one entry per
/// row (the running count of kept non-zeros).
fn keep_own<E: Element, const N: usize>(
    batch: &mut Reader<'_>,
    (lo, hi): (usize, usize),
    own: &mut (Vec<i64>, Vec<i64>, Vec<E>),
    from_le: fn([u8; N]) -> E,
) -> Result<usize> {
    let indptr = batch.ids()?;
    let indices = batch.ids()?;
    let values = batch.bytes()?;
    let malformed = || {
        Error::arg(
            OP,
            "malformed batch from a worker: row pointers, columns and values disagree",
        )
    };
    if indptr.first() != Some(&0)
        || indptr.last().map(|&e| e as usize) != Some(indices.len())
        || indptr.windows(2).any(|w| w[0] > w[1])
        || values.len() != indices.len() * N
    {
        return Err(malformed());
    }
    let (idx, vals, ptr) = (&mut own.0, &mut own.2, &mut own.1);
    for w in indptr.windows(2) {
        for k in w[0] as usize..w[1] as usize {
            let c = indices[k];
            if c >= lo as i64 && c < hi as i64 {
                idx.push(c - lo as i64);
                let b: [u8; N] = values[k * N..(k + 1) * N].try_into().expect("N bytes");
                vals.push(from_le(b));
            }
        }
        ptr.push(idx.len() as i64);
    }
    Ok(indptr.len() - 1)
}

/// Every worker's batch (`parts`) on the columns `lo..hi` as one csr array of `hi - lo`
/// columns, and where each worker's rows start in it (then the total).
fn own_batches(
    parts: &mut [Reader<'_>],
    dtype: DType,
    lo: usize,
    hi: usize,
) -> Result<(NDArray, Vec<usize>)> {
    fn build<E: Element, const N: usize>(
        parts: &mut [Reader<'_>],
        lo: usize,
        hi: usize,
        from_le: fn([u8; N]) -> E,
    ) -> Result<(NDArray, Vec<usize>)> {
        let mut own = (Vec::new(), vec![0i64], Vec::new());
        let mut starts = vec![0];
        for p in parts.iter_mut() {
            let rows = keep_own(p, (lo, hi), &mut own, from_le)?;
            starts.push(starts.last().copied().unwrap_or(0) + rows);
        }
        let total = *starts.last().expect("one entry at least");
        let (indices, indptr, values) = own;
        // Columns stay as each worker's batch had them (a LibSVM batch's are not checked for
        // order): the same product as that batch's, never a read out of bounds.
        let x = NDArray::csr_unchecked(values, indices, indptr, [total, hi - lo])?;
        Ok((x, starts))
    }
    match dtype {
        DType::F32 => build(parts, lo, hi, f32::from_le_bytes),
        DType::F64 => build(parts, lo, hi, f64::from_le_bytes),
        other => Err(Error::dtype(
            OP,
            format!(
                "a sharded product is float32 or float64, got {}",
                other.name()
            ),
        )),
    }
}

/// Write a csr batch's non-zeros: row pointers, columns, values.
fn write_batch(w: &mut Writer, x: &NDArray) -> Result<()> {
    fn put<E: Element + Plain>(w: &mut Writer, x: &NDArray) -> Result<()> {
        x.with_csr::<E, _>(|c| {
            w.ids(c.indptr).ids(c.indices);
            w.slice(c.values);
        })
    }
    match x.dtype() {
        DType::F32 => put::<f32>(w, x),
        _ => put::<f64>(w, x),
    }
}

/// [`KVStore::sharded_dot`](sparrow_optim::KVStore::sharded_dot) on a synchronous store.
pub(crate) fn forward<T: Transport>(
    store: &mut SyncStore<T>,
    key: usize,
    x: &NDArray,
) -> Result<(NDArray, ShardedDot)> {
    let rank = store.transport.rank();
    // What can fail before the gather goes into this worker's header, so that it fails the
    // call on every worker instead of leaving the others waiting.
    let x = x.to_device(sparrow_core::Device::Cpu);
    let local = x.clone().and_then(|x| {
        let s = table(store, OP, key)?;
        let dims = x.dims();
        if x.stype() != SType::Csr || dims.len() != 2 || dims[1] != s.shape[0] {
            return Err(Error::shape(
                OP,
                format!(
                    "key {key}: the table has {} rows, so a batch is a csr array of {} columns; \
                     got {} {dims:?}",
                    s.shape[0],
                    s.shape[0],
                    crate::wire::stype_name(x.stype())
                ),
            ));
        }
        if x.dtype() != s.dtype {
            return Err(Error::dtype(
                OP,
                format!(
                    "key {key}: the table is {}, the batch {}",
                    s.dtype.name(),
                    x.dtype().name()
                ),
            ));
        }
        Ok((s.shape.clone(), s.dtype))
    });
    // 1. Every worker's batch to every worker, behind its header.
    let (got, recv) = gather(store, "sharded_dot", key, &local, |w| match &x {
        Ok(x) => write_batch(w, x),
        Err(_) => Ok(()),
    });
    let result = got.and_then(|ranges| {
        let mut parts = gathered(OP, &recv, &ranges)?;
        let (shape, dtype) = local?;
        let s = table(store, OP, key)?;
        let (own, starts) = own_batches(&mut parts, dtype, s.lo, s.hi)?;
        // 2. This worker's rows times every worker's batch on them.
        let product = own.dot(&s.value)?;
        Ok((own, starts, product, shape[1], dtype))
    });
    store.recv = recv;
    let (own, starts, product, cols, dtype) = result?;
    // 3. Each worker's rows of the product back to it; its product is the owners' sum.
    let row_bytes = cols * dtype.size_of();
    let mut w = Writer(std::mem::take(&mut store.send));
    w.0.clear();
    let total = starts.last().copied().unwrap_or(0);
    w.raw_values(&product, 0..total * cols)?;
    let parts: Vec<Range<usize>> = starts
        .windows(2)
        .map(|s| s[0] * row_bytes..s[1] * row_bytes)
        .collect();
    let mut recv = std::mem::take(&mut store.recv);
    let got = store.transport.all_to_all_into(&w.0, &parts, &mut recv);
    store.send = w.0;
    let out = got.and_then(|ranges| {
        let slices: Vec<&[u8]> = ranges.iter().map(|r| &recv[r.clone()]).collect();
        // The owners' parts of this worker's product, summed in owner order.
        sum_raw(&slices, dtype, &[starts[rank + 1] - starts[rank], cols])
    });
    store.recv = recv;
    Ok((out?, ShardedDot { own, starts }))
}

/// What a product's backward checks on this worker before its exchange: its gradient `dy`
/// (dense, on the CPU) and the table's shape and dtype, or the error that goes into this
/// worker's header so that the call fails on every worker.
pub(crate) struct BackwardLocal {
    dy: Result<NDArray>,
    table: Result<(Vec<usize>, DType)>,
}

impl BackwardLocal {
    pub(crate) fn new<T: Transport>(
        store: &SyncStore<T>,
        key: usize,
        parts: &ShardedDot,
        dy: &NDArray,
    ) -> BackwardLocal {
        let (rank, n) = (store.transport.rank(), store.transport.size());
        let dy = if dy.stype() == SType::Dense {
            dy.to_device(sparrow_core::Device::Cpu)
        } else {
            dy.tostype(SType::Dense)
                .and_then(|d| d.to_device(sparrow_core::Device::Cpu))
        };
        let table = dy.clone().and_then(|dy| {
            let s = table(store, OP_BACK, key)?;
            if parts.starts.len() != n + 1 || parts.starts.windows(2).any(|w| w[0] > w[1]) {
                return Err(Error::arg(
                    OP_BACK,
                    format!(
                        "key {key}: the product was made by a store of {} workers, this one has {n}",
                        parts.starts.len().saturating_sub(1)
                    ),
                ));
            }
            let want = [parts.starts[rank + 1] - parts.starts[rank], s.shape[1]];
            if dy.dims()[..] != want || dy.dtype() != s.dtype {
                return Err(Error::shape(
                    OP_BACK,
                    format!(
                        "key {key}: the product's gradient is a {} {want:?} array (this worker's \
                         batch rows x the table's columns); got {} {:?}",
                        s.dtype.name(),
                        dy.dtype().name(),
                        &dy.dims()[..]
                    ),
                ));
            }
            Ok((s.shape.clone(), s.dtype))
        });
        BackwardLocal { dy, table }
    }

    /// This worker's header for the exchange.
    pub(crate) fn header(&self, key: usize) -> Header {
        header("sharded_dot_backward", key, &self.table)
    }

    /// The gradient this worker sends, or the error its checks found.
    pub(crate) fn checked(&self) -> Result<&NDArray> {
        self.table.as_ref().map_err(Clone::clone)?;
        self.dy.as_ref().map_err(Clone::clone)
    }

    /// This worker's rows' gradient from every worker's gradient of its product (`dys`, in
    /// worker order, as [`BackwardLocal::checked`]'s gradient was sent), as the table's rows.
    pub(crate) fn finish<T: Transport>(
        &self,
        store: &SyncStore<T>,
        key: usize,
        parts: &ShardedDot,
        dys: &[&[u8]],
    ) -> Result<NDArray> {
        let (shape, dtype) = self.table.clone()?;
        for (r, b) in dys.iter().enumerate() {
            if b.len() != (parts.starts[r + 1] - parts.starts[r]) * shape[1] * dtype.size_of() {
                return Err(Error::arg(
                    OP_BACK,
                    format!("malformed gradient from worker {r}: {} bytes", b.len()),
                ));
            }
        }
        let dy_all = concat_raw(dys, dtype, &[parts.starts[dys.len()], shape[1]])?;
        // This worker's rows' gradient over every worker's batch, as the table's rows.
        let lo = table(store, OP_BACK, key)?.lo as i64;
        let g = sparse::dot_csr_t_dense(&parts.own, &dy_all, SType::RowSparse)?;
        let (ids, rows) = g.row_sparse_parts()?;
        NDArray::row_sparse_from_arrays(&rows, ids.iter().map(|&i| i + lo).collect(), &shape)
    }
}

/// [`KVStore::sharded_dot_backward`](sparrow_optim::KVStore::sharded_dot_backward) on a
/// synchronous store.
pub(crate) fn backward<T: Transport>(
    store: &mut SyncStore<T>,
    key: usize,
    parts: &ShardedDot,
    dy: &NDArray,
) -> Result<NDArray> {
    let local = BackwardLocal::new(store, key, parts, dy);
    // Every worker's gradient of its product to every worker, behind its header.
    let (got, recv) = gather(
        store,
        "sharded_dot_backward",
        key,
        &local.table,
        |w| match local.checked() {
            Ok(dy) => w.values(dy).map(|_| ()),
            Err(_) => Ok(()),
        },
    );
    let g = got.and_then(|ranges| {
        let mut readers = gathered(OP_BACK, &recv, &ranges)?;
        let dys = readers
            .iter_mut()
            .map(|r| r.bytes())
            .collect::<Result<Vec<_>>>()?;
        local.finish(store, key, parts, &dys)
    });
    store.recv = recv;
    g
}
