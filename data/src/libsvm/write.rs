//! LibSVM writer. Values are printed with Rust's shortest round-trip formatting, so the file
//! reads back bit-identical; the file appears atomically (temp file in the same directory, then
//! rename), so a crash never leaves a half-written data set under the final name.

use std::io::Write;
use std::path::Path;

use rayon::prelude::*;
use sparrow_core::{CsrView, DType, NDArray};

use super::IndexBase;
use crate::error::{DataError, Result};

/// Rows formatted per parallel task.
const ROWS_PER_TASK: usize = 4096;

/// Write `csr` (a CSR or dense 2-D array, f32 or f64) with `labels` (dense, `[rows]` or
/// `[rows, k]` for multi-label rows written `l1,l2,...`) as zero-based LibSVM text.
///
/// ```no_run
/// # use sparrow_core::NDArray;
/// # fn f(x: &NDArray, y: &NDArray) -> sparrow_data::Result<()> {
/// sparrow_data::libsvm::save_libsvm("out.libsvm", x, y)?;
/// # Ok(()) }
/// ```
pub fn save_libsvm(path: impl AsRef<Path>, csr: &NDArray, labels: &NDArray) -> Result<()> {
    save_libsvm_with(path, csr, labels, IndexBase::Zero)
}

/// [`save_libsvm`] with a chosen index base (`Auto` writes zero-based).
pub fn save_libsvm_with(
    path: impl AsRef<Path>,
    csr: &NDArray,
    labels: &NDArray,
    base: IndexBase,
) -> Result<()> {
    const OP: &str = "save_libsvm";
    let path = path.as_ref();
    let x = sparrow_core::sparse::cast_storage(csr, sparrow_core::SType::Csr)?;
    let rows = x.shape()[0];
    let lab = labels.to_f64_vec();
    let lshape = labels.shape();
    let k = match lshape.as_slice() {
        [n] if *n == rows => 1,
        [n, k] if *n == rows && *k >= 1 => *k,
        _ => {
            return Err(DataError::arg(
                OP,
                format!("labels of shape {lshape:?} do not match {rows} rows"),
            ))
        }
    };
    let text = Text {
        lab: &lab,
        k,
        label_f32: labels.dtype() == DType::F32,
        shift: (base == IndexBase::One) as i64,
    };
    match x.dtype() {
        DType::F32 => x.with_csr::<f32, _>(|c| write_rows(path, c, &text))?,
        DType::F64 => x.with_csr::<f64, _>(|c| write_rows(path, c, &text))?,
        _ => Err(DataError::arg(OP, "feature values must be f32 or f64")),
    }
}

/// How labels and column ids are printed.
struct Text<'a> {
    /// Labels, `k` per row, row-major.
    lab: &'a [f64],
    k: usize,
    /// Print labels at f32 precision (their dtype), so they read back identical.
    label_f32: bool,
    /// Added to every column id (1 for one-based files).
    shift: i64,
}

/// Format the rows of `c` in parallel windows and write them in order into `path`, atomically.
fn write_rows<T: std::fmt::Display + Sync>(
    path: &Path,
    c: CsrView<'_, T>,
    t: &Text<'_>,
) -> Result<()> {
    let rows = c.shape[0];
    let fmt_row = |r: usize, s: &mut Vec<u8>| {
        for j in 0..t.k {
            if j > 0 {
                s.push(b',');
            }
            let l = t.lab[r * t.k + j];
            if t.label_f32 {
                let _ = write!(s, "{}", l as f32);
            } else {
                let _ = write!(s, "{l}");
            }
        }
        for p in c.indptr[r] as usize..c.indptr[r + 1] as usize {
            let _ = write!(s, " {}:{}", c.indices[p] + t.shift, c.values[p]);
        }
        s.push(b'\n');
    };
    write_atomic(path, |w| {
        let tasks: Vec<usize> = (0..rows).step_by(ROWS_PER_TASK).collect();
        // Format a window of tasks in parallel, then write it in order (bounded memory).
        for window in tasks.chunks(rayon::current_num_threads() * 4) {
            let texts: Vec<Vec<u8>> = window
                .par_iter()
                .map(|&r0| {
                    let mut s = Vec::new();
                    for r in r0..(r0 + ROWS_PER_TASK).min(rows) {
                        fmt_row(r, &mut s);
                    }
                    s
                })
                .collect();
            for t in texts {
                w.write_all(&t)?;
            }
        }
        Ok(())
    })
}

/// Write a file through [`sparrow_core::fsio::write_atomic`], the writer every sparrow file
/// goes through (a unique temporary in the same folder, fsynced, renamed, folder fsynced;
/// removed on failure). The temporary's name used to depend on the process id only, so two
/// threads writing one path collided.
pub(crate) fn write_atomic(
    path: &Path,
    f: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> Result<()> {
    sparrow_core::fsio::write_atomic(path, f).map_err(|e| DataError::io(path, e))
}
