//! The producer thread: runs epoch after epoch on one prefetch queue, each epoch reading the
//! blocks (on a reader thread, or itself for one small block), parsing them into batches on the
//! direct path (`block_batches`) or the piece path (`pieces`), and finishing with the last
//! batch as `last_batch` asks. It runs at idle priority when the parameters ask.

use std::sync::mpsc::{channel, sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::block_batches::{produce_direct, BlockBuf};
use super::pieces::{load_block, produce_pieces};
use super::plan::{read_span, Span};
use super::queue::{BatchTx, EpochState, Msg};
use super::reader::{is_small, read_blocks};
use super::shared::{make_batch, Shared};
use super::shuffle::epoch_order;
use super::Rows;
use crate::batch::{Batch, LastBatch};
use crate::error::Result;

/// Start a producer at `epoch`, beginning with `carry` and skipping `skip` rows. It goes on
/// through the following epochs on the same queue (see [`produce`]).
pub(super) fn spawn(
    shared: &Arc<Shared>,
    epoch: u64,
    carry: Option<Rows>,
    skip: usize,
) -> (Receiver<Msg>, JoinHandle<()>) {
    let (tx, rx) = sync_channel(1);
    let shared = shared.clone();
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

/// The producer: epoch after epoch on one queue, until the consumer goes (a reset in the middle
/// of an epoch, or a drop) or an error. Going straight on to the next epoch means its first
/// batches are parsed while the consumer still works through this epoch's last ones, and no
/// thread is started per epoch: a new thread waited up to ~3 ms for a core in the project's
/// two-core machine (CFS placed it behind the training thread), about a whole sparse Gluon tutorial
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
    let map = sh.p.map_files;
    // Reader thread: blocks are mapped (direct path) or read while the previous one is parsed.
    // Buffers come back through `ret` and are reused: a fresh 16 MB buffer per block cost more
    // in page faults (the kernel zeroing new pages) than the copy out of the page cache itself.
    // The direct path takes the next block while the current one's last ranges are still being
    // parsed, so one block ready in the reader's hand is enough there (each mapped block counts
    // in the resident set); the piece path keeps one more queued.
    //
    // A part of one small block (the sparse tutorial's 177 KB file) is read on this thread
    // instead: a new thread per epoch sometimes first ran milliseconds after `spawn` on the
    // two-core machine, and the training loop waited for it at the start of the epoch.
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
        read_blocks(&sh.files, spans, direct, map, &btx, &ret_rx);
        drop(btx);
        None
    } else {
        let files = sh.files.clone();
        #[cfg(test)]
        sh.readers
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        #[cfg(test)]
        let counted = sh.clone();
        Some(std::thread::spawn(move || {
            read_blocks(&files, spans, direct, map, &btx, &ret_rx);
            #[cfg(test)]
            {
                use std::sync::atomic::Ordering::Relaxed;
                let ms = counted.reader_exit_delay_ms.load(Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(ms));
                counted.readers_done.fetch_add(1, Relaxed);
            }
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
        produce_direct(sh, &order, blocks, &ret_tx, &mut st, bar_ref)
    } else {
        produce_pieces(sh, epoch, &order, blocks, &ret_tx, &mut st, bar_ref)
    };
    // The reader is joined on every path, an error included: a detached reader could outlive
    // the iterator (the drop joins only the producer) and still hold the files.
    drop(brx);
    if let Some(reader) = reader {
        let _ = reader.join();
    }
    let stopped = !sent?;
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
            LastBatch::Keep => send(tx, make_batch(sh, &[(&left, 0, c)], 0)?)?,
            LastBatch::Discard => {}
            LastBatch::RollOver => end_carry = Some(left),
            LastBatch::Pad | LastBatch::RoundBatch => {
                let next = if sh.p.last_batch == LastBatch::Pad {
                    epoch
                } else {
                    epoch + 1
                };
                let (fill, pos) = wrap_rows(sh, next, bs - c)?;
                let batch = make_batch(sh, &[(&left, 0, c), (&fill, 0, fill.len())], fill.len())?;
                send(tx, batch)?;
                if sh.p.last_batch == LastBatch::RoundBatch {
                    end_skip = pos;
                }
            }
        }
    }
    Ok(tx.finish(end_skip).then_some((end_carry, end_skip)))
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
