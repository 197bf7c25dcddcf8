//! LibSVM text format: parser, whole-file loader, streaming iterator and writer.
//!
//! A line is `label [qid:N] index:value index:value ...`. `#` starts a comment (a
//! whole line or the rest of a line); blank lines and comment-only lines are not rows; fields are
//! separated by spaces or tabs (a `\r` before the newline is ignored); a row may have no
//! features. Values and labels are parsed to `f32`, correctly rounded from the decimal text.
//!
//! Indices are zero-based (MXNet's default), one-based, or detected ([`IndexBase::Auto`]): data
//! with no index 0 anywhere is one-based, as scikit-learn decides. Auto needs the whole input:
//! [`load_libsvm`] parses everything first and then shifts; the streaming [`LibSVMIter`] with
//! `Auto` makes one extra parsing pass over the data when it is built (memory stays bounded),
//! so give an explicit base for large files.
//!
//! Malformed input is a [`DataError::Parse`](crate::DataError::Parse) naming the file, the line
//! and the byte column: non-numeric labels or values, `index:` with no value, negative indices,
//! indices `>=` the declared number of features, and unsorted or duplicate indices in a row
//! (unless [`LibSvmOptions::sort_indices`] asks to sort them and sum duplicates).
//!
//! # svmlight files and scikit-learn
//!
//! scikit-learn's `load_svmlight_file` is the reference for what these files may hold, and
//! the options map onto its parameters:
//!
//! - Labels: one per row by default; a comma in a label is an error on its line.
//!   [`LibSvmOptions::multilabel`] (sklearn's `multilabel=True`) reads `l1,l2,...` lists, and a
//!   row whose first token is a feature (or its qid) has no label. The iterator reads lists
//!   when `label_shape > 1`.
//! - Query ids: `qid:N` right after the label, `N` any `i64` (negative included);
//!   [`Rows::qids`] holds one `Option<i64>` per row. [`LibSvmOptions::ignore_qid`] skips the
//!   token without reading its value (sklearn's default `query_id=False`).
//! - [`LibSvmOptions::strict`] refuses what sklearn accepts but is almost surely a mistake: a
//!   number that overflows `f32` to infinity even when `allow_non_finite` admits the literal
//!   `nan`/`inf`, a non-zero number that rounds to zero in `f32` (`1e-50`), and a label
//!   repeated in one multilabel row.
//!
//! Where sparrow differs from sklearn on purpose (each shown by `scripts/check_svmlight_compat.py`,
//! which loads tricky files with both):
//!
//! - NaN, infinities and numbers past `f32`'s range are refused unless `allow_non_finite`
//!   (sklearn accepts them; it also reads into `f64` by default, where `1e39` is finite).
//! - Values are `f32`, rounded once from the decimal text; sklearn's `dtype=float32` rounds to
//!   `f64` first, so on rare inputs (`1.00000005960464477550`) the two differ by one ulp.
//! - Multilabel labels keep the file's order; sklearn sorts each row's labels.
//! - sklearn's query array lists only the rows that have a qid (so it is misaligned with the
//!   rows when some have none); [`Rows::qids`] has an entry per row.
//! - sklearn takes any first token starting with `qid` (`qidx:3`) as the qid; here only `qid:`.
//! - Fields are separated by spaces, tabs (and `\r`); sklearn splits on any whitespace
//!   (vertical tab, form feed, ...).
//! - Numbers are Rust's decimal syntax: sklearn (Python's `float`/`int`) also takes `1_0`.
//! - Feature indices may be any `i64`; sklearn refuses those past a C `int` (2^31 - 1).
//! - An empty file has 0 columns here, 1 in sklearn (when `num_features` is not given).

mod block_batches;
mod fast_line;
mod iter;
mod load;
mod locate;
pub(crate) mod number;
mod params;
pub(crate) mod parse;
mod pieces;
mod plan;
mod producer;
mod queue;
mod reader;
mod shared;
mod shuffle;
mod swar;
mod write;

pub use iter::LibSVMIter;
pub use load::{load_libsvm, parse_libsvm_bytes, LibSvmData};
pub use params::LibSVMIterParams;
pub use parse::Rows;
pub use write::{save_libsvm, save_libsvm_with};

use parse::ChunkOpts;

/// How feature indices in the text map to columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IndexBase {
    /// Index `i` is column `i` (MXNet's default).
    #[default]
    Zero,
    /// Index `i` is column `i - 1`; an index 0 is an error.
    One,
    /// One-based if no index 0 occurs anywhere, else zero-based (scikit-learn's rule).
    Auto,
}

/// Options of the LibSVM readers.
#[derive(Debug, Clone, Default)]
pub struct LibSvmOptions {
    /// Index base (default zero-based).
    pub index_base: IndexBase,
    /// The declared number of features; an index at or past it is an error. `None`: the largest
    /// column + 1 (only for the whole-file loader).
    pub num_features: Option<usize>,
    /// Sort each row's indices and sum duplicates instead of rejecting them.
    pub sort_indices: bool,
    /// Accept non-finite values (`nan`, `inf`, `1e999`); by default they are a parse error
    /// with file, line and column.
    pub allow_non_finite: bool,
    /// Memory-map the file instead of reading it (saves the copy out of the page cache).
    /// Off by default: a mapped file that another process truncates while it is parsed kills
    /// this process with SIGBUS (a fault no Rust code can catch); reading turns the same
    /// event into a short read. Map only files nothing else writes.
    pub map_file: bool,
    /// Labels are comma-separated lists (`1,3 0:1`), and a row whose first token is a feature
    /// has no label (scikit-learn's `multilabel=True`). Off by default: a comma in a label is
    /// then an error on its line, as in scikit-learn's default.
    pub multilabel: bool,
    /// Skip `qid:` tokens without reading their value, so every row's qid is `None`
    /// (scikit-learn's `query_id=False`, which also never reads the value).
    pub ignore_qid: bool,
    /// Refuse what scikit-learn accepts but is almost surely a mistake: a number that
    /// overflows `f32` to infinity (even with `allow_non_finite`, which then only admits the
    /// literal `nan`/`inf`), a non-zero number that rounds to zero in `f32`, and a label
    /// repeated within one multilabel row. Off by default.
    pub strict: bool,
}

impl LibSvmOptions {
    /// Chunk options for a known base (`Auto` parses raw: no shift, no bound).
    pub(crate) fn chunk_opts(&self, base: IndexBase) -> ChunkOpts {
        match base {
            IndexBase::Auto => ChunkOpts {
                shift: 0,
                zero_is_error: false,
                bound: None,
                sort: self.sort_indices,
                allow_non_finite: self.allow_non_finite,
                multilabel: self.multilabel,
                ignore_qid: self.ignore_qid,
                strict: self.strict,
            },
            IndexBase::Zero | IndexBase::One => ChunkOpts {
                shift: (base == IndexBase::One) as i64,
                zero_is_error: base == IndexBase::One,
                bound: self.num_features.map(|n| n as u64),
                sort: self.sort_indices,
                allow_non_finite: self.allow_non_finite,
                multilabel: self.multilabel,
                ignore_qid: self.ignore_qid,
                strict: self.strict,
            },
        }
    }
}

/// Target size of the pieces one parallel parse splits a buffer into.
pub(crate) const PIECE_BYTES: usize = 1 << 20;

/// Split `buf` (whole lines) into pieces of about `piece` bytes, each ending after a newline
/// (or at the end), and return the piece start offsets plus `buf.len()`.
pub(crate) fn split_lines(buf: &[u8], piece: usize) -> Vec<usize> {
    let mut cuts = vec![0];
    let mut pos = 0;
    while pos + piece < buf.len() {
        match memchr::memchr(b'\n', &buf[pos + piece..]) {
            Some(i) => {
                pos = pos + piece + i + 1;
                if pos < buf.len() {
                    cuts.push(pos);
                }
            }
            None => break,
        }
    }
    cuts.push(buf.len());
    cuts
}

/// A parse failure inside a buffer: the byte offset in the buffer of the start of the line at
/// fault, and the error with its column.
pub(crate) struct BufError {
    pub line_start: usize,
    pub err: parse::RawError,
}

/// Parse a buffer of whole lines in parallel (rayon) into one `Rows` per piece, in order.
pub(crate) fn parse_parallel(buf: &[u8], opts: &ChunkOpts) -> Result<Vec<Rows>, BufError> {
    use rayon::prelude::*;
    let cuts = split_lines(buf, PIECE_BYTES);
    let res: Vec<Result<Rows, BufError>> = cuts
        .par_windows(2)
        .map(|w| {
            let piece = &buf[w[0]..w[1]];
            let mut rows = Rows::new();
            // A generous guess avoids most regrowth: ~20 bytes per feature.
            rows.indices.reserve(piece.len() / 20);
            rows.values.reserve(piece.len() / 20);
            parse::parse_into(piece, opts, &mut rows).map_err(|err| {
                let line_start = w[0] + nth_line_start(piece, err.line);
                BufError { line_start, err }
            })?;
            Ok(rows)
        })
        .collect();
    res.into_iter().collect()
}

/// Byte offset of the start of the `n`-th (0-based) line of `buf`.
pub(crate) fn nth_line_start(buf: &[u8], n: u64) -> usize {
    if n == 0 {
        return 0;
    }
    memchr::memchr_iter(b'\n', buf)
        .nth(n as usize - 1)
        .map_or(buf.len(), |i| i + 1)
}

#[cfg(test)]
mod iter_tests;
#[cfg(test)]
mod svmlight_tests;
#[cfg(test)]
mod tests;
