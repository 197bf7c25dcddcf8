//! Save and load any [`NDArray`] — dense, csr or row_sparse, of any dtype — in one call, as
//! MXNet's `nd.save` / `nd.load` do for a dict or a list of arrays.
//!
//! ```
//! use sparrow_core::{io, NDArray, SType};
//! let dir = std::env::temp_dir().join(format!("sparrow-io-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let w = NDArray::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
//! let x = NDArray::csr_from_parts(vec![5.0f64], vec![2], vec![0, 0, 1], [2, 3]).unwrap();
//! for file in ["arrays.safetensors", "arrays.npz"] {
//!     let path = dir.join(file);
//!     io::save(&path, &[("w", &w), ("x", &x)]).unwrap();
//!     let back = io::load(&path).unwrap();
//!     assert_eq!(back[1].0, "x");
//!     assert_eq!(back[1].1.stype(), SType::Csr);
//!     assert_eq!(back[1].1.to_f64_vec(), x.to_f64_vec());
//! }
//! std::fs::remove_dir_all(&dir).unwrap();
//! ```
//!
//! The format follows the file's extension: `.safetensors` or `.npz`. Loaded arrays keep
//! their storage type, dtype and shape, and are in host memory (move them with
//! [`NDArray::to_device`]); an array on a device is copied to the host to be saved.
//!
//! ## Dicts and lists
//! [`save`] writes named arrays and [`load`] returns them in the order saved. [`save_list`]
//! names its arrays `arr_0`, `arr_1`, ... (what `np.savez(f, *arrays)` does) and
//! [`load_list`] returns them in that order. Names are non-empty, hold no control character
//! and are not `__metadata__`; no two arrays may store a tensor under the same name (a
//! sparse `w` and a dense `w/data` collide).
//!
//! ## safetensors layout
//! - A dense array `NAME` is the tensor `NAME`.
//! - A csr array `NAME` is three tensors: `NAME/data` (the nnz values, the array's dtype),
//!   `NAME/indices` (int64 column ids, nnz) and `NAME/indptr` (int64, rows + 1).
//! - A row_sparse array `NAME` is two tensors: `NAME/data` (`[k, shape[1..]...]`, the stored
//!   rows) and `NAME/indices` (int64, the k sorted row ids).
//! - `__metadata__` holds `format = sparrow-ndarrays`, `format_version = 1`, `names` (a JSON
//!   list of the array names in order), per array `stype:NAME` (`default`, `csr` or
//!   `row_sparse`) and `shape:NAME` (a JSON list, the logical shape), per tensor
//!   `checksum:TENSOR` ([`crate::fsio::checksum64`] of its bytes, 16 hex digits), and
//!   `meta_checksum` ([`crate::fsio::checksum_pairs`] of every other metadata pair).
//!
//! Any safetensors file of another tool loads too: each tensor as a dense array, in file
//! order (checksums are verified where such a file carries sparrow's).
//!
//! ## npz layout
//! An `.npz` is a zip of `.npy` members, as `np.savez` writes it; `np.load` reads every file
//! this module writes. Index members are int64.
//! - A dense array `NAME` is the member `NAME.npy`.
//! - A csr array `NAME` is SciPy's `save_npz` layout under the prefix `NAME/`:
//!   `NAME/indices.npy`, `NAME/indptr.npy`, `NAME/format.npy` (the byte string `b'csr'`),
//!   `NAME/shape.npy` (int64, 2) and `NAME/data.npy`.
//! - A row_sparse array `NAME` is SciPy's **bsr** layout with blocks of one full row
//!   (blocksize `(1, C)`, `C` the product of `shape[1..]`): `NAME/data.npy` is
//!   `(k, 1, C)` (the stored rows), `NAME/indices.npy` k zeros (each block's block-column),
//!   `NAME/indptr.npy` (rows + 1; row `r` is stored when `indptr[r + 1] - indptr[r] == 1`),
//!   `NAME/format.npy` `b'bsr'`, `NAME/shape.npy` `(rows, C)`, and, when the array is not
//!   2-D, `NAME/sparrow_shape.npy` (int64, the logical shape).
//!
//! [`save_list`] of exactly one sparse array writes those members without a prefix, which
//! is exactly `scipy.sparse.save_npz`'s file: `scipy.sparse.load_npz` reads a csr array as a
//! `csr_matrix` and a 2-D row_sparse array as a `bsr_matrix` of the same value. A member
//! of a dict is read in Python with `z = np.load(f)` and
//! `scipy.sparse.csr_matrix((z['x/data'], z['x/indices'], z['x/indptr']), shape=z['x/shape'])`
//! (`bsr_matrix` for row_sparse). In a dict, a dense array may not be named `format` or end
//! in `/format` (that member marks a sparse array).
//!
//! [`load`] reads every file this module writes, any `np.savez` / `np.savez_compressed`
//! file of the dtypes sparrow holds, and SciPy `save_npz` files (compressed or not) in the csr
//! format, or bsr with one-row blocks (as row_sparse). SciPy's csr must have sorted, unique
//! column ids per row (`m.sum_duplicates()` before `save_npz`), as sparrow's csr does.
//!
//! ## Reliability
//! Every write goes through [`crate::fsio::write_atomic`]: readers see the old file or the
//! new one, never a part. Every load checks the file before building any array:
//! safetensors tensors against their checksums and the metadata against `meta_checksum`;
//! npz members against their zip CRC-32 (and each member's name in the zip's local header
//! against its central directory entry); then every component's dtype, shape and length and
//! every sparse invariant (non-decreasing `indptr` from 0 to nnz, column ids in range and
//! sorted unique per row, row ids sorted unique and in range). A file that fails any check
//! is an [`Error::File`] naming the file and the array or tensor, never a panic.

mod npz;
mod parts;
mod safetensors_file;

/// The safetensors writer and dtype map nn's parameter files share with this module.
pub use safetensors_file::{our_dtype as dtype_from_safetensors, write_tensors, TensorBytes};

use std::collections::HashSet;
use std::path::Path;

use crate::{Error, NDArray, Result};

pub(crate) use parts::{Component, Parts};

const OP_SAVE: &str = "io::save";
const OP_LOAD: &str = "io::load";

/// How [`save_with`] and [`save_list_with`] write a file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SaveOptions {
    /// Deflate the members of an `.npz` file (`np.savez_compressed`, SciPy's default
    /// `save_npz(compressed=True)`); stored uncompressed otherwise (`np.savez`). No effect on
    /// safetensors, which has no compression.
    pub npz_deflate: bool,
}

/// The file formats, chosen by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    SafeTensors,
    Npz,
}

fn format_of(op: &'static str, path: &Path) -> Result<Format> {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("safetensors") => Ok(Format::SafeTensors),
        Some(e) if e.eq_ignore_ascii_case("npz") => Ok(Format::Npz),
        _ => Err(Error::file(
            op,
            path,
            "unknown file format: the extension must be .safetensors or .npz",
        )),
    }
}

/// The name of a list's `i`-th array (NumPy's `np.savez(f, *arrays)` names).
fn list_name(i: usize) -> String {
    format!("arr_{i}")
}

/// Save named arrays to `path` (`.safetensors` or `.npz`, see the [module docs](self) for
/// the layouts), replacing the file atomically: MXNet's `nd.save(path, dict)`.
pub fn save(path: impl AsRef<Path>, arrays: &[(&str, &NDArray)]) -> Result<()> {
    save_with(path, arrays, SaveOptions::default())
}

/// [`save`] with [`SaveOptions`].
pub fn save_with(
    path: impl AsRef<Path>,
    arrays: &[(&str, &NDArray)],
    opts: SaveOptions,
) -> Result<()> {
    let path = path.as_ref();
    let named: Vec<(String, &NDArray)> = arrays.iter().map(|&(n, a)| (n.to_string(), a)).collect();
    write(path, &named, false, opts)
}

/// Save a list of arrays to `path`, named `arr_0`, `arr_1`, ...: MXNet's
/// `nd.save(path, list)`. One sparse array saved to an `.npz` is written in exactly
/// `scipy.sparse.save_npz`'s layout (see the [module docs](self)).
pub fn save_list(path: impl AsRef<Path>, arrays: &[&NDArray]) -> Result<()> {
    save_list_with(path, arrays, SaveOptions::default())
}

/// [`save_list`] with [`SaveOptions`].
pub fn save_list_with(
    path: impl AsRef<Path>,
    arrays: &[&NDArray],
    opts: SaveOptions,
) -> Result<()> {
    let path = path.as_ref();
    let named: Vec<(String, &NDArray)> = arrays
        .iter()
        .enumerate()
        .map(|(i, &a)| (list_name(i), a))
        .collect();
    write(path, &named, true, opts)
}

/// Check the names, split every array into its parts and write the file.
fn write(path: &Path, arrays: &[(String, &NDArray)], list: bool, opts: SaveOptions) -> Result<()> {
    let format = format_of(OP_SAVE, path)?;
    let mut seen = HashSet::new();
    for (name, _) in arrays {
        check_name(name).map_err(|m| Error::file(OP_SAVE, path, m))?;
        if !seen.insert(name.as_str()) {
            return Err(Error::file(
                OP_SAVE,
                path,
                format!("two arrays are named '{name}'"),
            ));
        }
    }
    let mut parts = Vec::with_capacity(arrays.len());
    for (name, a) in arrays {
        let p =
            Parts::of(a).map_err(|e| Error::file(OP_SAVE, path, format!("array '{name}': {e}")))?;
        parts.push((name.clone(), p));
    }
    match format {
        Format::SafeTensors => safetensors_file::write(path, &parts),
        Format::Npz => npz::write(path, &parts, list, opts.npz_deflate),
    }
}

/// Why `name` cannot name an array, if it cannot.
fn check_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err("an array name is empty".into());
    }
    if name.chars().any(char::is_control) {
        return Err(format!("array name {name:?} holds a control character"));
    }
    if name == "__metadata__" {
        return Err("'__metadata__' is reserved by safetensors".into());
    }
    Ok(())
}

/// Every array of the file at `path`, with its name, in the order saved: MXNet's
/// `nd.load(path)` of a dict. The format follows the extension; see the [module docs](self)
/// for what is read and what is checked. A list file's arrays come back named `arr_0`, ...
pub fn load(path: impl AsRef<Path>) -> Result<Vec<(String, NDArray)>> {
    let path = path.as_ref();
    match format_of(OP_LOAD, path)? {
        Format::SafeTensors => safetensors_file::read(path),
        Format::Npz => npz::read(path),
    }
}

/// The arrays of a file written by [`save_list`] (or by `np.savez(f, *arrays)`, or a SciPy
/// `save_npz` file: a list of one), in order: MXNet's `nd.load(path)` of a list. A file
/// whose arrays are not named `arr_0` ... `arr_{n-1}` is an error (read it with [`load`]).
pub fn load_list(path: impl AsRef<Path>) -> Result<Vec<NDArray>> {
    let path = path.as_ref();
    let named = load(path)?;
    let n = named.len();
    let mut slots: Vec<Option<NDArray>> = vec![None; n];
    for (name, a) in named {
        let i = name
            .strip_prefix("arr_")
            .and_then(|i| i.parse::<usize>().ok())
            .filter(|&i| i < n && list_name(i) == name);
        match i {
            Some(i) if slots[i].is_none() => slots[i] = Some(a),
            _ => {
                return Err(Error::file(
                    OP_LOAD,
                    path,
                    format!(
                        "not a list of {n} arrays: found '{name}' (a list names its arrays \
                         arr_0 .. arr_{}; read named arrays with io::load)",
                        n.saturating_sub(1)
                    ),
                ))
            }
        }
    }
    // Every slot is filled: n distinct indices below n.
    Ok(slots.into_iter().flatten().collect())
}
