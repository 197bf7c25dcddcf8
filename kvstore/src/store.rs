//! [`SyncStore`]: MXNet's synchronous KVStore semantics over any [`Transport`]; `local` and
//! `dist_sync` are this store over threads and over MPI.

use std::collections::BTreeMap;
use std::ops::Range;

use sparrow_core::sparse::add_grads;
use sparrow_core::{DType, Error, NDArray, Result, SType};
use sparrow_optim::{check_many, KVStore, Optimizer, ProductGrad, ShardedDot, State};

use crate::sharded_dot::BackwardLocal;

use crate::transport::{Traffic, Transport};
use crate::wire::{self, check_headers, Header, Reader, Writer};

/// Per worker, per key: where in the gathered message the values the worker sent with its
/// headers lie (row_sparse rows, or a small dense value; empty for keys it sent nothing for).
type PerWorkerRows = Vec<Vec<Range<usize>>>;

/// A dense value of at most this many bytes rides in the gather that carries the headers and
/// the row_sparse rows, and is summed by every worker from the gathered copies (in worker
/// order, so the same bits everywhere), instead of by an all-reduce of its own: the small
/// layers of a sparse model then cost no extra collective call a step. Larger dense values
/// are all-reduced (a gather sends each worker's copy to every worker).
const DENSE_IN_GATHER_MAX: usize = 64 << 10;

/// One key's value and, with an optimizer on the store, its optimizer state.
pub(crate) struct Replica {
    pub(crate) value: NDArray,
    pub(crate) state: Option<State>,
}

/// A key: replicated on every worker, or a row_sparse table split by rows
/// ([`SyncStore::init_sharded`]).
pub(crate) enum Slot {
    Replicated(Replica),
    Sharded(crate::sharded::Shard),
}

/// A synchronous store: every push is summed over all workers before it is stored or applied,
/// as MXNet's `local` (several devices) and `dist_sync` stores do. Built from a
/// [`Transport`]; see [`crate::local`], [`crate::local_group`] and, with the `mpi` feature,
/// `crate::dist_sync`.
///
/// - Dense pushes are summed by an all-reduce.
/// - Row_sparse pushes are summed by gathering every worker's (row ids, rows) and merging
///   them in worker order, so every worker holds the same bits; no dense array of the table's
///   size is sent.
/// - Before any data moves, every worker's header (op, key, dtype, storage type, shape, or the
///   error it found locally) is gathered: a call that fails or disagrees on one worker fails
///   with the same message on all of them, and nothing is changed.
pub struct SyncStore<T: Transport> {
    kind: &'static str,
    pub(crate) transport: T,
    pub(crate) slots: BTreeMap<usize, Slot>,
    pub(crate) optimizer: Option<Box<dyn Optimizer>>,
    /// The message of the last fused step and every worker's copy of it, kept so that each
    /// step reuses their memory (fresh buffers of a few hundred KB a step were a large share
    /// of a step in page faults).
    pub(crate) send: Vec<u8>,
    pub(crate) recv: Vec<u8>,
    /// The last array every worker's gradient of a product was gathered into, reused by the
    /// next gather of its shape (which overwrites every value, so it is not zeroed again).
    pub(crate) dys: Option<NDArray>,
}

impl<T: Transport> SyncStore<T> {
    /// A store named `kind` (`local`, `dist_sync`) over `transport`.
    pub fn new(kind: &'static str, transport: T) -> Self {
        SyncStore {
            kind,
            transport,
            slots: BTreeMap::new(),
            optimizer: None,
            send: Vec::new(),
            recv: Vec::new(),
            dys: None,
        }
    }

    /// What this worker has sent through the transport so far.
    pub fn traffic(&self) -> Traffic {
        self.transport.traffic()
    }

    /// [`KVStore::init`] (`shared = false`: the store keeps a copy) and
    /// [`KVStore::init_shared`] (`shared = true`: the store keeps `value` itself).
    fn init_replica(&mut self, key: usize, value: &NDArray, shared: bool) -> Result<()> {
        const OP: &str = "KVStore::init";
        let local = if self.slots.contains_key(&key) {
            Err(Error::arg(OP, format!("key {key} is already initialized")))
        } else if value.stype() == SType::Csr {
            Err(Error::stype(
                OP,
                format!("key {key}: csr values cannot be stored (dense or row_sparse)"),
            ))
        } else {
            Ok(())
        };
        // With several workers a dense float value is broadcast straight into the array the
        // store keeps (no message-sized buffer; a 512 MB weight was held three times over: its
        // bytes, the received bytes, the decoded copy). That array is made before the
        // agreement, so that one a worker cannot allocate fails every worker's call: worker 0
        // keeps (a copy of) its value, the others' arrays are overwritten.
        let dense_float =
            value.stype() == SType::Dense && matches!(value.dtype(), DType::F32 | DType::F64);
        let (several, root) = (self.transport.size() > 1, self.transport.rank() == 0);
        let into = several && dense_float;
        let local = local.and_then(|()| {
            let stored = match (into, shared) {
                (false, _) => None,
                (true, true) => Some(value.clone()),
                (true, false) if root => Some(value.try_copy()?),
                (true, false) => Some(NDArray::zeros(&value.shape(), value.dtype())?),
            };
            // Worker 0's message where the value does not go in place (a sparse value, or
            // one not writable in host memory), read before the agreement: a value it cannot
            // read then fails every worker's call instead of leaving them in the broadcast.
            let message = match &stored {
                _ if !(several && root) => None,
                Some(s) if wire::with_le_bytes_mut(s, |_| ()).is_some() => None,
                Some(_) => Some(value.to_le_bytes()?),
                None => Some(wire::encode_value(value)?),
            };
            Ok((stored, message))
        });
        let header = Header::new("init", key, local.as_ref().map(|_| value));
        // Workers may init with different values (worker 0's wins) but not different kinds,
        // so every worker takes the same path below and the calls match.
        self.agree(OP, header, true)?;
        let (stored, message) = local?;
        if let Some(stored) = stored {
            let transport = &mut self.transport;
            match wire::with_le_bytes_mut(&stored, |b| transport.broadcast_into(0, b)) {
                Some(done) => done?,
                None => {
                    // Values not writable in place (on a device): through a host buffer.
                    let n = value.size() * value.dtype().size_of();
                    let mut bytes = message.unwrap_or_else(|| vec![0u8; n]);
                    self.transport.broadcast_into(0, &mut bytes)?;
                    stored.assign(&NDArray::from_le_bytes(
                        &bytes,
                        value.dtype(),
                        &value.shape(),
                    )?);
                }
            }
            self.slots.insert(
                key,
                Slot::Replicated(Replica {
                    value: stored,
                    state: None,
                }),
            );
            return Ok(());
        }
        let received = if several {
            let mut bytes = message.unwrap_or_default();
            self.transport.broadcast(0, &mut bytes)?;
            Some(wire::decode_value(
                &bytes,
                value.dtype(),
                value.stype(),
                &value.shape(),
            )?)
        } else {
            None
        };
        let stored = match (shared, received) {
            // The caller's array itself (set to worker 0's value): the key's updates write
            // into it, and a pull into it copies nothing.
            (true, Some(v)) => {
                value.assign(&v);
                value.clone()
            }
            (true, None) => value.clone(),
            (false, Some(v)) => v,
            // A copy, as MXNet's init: later writes to `value` do not reach the store.
            (false, None) => value.try_copy()?,
        };
        self.slots.insert(
            key,
            Slot::Replicated(Replica {
                value: stored,
                state: None,
            }),
        );
        Ok(())
    }

    /// Whether `key` has been initialized.
    pub fn contains(&self, key: usize) -> bool {
        self.slots.contains_key(&key)
    }

    /// Gather every worker's header for one call and check them (see [`check_headers`]).
    pub(crate) fn agree(
        &mut self,
        op: &'static str,
        mine: Header,
        same_stype: bool,
    ) -> Result<Vec<Header>> {
        let all = self.transport.all_gather(&mine.encode())?;
        let headers = all
            .iter()
            .map(|b| Header::decode(b))
            .collect::<Result<Vec<_>>>()?;
        check_headers(op, &headers, same_stype)?;
        Ok(headers)
    }

    /// The error of a pull of `key`, which this worker does not have. Where other workers
    /// hold it as a sharded table their pull is collective and waits in its header gather, so
    /// with several workers this one joins that gather with its error: every worker fails at
    /// once, naming it, instead of the others waiting for the watchdog's timeout. (Where no
    /// worker has the key, all fail together; where the others hold it replicated, their
    /// pull is local and the gather meets their next call, which fails on the error.)
    fn unknown_pulled_key(&mut self, op: &'static str, key: usize) -> Error {
        let e = unknown_key(op, key);
        if self.transport.size() < 2 {
            return e;
        }
        // The op name a sharded key's pull gathers under (`sharded::gather_rows`).
        match self.agree(op, Header::new("row_sparse_pull", key, Err(&e)), true) {
            Err(all) => all,
            Ok(_) => e,
        }
    }

    /// The (shape, dtype) of `key`, or the error of an unknown key.
    pub(crate) fn meta(&self, op: &'static str, key: usize) -> Result<(Vec<usize>, DType)> {
        match self.slots.get(&key) {
            Some(Slot::Replicated(r)) => Ok((r.value.shape(), r.value.dtype())),
            Some(Slot::Sharded(s)) => Ok((s.shape.clone(), s.dtype)),
            None => Err(unknown_key(op, key)),
        }
    }

    /// The sum of one worker's `values` for `key`, checked against the key.
    fn local_sum(&self, key: usize, values: &[NDArray]) -> Result<NDArray> {
        const OP: &str = "KVStore::push";
        let (shape, dtype) = self.meta(OP, key)?;
        let Some(first) = values.first() else {
            return Err(Error::arg(OP, format!("key {key}: no values to push")));
        };
        for v in values {
            check_value(OP, key, v, &shape, dtype)?;
        }
        let mut sum = first.clone();
        for v in &values[1..] {
            sum = add_grads(&sum, v)?;
        }
        if let Some(Slot::Sharded(_)) = self.slots.get(&key) {
            if sum.stype() != SType::RowSparse {
                return Err(Error::stype(
                    OP,
                    format!(
                        "key {key} is a sharded table: push row_sparse gradients (got {})",
                        wire::stype_name(sum.stype())
                    ),
                ));
            }
            if self.optimizer.is_none() {
                return Err(Error::arg(
                    OP,
                    format!(
                        "key {key} is a sharded table, updated by the worker that owns each \
                         row: set_optimizer first"
                    ),
                ));
            }
        }
        Ok(sum)
    }

    /// Sum `local` (this worker's part) over the workers: all-reduce when dense, gather and
    /// merge of (row ids, rows) when row_sparse.
    fn sum_over_workers(&mut self, local: NDArray) -> Result<NDArray> {
        if self.transport.size() == 1 {
            return Ok(local);
        }
        let shape = local.shape();
        match local.stype() {
            SType::RowSparse => {
                let mut w = Writer(std::mem::take(&mut self.send));
                w.0.clear();
                w.rsp(&local)?;
                let mut recv = std::mem::take(&mut self.recv);
                let ranges = self.transport.all_gather_into(&w.0, &mut recv)?;
                self.send = w.0;
                let parts: Vec<&[u8]> = ranges.into_iter().map(|r| &recv[r]).collect();
                let sum = merge_rows(&parts, local.dtype(), &shape);
                self.recv = recv;
                sum
            }
            _ => match local.dtype() {
                DType::F32 => {
                    let mut v = local.to_vec::<f32>()?;
                    self.transport.all_reduce_sum_f32(&mut v)?;
                    NDArray::from_vec(v, &shape)
                }
                DType::F64 => {
                    let mut v = local.to_vec::<f64>()?;
                    self.transport.all_reduce_sum_f64(&mut v)?;
                    NDArray::from_vec(v, &shape)
                }
                other => Err(Error::dtype(
                    "KVStore::push",
                    format!(
                        "dense pushes are summed as float32 or float64, got {}",
                        other.name()
                    ),
                )),
            },
        }
    }

    /// Store or apply the summed push of a replicated key.
    fn apply(&mut self, key: usize, sum: NDArray) -> Result<()> {
        let Some(Slot::Replicated(r)) = self.slots.get_mut(&key) else {
            return Err(unknown_key("KVStore::push", key));
        };
        match self.optimizer.as_mut() {
            None => {
                r.value = sum;
                Ok(())
            }
            Some(opt) => {
                if r.state.is_none() {
                    r.state = Some(opt.create_state(key, &r.value)?);
                }
                let state = r.state.as_mut().expect("created above");
                opt.update(key, &r.value, &sum, state)
            }
        }
    }

    /// Every key's header in one gather, checked key by key (see [`check_headers`]); a
    /// worker whose list differs in length fails the call everywhere. `payload` (this
    /// worker's row_sparse rows or small dense value, one entry per key) rides in the same
    /// message, so a step costs one gather for the headers, every row_sparse key and the small
    /// dense ones. Returns, per key, whether the workers' storage types differ (the key is then
    /// summed dense), every worker's message (`recv`, which the caller hands back to the store
    /// when done) and where each worker's payload entries lie in it.
    fn agree_many(
        &mut self,
        op: &'static str,
        mine: &[Header],
        payload: &[Entry<'_>],
    ) -> Result<(Vec<bool>, Vec<u8>, PerWorkerRows)> {
        let mut w = Writer(std::mem::take(&mut self.send));
        w.0.clear();
        w.u64(mine.len() as u64);
        for h in mine {
            w.bytes(&h.encode());
        }
        w.u64(payload.len() as u64);
        for p in payload {
            // A length-prefixed entry: the length is filled in once the entry is written.
            let at = w.0.len();
            w.u64(0);
            match p {
                Entry::Array(a) if a.stype() == SType::RowSparse => {
                    w.rsp(a)?;
                }
                Entry::Array(a) => {
                    w.values(a)?;
                }
                Entry::Bytes(b) => {
                    w.bytes(b);
                }
                Entry::Empty => {}
            }
            let len = (w.0.len() - at - 8) as u64;
            w.0[at..at + 8].copy_from_slice(&len.to_le_bytes());
        }
        let mut recv = std::mem::take(&mut self.recv);
        let gathered = self.transport.all_gather_into(&w.0, &mut recv);
        self.send = w.0;
        let ranges = gathered?;
        let mut per_worker = Vec::with_capacity(ranges.len());
        let mut payloads = Vec::with_capacity(ranges.len());
        for range in &ranges {
            let mut r = Reader::new(&recv[range.clone()]);
            let n = r.u64()? as usize;
            let hs = (0..n)
                .map(|_| Header::decode(r.bytes()?))
                .collect::<Result<Vec<_>>>()?;
            let m = r.u64()? as usize;
            let ps = (0..m)
                .map(|_| {
                    r.bytes_range()
                        .map(|p| range.start + p.start..range.start + p.end)
                })
                .collect::<Result<Vec<_>>>()?;
            per_worker.push(hs);
            payloads.push(ps);
        }
        // A worker that failed before listing its keys (bad lists) sends one header with its
        // error: report every worker's first error.
        if per_worker
            .iter()
            .any(|hs| hs.iter().any(|h| !h.error.is_empty()))
        {
            let firsts: Vec<Header> = per_worker
                .iter()
                .map(|hs| {
                    hs.iter()
                        .find(|h| !h.error.is_empty())
                        .or(hs.first())
                        .cloned()
                        .unwrap_or_else(|| Header::new("pushpull", 0, Ok(&NDArray::scalar(0f32))))
                })
                .collect();
            check_headers(op, &firsts, false)?;
        }
        if let Some((r, hs)) = per_worker
            .iter()
            .enumerate()
            .find(|(_, hs)| hs.len() != per_worker[0].len())
        {
            return Err(Error::arg(
                op,
                format!(
                    "workers disagree (nothing was changed): worker 0 pushes {} keys and product \
                     gradients, worker {r} {}",
                    per_worker[0].len(),
                    hs.len()
                ),
            ));
        }
        let mut mixed = Vec::with_capacity(per_worker[0].len());
        for i in 0..per_worker[0].len() {
            let key_headers: Vec<Header> = per_worker.iter().map(|hs| hs[i].clone()).collect();
            check_headers(op, &key_headers, false)?;
            mixed.push(key_headers.iter().any(|h| h.stype != key_headers[0].stype));
        }
        Ok((mixed, recv, payloads))
    }

    /// The sums of the fused keys `idx` of `pushpull_many`: for the keys in `rode` (small
    /// dense values that every worker sent with its headers) and the row_sparse keys, the sum,
    /// in worker order, of what every worker sent (`recv[sent[worker][key]]`); for the other
    /// dense keys one all-reduce per dtype (the values concatenated).
    fn sum_many(
        &mut self,
        locals: &[NDArray],
        idx: &[usize],
        rode: &[bool],
        recv: &[u8],
        sent: &PerWorkerRows,
    ) -> Result<Vec<(usize, NDArray)>> {
        if self.transport.size() == 1 {
            return Ok(idx.iter().map(|&i| (i, locals[i].clone())).collect());
        }
        let mut sums = Vec::with_capacity(idx.len());
        for dtype in [DType::F32, DType::F64] {
            let group: Vec<usize> = idx
                .iter()
                .copied()
                .filter(|&i| {
                    !rode[i] && locals[i].stype() == SType::Dense && locals[i].dtype() == dtype
                })
                .collect();
            if group.is_empty() {
                continue;
            }
            macro_rules! reduce {
                ($t:ty, $f:ident) => {{
                    let mut flat: Vec<$t> = Vec::new();
                    for &i in &group {
                        locals[i].with_slice::<$t, _>(|s| flat.extend_from_slice(s))?;
                    }
                    self.transport.$f(&mut flat)?;
                    if group.len() == 1 {
                        // One key: its sum is the buffer itself, no copy.
                        sums.push((
                            group[0],
                            NDArray::from_vec(flat, &locals[group[0]].shape())?,
                        ));
                    } else {
                        let mut at = 0;
                        for &i in &group {
                            let shape = locals[i].shape();
                            let n: usize = shape.iter().product();
                            sums.push((i, NDArray::from_vec(flat[at..at + n].to_vec(), &shape)?));
                            at += n;
                        }
                    }
                }};
            }
            match dtype {
                DType::F32 => reduce!(f32, all_reduce_sum_f32),
                _ => reduce!(f64, all_reduce_sum_f64),
            }
        }
        for &i in idx {
            let row_sparse = locals[i].stype() == SType::RowSparse;
            if !row_sparse && !rode[i] {
                continue;
            }
            let parts = sent
                .iter()
                .map(|w| {
                    w.get(i).map(|r| &recv[r.clone()]).ok_or_else(|| {
                        Error::arg(
                            "KVStore::pushpull_many",
                            "a worker sent no values for a key",
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let (dtype, shape) = (locals[i].dtype(), locals[i].shape());
            let sum = if row_sparse {
                merge_rows(&parts, dtype, &shape)?
            } else {
                sum_dense(&parts, dtype, &shape)?
            };
            sums.push((i, sum));
        }
        Ok(sums)
    }
}

/// One entry of the payload that rides with a call's headers: a key's value (row_sparse rows
/// or a small dense value), raw bytes, or nothing.
enum Entry<'a> {
    Array(&'a NDArray),
    Bytes(Vec<u8>),
    Empty,
}

/// Whether a dense value travels with the headers (see [`DENSE_IN_GATHER_MAX`]); every worker
/// decides the same for a key, since they agree on its shape and dtype before summing.
fn rides_in_gather(v: &NDArray) -> bool {
    v.stype() == SType::Dense
        && matches!(v.dtype(), DType::F32 | DType::F64)
        && v.shape().iter().product::<usize>() * v.dtype().size_of() <= DENSE_IN_GATHER_MAX
}

impl<T: Transport> KVStore for SyncStore<T> {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn rank(&self) -> usize {
        self.transport.rank()
    }

    fn num_workers(&self) -> usize {
        self.transport.size()
    }

    fn init(&mut self, key: usize, value: &NDArray) -> Result<()> {
        self.init_replica(key, value, false)
    }

    fn init_shared(&mut self, key: usize, value: &NDArray) -> Result<()> {
        self.init_replica(key, value, true)
    }

    fn push(&mut self, key: usize, values: &[NDArray]) -> Result<()> {
        const OP: &str = "KVStore::push";
        let local = self.local_sum(key, values);
        let header = Header::new("push", key, local.as_ref());
        // Workers' pushes may differ in storage type (one dense, one row_sparse): the sum
        // below then goes dense on every worker.
        let headers = self.agree(OP, header, false)?;
        let mut local = local?;
        let mixed = headers.iter().any(|h| h.stype != headers[0].stype);
        if mixed && local.stype() != SType::Dense {
            local = local.tostype(SType::Dense)?;
        }
        if let Some(Slot::Sharded(_)) = self.slots.get(&key) {
            return crate::sharded::push(self, key, local);
        }
        let sum = self.sum_over_workers(local)?;
        self.apply(key, sum)
    }

    fn pushpull_many(&mut self, keys: &[usize], values: &[NDArray], out: &[NDArray]) -> Result<()> {
        self.pushpull_with_products(keys, values, out, &[])
            .map(|_| ())
    }

    /// Every key's header, its row_sparse rows or small dense value, and every product's header
    /// and row starts go in one gather; then the sharded keys are pushed, the large dense
    /// values all-reduced, and each product's gradients gathered into one array
    /// (`BackwardLocal::gather_dys`) from which this worker's rows' gradient is computed.
    /// `pushpull_many` is this without products.
    fn pushpull_with_products(
        &mut self,
        keys: &[usize],
        values: &[NDArray],
        out: &[NDArray],
        products: &[ProductGrad<'_>],
    ) -> Result<Vec<NDArray>> {
        const OP: &str = "KVStore::pushpull_many";
        // Local checks first; their errors travel in the headers, so every worker fails.
        let mut locals = Vec::new();
        let mut rows: PerWorkerRows = Vec::new();
        let mut recv = Vec::new();
        let listed = check_many(OP, keys, values, out);
        let mut headers: Vec<Header> = match &listed {
            Err(e) => vec![Header::new(
                "pushpull",
                keys.first().copied().unwrap_or(0),
                Err(e),
            )],
            Ok(()) => {
                let mut hs = Vec::with_capacity(keys.len() + products.len());
                for ((&k, v), o) in keys.iter().zip(values).zip(out) {
                    let local = self.local_sum(k, std::slice::from_ref(v)).and_then(|s| {
                        let (shape, dtype) = self.meta(OP, k)?;
                        check_out(OP, k, o, &shape, dtype)?;
                        Ok(s)
                    });
                    hs.push(Header::new("pushpull", k, local.as_ref()));
                    locals.push(local);
                }
                hs
            }
        };
        // The products' headers and gradients follow the keys'.
        let backs: Vec<BackwardLocal> = products
            .iter()
            .map(|p| BackwardLocal::new(self, p.key, p.parts, p.dy))
            .collect();
        headers.extend(products.iter().zip(&backs).map(|(p, b)| b.header(p.key)));
        let sharded: Vec<bool> = keys
            .iter()
            .map(|k| matches!(self.slots.get(k), Some(Slot::Sharded(_))))
            .collect();
        let size = self.transport.size();
        let mixed = if size == 1 {
            // Nobody to agree with: a local error is the error.
            listed?;
            if let Some(Err(e)) = locals.iter().find(|l| l.is_err()) {
                return Err(e.clone());
            }
            vec![false; keys.len()]
        } else {
            // This worker's rows of every replicated row_sparse key and its small dense
            // values, one entry per key, then where each product's gradients go (sent only
            // when every local check passed: otherwise the headers fail the call everywhere).
            let mut payload: Vec<Entry<'_>> = Vec::new();
            if locals.iter().all(|l| l.is_ok()) {
                payload.extend(locals.iter().zip(&sharded).map(|(l, &sh)| match l {
                    Ok(l) if !sh && (l.stype() == SType::RowSparse || rides_in_gather(l)) => {
                        Entry::Array(l)
                    }
                    _ => Entry::Empty,
                }));
                // A product's gradient is gathered on its own, straight into place, once
                // every worker has agreed; here only where each worker's rows go.
                payload.extend(products.iter().zip(&backs).map(|(p, b)| match b.checked() {
                    Ok(_) => Entry::Bytes(BackwardLocal::described(p.parts)),
                    Err(_) => Entry::Empty,
                }));
            }
            let (mixed, got, sent) = self.agree_many(OP, &headers, &payload)?;
            recv = got;
            rows = sent;
            mixed
        };
        let mut locals = locals.into_iter().collect::<Result<Vec<_>>>()?;
        // Dense values that every worker sent with its headers (not when some worker's value
        // is sparse: the key is then densified and all-reduced).
        let rode: Vec<bool> = locals
            .iter()
            .zip(&mixed)
            .zip(&sharded)
            .map(|((l, &m), &sh)| size > 1 && !m && !sh && rides_in_gather(l))
            .collect();
        for (l, &m) in locals.iter_mut().zip(&mixed) {
            if m && l.stype() != SType::Dense {
                *l = l.tostype(SType::Dense)?;
            }
        }
        // From here on the other workers make the same collective calls whatever this one
        // finds: an error that only this worker meets (an update with a state that does not
        // fit) is kept and returned at the end, after every collective of the call, so that no
        // worker is left waiting in one this worker skipped.
        let mut first: Option<Error> = None;
        // Sharded keys go one by one; the rest are fused.
        for (i, &k) in keys.iter().enumerate() {
            if sharded[i] {
                if let Err(e) = crate::sharded::push(self, k, locals[i].clone()) {
                    first.get_or_insert(e);
                }
            }
        }
        let fused: Vec<usize> = (0..keys.len()).filter(|&i| !sharded[i]).collect();
        let sums = self.sum_many(&locals, &fused, &rode, &recv, &rows);
        // Where every worker's gradient of each product goes (the entries after the keys'),
        // read out of the gathered message before it is handed back to the store.
        let described = (0..products.len())
            .map(|j| {
                rows.iter()
                    .map(|w| {
                        let r = w.get(keys.len() + j).ok_or_else(|| {
                            Error::arg(OP, "a worker described no gradient for a product")
                        })?;
                        Reader::new(&recv[r.clone()]).bytes().map(<[u8]>::to_vec)
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Vec<_>>();
        self.recv = recv;
        // Each product's gradient from every worker's, gathered into place (one collective
        // per product, which every worker makes or, on a disagreement all of them see, skips).
        let grads = products
            .iter()
            .zip(&backs)
            .zip(described)
            .map(|((p, b), described)| {
                if size == 1 {
                    return b.finish(self, p.key, p.parts, b.checked()?);
                }
                let dy_all = b.gather_dys(self, p.parts, &described?)?;
                let g = b.finish(self, p.key, p.parts, &dy_all);
                self.dys = Some(dy_all);
                g
            })
            // Every product's collective is made before the first error is looked at.
            .collect::<Vec<_>>()
            .into_iter()
            .collect::<Result<Vec<_>>>();
        let sums = sums.unwrap_or_else(|e| {
            first.get_or_insert(e);
            Vec::new()
        });
        for (i, sum) in sums {
            if let Err(e) = self.apply(keys[i], sum) {
                first.get_or_insert(e);
            }
        }
        // A sharded key's pull is collective: every key is pulled even after an error.
        for (&k, o) in keys.iter().zip(out) {
            if let Err(e) = self.pull(k, std::slice::from_ref(o)) {
                first.get_or_insert(e);
            }
        }
        match first {
            Some(e) => Err(e),
            None => grads,
        }
    }

    fn pull(&mut self, key: usize, out: &[NDArray]) -> Result<()> {
        const OP: &str = "KVStore::pull";
        if !self.slots.contains_key(&key) {
            return Err(self.unknown_pulled_key(OP, key));
        }
        let (shape, dtype) = self.meta(OP, key)?;
        let checked = out
            .iter()
            .try_for_each(|o| check_out(OP, key, o, &shape, dtype));
        let value = match self.slots.get(&key) {
            Some(Slot::Replicated(r)) => {
                checked?;
                r.value.clone()
            }
            // Collective: a wrong `out` here fails every worker (in this worker's header).
            Some(Slot::Sharded(s)) => {
                let all: Vec<i64> = if checked.is_ok() {
                    (0..s.shape[0] as i64).collect()
                } else {
                    Vec::new()
                };
                crate::sharded::gather_rows(self, key, &all, checked)?.tostype(SType::Dense)?
            }
            None => return Err(self.unknown_pulled_key(OP, key)),
        };
        for o in out {
            o.assign(&value);
        }
        Ok(())
    }

    fn init_sharded(&mut self, key: usize, shape: &[usize], shard: &NDArray) -> Result<()> {
        // The inherent method (callable without the trait in scope).
        SyncStore::<T>::init_sharded(self, key, shape, shard)
    }

    fn init_sharded_shared(&mut self, key: usize, shape: &[usize], shard: &NDArray) -> Result<()> {
        SyncStore::<T>::init_sharded_shared(self, key, shape, shard)
    }

    fn sharded_dot(&mut self, key: usize, x: &NDArray) -> Result<(NDArray, ShardedDot)> {
        crate::sharded_dot::forward(self, key, x)
    }

    fn sharded_dot_backward(
        &mut self,
        key: usize,
        parts: &ShardedDot,
        dy: &NDArray,
    ) -> Result<NDArray> {
        crate::sharded_dot::backward(self, key, parts, dy)
    }

    fn update_owned(&mut self, key: usize, grad: &NDArray) -> Result<()> {
        crate::sharded::update_owned(self, key, grad)
    }

    fn row_sparse_pull(&mut self, key: usize, out: &[NDArray], row_ids: &[i64]) -> Result<()> {
        const OP: &str = "KVStore::row_sparse_pull";
        let checked = self.meta(OP, key).and_then(|(shape, dtype)| {
            for o in out {
                check_out(OP, key, o, &shape, dtype)?;
            }
            let Some(&n_rows) = shape.first() else {
                return Err(Error::shape(
                    OP,
                    format!("key {key} is a scalar: it has no rows to pull"),
                ));
            };
            match row_ids.iter().find(|&&i| i < 0 || i as usize >= n_rows) {
                Some(&bad) => Err(Error::index(
                    OP,
                    format!("key {key}: row id {bad} out of range for {n_rows} rows"),
                )),
                None => Ok(shape),
            }
        });
        let mut ids = row_ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let rows = match self.slots.get(&key) {
            // Collective: this worker's error goes to the others in its header, so every
            // worker fails rather than waiting for this one.
            Some(Slot::Sharded(_)) => {
                let local = checked.map(|_| ());
                if local.is_err() {
                    ids.clear();
                }
                crate::sharded::gather_rows(self, key, &ids, local)?
            }
            Some(Slot::Replicated(r)) => rows_of(&r.value, ids, &checked?)?,
            None => return Err(self.unknown_pulled_key(OP, key)),
        };
        for o in out {
            o.assign(&rows);
        }
        Ok(())
    }

    fn set_optimizer(&mut self, optimizer: Box<dyn Optimizer>) -> Result<()> {
        if let Some(set) = &self.optimizer {
            // The keys' states were made by (and for) the optimizer already set: a second one
            // would update with states it did not make, or drop them without a word.
            return Err(Error::arg(
                "KVStore::set_optimizer",
                format!(
                    "the '{}' store already has an optimizer ('{}'; '{}' given): a store's \
                     optimizer is set once, its states live in the store with it",
                    self.kind,
                    set.name(),
                    optimizer.name()
                ),
            ));
        }
        self.optimizer = Some(optimizer);
        Ok(())
    }

    fn has_optimizer(&self) -> bool {
        self.optimizer.is_some()
    }

    fn optimizer(&self) -> Option<&(dyn Optimizer + 'static)> {
        self.optimizer.as_deref()
    }

    fn optimizer_mut(&mut self) -> Option<&mut (dyn Optimizer + 'static)> {
        match self.optimizer.as_mut() {
            Some(o) => Some(o.as_mut()),
            None => None,
        }
    }

    fn optimizer_state(&self, key: usize) -> Option<&State> {
        match self.slots.get(&key) {
            Some(Slot::Replicated(r)) => r.state.as_ref(),
            Some(Slot::Sharded(s)) => s.state.as_ref(),
            None => None,
        }
    }

    fn table_shard(&self, key: usize) -> Result<(usize, usize, NDArray)> {
        self.shard(key)
    }

    fn set_optimizer_state(&mut self, key: usize, state: State) -> Result<()> {
        const OP: &str = "KVStore::set_optimizer_state";
        if self.optimizer.is_none() {
            return Err(Error::arg(
                OP,
                format!("key {key}: no optimizer set (set_optimizer first)"),
            ));
        }
        match self.slots.get_mut(&key) {
            Some(Slot::Replicated(r)) => {
                r.state = Some(state);
                Ok(())
            }
            // This worker's rows' state (the caller checked it against the shard).
            Some(Slot::Sharded(s)) => {
                s.state = Some(state);
                Ok(())
            }
            None => Err(unknown_key(OP, key)),
        }
    }

    fn barrier(&mut self) -> Result<()> {
        self.transport.barrier()
    }

    fn bytes_sent(&self) -> Option<u64> {
        Some(self.transport.traffic().bytes)
    }

    fn exchange_time(&self) -> Option<std::time::Duration> {
        Some(self.transport.traffic().time)
    }
}

/// The rows `ids` (sorted, unique, in range) of `value` as a row_sparse array.
fn rows_of(value: &NDArray, ids: Vec<i64>, shape: &[usize]) -> Result<NDArray> {
    match value.stype() {
        SType::RowSparse => value.retain(&ids),
        _ => {
            let rows = value.take_rows(&ids)?;
            NDArray::row_sparse_from_arrays(&rows, ids, shape)
        }
    }
}

/// Every worker's (row ids, rows) merged in worker order into one row_sparse array: a row
/// that one worker sent is copied, a row that several sent is their sum in worker order (the
/// bits of adding the workers' arrays one after another, on every worker).
pub(crate) fn merge_rows(parts: &[&[u8]], dtype: DType, shape: &[usize]) -> Result<NDArray> {
    match dtype {
        DType::F32 => merge_typed(parts, shape, f32::from_le_bytes),
        DType::F64 => merge_typed(parts, shape, f64::from_le_bytes),
        _ => {
            let mut sum: Option<NDArray> = None;
            for p in parts {
                let (ids, rows_le) = wire::decode_rows(p)?;
                let mut rows_shape = shape.to_vec();
                rows_shape[0] = ids.len();
                let rows = NDArray::from_le_bytes(rows_le, dtype, &rows_shape)?;
                let part = NDArray::row_sparse_from_arrays(&rows, ids, shape)?;
                sum = Some(match sum {
                    None => part,
                    Some(s) => add_grads(&s, &part)?,
                });
            }
            sum.ok_or_else(|| Error::arg("KVStore::push", "no workers"))
        }
    }
}

/// A malformed message from a worker (it would be a bug in the store, not the user's input;
/// still an error, never a read out of bounds).
fn malformed(what: String) -> Error {
    Error::arg(
        "KVStore::push",
        format!("malformed rows from a worker: {what}"),
    )
}

/// [`merge_rows`] for a float type read from `N` little-endian bytes: the union of the
/// workers' (sorted) ids, then each union row from the workers that sent it, straight from the
/// messages.
fn merge_typed<E, const N: usize>(
    parts: &[&[u8]],
    shape: &[usize],
    from_le: impl Fn([u8; N]) -> E + Copy,
) -> Result<NDArray>
where
    E: Copy + Default + std::ops::AddAssign + sparrow_core::Element,
{
    let row: usize = shape[1..].iter().product();
    let mut decoded = Vec::with_capacity(parts.len());
    for p in parts {
        let (ids, rows) = wire::decode_rows(p)?;
        if ids.len().checked_mul(row).and_then(|v| v.checked_mul(N)) != Some(rows.len()) {
            return Err(malformed(format!(
                "{} bytes for {} rows of {row} values",
                rows.len(),
                ids.len()
            )));
        }
        if ids.windows(2).any(|w| w[0] >= w[1])
            || ids.first().is_some_and(|&i| i < 0)
            || ids.last().is_some_and(|&i| i as usize >= shape[0])
        {
            return Err(malformed(format!(
                "row ids not sorted, repeated or outside 0..{}",
                shape[0]
            )));
        }
        decoded.push((ids, rows));
    }
    // The union of sorted lists, merged one list at a time (a handful of workers).
    let mut union: Vec<i64> = Vec::new();
    for (ids, _) in &decoded {
        union = union_sorted(&union, ids);
    }
    // Row by row in id order, so the output is written once, front to back: the first worker
    // that has a row gives its values, the later ones add theirs.
    let mut at = vec![0usize; decoded.len()];
    let mut out: Vec<E> = Vec::with_capacity(union.len() * row);
    for &id in &union {
        let start = out.len();
        for ((ids, rows), k) in decoded.iter().zip(at.iter_mut()) {
            if ids.get(*k) != Some(&id) {
                continue;
            }
            let src = wire::le_words(&rows[*k * row * N..(*k + 1) * row * N], from_le);
            if out.len() == start {
                out.extend(src);
            } else {
                out[start..].iter_mut().zip(src).for_each(|(d, v)| *d += v);
            }
            *k += 1;
        }
    }
    let mut rows_shape = shape.to_vec();
    rows_shape[0] = union.len();
    NDArray::row_sparse_from_arrays(&NDArray::from_vec(out, &rows_shape)?, union, shape)
}

/// The sorted union of two sorted lists of distinct ids.
fn union_sorted(a: &[i64], b: &[i64]) -> Vec<i64> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (x, y) = (a[i], b[j]);
        out.push(x.min(y));
        i += usize::from(x <= y);
        j += usize::from(y <= x);
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// Every worker's dense value (as [`Writer::values`] wrote it) summed in worker order.
fn sum_dense(parts: &[&[u8]], dtype: DType, shape: &[usize]) -> Result<NDArray> {
    let raw = parts
        .iter()
        .map(|p| Reader::new(p).bytes())
        .collect::<Result<Vec<_>>>()?;
    sum_raw(&raw, dtype, shape)
}

/// Every worker's values of `shape` (raw little-endian bytes) summed in worker order.
pub(crate) fn sum_raw(parts: &[&[u8]], dtype: DType, shape: &[usize]) -> Result<NDArray> {
    match dtype {
        DType::F32 => sum_raw_typed(parts, shape, f32::from_le_bytes),
        DType::F64 => sum_raw_typed(parts, shape, f64::from_le_bytes),
        other => Err(Error::dtype(
            "KVStore::push",
            format!(
                "dense values are summed as float32 or float64, got {}",
                other.name()
            ),
        )),
    }
}

/// Every worker's values (raw little-endian bytes) one after another, as one array of `shape`:
/// decoded straight into the array's buffer.
pub(crate) fn concat_raw(parts: &[&[u8]], dtype: DType, shape: &[usize]) -> Result<NDArray> {
    fn concat<E: sparrow_core::Element, const N: usize>(
        parts: &[&[u8]],
        shape: &[usize],
        from_le: impl Fn([u8; N]) -> E + Copy,
    ) -> Result<NDArray> {
        let n: usize = shape.iter().product();
        let bytes: usize = parts.iter().map(|b| b.len()).sum();
        if bytes != n * N || parts.iter().any(|b| b.len() % N != 0) {
            return Err(malformed(format!(
                "parts of {:?} bytes for {n} values",
                parts.iter().map(|b| b.len()).collect::<Vec<_>>()
            )));
        }
        let mut out = Vec::with_capacity(n);
        for b in parts {
            out.extend(wire::le_words(b, from_le));
        }
        NDArray::from_vec(out, shape)
    }
    match dtype {
        DType::F32 => concat(parts, shape, f32::from_le_bytes),
        DType::F64 => concat(parts, shape, f64::from_le_bytes),
        other => Err(Error::dtype(
            "KVStore::sharded_dot_backward",
            format!(
                "a product's gradient is float32 or float64, got {}",
                other.name()
            ),
        )),
    }
}

fn sum_raw_typed<E, const N: usize>(
    parts: &[&[u8]],
    shape: &[usize],
    from_le: impl Fn([u8; N]) -> E + Copy,
) -> Result<NDArray>
where
    E: Copy + Default + std::ops::Add<Output = E> + std::ops::AddAssign + sparrow_core::Element,
{
    let n: usize = shape.iter().product();
    for (w, b) in parts.iter().enumerate() {
        if b.len() != n * N {
            return Err(malformed(format!(
                "{} bytes from worker {w} for {n} dense values",
                b.len()
            )));
        }
    }
    let mut out: Vec<E> = Vec::with_capacity(n);
    match parts {
        [] => out.resize(n, E::default()),
        [a] => out.extend(wire::le_words(a, from_le)),
        // The first two workers' values summed in one pass (the sum starts there: no zeroed
        // buffer, no copy of the first worker's values read back).
        [a, b, ..] => out.extend(
            wire::le_words(a, from_le)
                .zip(wire::le_words(b, from_le))
                .map(|(x, y)| x + y),
        ),
    }
    for b in parts.iter().skip(2) {
        out.iter_mut()
            .zip(wire::le_words(b, from_le))
            .for_each(|(d, v)| *d += v);
    }
    NDArray::from_vec(out, shape)
}

pub(crate) fn unknown_key(op: &'static str, key: usize) -> Error {
    Error::arg(op, format!("unknown key {key} (init it first)"))
}

/// A pushed value must have the key's shape and dtype and be dense or row_sparse.
fn check_value(
    op: &'static str,
    key: usize,
    v: &NDArray,
    shape: &[usize],
    dtype: DType,
) -> Result<()> {
    if v.shape() != shape {
        return Err(Error::shape(
            op,
            format!("key {key} has shape {shape:?}, the value {:?}", v.shape()),
        ));
    }
    if v.dtype() != dtype {
        return Err(Error::dtype(
            op,
            format!(
                "key {key} has dtype {}, the value {}",
                dtype.name(),
                v.dtype().name()
            ),
        ));
    }
    if v.stype() == SType::Csr {
        return Err(Error::stype(
            op,
            format!("key {key}: csr values cannot be pushed (dense or row_sparse)"),
        ));
    }
    if !matches!(v.dtype(), DType::F32 | DType::F64) {
        // Sums are taken as float32 or float64, with one worker as with many.
        return Err(Error::dtype(
            op,
            format!(
                "key {key}: pushes are summed as float32 or float64, got {}",
                v.dtype().name()
            ),
        ));
    }
    Ok(())
}

/// An output array must have the key's shape and dtype.
fn check_out(
    op: &'static str,
    key: usize,
    o: &NDArray,
    shape: &[usize],
    dtype: DType,
) -> Result<()> {
    if o.shape() != shape {
        return Err(Error::shape(
            op,
            format!("key {key} has shape {shape:?}, the output {:?}", o.shape()),
        ));
    }
    if o.dtype() != dtype {
        return Err(Error::dtype(
            op,
            format!(
                "key {key} has dtype {}, the output {}",
                dtype.name(),
                o.dtype().name()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift64*), so the cases are the same every run.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A worker's row_sparse gradient: a random subset of `rows` rows, values with signed
    /// zeros among them (a copy and an add differ there).
    fn worker_rsp(rng: &mut Rng, rows: usize, width: usize, dtype: DType) -> NDArray {
        let ids: Vec<i64> = (0..rows as i64).filter(|_| rng.below(3) == 0).collect();
        let vals: Vec<f64> = (0..ids.len() * width)
            .map(|_| match rng.below(8) {
                0 => -0.0,
                1 => 0.0,
                _ => (rng.below(2001) as f64 - 1000.0) / 7.0,
            })
            .collect();
        let data = NDArray::from_vec(vals, &[ids.len(), width])
            .unwrap()
            .astype(dtype)
            .unwrap();
        NDArray::row_sparse_from_arrays(&data, ids, &[rows, width]).unwrap()
    }

    fn encoded(a: &NDArray) -> Vec<u8> {
        let mut w = Writer::default();
        w.rsp(a).unwrap();
        w.0
    }

    #[test]
    fn merged_rows_are_the_bits_of_adding_the_workers_in_order() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for case in 0..40 {
            let dtype = if case % 2 == 0 {
                DType::F32
            } else {
                DType::F64
            };
            let (workers, rows, width) = (1 + case % 4, 1 + rng.below(40) as usize, 1 + case % 5);
            let parts: Vec<NDArray> = (0..workers)
                .map(|_| worker_rsp(&mut rng, rows, width, dtype))
                .collect();
            let msgs: Vec<Vec<u8>> = parts.iter().map(encoded).collect();
            let slices: Vec<&[u8]> = msgs.iter().map(|m| &m[..]).collect();
            let got = merge_rows(&slices, dtype, &[rows, width]).unwrap();
            let mut want = parts[0].clone();
            for p in &parts[1..] {
                want = add_grads(&want, p).unwrap();
            }
            let (gi, gv) = got.row_sparse_parts().unwrap();
            let (wi, wv) = want.row_sparse_parts().unwrap();
            assert_eq!(gi, wi, "case {case}: row ids");
            assert_eq!(
                gv.to_le_bytes().unwrap(),
                wv.to_le_bytes().unwrap(),
                "case {case}: values"
            );
        }
    }

    #[test]
    fn malformed_rows_are_errors_not_reads_out_of_bounds() {
        let shape = [10usize, 2];
        let rows = 3.5f32.to_le_bytes().repeat(4);
        let cases: [(&[i64], &[u8], &str); 4] = [
            (&[3, 1], &rows, "not sorted"),
            (&[1, 1], &rows, "repeated"),
            (&[1, 10], &rows, "outside"),
            (&[1, 2], &rows[..12], "bytes for 2 rows"),
        ];
        for (ids, bytes, what) in cases {
            let msg = wire::encode_rows(ids, bytes);
            let err = merge_rows(&[&msg[..]], DType::F32, &shape).unwrap_err();
            assert!(err.to_string().contains(what), "{what}: {err}");
        }
        let short = [1u8, 2, 3];
        assert!(merge_rows(&[&short[..]], DType::F32, &shape).is_err());
    }

    #[test]
    fn small_dense_values_sum_in_worker_order() {
        let mut rng = Rng(7);
        for dtype in [DType::F32, DType::F64] {
            let vals: Vec<NDArray> = (0..3)
                .map(|_| {
                    let v: Vec<f64> = (0..6).map(|_| rng.below(1000) as f64 / 3.0).collect();
                    NDArray::from_vec(v, &[2, 3])
                        .unwrap()
                        .astype(dtype)
                        .unwrap()
                })
                .collect();
            let msgs: Vec<Vec<u8>> = vals
                .iter()
                .map(|v| {
                    let mut w = Writer::default();
                    w.values(v).unwrap();
                    w.0
                })
                .collect();
            let slices: Vec<&[u8]> = msgs.iter().map(|m| &m[..]).collect();
            // One worker, two (summed in one pass) and three.
            let mut want = vals[0].clone();
            for k in 1..=3 {
                if k > 1 {
                    want = want.add(&vals[k - 1]).unwrap();
                }
                let got = sum_dense(&slices[..k], dtype, &[2, 3]).unwrap();
                assert_eq!(got.to_le_bytes().unwrap(), want.to_le_bytes().unwrap());
                assert!(sum_dense(&slices[..k], dtype, &[2, 4]).is_err());
            }
        }
    }
}
