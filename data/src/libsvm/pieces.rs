//! The piece path of an epoch, taken when rows are shuffled within blocks or labels come from a
//! second file: each block is parsed into ~1 MB pieces (labels merged in, rows shuffled when
//! asked) and its rows copied into batches.

use std::sync::mpsc::{Receiver, Sender};

use rayon::prelude::*;

use super::block_batches::BlockBuf;
use super::locate::{locate, row_line_start};
use super::plan::read_span;
use super::queue::{BatchTx, EpochState};
use super::shared::{check_label_counts, make_batch, Shared};
use super::shuffle::shuffle_rows;
use super::{parse_parallel, Rows};
use crate::batch::{Batch, Seg};
use crate::error::{DataError, Result};

/// The piece path of one epoch (rows shuffled within blocks, or labels from a second file):
/// each block is read, parsed into ~1 MB pieces (`load_block`) and its rows copied into
/// batches. `Ok(false)` when the consumer has gone; rows that do not fill a batch stay in
/// `st.left`.
pub(super) fn produce_pieces(
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
        match emit(sh, &all, st.tx)? {
            Some(l) => *st.left = l,
            None => return Ok(false),
        }
    }
    Ok(true)
}

/// Build the batches of `batch` rows from `pieces` (after `carry`), send them, and return the
/// leftover rows (`None` when the consumer has gone).
fn emit(sh: &Shared, pieces: &[Rows], tx: &mut BatchTx) -> Result<Option<Rows>> {
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
    let batches: Vec<Batch> = specs
        .par_iter()
        .map(|s| make_batch(sh, s, 0))
        .collect::<Result<_>>()?;
    for b in batches {
        if !tx.send(b) {
            return Ok(None);
        }
    }
    let mut left = Rows::new();
    for &(p, a, z) in &cur {
        left.extend_from(p, a, z);
    }
    Ok(Some(left))
}

/// Read and parse one block into row pieces (labels from the label file merged in), shuffled
/// within the block when asked.
pub(super) fn load_block(
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
        pieces = shuffle_rows(sh, epoch, bi, pieces);
    }
    Ok(pieces)
}
