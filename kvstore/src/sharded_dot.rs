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

use crate::sharded::{first_outside, Shard};
use crate::store::{concat_raw, sum_raw, unknown_key, Slot, SyncStore};
use crate::transport::{poison_parts, Transport};
use crate::wire::{self, check_headers, Header, Plain, Reader, Writer};

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

/// Send each owner its part of this worker's batch `x` (see [`write_parts`]) behind this
/// worker's header, and receive every worker's part of this worker's rows: returns where each
/// other worker's part lies in the received buffer, that buffer (the store's, to be handed
/// back to `store.recv` once read), and where this worker's own part lies in `store.send`
/// (it stays there: nothing is copied to itself). A batch that fails to split makes every
/// part a header alone that carries the error: every worker fails with it.
fn exchange_batches<T: Transport>(
    store: &mut SyncStore<T>,
    key: usize,
    local: &Result<(Vec<usize>, DType)>,
    x: Option<&NDArray>,
) -> (Result<Vec<Range<usize>>>, Vec<u8>, Range<usize>) {
    let (n, rank) = (store.transport.size(), store.transport.rank());
    let mut head = header("sharded_dot", key, local).encode();
    let mut w = Writer(std::mem::take(&mut store.send));
    w.0.clear();
    let split = match (local, x) {
        (Ok((shape, _)), Some(x)) => {
            Some(write_parts(&mut w, &head, x, &owner_bounds(shape[0], n)))
        }
        _ => None,
    };
    let mut parts = match split {
        Some(Ok(parts)) => parts,
        failed => {
            // This worker's error goes in its header, so every worker fails the call with it.
            if let Some(Err(e)) = failed {
                head = header("sharded_dot", key, &Err(e)).encode();
            }
            w.0.clear();
            (0..n)
                .map(|_| {
                    let start = w.0.len();
                    w.bytes(&head);
                    start..w.0.len()
                })
                .collect()
        }
    };
    let mine = parts.get(rank).cloned().unwrap_or(0..0);
    if let Some(p) = parts.get_mut(rank) {
        *p = p.start..p.start;
    }
    let mut recv = std::mem::take(&mut store.recv);
    let got = store.transport.all_to_all_into(&w.0, &parts, &mut recv);
    store.send = w.0;
    (got, recv, mine)
}

/// Every worker's header and payload of one gather (each part is a length-prefixed header
/// followed by the payload), the headers checked: a worker that failed before the call, or
/// calls another op or key, fails the call on every worker. `own`: this worker's rank and
/// its own part, where that part was not sent to itself (read there, not in `recv`).
fn gathered<'a>(
    op: &'static str,
    recv: &'a [u8],
    ranges: &[Range<usize>],
    own: Option<(usize, &'a [u8])>,
) -> Result<Vec<Reader<'a>>> {
    let mut readers = Vec::with_capacity(ranges.len());
    let mut headers = Vec::with_capacity(ranges.len());
    for (i, r) in ranges.iter().enumerate() {
        let part = match own {
            Some((rank, mine)) if rank == i => Some(mine),
            _ => recv.get(r.clone()),
        };
        let part = part.ok_or_else(|| {
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

/// One worker's part of an owner's batch (as the product's message carries it, its columns
/// counted from the owner's first row), appended to `own`: `indptr` gets one entry per row
/// (the running count of non-zeros). Returns the part's rows and its non-zeros' positions in
/// `own` grouped by column, each with its column (from the worker's grouping of its batch,
/// which the message carries after the values): ascending by column, positions ascending
/// within a column.
fn append_part<E: Element, const N: usize>(
    part: &mut Reader<'_>,
    width: usize,
    own: &mut (Vec<i64>, Vec<i64>, Vec<E>),
    from_le: fn([u8; N]) -> E,
) -> Result<(usize, Vec<(i64, usize)>)> {
    let indptr = part.bytes()?;
    let indices = part.bytes()?;
    let values = part.bytes()?;
    let order = part.bytes()?;
    let malformed = || {
        Error::arg(
            OP,
            "malformed batch from a worker: row pointers, columns, values and column order \
             disagree",
        )
    };
    let nnz = indices.len() / 8;
    if indptr.len() < 8
        || indptr.len() % 8 != 0
        || indices.len() % 8 != 0
        || values.len() != nnz * N
        || order.len() != nnz * order_width(nnz)
    {
        return Err(malformed());
    }
    let (idx, ptr, vals) = (&mut own.0, &mut own.1, &mut own.2);
    let base = idx.len();
    // Row pointers from 0, never decreasing, ending at the part's non-zeros.
    let mut prev = 0i64;
    for (i, p) in wire::le_words(indptr, i64::from_le_bytes).enumerate() {
        if (i == 0 && p != 0) || p < prev || p as usize > nnz {
            return Err(malformed());
        }
        prev = p;
        if i > 0 {
            ptr.push(p + base as i64);
        }
    }
    if prev as usize != nnz {
        return Err(malformed());
    }
    // Decoded whole, then checked in one pass (both vectorize; a check per push does not).
    idx.extend(wire::le_words(indices, i64::from_le_bytes));
    if first_outside(&idx[base..], 0..i64::try_from(width).unwrap_or(i64::MAX)).is_some() {
        return Err(malformed());
    }
    vals.extend(wire::le_words(values, from_le));
    // The grouping's positions, each checked, as positions in `own`; their columns ascend
    // along it (a worker's grouping that does not is caught where `own`'s grouping is
    // checked whole).
    let cols = &idx[base..];
    let (outside, run) = if order_width(nnz) == 4 {
        grouping_pairs(order, |b| u64::from(u32::from_le_bytes(b)), cols, base)
    } else {
        grouping_pairs(order, u64::from_le_bytes, cols, base)
    };
    if outside {
        return Err(malformed());
    }
    Ok((indptr.len() / 8 - 1, run))
}

/// A part's column grouping (`order`: positions within the part, `W` bytes each) as
/// (column, position in the owner's batch) pairs, `cols` being the part's columns and `base`
/// where they start in the owner's batch; and whether some position is past the part. Checked
/// in one pass, then collected from an iterator of known length (no capacity check per pair)
/// with no exit per position: the columns are read at random places, and a loop that branched
/// on each read waited for it.
fn grouping_pairs<const W: usize>(
    order: &[u8],
    from_le: fn([u8; W]) -> u64,
    cols: &[i64],
    base: usize,
) -> (bool, Vec<(i64, usize)>) {
    let at = || wire::le_words(order, from_le).map(|p| p as usize);
    let outside = at().fold(false, |bad, p| bad | (p >= cols.len()));
    let pair = |p: usize| (cols.get(p).copied().unwrap_or(-1), base + p);
    (outside, at().map(pair).collect())
}

/// Every worker's part of this owner's batch (`parts`, in worker order) as one csr array of
/// `width` columns with its column grouping kept (the workers' groupings merged, so the
/// backward's `x^T . dy` sorts nothing), and where each worker's rows start in it (then the
/// total).
fn own_batches(
    parts: &mut [Reader<'_>],
    dtype: DType,
    width: usize,
) -> Result<(NDArray, Vec<usize>)> {
    fn build<E: Element, const N: usize>(
        parts: &mut [Reader<'_>],
        width: usize,
        from_le: fn([u8; N]) -> E,
    ) -> Result<(NDArray, Vec<usize>)> {
        let mut own = (Vec::new(), vec![0i64], Vec::new());
        let mut starts = vec![0];
        let mut runs = Vec::with_capacity(parts.len());
        for p in parts.iter_mut() {
            let (rows, run) = append_part(p, width, &mut own, from_le)?;
            starts.push(starts.last().copied().unwrap_or(0) + rows);
            runs.push(run);
        }
        // One run per worker, each ascending by column with `own`'s positions ascending
        // within a column, and every worker's positions above the previous one's: merged by
        // column (a tie goes to the earlier worker), they are exactly `own`'s column grouping.
        let grouped = merge_runs(runs);
        let total = *starts.last().expect("one entry at least");
        let (indices, indptr, values) = own;
        // Columns stay as each worker's batch had them (a LibSVM batch's are not checked for
        // order): the same product as that batch's, never a read out of bounds.
        let x = NDArray::csr_unchecked(values, indices, indptr, [total, width])?;
        x.set_csr_column_order(grouped)?;
        Ok((x, starts))
    }
    match dtype {
        DType::F32 => build(parts, width, f32::from_le_bytes),
        DType::F64 => build(parts, width, f64::from_le_bytes),
        other => Err(Error::dtype(
            OP,
            format!(
                "a sharded product is float32 or float64, got {}",
                other.name()
            ),
        )),
    }
}

/// Runs of (column, position) pairs, each ascending by column, merged into one ascending by
/// column, a tie going to the earlier run (pairwise, so `k` runs of `n` pairs take `n log k`
/// steps); returns the positions. Nothing here is trusted: the caller checks the result
/// (`set_csr_column_order`).
fn merge_runs(mut runs: Vec<Vec<(i64, usize)>>) -> Vec<usize> {
    // Pairs while more than two runs are left; the last merge writes positions alone.
    while runs.len() > 2 {
        let mut merged = Vec::with_capacity(runs.len().div_ceil(2));
        let mut it = runs.into_iter();
        while let Some(a) = it.next() {
            match it.next() {
                Some(b) => {
                    let mut out = Vec::with_capacity(a.len() + b.len());
                    merge_two(&a, &b, |p| out.push(p));
                    merged.push(out);
                }
                None => merged.push(a),
            }
        }
        runs = merged;
    }
    let (a, b) = match (runs.pop(), runs.pop()) {
        (Some(b), Some(a)) => (a, b),
        (Some(a), None) => (a, Vec::new()),
        _ => return Vec::new(),
    };
    let mut out = Vec::with_capacity(a.len() + b.len());
    merge_two(&a, &b, |p| out.push(p.1));
    out
}

/// Two runs of (column, position) pairs, each ascending by column, merged into `put` in
/// ascending column order, a tie going to `a`.
fn merge_two(a: &[(i64, usize)], b: &[(i64, usize)], mut put: impl FnMut((i64, usize))) {
    let (mut i, mut j) = (0, 0);
    // Without a branch on the comparison: the runs' columns are random, and a mispredicted
    // branch per pair cost more than the rest of the merge.
    while let (Some(x), Some(y)) = (a.get(i), b.get(j)) {
        let take_b = y.0 < x.0;
        put(if take_b { *y } else { *x });
        j += usize::from(take_b);
        i += usize::from(!take_b);
    }
    a[i.min(a.len())..].iter().for_each(|&p| put(p));
    b[j.min(b.len())..].iter().for_each(|&p| put(p));
}

/// Bytes a batch's message gives each position of its column grouping: 4 below 2^32
/// non-zeros, else 8.
fn order_width(nnz: usize) -> usize {
    if u32::try_from(nnz).is_ok() {
        4
    } else {
        8
    }
}

/// Where each of `n` owners' rows of a `rows`-row table start ([`crate::shard_range`]), then
/// `rows`: owner `r` holds `bounds[r]..bounds[r + 1]`.
fn owner_bounds(rows: usize, n: usize) -> Vec<usize> {
    (0..n)
        .map(|r| crate::shard_range(rows, r, n).0)
        .chain([rows])
        .collect()
}

/// Write a csr batch split by the owners of its columns (`bounds`: owner `r` holds the rows
/// `bounds[r]..bounds[r + 1]` of the table), each owner's part behind `head`: its row
/// pointers, its columns counted from the owner's first row, its values, then its non-zeros'
/// grouping by column (positions within the part, of [`order_width`] bytes), cut from the
/// batch's grouping ([`ColumnGroups::order`](sparrow_core::sparse::ColumnGroups::order): the
/// one a data loader prepared with the batch, `prepare_transpose`, else made here). Returns
/// where each owner's part lies in the message. Each owner reads only its own non-zeros, so
/// an owner's work and the bytes it receives do not grow with the number of workers.
fn write_parts(
    w: &mut Writer,
    head: &[u8],
    x: &NDArray,
    bounds: &[usize],
) -> Result<Vec<Range<usize>>> {
    fn put<E: Element + Plain>(
        w: &mut Writer,
        head: &[u8],
        x: &NDArray,
        bounds: &[usize],
        order: &[usize],
    ) -> Result<Vec<Range<usize>>> {
        let n = bounds.len() - 1;
        x.with_csr::<E, _>(|c| {
            let table_rows = 0..i64::try_from(bounds[n]).unwrap_or(i64::MAX);
            if let Some(col) = first_outside(c.indices, table_rows) {
                return Err(Error::index(
                    OP,
                    format!("column {col} of the batch is not a table row"),
                ));
            }
            // The owner of a column: how many owners past the first start at or before it
            // (counted without branches for a few owners: a batch's columns are random).
            let owner = |col: i64| {
                if n <= 16 {
                    bounds[1..n]
                        .iter()
                        .map(|&b| usize::from(b as i64 <= col))
                        .sum::<usize>()
                } else {
                    bounds[1..n].partition_point(|&b| b as i64 <= col)
                }
            };
            let (nnz, rows) = (c.indices.len(), c.indptr.len().saturating_sub(1));
            // Each non-zero's owner, and how many non-zeros each owner gets: then every
            // owner's columns and values are written once, each to its place in one buffer
            // (owner `r`'s at `start[r]..start[r + 1]`), with no buffer growing on the way.
            let owners: Vec<usize> = c.indices.iter().map(|&col| owner(col)).collect();
            let mut count = vec![0usize; n + 1];
            if n <= 16 {
                // One counting pass per owner: each vectorizes, where one pass adding to the
                // owners' counters in turn waits on its last add to the same counter.
                for (r, k) in count[1..].iter_mut().enumerate() {
                    *k = owners.iter().map(|&o| usize::from(o == r)).sum();
                }
            } else {
                owners.iter().for_each(|&r| count[r + 1] += 1);
            }
            let start: Vec<usize> = count
                .iter()
                .scan(0, |acc, &k| {
                    *acc += k;
                    Some(*acc)
                })
                .collect();
            let mut next = start[..n].to_vec();
            let mut idx = vec![0i64; nnz];
            let mut vals = vec![E::default(); nnz];
            // Row pointers of every owner's part, owner `r`'s at `r * (rows + 1)..`.
            let mut ptr = vec![0i64; n * (rows + 1)];
            // Each non-zero's position within its owner's part.
            let mut at = vec![0usize; nnz];
            for (row, bounds_of_row) in c.indptr.windows(2).enumerate() {
                let k = bounds_of_row[0] as usize..bounds_of_row[1] as usize;
                for (((a, &r), &col), &v) in at[k.clone()]
                    .iter_mut()
                    .zip(&owners[k.clone()])
                    .zip(&c.indices[k.clone()])
                    .zip(&c.values[k])
                {
                    let q = next[r];
                    *a = q - start[r];
                    idx[q] = col - bounds[r] as i64;
                    vals[q] = v;
                    next[r] = q + 1;
                }
                for (r, (&q, &s0)) in next.iter().zip(&start).enumerate() {
                    ptr[r * (rows + 1) + row + 1] = (q - s0) as i64;
                }
            }
            // The batch's grouping visits columns in ascending order, so each owner's
            // non-zeros are one run of it, and their positions come out grouped by column.
            let col_of = |p: usize| c.indices.get(p).copied().unwrap_or(i64::MAX);
            let cut: Vec<usize> = bounds
                .iter()
                .map(|&b| order.partition_point(|&p| col_of(p) < b as i64))
                .collect();
            let mut ranges = Vec::with_capacity(n);
            for r in 0..n {
                let begin = w.0.len();
                let part = start[r]..start[r + 1];
                w.bytes(head);
                w.slice(&ptr[r * (rows + 1)..(r + 1) * (rows + 1)])
                    .slice(&idx[part.clone()])
                    .slice(&vals[part.clone()]);
                // The owner's run of the grouping, as positions within its part.
                let run = &order[cut[r]..cut[r + 1].max(cut[r])];
                let pos = run
                    .iter()
                    .map(|&p| at.get(p).copied().unwrap_or(usize::MAX));
                if order_width(part.len()) == 4 {
                    // Below 2^32 non-zeros every position fits.
                    w.slice(&pos.map(|p| p as u32).collect::<Vec<u32>>());
                } else {
                    w.slice(&pos.map(|p| p as u64).collect::<Vec<u64>>());
                }
                ranges.push(begin..w.0.len());
            }
            Ok(ranges)
        })?
    }
    if bounds.len() < 2 {
        return Err(Error::arg(OP, "a product needs one worker at least"));
    }
    if x.csr_column_groups().is_none() {
        x.prepare_csr_transpose();
    }
    let groups = x
        .csr_column_groups()
        .ok_or_else(|| Error::arg(OP, "a batch's column grouping could not be made"))?;
    match x.dtype() {
        DType::F32 => put::<f32>(w, head, x, bounds, groups.order()),
        _ => put::<f64>(w, head, x, bounds, groups.order()),
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
    // 1. Each owner's part of every worker's batch to it, behind the worker's header.
    let (got, recv, mine) = exchange_batches(store, key, &local, x.as_ref().ok());
    let result = got.and_then(|ranges| {
        let own_part = store.send.get(mine).unwrap_or_default();
        let mut parts = gathered(OP, &recv, &ranges, Some((rank, own_part)))?;
        let (shape, dtype) = local?;
        let s = table(store, OP, key)?;
        let (own, starts) = own_batches(&mut parts, dtype, s.hi - s.lo)?;
        // 2. This worker's rows times every worker's batch on them.
        let product = own.dot(&s.value)?;
        Ok((own, starts, product, shape[1], dtype))
    });
    store.recv = recv;
    // 3. Each worker's rows of the product back to it; its product is the owners' sum.
    let mut w = Writer(std::mem::take(&mut store.send));
    w.0.clear();
    let mut recv = std::mem::take(&mut store.recv);
    let transport = &mut store.transport;
    let (got, made) = match result {
        Ok((own, starts, product, cols, dtype)) => {
            let row_bytes = cols * dtype.size_of();
            let bytes = starts.last().copied().unwrap_or(0) * row_bytes;
            // This worker's own rows of the product stay where they are (nothing is copied
            // to itself): they are summed from there.
            let parts: Vec<Range<usize>> = starts
                .windows(2)
                .enumerate()
                .map(|(r, s)| s[0] * row_bytes..s[usize::from(r != rank)] * row_bytes)
                .collect();
            let mine = starts[rank] * row_bytes..starts[rank + 1] * row_bytes;
            // The product's own memory is the message where it reads as bytes in place;
            // otherwise its bytes go through the store's buffer.
            let in_place = wire::with_le_bytes_mut(&product, |b| {
                (b.len() == bytes).then(|| transport.all_to_all_into(b, &parts, &mut recv))
            })
            .flatten();
            match in_place {
                Some(got) => (
                    got,
                    Ok((own, starts, cols, dtype, Mine::Product(product, mine))),
                ),
                None => match w.raw_values(&product, 0..bytes / dtype.size_of()) {
                    Ok(_) => (
                        transport.all_to_all_into(&w.0, &parts, &mut recv),
                        Ok((own, starts, cols, dtype, Mine::Sent(mine))),
                    ),
                    Err(e) => (poisoned(transport, &mut w.0, &mut recv), Err(e)),
                },
            }
        }
        // An error met after the gather (this owner's part of the product) may be this
        // worker's alone: it still takes part in the exchange, and every worker fails.
        Err(e) => (poisoned(transport, &mut w.0, &mut recv), Err(e)),
    };
    store.send = w.0;
    let out = made.and_then(|(own, starts, cols, dtype, mine)| {
        let ranges = got?;
        let want = (starts[rank + 1] - starts[rank]) * cols * dtype.size_of();
        let mut others = ranges.iter().enumerate().filter(|&(r, _)| r != rank);
        if let Some((_, r)) = others.find(|(_, r)| r.len() != want) {
            return Err(Error::arg(
                OP,
                format!(
                    "an owner sent {} bytes of this worker's product, not {want} (its part of \
                     the product failed)",
                    r.len()
                ),
            ));
        }
        // The owners' parts of this worker's product, summed in owner order.
        let sum = |own_part: &[u8]| {
            let slices: Vec<&[u8]> = (0..ranges.len())
                .map(|r| match r == rank {
                    true => own_part,
                    false => &recv[ranges[r].clone()],
                })
                .collect();
            sum_raw(&slices, dtype, &[starts[rank + 1] - starts[rank], cols])
        };
        let lost = || Error::arg(OP, "this worker's own rows of the product are not readable");
        let y = match mine {
            // A worker alone: its product is the whole sum, as it is.
            Mine::Product(product, _) if ranges.len() == 1 => Some(Ok(product)),
            Mine::Product(product, at) => {
                wire::with_le_bytes_mut(&product, |b| b.get(at).map(sum)).flatten()
            }
            Mine::Sent(at) => store.send.get(at).map(sum),
        }
        .ok_or_else(lost)??;
        Ok((y, ShardedDot { own, starts }))
    });
    store.recv = recv;
    out
}

/// Where an owner's own rows of its product are once the others' were sent: in the product
/// (sent in place), or in the store's send buffer (sent through it).
enum Mine {
    Product(NDArray, Range<usize>),
    Sent(Range<usize>),
}

/// The exchange of a worker that met an error of its own: it still takes part, with
/// [`poison_parts`], and every receiver fails.
fn poisoned<T: Transport>(
    transport: &mut T,
    buf: &mut Vec<u8>,
    recv: &mut Vec<u8>,
) -> Result<Vec<Range<usize>>> {
    let parts = poison_parts(buf, transport.size());
    transport.all_to_all_into(buf, &parts, recv)
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

    /// What this worker sends with its header for the gradients' exchange: the product's row
    /// starts ([`ShardedDot::starts`], as u64), which say where every worker's gradient goes.
    pub(crate) fn described(parts: &ShardedDot) -> Vec<u8> {
        let mut w = Writer::default();
        w.slice(&parts.starts.iter().map(|&s| s as u64).collect::<Vec<u64>>());
        w.0
    }

    /// Every worker's gradient of its product (this worker's is [`BackwardLocal::checked`]'s)
    /// gathered straight into one `[rows of every batch, table columns]` array, each worker's
    /// rows at its [`ShardedDot::starts`]: the array the owner's `x^T . dy` reads, with no
    /// message to decode or concatenate. `described` is every worker's
    /// [`BackwardLocal::described`] (gathered with the headers, so the same on every worker):
    /// unless all of them are this worker's, every worker fails here, before the collective
    /// call, so none is left waiting in it.
    pub(crate) fn gather_dys<T: Transport>(
        &self,
        store: &mut SyncStore<T>,
        parts: &ShardedDot,
        described: &[Vec<u8>],
    ) -> Result<NDArray> {
        let (shape, dtype) = self.table.clone()?;
        let dy = self.checked()?;
        let mine = Self::described(parts);
        if let Some(r) = described.iter().position(|d| *d != mine) {
            return Err(Error::arg(
                OP_BACK,
                format!(
                    "workers disagree on the product's rows: worker {r} describes {} bytes of \
                     row starts unlike this worker's (the products were not made by one call)",
                    described[r].len()
                ),
            ));
        }
        let n = described.len();
        if parts.starts.len() != n + 1 {
            return Err(Error::arg(
                OP_BACK,
                format!(
                    "the product was made by a store of {} workers, this one has {n}",
                    parts.starts.len().saturating_sub(1)
                ),
            ));
        }
        let (rows, cols) = (parts.starts[n], shape[1]);
        let row_bytes = cols * dtype.size_of();
        let ranges: Vec<Range<usize>> = parts
            .starts
            .windows(2)
            .map(|w| w[0] * row_bytes..w[1] * row_bytes)
            .collect();
        // The parts cover every row: the last gather's array of this shape is overwritten
        // whole, so it is reused without zeroing.
        let all = match store.dys.take() {
            Some(a) if a.dims()[..] == [rows, cols] && a.dtype() == dtype => a,
            _ => NDArray::zeros(&[rows, cols], dtype)?,
        };
        let transport = &mut store.transport;
        let in_place = wire::with_le_bytes(dy, |send| {
            wire::with_le_bytes_mut(&all, |recv| {
                transport.all_gather_known_into(send, recv, &ranges)
            })
        })
        .flatten();
        match in_place {
            Some(done) => done.map(|()| all),
            // Not readable or writable as little-endian bytes in place (a big-endian machine):
            // through buffers, decoded.
            None => {
                let send = dy.to_le_bytes()?;
                let mut recv = vec![0u8; rows * row_bytes];
                transport.all_gather_known_into(&send, &mut recv, &ranges)?;
                concat_raw(&[&recv], dtype, &[rows, cols])
            }
        }
    }

    /// This worker's rows' gradient from every worker's gradient of its product (`dy_all`,
    /// each worker's rows at its [`ShardedDot::starts`], as [`BackwardLocal::gather_dys`]
    /// makes it), as the table's rows.
    pub(crate) fn finish<T: Transport>(
        &self,
        store: &SyncStore<T>,
        key: usize,
        parts: &ShardedDot,
        dy_all: &NDArray,
    ) -> Result<NDArray> {
        let (shape, dtype) = self.table.clone()?;
        let want = [parts.starts.last().copied().unwrap_or(0), shape[1]];
        if dy_all.dims()[..] != want || dy_all.dtype() != dtype {
            return Err(Error::shape(
                OP_BACK,
                format!(
                    "every worker's gradient of the product is a {} {want:?} array; got {} {:?}",
                    dtype.name(),
                    dy_all.dtype().name(),
                    &dy_all.dims()[..]
                ),
            ));
        }
        // This worker's rows' gradient over every worker's batch, as the table's rows.
        let lo = table(store, OP_BACK, key)?.lo as i64;
        // Never part of a graph: the store reuses `dy_all` for the next gather, which a
        // recorded operation holding it would see.
        let g = sparrow_core::autograd::pause(|| {
            sparse::dot_csr_t_dense(&parts.own, dy_all, SType::RowSparse)
        })?;
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
    // Every worker's header and where its gradient goes, then the gradients themselves.
    let (got, recv) = gather(
        store,
        "sharded_dot_backward",
        key,
        &local.table,
        |w| match local.checked() {
            Ok(_) => {
                w.bytes(&BackwardLocal::described(parts));
                Ok(())
            }
            Err(_) => Ok(()),
        },
    );
    let described = got.and_then(|ranges| {
        let mut readers = gathered(OP_BACK, &recv, &ranges, None)?;
        readers
            .iter_mut()
            .map(|r| r.bytes().map(<[u8]>::to_vec))
            .collect::<Result<Vec<_>>>()
    });
    store.recv = recv;
    let dy_all = local.gather_dys(store, parts, &described?)?;
    let g = local.finish(store, key, parts, &dy_all);
    store.dys = Some(dy_all);
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use sparrow_core::testing::test_csr;

    /// `x` split for the owners `bounds` (behind an empty header), and where each part lies.
    fn message(x: &NDArray, bounds: &[usize]) -> (Vec<u8>, Vec<Range<usize>>) {
        let mut w = Writer::default();
        let ranges = write_parts(&mut w, &[], x, bounds).unwrap();
        (w.0, ranges)
    }

    /// A reader of one part, past its (empty) header.
    fn part(b: &[u8]) -> Reader<'_> {
        let mut r = Reader::new(b);
        assert!(r.bytes().unwrap().is_empty());
        r
    }

    /// A csr array with `x`'s non-zeros in new buffers (no grouping kept).
    fn rebuilt<E: Element>(x: &NDArray, shape: [usize; 2]) -> NDArray {
        x.with_csr::<E, _>(|c| {
            let (v, i, p) = (c.values.to_vec(), c.indices.to_vec(), c.indptr.to_vec());
            NDArray::csr_unchecked(v, i, p, shape)
        })
        .unwrap()
        .unwrap()
    }

    /// Each owner's batch holds exactly every worker's non-zeros in its columns, in worker
    /// order, and keeps the grouping a sort of it would make (merged from the workers'
    /// groupings, prepared or not), for any number of workers and owners (some owning no row).
    #[test]
    fn each_owners_batch_is_its_columns_of_every_batch_grouped_as_a_sort_would() {
        for (case, dtype) in [DType::F32, DType::F64, DType::F32, DType::F64]
            .into_iter()
            .enumerate()
        {
            let workers = 1 + case;
            let batches: Vec<NDArray> = (0..workers)
                .map(|w| test_csr(7 + w, 60, 0.2, (case * 10 + w) as u64, dtype))
                .collect();
            if case % 2 == 0 {
                batches[0].prepare_csr_transpose();
            }
            for owners in [1, 2, 3, 7, 64] {
                let b = owner_bounds(60, owners);
                let msgs: Vec<_> = batches.iter().map(|x| message(x, &b)).collect();
                for r in 0..owners {
                    let (lo, hi) = (b[r], b[r + 1]);
                    let mut parts: Vec<Reader<'_>> =
                        msgs.iter().map(|(m, at)| part(&m[at[r].clone()])).collect();
                    let (own, starts) = own_batches(&mut parts, dtype, hi - lo).unwrap();
                    let rows: Vec<usize> = batches.iter().map(|x| x.dims()[0]).collect();
                    let want_starts: Vec<usize> = std::iter::once(0)
                        .chain(rows.iter().scan(0, |acc, &n| {
                            *acc += n;
                            Some(*acc)
                        }))
                        .collect();
                    assert_eq!(starts, want_starts);
                    // Every worker's rows, columns lo..hi, one worker after another.
                    let want: Vec<f64> = batches
                        .iter()
                        .flat_map(|x| {
                            let d = x.to_f64_vec();
                            (0..x.dims()[0])
                                .flat_map(move |i| d[i * 60 + lo..i * 60 + hi].to_vec())
                                .collect::<Vec<f64>>()
                        })
                        .collect();
                    assert_eq!(own.to_f64_vec(), want, "case {case} owner {r} of {owners}");
                    let kept = own.csr_column_groups().expect("kept").order().to_vec();
                    // The same non-zeros in a new array (no grouping kept), grouped by the sort.
                    let shape = [starts[workers], hi - lo];
                    let again = match dtype {
                        DType::F32 => rebuilt::<f32>(&own, shape),
                        _ => rebuilt::<f64>(&own, shape),
                    };
                    assert!(again.csr_column_groups().is_none());
                    assert!(again.prepare_csr_transpose());
                    let sorted = again.csr_column_groups().unwrap();
                    assert_eq!(kept, sorted.order(), "case {case} owner {r} of {owners}");
                }
            }
        }
    }

    /// A batch message whose column order is short, points past the batch or does not group
    /// by column, or whose columns lie past the owner's rows, fails the product with an
    /// error, never a read out of bounds.
    #[test]
    fn a_malformed_column_order_is_an_error() {
        let x = test_csr(6, 20, 0.3, 3, DType::F32);
        let (good, _) = message(&x, &[0, 20]);
        let nnz = x.to_f64_vec().iter().filter(|v| **v != 0.0).count();
        // The order is the message's last field: nnz positions of 4 bytes.
        let at = good.len() - 4 * nnz;
        let with_order = |order: &[u32]| {
            let mut m = good[..at - 8].to_vec();
            m.extend_from_slice(&((order.len() * 4) as u64).to_le_bytes());
            for p in order {
                m.extend_from_slice(&p.to_le_bytes());
            }
            m
        };
        let order: Vec<u32> = good[at..]
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(with_order(&order), good);
        let mut past = order.clone();
        past[0] = nnz as u32;
        let mut reversed = order.clone();
        reversed.reverse();
        for (bad, width, what) in [
            (with_order(&order[1..]), 20, "malformed batch"),
            (with_order(&past), 20, "malformed batch"),
            (with_order(&reversed), 20, "not a column grouping"),
            // Columns past the owner's rows.
            (good.clone(), 10, "malformed batch"),
        ] {
            let mut parts = vec![part(&bad)];
            let e = own_batches(&mut parts, DType::F32, width).unwrap_err();
            assert!(e.to_string().contains(what), "{e}");
        }
        // A row pointer far past the part's non-zeros, in a second part (appended after the
        // first's non-zeros): malformed, not an overflow.
        let mut far = good.clone();
        far[24..32].copy_from_slice(&i64::MAX.to_le_bytes());
        let mut parts = vec![part(&good), part(&far)];
        let e = own_batches(&mut parts, DType::F32, 20).unwrap_err();
        assert!(e.to_string().contains("malformed batch"), "{e}");
        // A batch with columns past the table's rows is this worker's error, not a message.
        let mut w = Writer::default();
        let e = write_parts(&mut w, &[], &x, &[0, 5, 10]).unwrap_err();
        assert!(e.to_string().contains("is not a table row"), "{e}");
    }

    /// An owner whose part of the product fails after the batches were exchanged (an error
    /// only it meets) still takes part in the products' exchange: every worker fails the
    /// call at once, none waits for the timeout.
    #[test]
    fn an_owner_failing_its_part_fails_every_worker_without_a_wait() {
        use sparrow_optim::KVStore;
        let stores = crate::local_group(2, std::time::Duration::from_secs(5)).unwrap();
        let handles: Vec<_> = stores
            .into_iter()
            .enumerate()
            .map(|(r, mut kv)| {
                std::thread::spawn(move || {
                    let (lo, hi) = crate::shard_range(6, r, 2);
                    let part = NDArray::zeros(&[hi - lo, 2], DType::F32).unwrap();
                    kv.init_sharded(0, &[6, 2], &part).unwrap();
                    if r == 1 {
                        // The shard's rows in another dtype than the table's: the product of
                        // this owner's part fails here only.
                        let Some(crate::store::Slot::Sharded(s)) = kv.slots.get_mut(&0) else {
                            panic!("a sharded key")
                        };
                        s.value = NDArray::zeros(&[hi - lo, 2], DType::F64).unwrap();
                    }
                    let x = NDArray::from_vec(vec![1f32, 0.0, 0.0, 0.0, 0.0, 2.0], &[1, 6])
                        .unwrap()
                        .tostype(SType::Csr)
                        .unwrap();
                    let t = std::time::Instant::now();
                    let e = kv.sharded_dot(0, &x).map(|_| ()).unwrap_err().to_string();
                    (e, t.elapsed())
                })
            })
            .collect();
        let got: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(got[0].0.contains("an owner sent 1 bytes"), "{}", got[0].0);
        assert!(!got[1].0.contains("an owner sent"), "{}", got[1].0);
        for (e, took) in &got {
            assert!(!e.contains("waited"), "{e}");
            assert!(took.as_secs_f64() < 4.0, "{took:?}");
        }
    }
}
