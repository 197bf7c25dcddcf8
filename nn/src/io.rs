//! Parameter files in the safetensors format (readable by PyTorch, `safetensors`, NumPy).
//!
//! ## File layout
//! - One tensor per parameter, named by its hierarchical name (`dense0.weight`), stored with its
//!   dtype and the shape it is **held** in. A `Dense` holds its weight as `(in_units, units)`
//!   (whatever its gradient's storage type; see [`crate::Dense`]); its entry's metadata says
//!   `layout = in_out` (transpose it to get the Gluon/PyTorch `(units, in_units)` weight).
//! - A parameter with `stype = RowSparse` is saved densely by default; with
//!   [`SaveOptions::row_sparse_as_pairs`] it is saved as two tensors `<name>@indices` (int64,
//!   the non-zero rows) and `<name>@data` (`(k, ...)`), and loaded back into the same parameter.
//! - `__metadata__` holds `format = sparrow`, `format_version = 2`, per tensor `stype:<name>`,
//!   `layout:<name>` and `checksum:<name>` (a 64-bit hash of the bytes,
//!   [`sparrow_core::fsio::checksum64`]; safetensors itself has no checksum, so this is what
//!   detects corrupted data), `rows:<name>` for row_sparse pairs, and `meta_checksum`, the
//!   same hash over every other metadata pair, so a corrupted row count or layout is caught
//!   as a corrupted tensor is. Version 2 files must carry every checksum. Files written before
//!   version 2 (no `format_version`, no `meta_checksum`) still load, their tensors checked;
//!   files of other tools (no checksums) load unchecked.
//!
//! Writes go through [`sparrow_core::fsio::write_atomic`] (a unique temporary in the same
//! folder, fsynced, renamed, folder fsynced), so concurrent saves of one path never collide
//! and a reader always finds a complete file. Loading validates everything (file integrity,
//! metadata, names, shapes, dtypes, layouts, row ids and row counts) before allocating from
//! or assigning anything, so a crafted file is an error, never a panic or an abort, and a
//! failed load leaves the model unchanged; the error names the file and lists every problem.
//!
//! ## Layouts
//! A weight saved with `layout = out_in` (or without a layout: Gluon, PyTorch, other tools,
//! and sparrow files written before `Dense` had one layout) and loaded into a parameter held
//! `(in, out)` (a `Dense` weight), or the reverse, is **transposed on load**: both hold the same
//! weight, so the layer computes the same outputs. A layout other than `in_out` / `out_in`, or
//! on a tensor that is not 2-D, is an error.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use safetensors::tensor::SafeTensors;
use sparrow_core::fsio::{checksum64, checksum_hex, checksum_pairs};
use sparrow_core::io::{dtype_from_safetensors, write_tensors, TensorBytes};
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

/// The metadata key holding [`checksum_pairs`] of every other metadata pair.
const META_CHECKSUM: &str = "meta_checksum";
/// The version this code writes: 2 added `format_version` and `meta_checksum`.
const FORMAT_VERSION: &str = "2";

/// One tensor of a parameter file, before it is written.
struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

/// Save `params` to `path` (see the module docs for the layout).
pub fn save_params(params: &ParamDict, path: impl AsRef<Path>, opts: SaveOptions) -> Result<()> {
    let path = path.as_ref();
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    let mut meta: HashMap<String, String> = HashMap::new();
    meta.insert("format".into(), "sparrow".into());
    meta.insert("format_version".into(), FORMAT_VERSION.into());
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
                    dtype: DType::I64,
                    shape: vec![rows.len()],
                    bytes: idx_bytes,
                },
            ));
            tensors.push((
                format!("{name}@data"),
                Tensor {
                    dtype: values.dtype(),
                    shape: values.shape(),
                    bytes: values.to_le_bytes()?,
                },
            ));
            meta.insert(format!("rows:{name}"), shape[0].to_string());
        } else {
            tensors.push((
                name.to_string(),
                Tensor {
                    dtype: data.dtype(),
                    bytes: data.to_le_bytes()?,
                    shape,
                },
            ));
        }
    }
    for (n, t) in &tensors {
        meta.insert(format!("checksum:{n}"), checksum_hex(checksum64(&t.bytes)));
    }
    // Last: it covers every other pair, the tensors' checksums included.
    let mc = checksum_hex(checksum_pairs(&meta, META_CHECKSUM));
    meta.insert(META_CHECKSUM.into(), mc);
    let views: Vec<TensorBytes<'_>> = tensors
        .iter()
        .map(|(n, t)| TensorBytes {
            name: n,
            dtype: t.dtype,
            shape: &t.shape,
            bytes: &t.bytes,
        })
        .collect();
    write_tensors(OP_SAVE, path, &views, meta)
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
    let Some(dt) = dtype_from_safetensors(t.dtype()) else {
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

/// The file's integrity: the metadata checksum (required from version 2 on) and every
/// tensor's checksum (required from version 2 on; checked when present in older files).
fn check_integrity(st: &SafeTensors<'_>, meta: &HashMap<String, String>) -> Vec<String> {
    let mut problems = Vec::new();
    let ours = meta.get("format").is_some_and(|f| f == "sparrow");
    let version = meta.get("format_version");
    let strict = match version.map(String::as_str) {
        None => false,
        Some(FORMAT_VERSION) => true,
        Some(v) => {
            problems.push(format!(
                "format_version {v:?} is not one this sparrow reads (it writes {FORMAT_VERSION})"
            ));
            return problems;
        }
    };
    if strict || meta.contains_key(META_CHECKSUM) {
        let want = checksum_hex(checksum_pairs(meta, META_CHECKSUM));
        if meta.get(META_CHECKSUM) != Some(&want) {
            problems.push("metadata checksum mismatch (header corrupted)".into());
            return problems;
        }
    }
    for (fname, t) in st.tensors() {
        match meta.get(&format!("checksum:{fname}")) {
            Some(want) if *want != checksum_hex(checksum64(t.data())) => {
                problems.push(format!(
                    "tensor '{fname}': checksum mismatch (file corrupted)"
                ));
            }
            None if strict && ours => {
                problems.push(format!("tensor '{fname}': no checksum in a version 2 file"));
            }
            _ => {}
        }
    }
    problems
}

/// Whether a parameter holds its weight `(in, out)`, from a file's `layout:<name>` value
/// (absent: the Gluon/PyTorch `(out, in)`).
fn layout_in_out(name: &str, layout: Option<&String>) -> std::result::Result<bool, String> {
    match layout.map(String::as_str) {
        None | Some("out_in") => Ok(false),
        Some("in_out") => Ok(true),
        Some(other) => Err(format!("parameter '{name}': unknown layout {other:?}")),
    }
}

/// Load `path` into `params`: everything is validated first, and on any mismatch nothing is
/// assigned and the error lists every problem. A weight whose file layout differs from the
/// parameter's (`in_out` vs `out_in`, see the module docs) is transposed, not refused.
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
    let problems = check_integrity(&st, &meta);
    if !problems.is_empty() {
        return Err(bad_file(problems.join("; ")));
    }
    let mut problems: Vec<String> = Vec::new();
    let file_names: BTreeSet<String> = st.names().into_iter().map(String::from).collect();
    let mut used: BTreeSet<String> = BTreeSet::new();
    let mut pending: Vec<Pending> = Vec::new();
    for (name, p) in params.iter() {
        let (idx_name, data_name) = (format!("{name}@indices"), format!("{name}@data"));
        let file_in_out = match layout_in_out(name, meta.get(&format!("layout:{name}"))) {
            Ok(l) => l,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        let ps = p.shape();
        let transpose = file_in_out != p.fan_in_first();
        // The shape the file holds this parameter in, where the model knows it (0: deferred).
        let held = if transpose && ps.len() == 2 {
            vec![ps[1], ps[0]]
        } else {
            ps.clone()
        };
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
                    scatter_rows(name, &held, meta.get(&format!("rows:{name}")), &i, &d)
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
        let Some(mut value) = value else { continue };
        if transpose {
            if value.shape().len() != 2 || ps.len() != 2 {
                problems.push(format!(
                    "parameter '{name}': layout {} in the file, {} in the model, but the \
                     weight is not 2-D ({:?} in the file)",
                    if file_in_out { "in_out" } else { "out_in" },
                    if p.fan_in_first() { "in_out" } else { "out_in" },
                    value.shape()
                ));
                continue;
            }
            match value.transpose(None) {
                Ok(t) => value = t,
                Err(e) => {
                    problems.push(format!("parameter '{name}': cannot transpose: {e}"));
                    continue;
                }
            }
        }
        let vs = value.shape();
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
        let Some(p) = params.get(&name) else {
            return Err(Error::arg(
                OP_LOAD,
                format!("parameter '{name}' disappeared while loading"),
            ));
        };
        p.set_data(&value)?;
    }
    Ok(())
}

/// Dense weight from `(indices, data)` pairs; every check returns a message. `held`: the
/// parameter's shape in the file's layout (a 0 dim is deferred). The row count comes from the
/// model where it knows it, and the file's `rows:<name>` must agree; only a deferred row count
/// is taken from the file, and then the dense buffer is reserved fallibly, so an absurd count
/// is an error instead of an allocation failure that aborts the process.
fn scatter_rows(
    name: &str,
    held: &[usize],
    rows_meta: Option<&String>,
    idx: &NDArray,
    data: &NDArray,
) -> std::result::Result<NDArray, String> {
    let ids = idx
        .to_vec::<i64>()
        .map_err(|_| format!("'{name}@indices' must be int64"))?;
    let ds = data.shape();
    let file_rows = match rows_meta {
        Some(r) => Some(
            r.parse::<usize>()
                .map_err(|_| format!("'{name}': rows metadata {r:?} is not a row count"))?,
        ),
        None => None,
    };
    let model_rows = held.first().copied().filter(|&r| r > 0);
    let rows = match (model_rows, file_rows) {
        (Some(m), Some(f)) if m != f => {
            return Err(format!(
                "'{name}': the file holds {f} rows, the model {m} (shape {held:?})"
            ))
        }
        (Some(m), _) => m,
        (None, Some(f)) => f,
        (None, None) => {
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
    if held.len() == ds.len()
        && held[1..]
            .iter()
            .zip(&ds[1..])
            .any(|(&h, &d)| h != 0 && h != d)
    {
        return Err(format!(
            "'{name}@data' rows of shape {:?}, the model's are {:?}",
            &ds[1..],
            &held[1..]
        ));
    }
    if ids.windows(2).any(|w| w[0] >= w[1]) || ids.iter().any(|&r| r < 0 || r as usize >= rows) {
        return Err(format!(
            "'{name}@indices' must be sorted, unique and in [0, {rows})"
        ));
    }
    let mut shape = ds.clone();
    shape[0] = rows;
    let elem = data.dtype().size_of();
    let row_bytes = ds[1..].iter().try_fold(elem, |a, &d| a.checked_mul(d));
    let total = row_bytes.and_then(|b| b.checked_mul(rows));
    let (Some(row_bytes), Some(total)) = (row_bytes, total) else {
        return Err(format!(
            "'{name}': shape {shape:?} has more elements than memory"
        ));
    };
    let mut dense: Vec<u8> = Vec::new();
    dense
        .try_reserve_exact(total)
        .map_err(|e| format!("'{name}': cannot allocate {total} bytes for shape {shape:?}: {e}"))?;
    dense.resize(total, 0);
    let src = data.to_le_bytes().map_err(|e| e.to_string())?;
    for (k, &r) in ids.iter().enumerate() {
        let r = r as usize;
        dense[r * row_bytes..(r + 1) * row_bytes]
            .copy_from_slice(&src[k * row_bytes..(k + 1) * row_bytes]);
    }
    NDArray::from_le_bytes(&dense, data.dtype(), &shape).map_err(|e| e.to_string())
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
