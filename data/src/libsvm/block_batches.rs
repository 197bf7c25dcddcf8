//! Parsing a block straight into its batches.
//!
//! The reader thread records where each row's line starts. The producer then knows, before
//! parsing, which byte range holds each batch's rows, parses those ranges in parallel, and the
//! parsed CSR arrays become the batches by move: no row is copied except in the one batch per
//! block that joins the rows left over from the previous block. (Parsing fixed-size byte pieces
//! instead cuts batches across pieces, and every row had to be copied into its batch.)

use std::sync::mpsc::SyncSender;

use rayon::prelude::*;

use super::iter::{check_label_counts, locate, make_batch, Msg, Shared};
use super::parse::{is_row_line, parse_into, Rows};
use super::plan::{FileInfo, Span};
use super::{nth_line_start, BufError};
use crate::batch::{csr_array, dense_labels, Batch};
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
    tx: &SyncSender<Msg>,
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
        let z = (r + bs - left.len()).min(nrows);
        ranges.push((r, z));
        r = z;
    }
    while r < nrows {
        let z = (r + bs).min(nrows);
        ranges.push((r, z));
        r = z;
    }
    let byte = |row: usize| starts.get(row).copied().unwrap_or(buf.len());
    let parsed: Vec<std::result::Result<Rows, BufError>> = ranges
        .par_iter()
        .map(|&(a, z)| {
            let (s, e) = (byte(a), byte(z));
            let text = &buf[s..e];
            let mut rows = Rows::new();
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
            batch_from_rows(sh, p)
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
        if tx.send(Msg::Batch(batch)).is_err() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Send full batches off the front of `left` until it holds fewer than `batch_size` rows.
/// Returns `false` when the consumer has gone.
fn flush_full(sh: &Shared, left: &mut Rows, tx: &SyncSender<Msg>) -> bool {
    let bs = sh.p.batch_size;
    while left.len() >= bs {
        let batch = make_batch(sh, &[(left, 0, bs)], 0);
        let mut rest = Rows::new();
        rest.extend_from(left, bs, left.len());
        *left = rest;
        if tx.send(Msg::Batch(batch)).is_err() {
            return false;
        }
    }
    true
}

/// A full batch from rows parsed for it alone: the arrays move into the batch.
fn batch_from_rows(sh: &Shared, rows: Rows) -> Batch {
    let n = rows.len();
    let data = csr_array(n, sh.p.data_shape, rows.indptr, rows.indices, rows.values);
    let label = dense_labels(rows.labels, n, sh.p.label_shape);
    Batch {
        data,
        label: Some(label),
        pad: 0,
    }
}
