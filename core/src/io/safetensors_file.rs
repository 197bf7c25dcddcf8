//! The safetensors side of [`crate::io`]: sparse arrays as named component tensors, their
//! storage types and shapes in `__metadata__`, every tensor and the metadata checksummed.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors, View};

use super::{Component, Parts, OP_LOAD, OP_SAVE};
use crate::fsio::{checksum64, checksum_hex, checksum_pairs};
use crate::{DType, Error, NDArray, Result, SType};

/// `format` of files this module writes.
const FORMAT: &str = "sparrow-ndarrays";
/// `format_version` this module writes and reads.
const VERSION: &str = "1";
/// The metadata key holding [`checksum_pairs`] of every other pair.
const META_CHECKSUM: &str = "meta_checksum";

/// The safetensors dtype of a sparrow dtype (every sparrow dtype has one).
fn st_dtype(d: DType) -> Dtype {
    match d {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::I64 => Dtype::I64,
        DType::I32 => Dtype::I32,
        DType::U8 => Dtype::U8,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
    }
}

/// The sparrow dtype of a safetensors dtype, `None` for one sparrow does not hold.
pub fn our_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::I64 => DType::I64,
        Dtype::I32 => DType::I32,
        Dtype::U8 => DType::U8,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        _ => return None,
    })
}

fn stype_name(s: SType) -> &'static str {
    match s {
        SType::Dense => "default",
        SType::Csr => "csr",
        SType::RowSparse => "row_sparse",
    }
}

/// One tensor for [`write_tensors`]: its name, dtype, shape and little-endian bytes.
pub struct TensorBytes<'a> {
    /// The tensor's name in the file.
    pub name: &'a str,
    /// Its element type.
    pub dtype: DType,
    /// Its shape.
    pub shape: &'a [usize],
    /// Its elements, little-endian.
    pub bytes: &'a [u8],
}

/// A tensor's header entry without its bytes, so the header can be encoded on its own and
/// the tensors' bytes streamed after it (no copy of every array into one buffer).
struct HeaderOnly<'a>(&'a TensorBytes<'a>);

impl View for HeaderOnly<'_> {
    fn dtype(&self) -> Dtype {
        st_dtype(self.0.dtype)
    }
    fn shape(&self) -> &[usize] {
        self.0.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&[])
    }
    fn data_len(&self) -> usize {
        self.0.bytes.len()
    }
}

/// Write `tensors` and `meta` as a safetensors file at `path`, atomically
/// ([`crate::fsio::write_atomic`]): the header is encoded alone and the tensors' bytes are
/// streamed after it in the header's data order (whatever order the safetensors crate chose,
/// read back from its `data_offsets` and checked to be contiguous). Failures are
/// [`Error::File`] naming `op` and the file. nn's parameter files are written by it too.
pub fn write_tensors(
    op: &'static str,
    path: &Path,
    tensors: &[TensorBytes<'_>],
    meta: HashMap<String, String>,
) -> Result<()> {
    let fail = |e: &dyn std::fmt::Display| Error::file(op, path, e);
    let header =
        safetensors::serialize(tensors.iter().map(|t| (t.name, HeaderOnly(t))), Some(meta))
            .map_err(|e| fail(&format!("cannot encode the header: {e}")))?;
    let json: serde_json::Value = serde_json::from_slice(&header[8..])
        .map_err(|e| fail(&format!("cannot encode the header: {e}")))?;
    let mut order: Vec<(u64, &TensorBytes<'_>)> = Vec::with_capacity(tensors.len());
    for t in tensors {
        let begin = json[t.name]["data_offsets"][0]
            .as_u64()
            .ok_or_else(|| fail(&format!("no data offset for tensor '{}'", t.name)))?;
        order.push((begin, t));
    }
    // By (start, length): an empty tensor shares its start with the next tensor's.
    order.sort_by_key(|&(b, t)| (b, t.bytes.len()));
    let mut at = 0u64;
    for &(b, t) in &order {
        if b != at {
            return Err(fail(&"tensor data offsets are not contiguous"));
        }
        at += t.bytes.len() as u64;
    }
    crate::fsio::write_atomic(path, |w| {
        w.write_all(&header)?;
        for (_, t) in &order {
            w.write_all(t.bytes)?;
        }
        Ok(())
    })
    .map_err(|e| fail(&format!("cannot write: {e}")))
}

/// The tensors an array is stored as, with their names (see the module docs of `io`).
fn tensors_of(name: &str, p: &Parts) -> Vec<(String, Component)> {
    match p {
        Parts::Dense(c) => vec![(name.to_string(), c.clone())],
        Parts::Csr {
            data,
            indices,
            indptr,
            ..
        } => vec![
            (format!("{name}/data"), data.clone()),
            (format!("{name}/indices"), Component::from_ids(indices)),
            (format!("{name}/indptr"), Component::from_ids(indptr)),
        ],
        Parts::RowSparse { data, indices, .. } => vec![
            (format!("{name}/data"), data.clone()),
            (format!("{name}/indices"), Component::from_ids(indices)),
        ],
    }
}

fn shape_json(shape: &[usize]) -> String {
    serde_json::Value::from(shape.to_vec()).to_string()
}

/// Write `arrays` to `path` atomically.
pub(super) fn write(path: &Path, arrays: &[(String, Parts)]) -> Result<()> {
    let fail = |e: &dyn std::fmt::Display| Error::file(OP_SAVE, path, e);
    let mut tensors: Vec<(String, Component)> = Vec::new();
    let mut meta: HashMap<String, String> = HashMap::new();
    meta.insert("format".into(), FORMAT.into());
    meta.insert("format_version".into(), VERSION.into());
    let names: Vec<&str> = arrays.iter().map(|(n, _)| n.as_str()).collect();
    meta.insert("names".into(), serde_json::Value::from(names).to_string());
    for (name, p) in arrays {
        meta.insert(format!("stype:{name}"), stype_name(p.stype()).into());
        meta.insert(format!("shape:{name}"), shape_json(&p.shape()));
        tensors.extend(tensors_of(name, p));
    }
    let mut seen = HashSet::new();
    for (t, c) in &tensors {
        if !seen.insert(t.as_str()) {
            return Err(fail(&format!(
                "two arrays store a tensor named '{t}' (a sparse array NAME stores NAME/data, \
                 NAME/indices, NAME/indptr: rename one)"
            )));
        }
        meta.insert(format!("checksum:{t}"), checksum_hex(checksum64(&c.bytes)));
    }
    // Last: it covers every other pair, the tensors' checksums included.
    let mc = checksum_hex(checksum_pairs(&meta, META_CHECKSUM));
    meta.insert(META_CHECKSUM.into(), mc);

    let views: Vec<TensorBytes<'_>> = tensors
        .iter()
        .map(|(n, c)| TensorBytes {
            name: n,
            dtype: c.dtype,
            shape: &c.shape,
            bytes: &c.bytes,
        })
        .collect();
    write_tensors(OP_SAVE, path, &views, meta)
}

/// One tensor as a component (a dtype sparrow holds).
fn component(st: &SafeTensors<'_>, tensor: &str) -> std::result::Result<Component, String> {
    let t = st
        .tensor(tensor)
        .map_err(|_| format!("tensor '{tensor}' is missing"))?;
    let dtype = our_dtype(t.dtype()).ok_or_else(|| {
        format!(
            "tensor '{tensor}' has dtype {:?} (sparrow holds f32, f64, i64, i32, u8)",
            t.dtype()
        )
    })?;
    Ok(Component {
        dtype,
        shape: t.shape().to_vec(),
        bytes: t.data().to_vec(),
    })
}

/// Read the arrays of the safetensors file at `path`.
pub(super) fn read(path: &Path) -> Result<Vec<(String, NDArray)>> {
    let bytes =
        std::fs::read(path).map_err(|e| Error::file(OP_LOAD, path, format!("cannot read: {e}")))?;
    let bad = |m: String| Error::file(OP_LOAD, path, m);
    let (_, header) = SafeTensors::read_metadata(&bytes).map_err(|e| {
        bad(format!(
            "not a valid safetensors file (truncated or corrupted?): {e}"
        ))
    })?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| {
        bad(format!(
            "not a valid safetensors file (truncated or corrupted?): {e}"
        ))
    })?;
    let meta = header.metadata().clone().unwrap_or_default();
    check_integrity(&st, &meta).map_err(bad)?;
    if meta.get("format").map(String::as_str) != Some(FORMAT) {
        return read_foreign(&st).map_err(bad);
    }
    let names: Vec<String> = meta
        .get("names")
        .and_then(|s| serde_json::from_str(s).ok())
        .ok_or_else(|| bad("metadata 'names' is missing or not a JSON list of names".into()))?;
    let mut used: HashSet<String> = HashSet::new();
    let mut out = Vec::with_capacity(names.len());
    for name in &names {
        let p = parts(&st, &meta, name).map_err(|m| bad(format!("array '{name}': {m}")))?;
        for (t, _) in tensors_of(name, &p) {
            if !used.insert(t.clone()) {
                return Err(bad(format!("tensor '{t}' is claimed by two arrays")));
            }
        }
        let a = p
            .into_array()
            .map_err(|m| bad(format!("array '{name}': {m}")))?;
        out.push((name.clone(), a));
    }
    let mut extra: Vec<String> = st
        .names()
        .into_iter()
        .filter(|t| !used.contains(*t))
        .map(str::to_string)
        .collect();
    if !extra.is_empty() {
        extra.sort();
        return Err(bad(format!(
            "tensors {extra:?} belong to no array in 'names'"
        )));
    }
    Ok(out)
}

/// The parts of array `name` from its tensors and metadata.
fn parts(
    st: &SafeTensors<'_>,
    meta: &HashMap<String, String>,
    name: &str,
) -> std::result::Result<Parts, String> {
    let stype = meta
        .get(&format!("stype:{name}"))
        .ok_or("no 'stype' in the metadata")?;
    let shape: Vec<usize> = meta
        .get(&format!("shape:{name}"))
        .and_then(|s| serde_json::from_str(s).ok())
        .ok_or("no 'shape' (a JSON list of sizes) in the metadata")?;
    let ids = |t: String| -> std::result::Result<Vec<i64>, String> {
        component(st, &t)?.to_ids(&format!("tensor '{t}'"))
    };
    match stype.as_str() {
        "default" => {
            let c = component(st, name)?;
            if c.shape != shape {
                return Err(format!(
                    "tensor has shape {:?}, the metadata says {shape:?}",
                    c.shape
                ));
            }
            Ok(Parts::Dense(c))
        }
        "csr" => {
            let &[rows, cols] = shape.as_slice() else {
                return Err(format!(
                    "a csr array must be 2-D, the metadata says {shape:?}"
                ));
            };
            Ok(Parts::Csr {
                shape: [rows, cols],
                data: component(st, &format!("{name}/data"))?,
                indices: ids(format!("{name}/indices"))?,
                indptr: ids(format!("{name}/indptr"))?,
            })
        }
        "row_sparse" => Ok(Parts::RowSparse {
            shape,
            data: component(st, &format!("{name}/data"))?,
            indices: ids(format!("{name}/indices"))?,
        }),
        other => Err(format!(
            "unknown stype {other:?} (default, csr or row_sparse)"
        )),
    }
}

/// A file sparrow's `io` did not write: every tensor a dense array, in file order.
fn read_foreign(st: &SafeTensors<'_>) -> std::result::Result<Vec<(String, NDArray)>, String> {
    let mut tensors: Vec<(String, safetensors::tensor::TensorView<'_>)> = st.tensors();
    tensors.sort_by_key(|(_, t)| t.data().as_ptr() as usize);
    let mut out = Vec::with_capacity(tensors.len());
    for (name, _) in tensors {
        let c = component(st, &name)?;
        let a = Parts::Dense(c)
            .into_array()
            .map_err(|m| format!("tensor '{name}': {m}"))?;
        out.push((name, a));
    }
    Ok(out)
}

/// Checksums: required in this module's files (every tensor's and the metadata's),
/// verified where another sparrow file carries them.
fn check_integrity(
    st: &SafeTensors<'_>,
    meta: &HashMap<String, String>,
) -> std::result::Result<(), String> {
    let ours = meta.get("format").map(String::as_str) == Some(FORMAT);
    if ours || meta.contains_key(META_CHECKSUM) {
        let want = checksum_hex(checksum_pairs(meta, META_CHECKSUM));
        if meta.get(META_CHECKSUM) != Some(&want) {
            return Err("metadata checksum mismatch (header corrupted)".into());
        }
    }
    if ours {
        match meta.get("format_version").map(String::as_str) {
            Some(VERSION) => {}
            v => {
                return Err(format!(
                    "format_version {v:?} is not one this sparrow reads (it reads {VERSION:?})"
                ))
            }
        }
    }
    // Sorted: the first bad tensor reported is the same on every run.
    let sorted: BTreeMap<String, _> = st.tensors().into_iter().collect();
    for (name, t) in sorted {
        match meta.get(&format!("checksum:{name}")) {
            Some(want) if *want != checksum_hex(checksum64(t.data())) => {
                return Err(format!(
                    "tensor '{name}': checksum mismatch (file corrupted)"
                ));
            }
            None if ours => return Err(format!("tensor '{name}': no checksum")),
            _ => {}
        }
    }
    Ok(())
}
