//! Whole-file loading: parse a file (memory-mapped) or a directory of files in parallel into one
//! CSR matrix and labels.

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use sparrow_core::NDArray;

use super::{parse_parallel, BufError, IndexBase, LibSvmOptions, Rows};
use crate::error::{DataError, Result};

/// A parsed LibSVM data set held in memory.
#[derive(Debug, Clone)]
pub struct LibSvmData {
    /// The rows (CSR parts, labels, qids).
    pub rows: Rows,
    /// Number of columns: the declared number of features, or the largest column + 1.
    pub num_features: usize,
    /// The base that was applied (`Zero` or `One`, never `Auto`).
    pub index_base: IndexBase,
}

impl LibSvmData {
    /// Number of rows.
    pub fn num_rows(&self) -> usize {
        self.rows.len()
    }
    /// The features as a `rows x num_features` CSR array (f32 values, i64 indices).
    pub fn csr(&self) -> Result<NDArray> {
        rows_to_csr(&self.rows, self.num_features)
    }
    /// The labels as a dense 1-D f32 array; every row must have exactly one label.
    pub fn labels(&self) -> Result<NDArray> {
        if let Some(r) = (0..self.rows.len()).find(|&r| self.rows.row_labels(r).len() != 1) {
            return Err(DataError::arg(
                "LibSvmData::labels",
                format!(
                    "row {r} has {} labels; use rows.labels/rows.label_ptr for multi-label data",
                    self.rows.row_labels(r).len()
                ),
            ));
        }
        Ok(NDArray::from_vec(
            self.rows.labels.clone(),
            &[self.rows.len()],
        )?)
    }
}

/// Build a CSR NDArray from parsed rows (the rows are valid CSR by construction).
pub(crate) fn rows_to_csr(rows: &Rows, ncols: usize) -> Result<NDArray> {
    Ok(NDArray::csr_unchecked(
        rows.values.clone(),
        rows.indices.clone(),
        rows.indptr.clone(),
        [rows.len(), ncols],
    )?)
}

/// The regular files of a path: the file itself, or a directory's non-hidden files sorted by
/// name.
pub(crate) fn list_files(path: &Path) -> Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(path).map_err(|e| DataError::io(path, e))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| DataError::io(path, e))? {
        let entry = entry.map_err(|e| DataError::io(path, e))?;
        let p = entry.path();
        let hidden = p
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if !hidden && p.is_file() {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(DataError::arg(
            "libsvm",
            format!("directory {} holds no data files", path.display()),
        ));
    }
    Ok(files)
}

/// Turn a buffer-relative parse error into a positioned [`DataError::Parse`]; `prefix_newlines`
/// is the number of lines before the buffer's start in the file.
pub(crate) fn positioned(file: &Path, buf: &[u8], prefix_newlines: u64, e: BufError) -> DataError {
    let before = memchr::memchr_iter(b'\n', &buf[..e.line_start.min(buf.len())]).count() as u64;
    DataError::Parse {
        file: file.to_path_buf(),
        line: prefix_newlines + before + 1,
        col: e.err.col,
        msg: e.err.msg,
    }
}

/// Concatenate row pieces in order.
pub(crate) fn concat(mut parts: Vec<Rows>) -> Rows {
    if parts.len() == 1 {
        return parts.pop().unwrap_or_default();
    }
    let mut out = Rows::new();
    let nnz: usize = parts.iter().map(|p| p.nnz()).sum();
    out.indices.reserve(nnz);
    out.values.reserve(nnz);
    for p in &parts {
        out.extend_from(p, 0, p.len());
    }
    out
}

/// Load a LibSVM file, or every file of a directory in name order, into memory.
///
/// ```no_run
/// use sparrow_data::libsvm::{load_libsvm, LibSvmOptions, IndexBase};
/// let opts = LibSvmOptions { index_base: IndexBase::Auto, ..Default::default() };
/// let d = load_libsvm("train.libsvm", &opts)?;
/// let (x, y) = (d.csr()?, d.labels()?);
/// # Ok::<(), sparrow_data::DataError>(())
/// ```
pub fn load_libsvm(path: impl AsRef<Path>, opts: &LibSvmOptions) -> Result<LibSvmData> {
    let files = list_files(path.as_ref())?;
    let mut texts = Vec::with_capacity(files.len());
    for f in &files {
        texts.push(Text::open(f, opts.map_file)?);
    }
    let bufs: Vec<(&Path, &[u8])> = files
        .iter()
        .zip(&texts)
        .map(|(f, t)| (f.as_path(), t.bytes()))
        .collect();
    parse_sources(&bufs, opts)
}

/// A whole file's text: read into memory (the default), or mapped with `map_file`.
enum Text {
    Read(Vec<u8>),
    Mapped(Option<memmap2::Mmap>),
}

impl Text {
    fn open(f: &Path, map: bool) -> Result<Text> {
        if !map {
            return std::fs::read(f)
                .map(Text::Read)
                .map_err(|e| DataError::io(f, e));
        }
        let file = std::fs::File::open(f).map_err(|e| DataError::io(f, e))?;
        let len = file.metadata().map_err(|e| DataError::io(f, e))?.len();
        if len == 0 {
            return Ok(Text::Mapped(None));
        }
        // SAFETY: the map is read-only and only read while it lives. A file truncated by
        // another process meanwhile faults (SIGBUS): the hazard `LibSvmOptions::map_file`
        // documents, which is why mapping is opt-in.
        let m = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| DataError::io(f, e))?;
        Ok(Text::Mapped(Some(m)))
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Text::Read(v) => v,
            Text::Mapped(m) => m.as_deref().unwrap_or(&[]),
        }
    }
}

/// Parse LibSVM text held in memory (`name` is used in error messages).
pub fn parse_libsvm_bytes(bytes: &[u8], name: &str, opts: &LibSvmOptions) -> Result<LibSvmData> {
    parse_sources(&[(Path::new(name), bytes)], opts)
}

fn parse_sources(bufs: &[(&Path, &[u8])], opts: &LibSvmOptions) -> Result<LibSvmData> {
    let run = |base: IndexBase| -> Result<Rows> {
        let copts = opts.chunk_opts(base);
        let mut pieces = Vec::new();
        for (file, buf) in bufs {
            let p = parse_parallel(buf, &copts).map_err(|e| positioned(file, buf, 0, e))?;
            pieces.extend(p);
        }
        Ok(concat(pieces))
    };
    let mut rows = run(opts.index_base)?;
    let base = match opts.index_base {
        IndexBase::Auto => {
            let base = if rows.min_raw == 0 || rows.nnz() == 0 {
                IndexBase::Zero
            } else {
                IndexBase::One
            };
            let max_col = rows.max_raw - (base == IndexBase::One) as i64;
            let out_of_range = opts.num_features.is_some_and(|n| max_col >= n as i64);
            if out_of_range {
                // Parse again with the base fixed to get the position of the first bad index.
                run(base)?;
            }
            if base == IndexBase::One {
                rows.indices.par_iter_mut().for_each(|c| *c -= 1);
            }
            base
        }
        b => b,
    };
    let num_features = match opts.num_features {
        Some(n) => n,
        None => rows
            .indices
            .par_iter()
            .copied()
            .max()
            .map_or(0, |m| m as usize + 1),
    };
    Ok(LibSvmData {
        rows,
        num_features,
        index_base: base,
    })
}
