//! The block reader: sends an epoch's blocks to the producer in order, each mapped (large
//! blocks on the direct path, with their row starts found, see `block_batches`) or read into a
//! recycled buffer.

use std::sync::mpsc::{Receiver, SyncSender};

use super::block_batches::{map_span, row_starts, BlockBuf};
use super::plan::{read_span, FileInfo, Span};
use crate::error::Result;

/// Blocks at most this large are read rather than mapped, and a part of one such block is
/// read on the producer thread (no reader thread): for small files a thread start per epoch,
/// and the TLB shootdowns of unmapping a block each epoch, cost more than the reading.
const SMALL_BLOCK_BYTES: u64 = 1 << 20;

pub(super) fn is_small(s: Span) -> bool {
    s.end - s.start <= SMALL_BLOCK_BYTES
}

/// The reader: send blocks `spans` in order (mapped on the direct path when `map` allows it,
/// else read), reusing the buffers that come back through `ret`. Stops when the receiver has
/// gone.
pub(super) fn read_blocks(
    files: &[FileInfo],
    spans: Vec<Span>,
    direct: bool,
    map: bool,
    btx: &SyncSender<Result<(usize, BlockBuf)>>,
    ret: &Receiver<BlockBuf>,
) {
    for (k, s) in spans.into_iter().enumerate() {
        let mut b: BlockBuf = ret.try_recv().unwrap_or_default();
        let r = if direct && map && !is_small(s) {
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
