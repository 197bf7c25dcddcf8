//! Parsing a block straight into its batches.
//!
//! The reader thread records where each row's line starts. The producer then knows, before
//! parsing, which byte range holds each batch's rows, parses those ranges as rayon tasks (the
//! next block's while the current block's last ones finish), and the parsed CSR arrays become
//! the batches by move: no row is copied except in the one batch per block that joins the rows
//! left over from the previous block. (Parsing fixed-size byte pieces instead cuts batches
//! across pieces, and every row had to be copied into its batch.) The parser starts each row
//! from the recorded line starts rather than searching for every newline again.

use std::collections::VecDeque;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use sparrow_core::NDArray;

use super::locate::locate;
use super::parse::{is_row_line, parse_into, parse_rows_into, Rows};
use super::plan::{FileInfo, Span};
use super::queue::{BatchTx, EpochState};
use super::shared::{check_label_counts, make_batch, Shared};
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
    // SAFETY: the map is read-only and only read while it lives. A file truncated by another
    // process meanwhile faults (SIGBUS): the hazard `LibSVMIterParams::map_files` documents,
    // which is why mapping is opt-in.
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

/// Row ranges parsed by one rayon task: consecutive ranges of one block, each becoming one
/// batch (or part of one), and what emitting them needs.
struct Job {
    /// The block, kept mapped by every job of it (the last one to go unmaps it).
    block: Arc<BlockBuf>,
    /// Index of the block in `Shared::blocks` (to place errors in the file).
    bi: usize,
    /// Row ranges `(first, end)` of the block, in order.
    ranges: Vec<(usize, usize)>,
    /// Bytes of text the ranges span (for the window bound).
    bytes: usize,
    /// The block's last job: after emitting it, its buffers go back to the reader.
    last: bool,
}

/// A job's parsed ranges, or the first error in them.
type JobResult = std::result::Result<Vec<Rows>, BufError>;

/// Text bytes one job aims at: small batches are parsed many to a task (a task costs a few
/// microseconds of hand-offs), batches of this size or more one per task.
const JOB_BYTES: usize = 256 << 10;

/// Parse the blocks the reader sends (`blocks`, one per entry of `order`, mapped and with their
/// row starts) into batches and send the full ones to `st.tx`; rows that do not fill a batch
/// end in `st.left` (which holds fewer than `batch_size` rows on entry and exit). The first
/// `st.skip` rows are dropped (rows the previous epoch's round batch already used). Block
/// buffers go back to the reader through `ret` once parsed. Returns `Ok(false)` when the
/// consumer has gone.
///
/// Every block is cut into row ranges of exactly one batch (from the row starts alone, before
/// any parsing), grouped into jobs of about [`JOB_BYTES`], and the jobs run as rayon tasks
/// while this thread emits finished ones in order. Jobs of the next block are queued while the
/// current block's last ones still run, so neither core waits at block ends (parsing a block
/// with one parallel call, the next block could only start once the slowest range was done:
/// ~1.6 of 2 cores were busy). The jobs in flight are bounded (at least one per thread plus
/// one, more only while they hold less than a block of text), so memory stays a few blocks
/// and batches whatever the file size.
///
/// An error ends the pass: it is the first one in file order, except that within a block a
/// parse error anywhere in the block is reported before a row with the wrong number of labels
/// (the order the whole-block path reports them). Batches before the failing one are sent.
pub(super) fn produce_direct(
    sh: &Arc<Shared>,
    order: &[usize],
    blocks: &Receiver<Result<(usize, BlockBuf)>>,
    ret: &Sender<BlockBuf>,
    st: &mut EpochState<'_>,
    bar: Option<&indicatif::ProgressBar>,
) -> Result<bool> {
    let (left, skip, tx) = (&mut *st.left, &mut *st.skip, &mut *st.tx);
    let on_producer = st.on_producer;
    let threads = rayon::current_num_threads().max(1);
    let (min_jobs, max_jobs) = (threads + 1, 4 * threads);
    let window_bytes = sh.p.block_bytes.max(1);
    let mut pool = ArrayPool::default();
    // Rows the planned ranges leave over at the end (what `left` will hold once every job
    // planned so far has been emitted).
    let mut plan_left = left.len();
    let (rtx, rrx) = channel::<(u64, JobResult)>();
    // Jobs planned and not yet started (all of one block), jobs started and not yet emitted,
    // each with its result once received (in order; `None` until it arrives).
    let mut planned: VecDeque<Job> = VecDeque::new();
    let mut running: VecDeque<(Job, Option<JobResult>)> = VecDeque::new();
    // Sequence number of the job at the front of `running` (the next to emit).
    let mut emit_seq = 0u64;
    let mut running_bytes = 0usize;
    let mut received = 0;
    loop {
        // Start jobs while the window allows, planning the next block when one is needed.
        loop {
            let n = running.len();
            if !(n < min_jobs || (n < max_jobs && running_bytes < window_bytes)) {
                break;
            }
            if planned.is_empty() {
                if received == order.len() {
                    break;
                }
                let Ok(r) = blocks.recv() else {
                    break;
                };
                let (k, block) = r?;
                received += 1;
                if let Some(bar) = bar {
                    bar.inc(block.bytes().len() as u64);
                }
                plan_block(sh, order[k], block, &mut plan_left, skip, &mut planned, ret);
                continue;
            }
            let Some(job) = planned.pop_front() else {
                break;
            };
            pool.reclaim();
            let outs: Vec<Rows> = job.ranges.iter().map(|_| pool.rows()).collect();
            let (task_sh, block, ranges) = (sh.clone(), job.block.clone(), job.ranges.clone());
            let (rtx, seq) = (rtx.clone(), emit_seq + running.len() as u64);
            let task = move || {
                let res = parse_ranges(&task_sh, &block, &ranges, outs);
                // The block is released before the result is sent, so once the emitter has
                // every result of a block it holds the block's only reference.
                drop(block);
                let _ = rtx.send((seq, res)); // the emitter may have stopped on an error
            };
            // A pool task, even the one job of a small file: at normal priority this thread
            // often shares the training thread's core, and its parse then preempted the
            // training loop (tutorial (c), 5 interleaved pairs of 7-epoch runs: wall minus CPU
            // 0.74 vs 0.31 ms per epoch). At idle priority it cannot preempt anything, and a
            // small epoch is parsed here rather than waking the pool (`on_producer`).
            if on_producer {
                task();
            } else {
                #[cfg(test)]
                sh.pool_tasks
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                rayon::spawn(task);
            }
            running_bytes += job.bytes;
            running.push_back((job, None));
        }
        if running.is_empty() {
            break; // nothing running and nothing left to start
        }
        while running.front().is_some_and(|(_, r)| r.is_none()) {
            let Ok((seq, res)) = rrx.recv() else {
                return Err(DataError::arg(
                    "LibSVMIter",
                    "a parsing task stopped unexpectedly",
                ));
            };
            // Results come back nearly in order; `seq - emit_seq` indexes the window.
            if let Some((_, r)) = running.get_mut((seq - emit_seq) as usize) {
                *r = Some(res);
            }
        }
        let Some((job, Some(res))) = running.pop_front() else {
            break;
        };
        emit_seq += 1;
        running_bytes -= job.bytes;
        if !emit_job(sh, &job, res, left, &mut pool, tx)? {
            return Ok(false);
        }
        if job.last {
            if let Ok(mut b) = Arc::try_unwrap(job.block) {
                b.map = None; // unmap now: memory stays bounded by the blocks in flight
                let _ = ret.send(b); // the reader may have finished: then it is just freed
            }
        }
    }
    Ok(true)
}

/// Cut block `bi` into batch-sized row ranges (the first one completing the `plan_left` rows
/// the previous blocks leave over, the first `skip` rows dropped) and group them into jobs.
/// A block with no rows to parse goes straight back to the reader.
fn plan_block(
    sh: &Shared,
    bi: usize,
    block: BlockBuf,
    plan_left: &mut usize,
    skip: &mut usize,
    planned: &mut VecDeque<Job>,
    ret: &Sender<BlockBuf>,
) {
    let bs = sh.p.batch_size;
    let nrows = block.row_starts.len();
    let r0 = (*skip).min(nrows);
    *skip -= r0;
    let mut ranges = Vec::with_capacity((nrows - r0) / bs + 2);
    let mut r = r0;
    if *plan_left > 0 && r < nrows {
        let z = r.saturating_add(bs - *plan_left).min(nrows);
        ranges.push((r, z));
        r = z;
    }
    while r < nrows {
        let z = r.saturating_add(bs).min(nrows);
        ranges.push((r, z));
        r = z;
    }
    // Each range either completes a batch or adds to the rows left over.
    *plan_left = (*plan_left + (nrows - r0)) % bs;
    if ranges.is_empty() {
        let mut block = block;
        block.map = None;
        let _ = ret.send(block);
        return;
    }
    let block = Arc::new(block);
    let byte = |row: usize| block_byte(&block, row);
    let count = ranges.len();
    let mut cur: Vec<(usize, usize)> = Vec::new();
    let mut cur_bytes = 0;
    for (i, (a, z)) in ranges.into_iter().enumerate() {
        cur.push((a, z));
        cur_bytes += byte(z) - byte(a);
        let last = i + 1 == count;
        if cur_bytes >= JOB_BYTES || last {
            planned.push_back(Job {
                block: block.clone(),
                bi,
                ranges: std::mem::take(&mut cur),
                bytes: std::mem::take(&mut cur_bytes),
                last,
            });
        }
    }
}

/// Byte offset in the block where row `row` starts (the block's length past its last row).
fn block_byte(block: &BlockBuf, row: usize) -> usize {
    let buf = block.bytes();
    block.row_starts.get(row).map_or(buf.len(), |&s| s)
}

/// Parse a job's ranges, each into the matching `outs` rows (taken from the pool).
fn parse_ranges(
    sh: &Shared,
    block: &BlockBuf,
    ranges: &[(usize, usize)],
    outs: Vec<Rows>,
) -> JobResult {
    let (buf, starts) = (block.bytes(), &block.row_starts[..]);
    let mut parsed = Vec::with_capacity(ranges.len());
    for (&(a, z), mut rows) in ranges.iter().zip(outs) {
        let (s, e) = (block_byte(block, a), block_byte(block, z));
        // ~16 bytes per feature is typical of real data; a shortfall only costs a regrow.
        rows.indices.reserve((e - s) / 16);
        rows.values.reserve((e - s) / 16);
        rows.labels.reserve(z - a);
        let row_starts = starts.get(a..z).unwrap_or(&[]);
        parse_rows_into(buf, row_starts, e, &sh.data_opts, &mut rows)?;
        parsed.push(rows);
    }
    Ok(parsed)
}

/// Emit a finished job's rows as batches (see [`produce_direct`]). `Ok(false)` when the
/// consumer has gone.
fn emit_job(
    sh: &Shared,
    job: &Job,
    res: JobResult,
    left: &mut Rows,
    pool: &mut ArrayPool,
    tx: &mut BatchTx,
) -> Result<bool> {
    let bs = sh.p.batch_size;
    let buf = job.block.bytes();
    let span = sh.blocks[job.bi].data;
    let pieces = res.map_err(|e| locate(&sh.files, span, buf, e))?;
    for (p, &(a, z)) in pieces.into_iter().zip(&job.ranges) {
        if let Err(label_err) =
            check_label_counts(sh, job.bi, buf, &p, |r| block_byte(&job.block, a + r))
        {
            // A parse error later in the block comes first (see `produce_direct`).
            let rest_start = block_byte(&job.block, z);
            let rest = &buf[rest_start..];
            let mut scratch = Rows::new();
            return Err(match parse_into(rest, &sh.data_opts, &mut scratch) {
                Err(err) => {
                    let line_start = rest_start + nth_line_start(rest, err.line);
                    locate(&sh.files, span, buf, BufError { line_start, err })
                }
                Ok(()) => label_err,
            });
        }
        let batch = if left.is_empty() && p.len() == bs {
            pool.batch_from_rows(sh, p)?
        } else if left.len() + p.len() == bs {
            let b = make_batch(sh, &[(left, 0, left.len()), (&p, 0, p.len())], 0)?;
            *left = Rows::new();
            b
        } else {
            // Fewer rows than a batch: the tail (or all a small block has) waits for more.
            // (The ranges are cut so that this never overfills; `flush_full` keeps the
            // invariant even if a range ever held another row count.)
            left.extend_from(&p, 0, p.len());
            if !flush_full(sh, left, tx)? {
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
fn flush_full(sh: &Shared, left: &mut Rows, tx: &mut BatchTx) -> Result<bool> {
    let bs = sh.p.batch_size;
    while left.len() >= bs {
        let batch = make_batch(sh, &[(left, 0, bs)], 0)?;
        let mut rest = Rows::new();
        rest.extend_from(left, bs, left.len());
        *left = rest;
        if !tx.send(batch) {
            return Ok(false);
        }
    }
    Ok(true)
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
    fn batch_from_rows(&mut self, sh: &Shared, rows: Rows) -> Result<Batch> {
        let n = rows.len();
        // The parser checked sorted unique columns below `data_shape` and built `indptr` from
        // the rows it stored, so only the length checks run here (no pass over the indices).
        let data = NDArray::csr_from_shared(
            self.values.watch(rows.values),
            self.indices.watch(rows.indices),
            self.indptr.watch(rows.indptr),
            [n, sh.p.data_shape],
            false,
        )?;
        let k = sh.p.label_shape;
        let shape = if k == 1 { vec![n] } else { vec![n, k] };
        let label = NDArray::from_shared_vec(self.labels.watch(rows.labels), &shape)?;
        Ok(Batch {
            data,
            label: Some(label),
            pad: 0,
        })
    }
}
