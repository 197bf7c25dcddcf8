//! Parsing a block straight into its batches.
//!
//! The reader thread records where each row's line starts. The producer then knows, before
//! parsing, which byte range holds each batch's rows, parses those ranges in parallel, and the
//! parsed CSR arrays become the batches by move: no row is copied except in the one batch per
//! block that joins the rows left over from the previous block. (Parsing fixed-size byte pieces
//! instead cuts batches across pieces, and every row had to be copied into its batch.)

use std::collections::VecDeque;
use std::sync::Arc;

use rayon::prelude::*;
use sparrow_core::{ArrayData, Buffer, CsrData, DenseData, NDArray};

use super::iter::{check_label_counts, locate, make_batch, BatchTx, Shared};
use super::parse::{is_row_line, parse_into, Rows};
use super::plan::{FileInfo, Span};
use super::{nth_line_start, BufError};
use crate::batch::Batch;
use crate::error::{DataError, Result};

/// A block's text and the offsets of its row lines; the vectors are reused from block to block.
#[derive(Default)]
pub(super) struct BlockBuf {
    /// The block's text when it was read (whole lines).
    pub buf: Vec<u8>,
    /// The block's text when it was mapped instead (then `buf` is unused).
    pub map: Option<memmap2::Mmap>,
    /// Byte offset of every line that holds a row (blank and comment-only lines hold none).
    pub row_starts: Vec<usize>,
}

impl BlockBuf {
    /// The block's text.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&self.buf)
    }
}

/// Map span `s` read-only, its pages populated up front (one call instead of a page fault per
/// 64 KB while parsing). Mapping instead of `read()` saves copying every byte out of the page
/// cache; unmapping after the block keeps memory bounded by the blocks in flight.
pub(super) fn map_span(files: &[FileInfo], s: Span) -> Result<memmap2::Mmap> {
    let path = &files[s.file].path;
    let file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    // SAFETY: the map is read-only and only read while it lives; a file truncated by another
    // process meanwhile could fault, the documented hazard of memory-mapped input (the whole-file
    // loader accepts the same).
    unsafe {
        memmap2::MmapOptions::new()
            .offset(s.start)
            .len((s.end - s.start) as usize)
            .populate()
            .map(&file)
    }
    .map_err(|e| DataError::io(path, e))
}

/// Fill `out` with the start offset of every row line of `buf` (as `parse::is_row_line`
/// decides, the same rule the parser uses, so range `k` of these holds exactly `k` rows).
pub(super) fn row_starts(buf: &[u8], out: &mut Vec<usize>) {
    out.clear();
    let mut start = 0;
    for nl in memchr::memchr_iter(b'\n', buf) {
        if is_row_line(&buf[start..nl]) {
            out.push(start);
        }
        start = nl + 1;
    }
    if start < buf.len() && is_row_line(&buf[start..]) {
        out.push(start);
    }
}

/// Parse block `bi` (in `block`) into batches and send the full ones; rows that do not fill a
/// batch are appended to `left` (which holds fewer than `batch_size` rows on entry and exit).
/// The first `skip` rows are dropped (rows the previous epoch's round batch already used).
/// Returns `Ok(false)` when the consumer has gone.
pub(super) fn emit_block_direct(
    sh: &Shared,
    bi: usize,
    block: &BlockBuf,
    left: &mut Rows,
    skip: &mut usize,
    pool: &mut ArrayPool,
    tx: &mut BatchTx,
) -> Result<bool> {
    let (buf, starts) = (block.bytes(), &block.row_starts[..]);
    let bs = sh.p.batch_size;
    let nrows = starts.len();
    let r0 = (*skip).min(nrows);
    *skip -= r0;
    // Row ranges: first the rows that complete `left` into a batch, then whole batches, then
    // the tail.
    let mut ranges = Vec::with_capacity((nrows - r0) / bs + 2);
    let mut r = r0;
    if !left.is_empty() && r < nrows {
        let z = r.saturating_add(bs - left.len()).min(nrows);
        ranges.push((r, z));
        r = z;
    }
    while r < nrows {
        let z = r.saturating_add(bs).min(nrows);
        ranges.push((r, z));
        r = z;
    }
    let byte = |row: usize| starts.get(row).copied().unwrap_or(buf.len());
    pool.reclaim();
    let outs: Vec<Rows> = ranges.iter().map(|_| pool.rows()).collect();
    let parsed: Vec<std::result::Result<Rows, BufError>> = ranges
        .par_iter()
        .zip(outs)
        .map(|(&(a, z), mut rows)| {
            let (s, e) = (byte(a), byte(z));
            let text = &buf[s..e];
            // ~16 bytes per feature is typical of real data; a shortfall only costs a regrow.
            rows.indices.reserve(text.len() / 16);
            rows.values.reserve(text.len() / 16);
            rows.labels.reserve(z - a);
            parse_into(text, &sh.data_opts, &mut rows).map_err(|err| BufError {
                line_start: s + nth_line_start(text, err.line),
                err,
            })?;
            Ok(rows)
        })
        .collect();
    // Parse errors first, in file order, then label counts: the order the piece path reports.
    let mut pieces = Vec::with_capacity(parsed.len());
    for p in parsed {
        pieces.push(p.map_err(|e| locate(&sh.files, sh.blocks[bi].data, buf, e))?);
    }
    for (p, &(a, _)) in pieces.iter().zip(&ranges) {
        check_label_counts(sh, bi, buf, p, |r| byte(a + r))?;
    }
    for p in pieces {
        let batch = if left.is_empty() && p.len() == bs {
            pool.batch_from_rows(sh, p)
        } else if left.len() + p.len() == bs {
            let b = make_batch(sh, &[(left, 0, left.len()), (&p, 0, p.len())], 0);
            *left = Rows::new();
            b
        } else {
            // Fewer rows than a batch: the tail (or all a small block has) waits for more.
            // (The ranges are cut so that this never overfills; `flush_full` keeps the
            // invariant even if a range ever held another row count.)
            left.extend_from(&p, 0, p.len());
            if !flush_full(sh, left, tx) {
                return Ok(false);
            }
            continue;
        };
        if !tx.send(batch) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Send full batches off the front of `left` until it holds fewer than `batch_size` rows.
/// Returns `false` when the consumer has gone.
fn flush_full(sh: &Shared, left: &mut Rows, tx: &mut BatchTx) -> bool {
    let bs = sh.p.batch_size;
    while left.len() >= bs {
        let batch = make_batch(sh, &[(left, 0, bs)], 0);
        let mut rest = Rows::new();
        rest.extend_from(left, bs, left.len());
        *left = rest;
        if !tx.send(batch) {
            return false;
        }
    }
    true
}

/// Arrays of the batches handed out, taken back for the next batches once the consumer has
/// dropped its batch.
///
/// Every batch needs ~0.5 MB of fresh arrays. Freed and allocated again at this rate, the
/// allocator kept returning the memory to the kernel and faulting it back in zeroed: that
/// page-fault and `madvise` traffic was ~20% of a pass. The pool keeps a second `Arc` to each
/// array it hands out; when the consumer has dropped the batch, that `Arc` is the only one left
/// and its vector is reused. Only the most recent `KEEP` arrays are watched, so a consumer
/// that keeps its batches costs no extra memory (the arrays are shared, not copied). A
/// consumer that mutates a batch still in the window gets copy-on-write, as with any shared
/// array.
#[derive(Default)]
pub(super) struct ArrayPool {
    indptr: Recycler<i64>,
    indices: Recycler<i64>,
    values: Recycler<f32>,
    labels: Recycler<f32>,
}

/// Arrays watched per kind (one per batch, so more than a block's batches plus the prefetch
/// queue).
const KEEP: usize = 64;

/// The arrays of one kind handed out, and those taken back.
struct Recycler<T> {
    sent: VecDeque<Arc<Vec<T>>>,
    free: Vec<Vec<T>>,
}

impl<T> Default for Recycler<T> {
    fn default() -> Self {
        Recycler {
            sent: VecDeque::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Recycler<T> {
    /// Move the arrays whose batch has been dropped to the free list.
    fn reclaim(&mut self) {
        for _ in 0..self.sent.len() {
            let Some(a) = self.sent.pop_front() else {
                break;
            };
            match Arc::try_unwrap(a) {
                Ok(mut v) => {
                    v.clear();
                    self.free.push(v);
                }
                Err(a) => self.sent.push_back(a),
            }
        }
        self.free.truncate(KEEP);
    }

    /// An empty array, reused when one is free.
    fn get(&mut self) -> Vec<T> {
        self.free.pop().unwrap_or_default()
    }

    /// Hand `v` out, watching it (the oldest watched array is let go past `KEEP`).
    fn watch(&mut self, v: Vec<T>) -> Arc<Vec<T>> {
        let a = Arc::new(v);
        if self.sent.len() == KEEP {
            self.sent.pop_front();
        }
        self.sent.push_back(a.clone());
        a
    }
}

impl ArrayPool {
    /// Take back the arrays of the batches the consumer has dropped.
    fn reclaim(&mut self) {
        self.indptr.reclaim();
        self.indices.reclaim();
        self.values.reclaim();
        self.labels.reclaim();
    }

    /// Empty rows, with reused arrays where there are any.
    fn rows(&mut self) -> Rows {
        let mut r = Rows::new();
        r.indptr = self.indptr.get();
        r.indptr.push(0);
        r.indices = self.indices.get();
        r.values = self.values.get();
        r.labels = self.labels.get();
        r
    }

    /// A full batch from rows parsed for it alone: the arrays move into the batch (valid CSR by
    /// construction: the parser checked sorted unique columns below `data_shape`).
    fn batch_from_rows(&mut self, sh: &Shared, rows: Rows) -> Batch {
        let n = rows.len();
        let data = NDArray::from_data(ArrayData::Csr(CsrData {
            shape: [n, sh.p.data_shape],
            indptr: self.indptr.watch(rows.indptr),
            indices: self.indices.watch(rows.indices),
            data: Buffer::F32(self.values.watch(rows.values)),
            offset: 0,
        }));
        let k = sh.p.label_shape;
        let shape = if k == 1 { vec![n] } else { vec![n, k] };
        let label = NDArray::from_data(ArrayData::Dense(DenseData {
            shape,
            buf: Buffer::F32(self.labels.watch(rows.labels)),
        }));
        Batch {
            data,
            label: Some(label),
            pad: 0,
        }
    }
}
