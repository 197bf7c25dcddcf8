//! File-backed arrays: `.npy`, safetensors and raw files opened as dense arrays without reading
//! them into memory (numpy's `np.load(mmap_mode=...)`, `np.memmap`).
//!
//! The elements stay in the file's pages, which the kernel reads on first touch and may evict
//! again, so an array larger than RAM costs only the pages an operation reads. Every operator
//! works on such an array unchanged (a file-backed buffer is host memory to the CPU kernels);
//! an operator's output is a new array in memory. Writes to the array itself (optimizer
//! updates, [`NDArray::write_rows`]) follow the [`MapMode`]: they reach the file only in
//! [`MapMode::ReadWrite`], where [`NDArray::flush`] makes them durable.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{ArrayData, NDArray};
use crate::cpu::mapped::{MapMode, MappedFile};
use crate::cpu::{with_buffer, CpuStorage, HostBuf, HostElement};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ndarray::checked_size;
use crate::storage::Storage;

/// A dense array over `count` elements of `dtype` at byte `offset` of `file`.
fn array_over(
    op: &'static str,
    file: &Arc<MappedFile>,
    offset: usize,
    dtype: DType,
    shape: &[usize],
) -> Result<NDArray> {
    let count = checked_size(op, shape)?;
    file.check_range(op, offset, count, dtype.size_of())?;
    fn wrap<T: HostElement>(f: &Arc<MappedFile>, offset: usize, n: usize) -> CpuStorage {
        T::host_buffer(HostBuf::mapped(f.clone(), offset, n))
    }
    let buf = match dtype {
        DType::F32 => wrap::<f32>(file, offset, count),
        DType::F64 => wrap::<f64>(file, offset, count),
        DType::I64 => wrap::<i64>(file, offset, count),
        DType::I32 => wrap::<i32>(file, offset, count),
        DType::U8 => wrap::<u8>(file, offset, count),
        DType::F16 => wrap::<half::f16>(file, offset, count),
        DType::BF16 => wrap::<half::bf16>(file, offset, count),
    };
    NDArray::from_buffer(buf, shape)
}

/// The mapped file and byte offset under a buffer, when it lives in one.
fn mapped_range(buf: &Storage) -> Option<(Arc<MappedFile>, usize)> {
    match buf {
        Storage::Cpu(c) => with_buffer!(c, v => v.mapped_file().map(|(f, o)| (f.clone(), o))),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// Rows an in-place writer is about to change.
pub(crate) enum JournalRows<'a> {
    /// These row ids (a lazy row_sparse update); ids outside the array are skipped.
    Ids(&'a [i64]),
    /// A run of rows (`write_rows`; a dense update passes every row).
    Range(std::ops::Range<usize>),
}

/// Save in the undo journal of the read-write file under `buf` (if it is one) the rows an
/// in-place writer named `op` is about to change, of the array's `nrows` (a run of rows in
/// ranges of about 1 MiB). Nothing for an array in memory.
pub(crate) fn journal_rows(
    op: &'static str,
    buf: &Storage,
    nrows: usize,
    rows: JournalRows<'_>,
) -> Result<()> {
    let Some((file, offset)) = mapped_range(buf) else {
        return Ok(());
    };
    let bytes = buf.nbytes();
    if file.mode() != MapMode::ReadWrite || nrows == 0 || bytes == 0 {
        return Ok(());
    }
    let row = bytes / nrows;
    match rows {
        JournalRows::Ids(ids) => file.save_ranges(
            op,
            &mut ids
                .iter()
                .filter_map(|&r| usize::try_from(r).ok().filter(|&r| r < nrows))
                .map(|r| (offset + r * row, row)),
        ),
        JournalRows::Range(run) => {
            let end = run.end.min(nrows);
            let per = ((1usize << 20) / row.max(1)).max(1);
            file.save_ranges(
                op,
                &mut (run.start..end)
                    .step_by(per)
                    .map(|r0| (offset + r0 * row, per.min(end - r0) * row)),
            )
        }
    }
}

impl NDArray {
    /// The mapped file under this dense array, its byte offset there and its byte length;
    /// `None` for an array in memory or a sparse one.
    pub(super) fn mapping(&self) -> Option<(Arc<MappedFile>, usize, usize)> {
        let d = self.read();
        let ArrayData::Dense(dd) = &*d else {
            return None;
        };
        mapped_range(&dd.buf).map(|(f, o)| (f, o, dd.buf.nbytes()))
    }

    /// Open the `.npy` file at `path` as a dense array whose elements stay in the file
    /// (`np.load(path, mmap_mode=...)`): `ReadOnly` is `'r'`, `CopyOnWrite` is `'c'`,
    /// `ReadWrite` is `'r+'`.
    ///
    /// Errors name the file: missing, not `.npy`, a dtype sparrow does not hold (big-endian,
    /// complex, ...), Fortran order, or shorter than its header's shape needs.
    pub fn open_npy(path: impl AsRef<Path>, mode: MapMode) -> Result<NDArray> {
        const OP: &str = "open_npy";
        let path = path.as_ref();
        let file = MappedFile::open(OP, path, mode)?;
        let h = crate::npy::parse_header(file.bytes()).map_err(|m| Error::file(OP, path, m))?;
        array_over(OP, &file, h.data_offset, h.dtype, &h.shape)
    }

    /// Create a `.npy` file at `path` holding zeros of `shape` and `dtype`, and open it
    /// read-write (`np.lib.format.open_memmap(path, 'w+', ...)`). The file is sparse: its pages
    /// take disk space only once written. Creation is atomic: the header and length go to a
    /// temporary that is renamed over `path`, so `path` is never a half-written file.
    pub fn create_npy(path: impl AsRef<Path>, shape: &[usize], dtype: DType) -> Result<NDArray> {
        const OP: &str = "create_npy";
        let path = path.as_ref();
        let count = checked_size(OP, shape)?;
        let header = crate::npy::header_bytes(shape, dtype).map_err(|e| Error::arg(OP, e))?;
        let total = count
            .checked_mul(dtype.size_of())
            .and_then(|b| b.checked_add(header.len()))
            .ok_or_else(|| Error::arg(OP, format!("{shape:?} of {dtype:?} overflows a size")))?;
        crate::fsio::write_atomic(path, |w| {
            use std::io::Write;
            // Sized before the header is flushed from the buffer: the header still lands at 0.
            w.get_ref().set_len(total as u64)?;
            w.write_all(&header)
        })
        .map_err(|e| Error::file(OP, path, format!("cannot create: {e}")))?;
        let file = MappedFile::open(OP, path, MapMode::ReadWrite)?;
        array_over(OP, &file, header.len(), dtype, shape)
    }

    /// Open `shape` elements of `dtype` at byte `offset` of the raw file at `path`
    /// (`np.memmap(path, dtype, mode, offset, shape)`), little-endian, C order. The file may
    /// be longer than the array; it may not be shorter. `offset` must be a multiple of the
    /// element size.
    pub fn open_raw(
        path: impl AsRef<Path>,
        dtype: DType,
        shape: &[usize],
        offset: usize,
        mode: MapMode,
    ) -> Result<NDArray> {
        const OP: &str = "open_raw";
        let path = path.as_ref();
        let file = MappedFile::open(OP, path, mode)?;
        array_over(OP, &file, offset, dtype, shape)
    }

    /// Every tensor of the safetensors file at `path`, in file order, as dense arrays over one
    /// shared mapping of the file. Tensors of a dtype sparrow does not hold (f16, bf16, bool,
    /// ...) are an error naming the tensor, as is a tensor whose data is not aligned for its
    /// element type.
    pub fn open_safetensors(
        path: impl AsRef<Path>,
        mode: MapMode,
    ) -> Result<Vec<(String, NDArray)>> {
        const OP: &str = "open_safetensors";
        let path = path.as_ref();
        let file = MappedFile::open(OP, path, mode)?;
        let st = safetensors::SafeTensors::deserialize(file.bytes())
            .map_err(|e| Error::file(OP, path, format!("not a safetensors file: {e}")))?;
        let base = file.bytes().as_ptr() as usize;
        let mut tensors: Vec<(String, safetensors::tensor::TensorView<'_>)> =
            st.tensors().into_iter().collect();
        tensors.sort_by_key(|(_, t)| t.data().as_ptr() as usize);
        let mut out = Vec::with_capacity(tensors.len());
        for (name, t) in tensors {
            use safetensors::Dtype as S;
            let dtype = match t.dtype() {
                S::F32 => DType::F32,
                S::F64 => DType::F64,
                S::I64 => DType::I64,
                S::I32 => DType::I32,
                S::U8 => DType::U8,
                other => {
                    return Err(Error::file(
                        OP,
                        path,
                        format!("tensor '{name}' has dtype {other:?} (sparrow holds f32, f64, i64, i32, u8)"),
                    ))
                }
            };
            let offset = t.data().as_ptr() as usize - base;
            let a = array_over(OP, &file, offset, dtype, t.shape())
                .map_err(|e| Error::file(OP, path, format!("tensor '{name}': {e}")))?;
            out.push((name, a));
        }
        Ok(out)
    }

    /// The file holding this array's elements and how it is mapped, when it is a file-backed
    /// dense array (`None` for an array in memory, including every operator's output).
    pub fn backing_file(&self) -> Option<(PathBuf, MapMode)> {
        self.mapping()
            .map(|(f, _, _)| (f.path().to_path_buf(), f.mode()))
    }

    /// Declare that this file-backed array is read a few rows at a time in no order (an
    /// embedding or sparse-input table): the kernel then maps only the pages touched, without
    /// read-ahead or the 64 KiB fault-around it does by default, so resident memory follows
    /// the rows used. `false` restores the default for scans. No effect on an array in memory.
    ///
    /// See also [`NDArray::release_pages`], for a pass over a file larger than memory.
    pub fn advise_random_access(&self, random: bool) {
        if let Some((f, _, _)) = self.mapping() {
            f.advise_random(random);
        }
    }

    /// Drop this file-backed array's pages from the process's resident set (`MADV_DONTNEED`;
    /// the data stays in the file and the page cache, which the kernel may reclaim), so a pass
    /// over a file larger than memory, a block at a time, keeps its working set to the blocks
    /// in use: call it on each block (a [`NDArray::mapped_rows`] view) once it is done. Nothing
    /// happens for an array in memory or a copy-on-write array (that would discard its writes);
    /// a read-write array's changes stay in the file.
    pub fn release_pages(&self) {
        if let Some((f, offset, bytes)) = self.mapping() {
            f.release(offset, bytes);
        }
    }

    /// Write this file-backed array's changed pages to its file and wait for the disk (`msync`;
    /// numpy's `memmap.flush`). A read-only array has nothing to write. Errors: an array in
    /// memory, a copy-on-write array (its writes never reach the file), or a file whose size
    /// changed since it was opened.
    ///
    /// For a read-write array this is a checkpoint: the updates and `write_rows` since the last
    /// flush saved the old contents of the rows they changed in `<file>.undo`, which the flush
    /// empties; a process killed before the next flush leaves that journal, and opening the
    /// file read-write again restores the rows, so the file is this flush's state again. The
    /// whole file is written back (every array over it).
    pub fn flush(&self) -> Result<()> {
        const OP: &str = "flush";
        let (f, _, _) = self.mapping().ok_or_else(|| {
            Error::arg(
                OP,
                "the array is in memory, not backed by a file (open_npy, create_npy, open_raw)",
            )
        })?;
        // The whole file: the undo journal (see `cpu/journal.rs`) is per file, and emptying it
        // is only right once every range it guards is durable.
        f.flush_all(OP)
    }

    /// Overwrite rows `start..start + src.shape()[0]` of this dense array with `src`, in place
    /// (`a[start:start + len(src)] = src`): every handle of this array sees the new rows, and a
    /// [`MapMode::ReadWrite`] file-backed array writes them to its file (only those pages are
    /// touched). `src` is dense, of the same dtype, with this array's trailing dimensions. Not
    /// recorded by autograd.
    ///
    /// A file-backed array whose buffer another array shares (a clone made by `reshape`, a
    /// handle saved for backward) is an error rather than a silent copy of the file.
    pub fn write_rows(&self, start: usize, src: &NDArray) -> Result<()> {
        const OP: &str = "write_rows";
        let s = src.dense_data()?;
        let mut d = self.write();
        let shape = d.shape().to_vec();
        let dd = d
            .as_dense_mut()
            .ok_or_else(|| Error::stype(OP, "needs a dense array to write into"))?;
        if shape.is_empty() || s.shape.len() != shape.len() || s.shape[1..] != shape[1..] {
            return Err(Error::shape(
                OP,
                format!(
                    "rows of shape {:?} do not fit an array of shape {shape:?}",
                    s.shape
                ),
            ));
        }
        let end = start.checked_add(s.shape[0]).filter(|&e| e <= shape[0]);
        if end.is_none() {
            return Err(Error::index(
                OP,
                format!(
                    "rows {start}..{} of an array with {} rows",
                    start.saturating_add(s.shape[0]),
                    shape[0]
                ),
            ));
        }
        let row: usize = shape[1..].iter().product();
        let rows = JournalRows::Range(start..start + s.shape[0]);
        journal_rows(OP, &dd.buf, shape[0], rows)?;
        dd.buf.write_at(start * row, &s.buf)
    }

    /// Rows `start..end` of this file-backed dense array as an array over the same pages (no
    /// copy: `a[start:end]` of a numpy memmap). Reading it reads those rows of the file; writing
    /// it follows the mapping's mode. An array in memory is an error (use `slice_axis`).
    pub fn mapped_rows(&self, start: usize, end: usize) -> Result<NDArray> {
        const OP: &str = "mapped_rows";
        let d = self.read();
        let ArrayData::Dense(dd) = &*d else {
            return Err(Error::stype(OP, "needs a dense file-backed array"));
        };
        let shape = dd.shape.to_vec();
        let (file, offset) = mapped_range(&dd.buf)
            .ok_or_else(|| Error::arg(OP, "the array is in memory, not backed by a file"))?;
        if shape.is_empty() || start > end || end > shape[0] {
            return Err(Error::index(
                OP,
                format!("rows {start}..{end} of an array of shape {shape:?}"),
            ));
        }
        let row: usize = shape[1..].iter().product();
        let size = dd.buf.dtype().size_of();
        let mut out_shape = shape.clone();
        out_shape[0] = end - start;
        array_over(
            OP,
            &file,
            offset + start * row * size,
            dd.buf.dtype(),
            &out_shape,
        )
    }
}
