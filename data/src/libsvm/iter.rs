//! `LibSVMIter`: streaming, parallel LibSVM reading into CSR batches.
//!
//! Pipeline per epoch: a reader thread maps blocks (see `plan`) and finds their row starts; a
//! producer thread cuts each block into byte ranges of exactly one batch of rows, has rayon
//! tasks parse them straight into the batches' arrays, a bounded window of tasks running
//! across block boundaries (see `block_batches`), and sends the batches in order through a
//! bounded channel (the prefetch queue) in groups of `prefetch` batches or more (one thread
//! hand-off per group, see `queue::BatchTx`). With shuffling or a separate label file, blocks
//! are read into recycled buffers and parsed into ~1 MB pieces instead, and the rows copied
//! into batches. Memory is a few blocks plus the batches of the task window (or of one block on the
//! piece path) and two groups of batches (each `prefetch` batches, or 256 KB of small ones),
//! whatever the file size. The producer thread runs epoch after epoch on the same queue (the
//! epoch's last group travels with its end), so the next epoch's first batches are ready when
//! `reset` comes; only a reset in the middle of an epoch stops it and starts a new one.
//!
//! Data blocks are memory-mapped while they are parsed: as with the whole-file loader,
//! truncating a file while it is being read is not supported (the process may fault).
//!
//! The parts: `params` (the parameters), `shared` (what the threads share, and the block plan
//! made at construction), `producer` (the producer thread and an epoch's course), `reader`
//! (the block reader), `block_batches` (the direct path), `pieces` (the piece path), `shuffle`
//! (block and row order), `queue` (the prefetch queue) and `locate` (error positions). This
//! file holds the consumer's side.

use std::collections::VecDeque;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::params::LibSVMIterParams;
use super::producer;
use super::queue::Msg;
use super::shared::Shared;
use crate::batch::Batch;
use crate::error::{DataError, Result};

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
        let shared = Arc::new(Shared::new(p)?);
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

    /// What the threads share, kept by a test past the iterator's drop.
    #[cfg(test)]
    pub(super) fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
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
        let (rx, handle) = producer::spawn(&self.shared, self.epoch, None, self.skip);
        self.threads.push(handle);
        self.rx = Some(rx);
        self.done = false;
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
