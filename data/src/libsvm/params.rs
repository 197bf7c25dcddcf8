//! The parameters of [`LibSVMIter`](super::LibSVMIter), their defaults and their validation.

use std::path::PathBuf;

use super::IndexBase;
use crate::batch::LastBatch;
use crate::error::{DataError, Result};

/// Parameters of [`LibSVMIter`](super::LibSVMIter) (MXNet's names; build with
/// [`LibSVMIterParams::new`] and set fields).
#[derive(Debug, Clone)]
pub struct LibSVMIterParams {
    /// A LibSVM file, or a directory whose files are read in name order.
    pub data_libsvm: PathBuf,
    /// Number of features (columns of the CSR batches).
    pub data_shape: usize,
    /// A separate label file in LibSVM format (its labels are ignored; its features become
    /// CSR label batches of `label_shape` columns), row-aligned with the data.
    pub label_libsvm: Option<PathBuf>,
    /// Labels per row (dense labels) or label columns (with `label_libsvm`). Default 1. With
    /// more than one, labels are comma-separated lists (each row must hold exactly this many);
    /// with 1, a comma in a label is an error on its line.
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
    /// Accept non-finite values (`nan`, `inf`, `1e999`); by default they are a parse error
    /// with file, line and column (one NaN in a batch turns the weights it touches NaN).
    pub allow_non_finite: bool,
    /// Strict mode ([`LibSvmOptions::strict`](super::LibSvmOptions::strict)): refuse numbers
    /// that overflow `f32` or underflow to zero, and repeated labels in a row.
    pub strict: bool,
    /// Memory-map large blocks instead of reading them: saves copying each byte out of the
    /// page cache (a few percent of a pass on two cores). Off by default: a mapped file that
    /// another process truncates during the pass kills this process with SIGBUS, a fault no
    /// Rust code can catch, while a read block sees the change and the pass reports it as an
    /// error. Turn it on only for files nothing else writes while they are read.
    pub map_files: bool,
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
    /// steps on a machine with few cores: on two cores the woken producer landed
    /// on the training thread's core and took ~0.2 ms per 100-batch epoch of the sparse
    /// tutorial. Off by default: with more busy threads than cores an idle-priority producer
    /// gets almost no CPU and the consumer waits for its batches.
    ///
    /// An idle-priority producer also does the work of an epoch that is one small block (at
    /// most 1 MiB of text) itself instead of handing it to the rayon pool, whose threads run at
    /// normal priority: the `prepare_transpose` grouping always, the parsing when rows are
    /// neither shuffled nor labelled from a second file (the direct path; the other path still
    /// parses as pool tasks). Waking the pool three times per tutorial epoch made its (c)
    /// 1.1-1.3x slower with 2 pool threads than with 1 on two cores (the woken threads ran
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
            allow_non_finite: false,
            strict: false,
            map_files: false,
            progress: false,
            prepare_transpose: false,
            idle_priority: false,
        }
    }

    /// Check what the iterator cannot run with: zero sizes, or a part outside `num_parts`.
    pub(super) fn validate(&self) -> Result<()> {
        const OP: &str = "LibSVMIter";
        if self.batch_size == 0 || self.data_shape == 0 || self.label_shape == 0 {
            return Err(DataError::arg(
                OP,
                "batch_size, data_shape and label_shape must be > 0",
            ));
        }
        DataError::check_part(OP, self.num_parts, self.part_index)?;
        Ok(())
    }
}
