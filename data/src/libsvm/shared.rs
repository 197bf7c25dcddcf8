//! The state the iterator's background threads share, built when the iterator is: the
//! parameters, this part's files and planned blocks (paired with the label file's), and the
//! parse options. Also what turns parsed rows into batches according to the parameters.

use super::load::list_files;
use super::locate::locate;
use super::params::LibSVMIterParams;
use super::parse::ChunkOpts;
use super::plan::{file_infos, pair_labels, plan_part, read_span, Block, FileInfo};
use super::{parse_parallel, IndexBase, LibSvmOptions, Rows};
use crate::batch::{
    csr_from_segs, csr_labels_from_segs, dense_labels_from_segs, Batch, LastBatch, Seg,
};
use crate::error::{DataError, Result};

/// Everything the background threads share.
pub(super) struct Shared {
    pub(super) p: LibSVMIterParams,
    pub(super) files: Vec<FileInfo>,
    pub(super) label_file: Option<FileInfo>,
    pub(super) blocks: Vec<Block>,
    pub(super) data_opts: ChunkOpts,
    pub(super) label_opts: ChunkOpts,
    pub(super) part_bytes: u64,
    /// Producer threads started so far (tests check that full epochs reuse one).
    #[cfg(test)]
    pub(super) producers: std::sync::atomic::AtomicUsize,
    /// Block reader threads started so far (tests check that a one-block part starts none).
    #[cfg(test)]
    pub(super) readers: std::sync::atomic::AtomicUsize,
    /// Block reader threads that have finished (tests check none outlives its iterator).
    #[cfg(test)]
    pub(super) readers_done: std::sync::atomic::AtomicUsize,
    /// Milliseconds a reader thread waits before it finishes (a test widens the window in which
    /// an unjoined reader would still run).
    #[cfg(test)]
    pub(super) reader_exit_delay_ms: std::sync::atomic::AtomicU64,
    /// Producer threads that found themselves at idle priority when they started.
    #[cfg(test)]
    pub(super) idle_producers: std::sync::atomic::AtomicUsize,
    /// Work handed to the rayon pool by producers (parse jobs and batch-group preparations).
    #[cfg(test)]
    pub(super) pool_tasks: std::sync::atomic::AtomicUsize,
}

impl Shared {
    /// Check the parameters, plan the blocks (and pair them with the label file), detecting
    /// the index base first when it is `Auto`.
    pub(super) fn new(p: LibSVMIterParams) -> Result<Shared> {
        p.validate()?;
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
            allow_non_finite: p.allow_non_finite,
            map_file: p.map_files,
            // Label lists only where rows carry several labels; a label file's own labels
            // (and then the data file's) are not used, so any list is fine there.
            multilabel: p.label_shape > 1 || p.label_libsvm.is_some(),
            ignore_qid: false,
            strict: p.strict,
        };
        let mut base = p.index_base;
        if base == IndexBase::Auto {
            base = detect_base(&files, block_bytes, &lopts)?;
        }
        let data_opts = lopts.chunk_opts(base);
        lopts.num_features = Some(p.label_shape);
        lopts.multilabel = true;
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
        check_batch_fits(&p, part_bytes)?;
        Ok(Shared {
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
            readers_done: Default::default(),
            #[cfg(test)]
            reader_exit_delay_ms: Default::default(),
            #[cfg(test)]
            idle_producers: Default::default(),
            #[cfg(test)]
            pool_tasks: Default::default(),
        })
    }
}

/// A row line takes at least two bytes (a label or an index and its newline), so a part of
/// `part_bytes` holds at most `(part_bytes + 1) / 2` rows. With `Pad` and `RoundBatch` a batch
/// larger than that is made of the part's rows repeated (or empty padding rows) to reach
/// `batch_size`: a typo such as `batch_size` 1e9 on a 100-row file would allocate for a billion
/// rows. Such a batch size is refused here, naming both sizes; the other modes emit only the
/// rows the file has and allocate as rows arrive.
fn check_batch_fits(p: &LibSVMIterParams, part_bytes: u64) -> Result<()> {
    let max_rows = part_bytes.div_ceil(2);
    let fabricates = matches!(p.last_batch, LastBatch::Pad | LastBatch::RoundBatch);
    if fabricates && part_bytes > 0 && p.batch_size as u64 > max_rows {
        return Err(DataError::arg(
            "LibSVMIter",
            format!(
                "batch_size {} is more rows than this part's {part_bytes} bytes can hold (at \
                 most {max_rows}); with LastBatch::{:?} each batch would repeat or pad the \
                 part's rows up to batch_size: use a smaller batch_size or LastBatch::Keep",
                p.batch_size, p.last_batch
            ),
        ));
    }
    Ok(())
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

pub(super) fn make_batch(sh: &Shared, segs: &[Seg<'_>], pad: usize) -> Result<Batch> {
    let data = csr_from_segs(segs, sh.p.data_shape)?;
    let label = if sh.label_file.is_some() {
        csr_labels_from_segs(segs, sh.p.label_shape)?
    } else {
        dense_labels_from_segs(segs, sh.p.label_shape)
    };
    Ok(Batch {
        data,
        label: Some(label),
        pad,
    })
}
