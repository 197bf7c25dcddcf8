//! CSV files: the streaming [`CSVIter`] (MXNet's `CSVIter`), dense batches from a data file
//! and an optional row-aligned label file.
//!
//! Format: one row per line, its values separated by commas; blanks around a value are
//! ignored, a `\r` before the newline too, and lines holding nothing but blanks are not rows.
//! There is no header and no quoting (the files are numbers). A data row has exactly
//! `prod(data_shape)` values and a label row `prod(label_shape)`; values are parsed to the
//! iterator's dtype (`f32` by the LibSVM reader's correctly rounded parser, `f64`, or
//! range-checked `i32` / `i64`).
//!
//! Malformed input is a [`DataError::Parse`](crate::DataError::Parse) naming the file, the
//! line and the byte column: a row with too many or too few values for its shape, an empty
//! value, a non-number (or a non-integer for integer dtypes, or one out of its range), a NaN
//! or infinity unless [`CSVIterParams::allow_non_finite`], and a label file whose row count
//! differs from the data file's (at the first row without a partner, found when the iterator
//! is built). A missing file is a [`DataError::Io`](crate::DataError::Io) naming it.
//!
//! Streaming: [`CSVIter::new`] reads each file once to count its rows and remember where
//! every `block_rows`-th row starts; epochs then read one block at a time from there, so
//! memory is bounded by a block, a batch and that index (two words per block), whatever the
//! file size. Parts (`num_parts`, `part_index`) split the rows, not the bytes, so data and
//! label files stay aligned and every row belongs to exactly one part. Shuffling permutes
//! the blocks of the part and the rows within each block.
//!
//! Last batch: every [`LastBatch`](crate::LastBatch) mode, with the semantics of
//! [`NDArrayIter`](crate::NDArrayIter) (the tests compare the two), except that a `reset` in the
//! middle of a `RollOver` epoch carries no rows over (the leftover rows are only known at the
//! end of a pass).

mod index;
mod iter;
mod params;
mod stream;
mod values;

pub use iter::CSVIter;
pub use params::CSVIterParams;

#[cfg(test)]
mod tests;
