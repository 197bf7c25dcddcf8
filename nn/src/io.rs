//! Parameter files in the safetensors format (readable by PyTorch, `safetensors`, NumPy).
//!
//! ## File layout
//! - One tensor per parameter, named by its hierarchical name (`dense0.weight`), stored with its
//!   dtype and the shape it is **held** in. A row_sparse-gradient `Dense` holds its weight as
//!   `(in_units, units)`; its entry's metadata says `layout = in_out` (transpose it to get the
//!   Gluon/PyTorch `(units, in_units)` weight).
//! - A parameter with `stype = RowSparse` is saved densely by default; with
//!   [`SaveOptions::row_sparse_as_pairs`] it is saved as two tensors `<name>@indices` (int64,
//!   the non-zero rows) and `<name>@data` (`(k, ...)`), and loaded back into the same parameter.
//! - `__metadata__` holds `format = sparrow`, and per tensor `stype:<name>`, `layout:<name>` and
//!   `checksum:<name>` (a 64-bit hash of the bytes; safetensors itself has no checksum, so this
//!   is what detects corrupted data). Files without checksums (other tools) load unchecked.
//!
//! Writes are atomic (temporary file in the same folder, then rename). Loading validates
//! everything (file integrity, names, shapes, dtypes, row ids) before assigning anything, so a
//! failed load leaves the model unchanged; the error lists every mismatch.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors, View};
use sparrow_core::{DType, Error, NDArray, Result, SType};

use crate::block::Block;
use crate::param_dict::ParamDict;

/// How to write a parameter file.
#[derive(Debug, Clone, Copy, Default)]
pub struct SaveOptions {
    /// Save `stype = RowSparse` parameters as `<name>@indices` / `<name>@data` pairs.
    pub row_sparse_as_pairs: bool,
}

/// How to read a parameter file.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions {
    /// Parameters absent from the file keep their values instead of being an error.
    pub allow_missing: bool,
    /// Tensors in the file that match no parameter are skipped instead of being an error.
    pub ignore_extra: bool,
}

const OP_SAVE: &str = "save_parameters";
const OP_LOAD: &str = "load_parameters";

struct Tensor {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl View for &Tensor {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

fn st_dtype(d: DType) -> Dtype {
    match d {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::I64 => Dtype::I64,
        DType::I32 => Dtype::I32,
        DType::U8 => Dtype::U8,
    }
}

fn our_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::I64 => DType::I64,
        Dtype::I32 => DType::I32,
        Dtype::U8 => DType::U8,
        _ => return None,
    })
}

/// A 64-bit hash of bytes (word-wise multiply-xorshift; detects corruption, not tampering).
fn checksum(bytes: &[u8]) -> u64 {
    let mut h = 0x243F_6A88_85A3_08D3u64 ^ bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let x = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        h = (h ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^= h >> 29;
    }
    for &b in words.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01B3);
    }
    h
}

/// Save `params` to `path` (see the module docs for the layout).
pub fn save_params(params: &ParamDict, path: impl AsRef<Path>, opts: SaveOptions) -> Result<()> {
    let path = path.as_ref();
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    let mut meta: HashMap<String, String> = HashMap::new();
    meta.insert("format".into(), "sparrow".into());
    for (name, p) in params.iter() {
        let data = p.data().map_err(|e| {
            Error::arg(
                OP_SAVE,
                format!("parameter '{name}' has no value to save: {e}"),
            )
        })?;
        let stype = p.stype();
        meta.insert(
            format!("stype:{name}"),
            if stype == SType::RowSparse {
                "row_sparse"
            } else {
                "default"
            }
            .into(),
        );
        if p.fan_in_first() {
            meta.insert(format!("layout:{name}"), "in_out".into());
        }
        let shape = data.shape();
        if stype == SType::RowSparse && opts.row_sparse_as_pairs && !shape.is_empty() {
            // The rows holding a non-zero, as (row ids, their values).
            let (rows, values) = data.tostype(SType::RowSparse)?.row_sparse_parts()?;
            let idx_bytes = rows.iter().flat_map(|r| r.to_le_bytes()).collect();
            tensors.push((
                format!("{name}@indices"),
                Tensor {
                    dtype: Dtype::I64,
                    shape: vec![rows.len()],
                    bytes: idx_bytes,
                },
            ));
            tensors.push((
                format!("{name}@data"),
                Tensor {
                    dtype: st_dtype(values.dtype()),
                    shape: values.shape(),
                    bytes: values.to_le_bytes()?,
                },
            ));
            meta.insert(format!("rows:{name}"), shape[0].to_string());
        } else {
            tensors.push((
                name.to_string(),
                Tensor {
                    dtype: st_dtype(data.dtype()),
                    bytes: data.to_le_bytes()?,
                    shape,
                },
            ));
        }
    }
    for (n, t) in &tensors {
        meta.insert(
            format!("checksum:{n}"),
            format!("{:016x}", checksum(&t.bytes)),
        );
    }
    let file_name = path
        .file_name()
        .ok_or_else(|| Error::arg(OP_SAVE, format!("'{}' is not a file path", path.display())))?;
    let tmp = path.with_file_name(format!(
        ".{}.tmp.{}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let io = |e: &dyn std::fmt::Display, what: &str, p: &Path| {
        Error::arg(OP_SAVE, format!("{what} '{}': {e}", p.display()))
    };
    safetensors::serialize_to_file(
        tensors.iter().map(|(n, t)| (n.as_str(), t)),
        Some(meta),
        &tmp,
    )
    .map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(&e, "cannot write", &tmp)
    })?;
    if let Ok(f) = std::fs::File::open(&tmp) {
        let _ = f.sync_all();
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(&e, "cannot rename the temporary file onto", path)
    })
}

/// A validated value ready to assign.
struct Pending {
    name: String,
    value: NDArray,
}

fn tensor_array(st: &SafeTensors<'_>, fname: &str, problems: &mut Vec<String>) -> Option<NDArray> {
    let t = match st.tensor(fname) {
        Ok(t) => t,
        Err(e) => {
            problems.push(format!("tensor '{fname}': {e}"));
            return None;
        }
    };
    let Some(dt) = our_dtype(t.dtype()) else {
        problems.push(format!(
            "tensor '{fname}': unsupported dtype {:?}",
            t.dtype()
        ));
        return None;
    };
    NDArray::from_le_bytes(t.data(), dt, t.shape())
        .map_err(|e| problems.push(format!("tensor '{fname}': {e}")))
        .ok()
}

/// Load `path` into `params`: everything is validated first, and on any mismatch nothing is
/// assigned and the error lists every problem.
pub fn load_params(params: &ParamDict, path: impl AsRef<Path>, opts: LoadOptions) -> Result<()> {
    let path = path.as_ref();
    let bytes = std::fs::read(path)
        .map_err(|e| Error::arg(OP_LOAD, format!("cannot read '{}': {e}", path.display())))?;
    let bad_file = |msg: String| {
        Error::arg(
            OP_LOAD,
            format!(
                "'{}' is not a valid safetensors file (truncated or corrupted?): {msg}",
                path.display()
            ),
        )
    };
    let (_, header) = SafeTensors::read_metadata(&bytes).map_err(|e| bad_file(e.to_string()))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| bad_file(e.to_string()))?;
    let meta = header.metadata().clone().unwrap_or_default();
    let mut problems: Vec<String> = Vec::new();
    for (fname, t) in st.tensors() {
        if let Some(want) = meta.get(&format!("checksum:{fname}")) {
            let got = format!("{:016x}", checksum(t.data()));
            if &got != want {
                problems.push(format!(
                    "tensor '{fname}': checksum mismatch (file corrupted)"
                ));
            }
        }
    }
    if !problems.is_empty() {
        return Err(bad_file(problems.join("; ")));
    }
    let file_names: BTreeSet<String> = st.names().into_iter().map(String::from).collect();
    let mut used: BTreeSet<String> = BTreeSet::new();
    let mut pending: Vec<Pending> = Vec::new();
    for (name, p) in params.iter() {
        let (idx_name, data_name) = (format!("{name}@indices"), format!("{name}@data"));
        let value = if file_names.contains(name) {
            used.insert(name.to_string());
            tensor_array(&st, name, &mut problems)
        } else if file_names.contains(&idx_name) && file_names.contains(&data_name) {
            used.insert(idx_name.clone());
            used.insert(data_name.clone());
            let idx = tensor_array(&st, &idx_name, &mut problems);
            let data = tensor_array(&st, &data_name, &mut problems);
            match (idx, data) {
                (Some(i), Some(d)) => {
                    scatter_rows(name, &p.shape(), meta.get(&format!("rows:{name}")), &i, &d)
                        .map_err(|e| problems.push(e))
                        .ok()
                }
                _ => None,
            }
        } else {
            if !opts.allow_missing {
                problems.push(format!("parameter '{name}' is missing from the file"));
            }
            continue;
        };
        let Some(value) = value else { continue };
        let (ps, vs) = (p.shape(), value.shape());
        let fits = ps.len() == vs.len() && ps.iter().zip(&vs).all(|(&a, &b)| a == 0 || a == b);
        if !fits {
            problems.push(format!(
                "parameter '{name}': shape {ps:?} in the model, {vs:?} in the file"
            ));
        } else if value.dtype() != p.dtype() {
            problems.push(format!(
                "parameter '{name}': dtype {} in the model, {} in the file",
                p.dtype().name(),
                value.dtype().name()
            ));
        } else {
            pending.push(Pending {
                name: name.to_string(),
                value,
            });
        }
    }
    if !opts.ignore_extra {
        for extra in file_names.difference(&used) {
            problems.push(format!("tensor '{extra}' in the file matches no parameter"));
        }
    }
    if !problems.is_empty() {
        return Err(Error::arg(
            OP_LOAD,
            format!(
                "'{}': {} problem(s), nothing loaded: {}",
                path.display(),
                problems.len(),
                problems.join("; ")
            ),
        ));
    }
    for Pending { name, value } in pending {
        let p = params.get(&name).expect("validated above");
        p.set_data(&value)?;
    }
    Ok(())
}

/// Dense weight from `(indices, data)` pairs; every check returns a message.
fn scatter_rows(
    name: &str,
    pshape: &[usize],
    rows_meta: Option<&String>,
    idx: &NDArray,
    data: &NDArray,
) -> std::result::Result<NDArray, String> {
    let ids = idx
        .to_vec::<i64>()
        .map_err(|_| format!("'{name}@indices' must be int64"))?;
    let ds = data.shape();
    let rows = match rows_meta.and_then(|r| r.parse::<usize>().ok()) {
        Some(r) => r,
        None if !pshape.is_empty() && pshape[0] > 0 => pshape[0],
        None => {
            return Err(format!(
                "'{name}': row count unknown (no rows metadata, deferred shape)"
            ))
        }
    };
    if ds.is_empty() || ds[0] != ids.len() {
        return Err(format!(
            "'{name}@data' shape {ds:?} does not hold {} rows",
            ids.len()
        ));
    }
    if ids.windows(2).any(|w| w[0] >= w[1]) || ids.iter().any(|&r| r < 0 || r as usize >= rows) {
        return Err(format!(
            "'{name}@indices' must be sorted, unique and in [0, {rows})"
        ));
    }
    let mut shape = ds.clone();
    shape[0] = rows;
    NDArray::row_sparse_from_arrays(data, ids, &shape)
        .and_then(|rs| rs.tostype(SType::Dense))
        .map_err(|e| e.to_string())
}

/// Parameter files for any [`Block`]: `net.save_parameters(path)` / `net.load_parameters(path)`.
pub trait BlockIo: Block {
    /// Save all parameters (row_sparse weights densely).
    fn save_parameters(&self, path: impl AsRef<Path>) -> Result<()> {
        save_params(&self.collect_params()?, path, SaveOptions::default())
    }
    /// Save with options.
    fn save_parameters_with(&self, path: impl AsRef<Path>, opts: SaveOptions) -> Result<()> {
        save_params(&self.collect_params()?, path, opts)
    }
    /// Load all parameters; any mismatch is an error and nothing is changed.
    fn load_parameters(&self, path: impl AsRef<Path>) -> Result<()> {
        load_params(&self.collect_params()?, path, LoadOptions::default())
    }
    /// Load with `allow_missing` / `ignore_extra`.
    fn load_parameters_with(&self, path: impl AsRef<Path>, opts: LoadOptions) -> Result<()> {
        load_params(&self.collect_params()?, path, opts)
    }
}

impl<B: Block + ?Sized> BlockIo for B {}
