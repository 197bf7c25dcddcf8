//! `LibSVMIter`: streaming, parallel LibSVM reading into CSR batches.
//!
//! Pipeline per epoch: a reader thread maps blocks (see `plan`) and finds their row starts; a
//! producer thread cuts each block into byte ranges of exactly one batch of rows, has rayon
//! tasks parse them straight into the batches' arrays, a bounded window of tasks running
//! across block boundaries (see `block_batches`), and sends the batches in order through a
//! bounded channel (the prefetch queue) in groups of `prefetch` batches or more (one thread
//! hand-off per group, see `BatchTx`). With shuffling or a separate label file, blocks are read
//! into recycled buffers and parsed into ~1 MB pieces instead, and the rows copied into
//! batches. Memory is a few blocks plus the batches of the task window (or of one block on the
//! piece path) and two groups of batches (each `prefetch` batches, or 256 KB of small ones),
//! whatever the file size. The producer thread runs epoch after epoch on the same queue (the
//! epoch's last group travels with its end), so the next epoch's first batches are ready when
//! `reset` comes; only a reset in the middle of an epoch stops it and starts a new one.
//!
//! Data blocks are memory-mapped while they are parsed: as with the whole-file loader,
//! truncating a file while it is being read is not supported (the process may fault).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use rand::seq::SliceRandom;
use rand::{rngs::StdRng, SeedableRng};
use rayon::prelude::*;

use super::block_batches::{map_span, produce_direct, row_starts, BlockBuf};
use super::load::{list_files, positioned};
use super::parse::ChunkOpts;
use super::plan::{file_infos, pair_labels, plan_part, read_span, Block, FileInfo, Span};
use super::{parse_parallel, IndexBase, LibSvmOptions, Rows};
use crate::batch::{
    csr_from_segs, csr_labels_from_segs, dense_labels_from_segs, Batch, LastBatch, Seg,
};
use crate::error::{DataError, Result};

/// Parameters of [`LibSVMIter`] (MXNet's names; build with [`LibSVMIterParams::new`] and
/// set fields).
#[derive(Debug, Clone)]
pub struct LibSVMIterParams {
    /// A LibSVM file, or a directory whose files are read in name order.
    pub data_libsvm: PathBuf,
    /// Number of features (columns of the CSR batches).
    pub data_shape: usize,
    /// A separate label file in LibSVM format (its labels are ignored; its features become
    /// CSR label batches of `label_shape` columns), row-aligned with the data.
    pub label_libsvm: Option<PathBuf>,
    /// Labels per row (dense labels) or label columns (with `label_libsvm`). Default 1.
    pub label_shape: usize,
    /// Rows per batch.
    pub batch_size: usize,
    /// Last-batch handling (default [`LastBatch::RoundBatch`], as MXNet's `round_batch=True`).
    pub last_batch: LastBatch,
    /// Number of disjoint parts the data is split into (for distributed reading).
    pub num_parts: usize,
    /// Which part this iterator reads.
    pub part_index: usize,
    /// Shuffle block order and rows within blocks each epoch.
    pub shuffle: bool,
    /// Seed of the shuffle (epoch `e` uses a stream derived from `seed` and `e`).
    pub seed: u64,
    /// Batches parsed ahead in the background, handed to the consumer in groups of at least this
    /// many (small batches are grouped up to 256 KB; at most two groups are ahead).
    pub prefetch: usize,
    /// Bytes per streaming block (also the shuffle granularity). Default 16 MB.
    pub block_bytes: usize,
    /// Index base (default zero-based; `Auto` costs one extra parsing pass at construction).
    pub index_base: IndexBase,
    /// Sort indices within rows and sum duplicates instead of rejecting them.
    pub sort_indices: bool,
    /// Show a progress bar over each pass (hidden when stderr is no terminal or CI is set).
    pub progress: bool,
    /// Group each batch's non-zeros by column on the producer thread
    /// ([`NDArray::prepare_csr_transpose`](sparrow_core::NDArray::prepare_csr_transpose)), so
    /// the row_sparse weight gradient of a Dense layer fed these batches skips that sort on the
    /// training thread. Off by default: it costs producer time and ~3 words per non-zero.
    pub prepare_transpose: bool,
    /// Run the producer thread (and the block reader it starts) at idle scheduling priority
    /// ([`sparrow_core::sys::set_idle_priority`], Linux `SCHED_IDLE`), so that waking it never
    /// preempts the training thread. Worth it when the training loop is a tight loop of small
    /// steps on a machine with few cores: on the project's 2-vCPU VM the woken producer landed
    /// on the training thread's core and took ~0.2 ms per 100-batch epoch of the sparse
    /// tutorial. Off by default: with more busy threads than cores an idle-priority producer
    /// gets almost no CPU and the consumer waits for its batches.
    ///
    /// An idle-priority producer also does the work of an epoch that is one small block (at
    /// most 1 MiB of text) itself instead of handing it to the rayon pool, whose threads run at
    /// normal priority: the `prepare_transpose` grouping always, the parsing when rows are
    /// neither shuffled nor labelled from a second file (the direct path; the other path still
    /// parses as pool tasks). Waking the pool three times per tutorial epoch made its (c)
    /// 1.1-1.3x slower with 2 pool threads than with 1 on the 2-vCPU VM (the woken threads ran
    /// and spun, ~100 `sched_yield` calls per epoch, beside the training thread); keeping that
    /// work here: 0.89x at 2 threads, unchanged at 1 (16 interleaved rounds). Larger epochs
    /// still parse as pool tasks, where parallelism pays.
    pub idle_priority: bool,
}

impl LibSVMIterParams {
    /// Parameters with MXNet's defaults for everything but the data path, shape and batch size,
    /// except `prefetch`: 16 here (MXNet 4), since batches are handed over in groups of it.
    pub fn new(data_libsvm: impl Into<PathBuf>, data_shape: usize, batch_size: usize) -> Self {
        LibSVMIterParams {
            data_libsvm: data_libsvm.into(),
            data_shape,
            label_libsvm: None,
            label_shape: 1,
            batch_size,
            last_batch: LastBatch::RoundBatch,
            num_parts: 1,
            part_index: 0,
            shuffle: false,
            seed: 0,
            prefetch: 16,
            block_bytes: 16 << 20,
            index_base: IndexBase::Zero,
            sort_indices: false,
            progress: false,
            prepare_transpose: false,
            idle_priority: false,
        }
    }
}

/// Everything the background threads share.
pub(super) struct Shared {
    pub(super) p: LibSVMIterParams,
    pub(super) files: Vec<FileInfo>,
    label_file: Option<FileInfo>,
    pub(super) blocks: Vec<Block>,
    pub(super) data_opts: ChunkOpts,
    label_opts: ChunkOpts,
    part_bytes: u64,
    /// Producer threads started so far (tests check that full epochs reuse one).
    #[cfg(test)]
    pub(super) producers: std::sync::atomic::AtomicUsize,
    /// Block reader threads started so far (tests check that a one-block part starts none).
    #[cfg(test)]
    pub(super) readers: std::sync::atomic::AtomicUsize,
    /// Producer threads that found themselves at idle priority when they started.
    #[cfg(test)]
    pub(super) idle_producers: std::sync::atomic::AtomicUsize,
    /// Work handed to the rayon pool by producers (parse jobs and batch-group preparations).
    #[cfg(test)]
    pub(super) pool_tasks: std::sync::atomic::AtomicUsize,
}

pub(super) enum Msg {
    /// Consecutive batches, in order (see [`BatchTx`]).
    Batches(Vec<Batch>),
    /// The epoch's last group of batches (possibly empty) and the rows the next epoch skips
    /// (kept by the consumer for a restart). The producer goes on with the next epoch's
    /// messages on the same queue.
    End {
        batches: Vec<Batch>,
        skip: usize,
    },
    Err(DataError),
}

/// The producer's end of the prefetch queue. Batches travel in groups: one channel hand-off,
/// so at most one thread wake-up, per group instead of per batch. With small batches (the
/// sparse Gluon tutorial's 10 rows of ~1 KB) a futex wake-up and context switch cost more than
/// parsing the batch, so after the first group of an epoch (exactly `prefetch` batches, to
/// start the consumer early) a group also keeps growing until it holds [`GROUP_BYTES`] of
/// arrays: a 100-batch tutorial epoch then takes two hand-offs instead of seven, while large
/// batches (1024 rows of a few hundred KB) still travel `prefetch` at a time. The channel holds
/// one group, so what is ahead of the consumer is bounded by two groups, whatever the file size.
pub(super) struct BatchTx {
    tx: SyncSender<Msg>,
    pending: Vec<Batch>,
    pending_bytes: usize,
    group: usize,
    /// Whether a group was handed over since the last `finish` (the first group of an epoch is
    /// cut at `group` batches regardless of bytes).
    started: bool,
    /// Prepare each batch's column grouping before queueing it (`prepare_transpose`).
    prepare_transpose: bool,
    /// Prepare on this thread rather than as pool tasks (an idle-priority producer's small
    /// epoch, see [`LibSVMIterParams::idle_priority`]); set per epoch.
    pub(super) prepare_here: bool,
    #[cfg(test)]
    shared: Option<Arc<Shared>>,
}

/// Bytes of batch arrays a group (after an epoch's first) grows to before it is handed over.
pub(super) const GROUP_BYTES: usize = 256 * 1024;

impl BatchTx {
    pub(super) fn new(tx: SyncSender<Msg>, group: usize, prepare_transpose: bool) -> BatchTx {
        BatchTx {
            tx,
            pending: Vec::new(),
            pending_bytes: 0,
            group: group.max(1),
            started: false,
            prepare_transpose,
            prepare_here: false,
            #[cfg(test)]
            shared: None,
        }
    }
    /// Queue a batch; `false` when the consumer has gone (reset or dropped the iterator).
    pub(super) fn send(&mut self, b: Batch) -> bool {
        self.pending_bytes += b.data.nbytes() + b.label.as_ref().map_or(0, |l| l.nbytes());
        self.pending.push(b);
        let full = self.pending.len() >= self.group
            && (!self.started || self.pending_bytes >= GROUP_BYTES);
        !full || self.flush()
    }
    /// Hand the queued batches over; `false` when the consumer has gone.
    fn flush(&mut self) -> bool {
        if self.pending.is_empty() {
            return true;
        }
        let group = std::mem::replace(&mut self.pending, Vec::with_capacity(self.group));
        self.pending_bytes = 0;
        self.started = true;
        self.prepare(&group);
        self.tx.send(Msg::Batches(group)).is_ok()
    }
    /// With `prepare_transpose`, group the columns of a group's batches: as pool tasks, since
    /// this thread often shares the training thread's core (see `produce_direct`), unless it
    /// runs at idle priority on a small epoch (`prepare_here`).
    fn prepare(&self, batches: &[Batch]) {
        if !self.prepare_transpose || batches.is_empty() {
            return;
        }
        if self.prepare_here {
            for b in batches {
                b.data.prepare_csr_transpose();
            }
            return;
        }
        #[cfg(test)]
        if let Some(sh) = &self.shared {
            sh.pool_tasks
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        batches.par_iter().for_each(|b| {
            b.data.prepare_csr_transpose();
        });
    }
    /// Flush, then send an error after the batches before it.
    pub(super) fn fail(&mut self, e: DataError) {
        if self.flush() {
            let _ = self.tx.send(Msg::Err(e));
        }
        self.started = false;
    }
    /// Send the queued batches as the end of the epoch; `false` when the consumer has gone.
    pub(super) fn finish(&mut self, skip: usize) -> bool {
        let batches = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        self.started = false;
        self.prepare(&batches);
        self.tx.send(Msg::End { batches, skip }).is_ok()
    }
}

/// Streaming LibSVM iterator yielding CSR batches (`Iterator<Item = Result<Batch>>`).
///
/// Malformed input yields one `Err` (file, line, column) and ends the epoch; the batches
/// before it may already have been yielded (without shuffling or a label file, those of the
/// rows before the failing batch's task; otherwise those of the blocks before it).
///
/// ```no_run
/// use sparrow_data::libsvm::{LibSVMIter, LibSVMIterParams};
/// let mut it = LibSVMIter::new(LibSVMIterParams::new("train.libsvm", 10_000_000, 1024))?;
/// for batch in &mut it {
///     let b = batch?;
///     // b.data: CSR [1024, 10_000_000]; b.label: dense [1024]; b.pad
/// }
/// it.reset();
/// # Ok::<(), sparrow_data::DataError>(())
/// ```
pub struct LibSVMIter {
    shared: Arc<Shared>,
    epoch: u64,
    rx: Option<Receiver<Msg>>,
    /// Batches received in a group and not yet returned.
    queue: VecDeque<Batch>,
    threads: Vec<JoinHandle<()>>,
    /// Rows the next epoch skips (those the last round batch borrowed), for a producer started
    /// by a reset in the middle of an epoch.
    skip: usize,
    /// This epoch's end has arrived (its batches may still be queued).
    done: bool,
}

impl LibSVMIter {
    /// Plan the blocks (and pair them with the label file) and start the first epoch.
    pub fn new(p: LibSVMIterParams) -> Result<Self> {
        const OP: &str = "LibSVMIter";
        if p.batch_size == 0 || p.data_shape == 0 || p.label_shape == 0 {
            return Err(DataError::arg(
                OP,
                "batch_size, data_shape and label_shape must be > 0",
            ));
        }
        if p.num_parts == 0 || p.part_index >= p.num_parts {
            return Err(DataError::arg(
                OP,
                format!(
                    "part_index {} must be < num_parts {}",
                    p.part_index, p.num_parts
                ),
            ));
        }
        let files = file_infos(&list_files(&p.data_libsvm)?)?;
        let block_bytes = p.block_bytes.max(1) as u64;
        let label_file = match &p.label_libsvm {
            Some(l) => Some(file_infos(std::slice::from_ref(l))?.remove(0)),
            None => None,
        };
        let mut lopts = LibSvmOptions {
            index_base: p.index_base,
            num_features: Some(p.data_shape),
            sort_indices: p.sort_indices,
        };
        let mut base = p.index_base;
        if base == IndexBase::Auto {
            base = detect_base(&files, block_bytes, &lopts)?;
        }
        let data_opts = lopts.chunk_opts(base);
        lopts.num_features = Some(p.label_shape);
        let label_opts = lopts.chunk_opts(if base == IndexBase::Auto {
            IndexBase::Zero
        } else {
            base
        });
        let blocks: Vec<Block> = match &label_file {
            None => plan_part(&files, p.num_parts, p.part_index, block_bytes)?
                .into_iter()
                .map(|data| Block { data, label: None })
                .collect(),
            Some(lf) => {
                // Pair all parts' blocks so each part's label spans are right, then keep ours.
                let mut all = Vec::new();
                let mut owner = Vec::new();
                for part in 0..p.num_parts {
                    let spans = plan_part(&files, p.num_parts, part, block_bytes)?;
                    owner.extend(std::iter::repeat_n(part, spans.len()));
                    all.extend(spans);
                }
                let labels = pair_labels(&files, &all, lf)?;
                all.into_iter()
                    .zip(labels)
                    .zip(owner)
                    .filter(|(_, o)| *o == p.part_index)
                    .map(|((data, l), _)| Block {
                        data,
                        label: Some(l),
                    })
                    .collect()
            }
        };
        let part_bytes: u64 = blocks.iter().map(|b| b.data.end - b.data.start).sum();
        let shared = Arc::new(Shared {
            p,
            files,
            label_file,
            blocks,
            data_opts,
            label_opts,
            part_bytes,
            #[cfg(test)]
            producers: Default::default(),
            #[cfg(test)]
            readers: Default::default(),
            #[cfg(test)]
            idle_producers: Default::default(),
            #[cfg(test)]
            pool_tasks: Default::default(),
        });
        let mut it = LibSVMIter {
            shared,
            epoch: 0,
            rx: None,
            queue: VecDeque::new(),
            threads: Vec::new(),
            skip: 0,
            done: false,
        };
        it.start();
        Ok(it)
    }

    /// The parameters.
    pub fn params(&self) -> &LibSVMIterParams {
        &self.shared.p
    }

    /// Producer threads started so far.
    #[cfg(test)]
    pub(super) fn producers_started(&self) -> usize {
        self.shared
            .producers
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Block reader threads started so far.
    #[cfg(test)]
    pub(super) fn readers_started(&self) -> usize {
        self.shared
            .readers
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Producer threads that ran at idle priority.
    #[cfg(test)]
    pub(super) fn idle_producers(&self) -> usize {
        self.shared
            .idle_producers
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Parse jobs and group preparations producers handed to the rayon pool.
    #[cfg(test)]
    pub(super) fn pool_tasks(&self) -> usize {
        self.shared
            .pool_tasks
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Bytes of data this part reads per epoch.
    pub fn part_bytes(&self) -> u64 {
        self.shared.part_bytes
    }

    fn start(&mut self) {
        // A restart has no leftover rows to roll over: those belong to the epoch cut short.
        let (rx, handle) = self.spawn_epoch(self.epoch, None, self.skip);
        self.threads.push(handle);
        self.rx = Some(rx);
        self.done = false;
    }

    /// Start a producer at `epoch`, beginning with `carry` and skipping `skip` rows. It goes on
    /// through the following epochs on the same queue (see [`produce`]).
    fn spawn_epoch(
        &self,
        epoch: u64,
        carry: Option<Rows>,
        skip: usize,
    ) -> (Receiver<Msg>, JoinHandle<()>) {
        let (tx, rx) = sync_channel(1);
        let shared = self.shared.clone();
        #[cfg(test)]
        shared
            .producers
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let handle = std::thread::spawn(move || {
            if shared.p.idle_priority {
                // A hint: where the policy is refused the producer runs as before.
                sparrow_core::sys::set_idle_priority();
            }
            #[cfg(test)]
            if sparrow_core::sys::has_idle_priority() {
                shared
                    .idle_producers
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let mut tx = BatchTx::new(tx, shared.p.prefetch, shared.p.prepare_transpose);
            #[cfg(test)]
            {
                tx.shared = Some(shared.clone());
            }
            produce(&shared, epoch, carry, skip, &mut tx)
        });
        (rx, handle)
    }

    fn stop(&mut self) {
        self.rx = None; // the producer's next send fails and it exits
        self.queue.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    /// Start the next epoch (like MXNet's `reset`): with `RoundBatch` it begins after the rows
    /// the last batch borrowed, with `RollOver` it begins with the rows left over.
    pub fn reset(&mut self) {
        if self.done && self.queue.is_empty() && self.rx.is_some() {
            // The epoch ran to its end: the producer is already on the next one, same queue.
            self.epoch += 1;
            self.done = false;
            return;
        }
        self.stop();
        self.epoch += 1;
        self.start();
    }
}

impl Drop for LibSVMIter {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Iterator for LibSVMIter {
    type Item = Result<Batch>;
    fn next(&mut self) -> Option<Result<Batch>> {
        if let Some(b) = self.queue.pop_front() {
            return Some(Ok(b));
        }
        if self.done {
            return None;
        }
        let msg = self.rx.as_ref()?.recv();
        match msg {
            Ok(Msg::Batches(group)) => {
                self.queue.extend(group);
                self.queue.pop_front().map(Ok).or_else(|| self.next())
            }
            Ok(Msg::End { batches, skip }) => {
                self.done = true;
                self.skip = skip;
                self.queue.extend(batches);
                self.queue.pop_front().map(Ok)
            }
            Ok(Msg::Err(e)) => {
                // The producer stops at an error; a reset starts a new one.
                self.done = true;
                self.rx = None;
                Some(Err(e))
            }
            Err(_) => {
                self.done = true;
                self.rx = None; // a reset starts a new producer
                Some(Err(DataError::arg(
                    "LibSVMIter",
                    "the background reader stopped unexpectedly",
                )))
            }
        }
    }
}

/// Scan the whole data once, parsing raw, to find whether any index 0 occurs.
fn detect_base(files: &[FileInfo], block_bytes: u64, o: &LibSvmOptions) -> Result<IndexBase> {
    let raw = LibSvmOptions {
        num_features: None,
        ..o.clone()
    }
    .chunk_opts(IndexBase::Auto);
    let mut buf = Vec::new();
    for s in plan_part(files, 1, 0, block_bytes)? {
        read_span(files, s, &mut buf)?;
        let rows = parse_parallel(&buf, &raw).map_err(|e| locate(files, s, &buf, e))?;
        if rows.iter().any(|r| r.min_raw == 0) {
            return Ok(IndexBase::Zero);
        }
    }
    Ok(IndexBase::One)
}

/// Position a parse error of a block in its file (counts the newlines before the block).
pub(super) fn locate(files: &[FileInfo], s: Span, buf: &[u8], e: super::BufError) -> DataError {
    let path = &files[s.file].path;
    match count_newlines(path, s.start) {
        Ok(n) => positioned(path, buf, n, e),
        Err(err) => err,
    }
}

fn count_newlines(path: &std::path::Path, upto: u64) -> Result<u64> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut r = f.take(upto);
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = r.read(&mut buf).map_err(|e| DataError::io(path, e))?;
        if k == 0 {
            return Ok(n);
        }
        n += memchr::memchr_iter(b'\n', &buf[..k]).count() as u64;
    }
}

/// Block visiting order of an epoch.
fn epoch_order(sh: &Shared, epoch: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sh.blocks.len()).collect();
    if sh.p.shuffle {
        order.shuffle(&mut StdRng::seed_from_u64(mix(sh.p.seed, epoch, u64::MAX)));
    }
    order
}

fn mix(seed: u64, a: u64, b: u64) -> u64 {
    // splitmix64-style mixing so nearby seeds/epochs give unrelated streams
    let mut z = seed ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.rotate_left(17);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Read and parse one block into row pieces (labels from the label file merged in), shuffled
/// within the block when asked.
fn load_block(
    sh: &Shared,
    bi: usize,
    epoch: u64,
    buf: &[u8],
    lbuf: &mut Vec<u8>,
) -> Result<Vec<Rows>> {
    let b = &sh.blocks[bi];
    let mut pieces =
        parse_parallel(buf, &sh.data_opts).map_err(|e| locate(&sh.files, b.data, buf, e))?;
    match (&b.label, &sh.label_file) {
        (Some(ls), Some(lf)) => {
            let lfiles = std::slice::from_ref(lf);
            read_span(lfiles, *ls, lbuf)?;
            let lp =
                parse_parallel(lbuf, &sh.label_opts).map_err(|e| locate(lfiles, *ls, lbuf, e))?;
            let labels = super::load::concat(lp);
            let nrows: usize = pieces.iter().map(Rows::len).sum();
            if labels.len() != nrows {
                return Err(DataError::arg(
                    "LibSVMIter",
                    format!("label block has {} rows, data block {nrows}", labels.len()),
                ));
            }
            let mut g = 0;
            for piece in &mut pieces {
                let (a, z) = (
                    labels.indptr[g] as usize,
                    labels.indptr[g + piece.len()] as usize,
                );
                piece.labels = labels.values[a..z].to_vec();
                piece.label_indices = labels.indices[a..z].to_vec();
                piece.label_ptr = labels.indptr[g..=g + piece.len()]
                    .iter()
                    .map(|x| x - a as i64)
                    .collect();
                g += piece.len();
            }
        }
        _ => {
            let mut g = 0;
            for piece in &pieces {
                check_label_counts(sh, bi, buf, piece, |r| row_line_start(buf, g + r))?;
                g += piece.len();
            }
        }
    }
    if sh.p.shuffle {
        let all = super::load::concat(pieces);
        let mut order: Vec<usize> = (0..all.len()).collect();
        order.shuffle(&mut StdRng::seed_from_u64(mix(sh.p.seed, epoch, bi as u64)));
        pieces = vec![all.gather(&order)];
    }
    Ok(pieces)
}

/// Every row of `piece` must carry `label_shape` labels (dense labels); the error points at the
/// row's line, whose byte offset in the block buffer `buf` is `line_start(r)` for row `r`.
pub(super) fn check_label_counts(
    sh: &Shared,
    bi: usize,
    buf: &[u8],
    piece: &Rows,
    line_start: impl Fn(usize) -> usize,
) -> Result<()> {
    let k = sh.p.label_shape as i64;
    let Some(r) = (0..piece.len()).find(|&r| piece.label_ptr[r + 1] - piece.label_ptr[r] != k)
    else {
        return Ok(());
    };
    let got = piece.label_ptr[r + 1] - piece.label_ptr[r];
    let e = super::BufError {
        line_start: line_start(r),
        err: super::parse::RawError {
            line: 0,
            col: 1,
            msg: format!("expected {k} label(s) per row (label_shape), found {got}"),
        },
    };
    Err(locate(&sh.files, sh.blocks[bi].data, buf, e))
}

/// Byte offset of the line holding the `r`-th row of a buffer.
fn row_line_start(buf: &[u8], r: usize) -> usize {
    let mut seen = 0;
    let mut start = 0;
    for line in buf.split(|&b| b == b'\n') {
        if super::parse::is_row_line(line) {
            if seen == r {
                return start;
            }
            seen += 1;
        }
        start += line.len() + 1;
    }
    buf.len()
}

/// Build the batches of `batch` rows from `pieces` (after `carry`), send them, and return the
/// leftover rows.
fn emit(sh: &Shared, pieces: &[Rows], tx: &mut BatchTx) -> std::result::Result<Rows, ()> {
    let bs = sh.p.batch_size;
    let mut specs: Vec<Vec<Seg<'_>>> = Vec::new();
    let mut cur: Vec<Seg<'_>> = Vec::new();
    let mut have = 0;
    for p in pieces {
        let mut r = 0;
        while r < p.len() {
            let take = (bs - have).min(p.len() - r);
            cur.push((p, r, r + take));
            have += take;
            r += take;
            if have == bs {
                specs.push(std::mem::take(&mut cur));
                have = 0;
            }
        }
    }
    let batches: Vec<Batch> = specs.par_iter().map(|s| make_batch(sh, s, 0)).collect();
    for b in batches {
        if !tx.send(b) {
            return Err(());
        }
    }
    let mut left = Rows::new();
    for &(p, a, z) in &cur {
        left.extend_from(p, a, z);
    }
    Ok(left)
}

pub(super) fn make_batch(sh: &Shared, segs: &[Seg<'_>], pad: usize) -> Batch {
    let data = csr_from_segs(segs, sh.p.data_shape);
    let label = if sh.label_file.is_some() {
        csr_labels_from_segs(segs, sh.p.label_shape)
    } else {
        dense_labels_from_segs(segs, sh.p.label_shape)
    };
    Batch {
        data,
        label: Some(label),
        pad,
    }
}

/// The producer: epoch after epoch on one queue, until the consumer goes (a reset in the middle
/// of an epoch, or a drop) or an error. Going straight on to the next epoch means its first
/// batches are parsed while the consumer still works through this epoch's last ones, and no
/// thread is started per epoch: a new thread waited up to ~3 ms for a core in the project's
/// 2-core VM (CFS placed it behind the training thread), about a whole sparse Gluon tutorial
/// epoch. The queue bounds how far ahead it runs: at most one group in the channel and one
/// being filled.
fn produce(
    sh: &Arc<Shared>,
    mut epoch: u64,
    mut carry: Option<Rows>,
    mut skip: usize,
    tx: &mut BatchTx,
) {
    loop {
        match produce_inner(sh, epoch, carry, skip, tx) {
            Ok(Some((end_carry, end_skip))) => {
                (carry, skip) = (end_carry, end_skip);
                epoch += 1;
            }
            Ok(None) => return,
            Err(e) => {
                tx.fail(e);
                return;
            }
        }
    }
}

/// One epoch; `Ok(Some((carry, skip)))` for the next when it was delivered whole, `Ok(None)`
/// when the consumer has gone.
fn produce_inner(
    sh: &Arc<Shared>,
    epoch: u64,
    carry: Option<Rows>,
    mut skip: usize,
    tx: &mut BatchTx,
) -> Result<Option<(Option<Rows>, usize)>> {
    let order = epoch_order(sh, epoch);
    let bar =
        sh.p.progress
            .then(|| crate::progress::bar(sh.part_bytes, &format!("epoch {epoch}")));
    // Batches are parsed straight from row ranges of the block unless rows are shuffled within
    // blocks or labels come from a second file (those take the general piece path).
    let direct = !sh.p.shuffle && sh.label_file.is_none();
    // Reader thread: blocks are mapped (direct path) or read while the previous one is parsed.
    // Buffers come back through `ret` and are reused: a fresh 16 MB buffer per block cost more
    // in page faults (the kernel zeroing new pages) than the copy out of the page cache itself.
    // The direct path takes the next block while the current one's last ranges are still being
    // parsed, so one block ready in the reader's hand is enough there (each mapped block counts
    // in the resident set); the piece path keeps one more queued.
    //
    // A part of one small block (the sparse tutorial's 177 KB file) is read on this thread
    // instead: a new thread per epoch sometimes first ran milliseconds after `spawn` on the
    // project's 2-vCPU VM, and the training loop waited for it at the start of the epoch.
    let spans: Vec<Span> = order.iter().map(|&i| sh.blocks[i].data).collect();
    let inline = match spans[..] {
        [] => true,
        [s] => is_small(s),
        _ => false,
    };
    // An idle-priority producer keeps a small epoch's work to itself (see
    // `LibSVMIterParams::idle_priority`).
    let on_producer = inline && sh.p.idle_priority;
    tx.prepare_here = on_producer;
    let cap = if inline {
        spans.len()
    } else if direct {
        0
    } else {
        1
    };
    let (btx, brx) = sync_channel::<Result<(usize, BlockBuf)>>(cap);
    let (ret_tx, ret_rx) = channel::<BlockBuf>();
    let reader = if inline {
        read_blocks(&sh.files, spans, direct, &btx, &ret_rx);
        drop(btx);
        None
    } else {
        let files = sh.files.clone();
        #[cfg(test)]
        sh.readers
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(std::thread::spawn(move || {
            read_blocks(&files, spans, direct, &btx, &ret_rx)
        }))
    };
    let mut left = carry.unwrap_or_default();
    let (blocks, bar_ref) = (&brx, bar.as_ref());
    let mut st = EpochState {
        left: &mut left,
        skip: &mut skip,
        tx,
        on_producer,
    };
    let sent = if direct {
        produce_direct(sh, &order, blocks, &ret_tx, &mut st, bar_ref)?
    } else {
        produce_pieces(sh, epoch, &order, blocks, &ret_tx, &mut st, bar_ref)?
    };
    let stopped = !sent;
    drop(brx);
    if let Some(reader) = reader {
        let _ = reader.join();
    }
    if stopped {
        return Ok(None);
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let bs = sh.p.batch_size;
    let c = left.len();
    let (mut end_carry, mut end_skip) = (None, 0);
    if c > 0 {
        match sh.p.last_batch {
            LastBatch::Keep => send(tx, make_batch(sh, &[(&left, 0, c)], 0))?,
            LastBatch::Discard => {}
            LastBatch::RollOver => end_carry = Some(left),
            LastBatch::Pad | LastBatch::RoundBatch => {
                let next = if sh.p.last_batch == LastBatch::Pad {
                    epoch
                } else {
                    epoch + 1
                };
                let (fill, pos) = wrap_rows(sh, next, bs - c)?;
                let batch = make_batch(sh, &[(&left, 0, c), (&fill, 0, fill.len())], fill.len());
                send(tx, batch)?;
                if sh.p.last_batch == LastBatch::RoundBatch {
                    end_skip = pos;
                }
            }
        }
    }
    Ok(tx.finish(end_skip).then_some((end_carry, end_skip)))
}

/// What the block loop of an epoch updates: rows carried into the next batch, rows still to
/// skip, and the batch queue.
pub(super) struct EpochState<'a> {
    /// Rows that do not fill a batch yet (fewer than `batch_size`).
    pub(super) left: &'a mut Rows,
    /// Rows at the start still to drop (those the previous epoch's round batch used).
    pub(super) skip: &'a mut usize,
    /// The prefetch queue.
    pub(super) tx: &'a mut BatchTx,
    /// Parse on this thread instead of as pool tasks (an idle-priority producer's small epoch).
    pub(super) on_producer: bool,
}

/// The piece path of one epoch (rows shuffled within blocks, or labels from a second file):
/// each block is read, parsed into ~1 MB pieces (`load_block`) and its rows copied into
/// batches. `Ok(false)` when the consumer has gone; rows that do not fill a batch stay in
/// `st.left`.
fn produce_pieces(
    sh: &Shared,
    epoch: u64,
    order: &[usize],
    blocks: &Receiver<Result<(usize, BlockBuf)>>,
    ret: &Sender<BlockBuf>,
    st: &mut EpochState<'_>,
    bar: Option<&indicatif::ProgressBar>,
) -> Result<bool> {
    let mut lbuf = Vec::new();
    for _ in 0..order.len() {
        let Ok(r) = blocks.recv() else { break };
        let (k, block) = r?;
        let bi = order[k];
        if let Some(bar) = bar {
            bar.inc(block.bytes().len() as u64);
        }
        let mut pieces = load_block(sh, bi, epoch, &block.buf, &mut lbuf)?;
        let _ = ret.send(block);
        // Rows the previous round batch borrowed.
        for p in pieces.iter_mut() {
            if *st.skip == 0 {
                break;
            }
            let n = (*st.skip).min(p.len());
            let mut rest = Rows::new();
            rest.extend_from(p, n, p.len());
            *p = rest;
            *st.skip -= n;
        }
        let mut all = Vec::with_capacity(pieces.len() + 1);
        all.push(std::mem::take(st.left));
        all.extend(pieces);
        match emit(sh, &all, st.tx) {
            Ok(l) => *st.left = l,
            Err(()) => return Ok(false),
        }
    }
    Ok(true)
}

/// Blocks at most this large are read rather than mapped, and a part of one such block is
/// read on the producer thread (no reader thread): for small files a thread start per epoch,
/// and the TLB shootdowns of unmapping a block each epoch, cost more than the reading.
const SMALL_BLOCK_BYTES: u64 = 1 << 20;

fn is_small(s: Span) -> bool {
    s.end - s.start <= SMALL_BLOCK_BYTES
}

/// The reader: send blocks `spans` in order (mapped on the direct path, or read), reusing the
/// buffers that come back through `ret`. Stops when the receiver has gone.
fn read_blocks(
    files: &[FileInfo],
    spans: Vec<Span>,
    direct: bool,
    btx: &SyncSender<Result<(usize, BlockBuf)>>,
    ret: &Receiver<BlockBuf>,
) {
    for (k, s) in spans.into_iter().enumerate() {
        let mut b: BlockBuf = ret.try_recv().unwrap_or_default();
        let r = if direct && !is_small(s) {
            map_span(files, s).map(|m| {
                row_starts(&m, &mut b.row_starts);
                b.map = Some(m);
                (k, b)
            })
        } else {
            b.map = None;
            read_span(files, s, &mut b.buf).map(|_| {
                if direct {
                    row_starts(&b.buf, &mut b.row_starts);
                }
                (k, b)
            })
        };
        if btx.send(r).is_err() {
            return;
        }
    }
}

fn send(tx: &mut BatchTx, b: Batch) -> Result<()> {
    // A closed channel means the consumer reset or dropped the iterator: nothing to report.
    let _ = tx.send(b);
    Ok(())
}

/// `need` rows from the start of epoch `epoch`'s order (cycling if the part is smaller), and
/// how many rows into its last cycle the taking stopped.
fn wrap_rows(sh: &Shared, epoch: u64, need: usize) -> Result<(Rows, usize)> {
    let order = epoch_order(sh, epoch);
    let mut out = Rows::new();
    let (mut buf, mut lbuf) = (Vec::new(), Vec::new());
    loop {
        let mut pos = 0;
        for &bi in &order {
            read_span(&sh.files, sh.blocks[bi].data, &mut buf)?;
            for p in load_block(sh, bi, epoch, &buf, &mut lbuf)? {
                let take = (need - out.len()).min(p.len());
                out.extend_from(&p, 0, take);
                pos += take;
                if out.len() == need {
                    return Ok((out, pos));
                }
            }
        }
        if pos == 0 {
            return Ok((out, 0)); // no rows at all: nothing to wrap with
        }
    }
}
