//! The parameters of [`CSVIter`](super::CSVIter), their defaults and their validation.

use std::path::PathBuf;

use sparrow_core::DType;

use crate::batch::LastBatch;
use crate::error::{DataError, Result};

/// Parameters of [`CSVIter`](super::CSVIter) (MXNet's names; build with [`CSVIterParams::new`]
/// and set fields).
#[derive(Debug, Clone)]
pub struct CSVIterParams {
    /// The CSV file of the data: one row per line, `prod(data_shape)` comma-separated numbers.
    pub data_csv: PathBuf,
    /// Shape of one row; batches are `[batch_size, data_shape...]`.
    pub data_shape: Vec<usize>,
    /// The CSV file of the labels, row-aligned with the data (one line per data row). `None`:
    /// every label is 0, as in MXNet.
    pub label_csv: Option<PathBuf>,
    /// Shape of one row's label. Default `[1]`, whose batches are `[batch_size]`; any other
    /// shape gives `[batch_size, label_shape...]`.
    pub label_shape: Vec<usize>,
    /// Rows per batch.
    pub batch_size: usize,
    /// Last-batch handling (default [`LastBatch::RoundBatch`], MXNet's `round_batch=True`).
    pub last_batch: LastBatch,
    /// Element type of data and label batches: `F32` (default, parsed by the LibSVM reader's
    /// correctly rounded parser), `F64`, `I32` or `I64` (integers only, range-checked).
    pub dtype: DType,
    /// Accept `nan`, `inf` and values that overflow the float type; by default they are a
    /// parse error with file, line and column.
    pub allow_non_finite: bool,
    /// Number of disjoint parts the rows are split into (for distributed reading): part `k`
    /// reads rows `n*k/num_parts .. n*(k+1)/num_parts` of the `n` rows.
    pub num_parts: usize,
    /// Which part this iterator reads.
    pub part_index: usize,
    /// Shuffle each epoch: the order of blocks, and the rows within each block.
    pub shuffle: bool,
    /// Seed of the shuffle (epoch `e` uses a stream derived from `seed` and `e`).
    pub seed: u64,
    /// Rows per block: the unit read at once (and held in memory) and the shuffle granularity.
    /// Default 4096.
    pub block_rows: usize,
}

impl CSVIterParams {
    /// Parameters with MXNet's defaults for everything but the data path, row shape and batch
    /// size.
    pub fn new(data_csv: impl Into<PathBuf>, data_shape: &[usize], batch_size: usize) -> Self {
        CSVIterParams {
            data_csv: data_csv.into(),
            data_shape: data_shape.to_vec(),
            label_csv: None,
            label_shape: vec![1],
            batch_size,
            last_batch: LastBatch::RoundBatch,
            dtype: DType::F32,
            allow_non_finite: false,
            num_parts: 1,
            part_index: 0,
            shuffle: false,
            seed: 0,
            block_rows: 4096,
        }
    }

    /// Values per data row and per label row (checked: non-empty shapes, no zero extent, no
    /// overflow).
    pub(super) fn widths(&self) -> Result<(usize, usize)> {
        let width = |what: &str, s: &[usize]| {
            let n = s.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            match n {
                Some(n) if n > 0 && !s.is_empty() => Ok(n),
                _ => Err(DataError::arg(
                    OP,
                    format!("{what} {s:?} must be non-empty with every extent > 0"),
                )),
            }
        };
        Ok((
            width("data_shape", &self.data_shape)?,
            width("label_shape", &self.label_shape)?,
        ))
    }

    /// Check what the iterator cannot run with.
    pub(super) fn validate(&self) -> Result<()> {
        self.widths()?;
        if self.batch_size == 0 || self.block_rows == 0 {
            return Err(DataError::arg(OP, "batch_size and block_rows must be > 0"));
        }
        DataError::check_part(OP, self.num_parts, self.part_index)?;
        if !matches!(
            self.dtype,
            DType::F32 | DType::F64 | DType::I32 | DType::I64
        ) {
            return Err(DataError::arg(
                OP,
                format!("dtype {:?}: expected F32, F64, I32 or I64", self.dtype),
            ));
        }
        Ok(())
    }
}

pub(super) const OP: &str = "CSVIter";
