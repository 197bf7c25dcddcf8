//! The prefetch queue between the producer and the consumer: the messages, the producer's end
//! that hands batches over in groups, and the per-epoch state the producer's block loops update.

use std::sync::mpsc::SyncSender;
#[cfg(test)]
use std::sync::Arc;

use rayon::prelude::*;

#[cfg(test)]
use super::shared::Shared;
use super::Rows;
use crate::batch::Batch;
use crate::error::DataError;

/// A message of the prefetch queue, producer to consumer.
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
    /// epoch, see [`LibSVMIterParams::idle_priority`](super::LibSVMIterParams::idle_priority));
    /// set per epoch.
    pub(super) prepare_here: bool,
    #[cfg(test)]
    pub(super) shared: Option<Arc<Shared>>,
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
