//! Optimizer states on disk: one safetensors file (readable by any framework) holding every
//! state array as `"<param index>.<slot>"`, with update counts, scalars and the parameter names
//! in the header metadata. Writes go through [`sparrow_core::fsio::write_atomic`] (a unique
//! temporary in the same folder, fsynced, renamed, folder fsynced).
//!
//! Format `sparrow-optim-states-2` adds checksums, the hash parameter files use
//! ([`sparrow_core::fsio::checksum64`]): `checksum:<tensor>` for every state array and
//! `meta_checksum` over every other metadata pair (update counts, scalars, names), so one
//! flipped byte anywhere is refused instead of loading and turning the weights into NaN after
//! a step. Version 1 files (no checksums) still load, with every value validated.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use serde_json::{json, Value};
use sparrow_core::fsio::{checksum64, checksum_hex, checksum_pairs};
use sparrow_core::{DType, Error, NDArray, Result};

/// The format this code writes; [`FORMAT_V1`] files still load.
const FORMAT_V2: &str = "sparrow-optim-states-2";
const FORMAT_V1: &str = "sparrow-optim-states-1";
/// The metadata key holding [`checksum_pairs`] of every other metadata pair.
const META_CHECKSUM: &str = "meta_checksum";

use crate::optimizer::State;

fn io_err(op: &'static str, path: &Path, e: impl std::fmt::Display) -> Error {
    Error::arg(op, format!("{}: {e}", path.display()))
}

/// Write `bytes` to `path` through [`sparrow_core::fsio::write_atomic`], the writer every
/// sparrow file goes through.
pub(crate) fn write_atomic(op: &'static str, path: &Path, bytes: &[u8]) -> Result<()> {
    sparrow_core::fsio::write_atomic(path, |w| w.write_all(bytes)).map_err(|e| io_err(op, path, e))
}

/// Arrays and metadata a state file carries besides the states (a sharded table's rows and
/// range, [`crate::Trainer::save_table`]), covered by the same checksums. Tensor names must
/// not have the `<index>.<slot>` form of the states'.
#[derive(Default)]
pub(crate) struct Extra {
    pub tensors: Vec<(String, NDArray)>,
    pub meta: Vec<(String, String)>,
}

/// An array's safetensors dtype and little-endian bytes (the float dtypes states have).
fn tensor_bytes(op: &'static str, a: &NDArray) -> Result<(Dtype, Vec<u8>)> {
    Ok(match a.dtype() {
        DType::F32 => (
            Dtype::F32,
            a.to_vec::<f32>()?
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
        ),
        DType::F64 => (
            Dtype::F64,
            a.to_vec::<f64>()?
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
        ),
        // Half states (a half weight without multi_precision), stored as they are.
        h @ (DType::F16 | DType::BF16) => (
            if h == DType::F16 {
                Dtype::F16
            } else {
                Dtype::BF16
            },
            a.to_le_bytes()?,
        ),
        other => return Err(Error::dtype(op, format!("state dtype {}", other.name()))),
    })
}

/// The array of a safetensors tensor of a float dtype.
fn tensor_array(tv: &TensorView<'_>) -> std::result::Result<NDArray, String> {
    let shape = tv.shape().to_vec();
    match tv.dtype() {
        Dtype::F32 => NDArray::from_vec(le_f32(tv.data()).collect::<Vec<_>>(), &shape),
        Dtype::F64 => NDArray::from_vec(le_f64(tv.data()).collect::<Vec<_>>(), &shape),
        Dtype::F16 => NDArray::from_le_bytes(tv.data(), DType::F16, &shape),
        Dtype::BF16 => NDArray::from_le_bytes(tv.data(), DType::BF16, &shape),
        other => return Err(format!("unsupported dtype {other:?}")),
    }
    .map_err(|e| e.to_string())
}

/// Serialize the states of all parameters.
pub(crate) fn save_states(
    path: &Path,
    optimizer: &str,
    num_update: u64,
    names: &[String],
    states: &[Option<State>],
) -> Result<()> {
    save_states_with(
        path,
        optimizer,
        num_update,
        names,
        states,
        &Extra::default(),
    )
}

/// [`save_states`] with `extra` arrays and metadata in the same file.
pub(crate) fn save_states_with(
    path: &Path,
    optimizer: &str,
    num_update: u64,
    names: &[String],
    states: &[Option<State>],
    extra: &Extra,
) -> Result<()> {
    const OP: &str = "save_states";
    let mut blobs: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut meta = HashMap::new();
    for (k, v) in &extra.meta {
        meta.insert(k.clone(), v.clone());
    }
    for (n, a) in &extra.tensors {
        let (dt, bytes) = tensor_bytes(OP, a)?;
        blobs.push((n.clone(), dt, a.shape(), bytes));
    }
    meta.insert("format".to_string(), FORMAT_V2.to_string());
    meta.insert("optimizer".to_string(), optimizer.to_string());
    meta.insert("num_update".to_string(), num_update.to_string());
    meta.insert("params".to_string(), json!(names).to_string());
    for (i, st) in states.iter().enumerate() {
        let Some(st) = st else {
            meta.insert(format!("state.{i}"), "null".to_string());
            continue;
        };
        let slots: Vec<&str> = st.arrays.iter().map(|(n, _)| n.as_str()).collect();
        let scalars: HashMap<&str, f64> =
            st.scalars.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        meta.insert(
            format!("state.{i}"),
            json!({"t": st.t, "slots": slots, "scalars": scalars}).to_string(),
        );
        for (slot, a) in &st.arrays {
            let (dt, bytes) = tensor_bytes(OP, a)?;
            blobs.push((format!("{i}.{slot}"), dt, a.shape(), bytes));
        }
    }
    for (n, _, _, b) in &blobs {
        meta.insert(format!("checksum:{n}"), checksum_hex(checksum64(b)));
    }
    // Last: it covers every other pair, the arrays' checksums included.
    let mc = checksum_hex(checksum_pairs(&meta, META_CHECKSUM));
    meta.insert(META_CHECKSUM.to_string(), mc);
    let views = blobs
        .iter()
        .map(|(n, dt, shape, b)| {
            TensorView::new(*dt, shape.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| io_err(OP, path, e))
        })
        .collect::<Result<Vec<_>>>()?;
    let bytes = safetensors::serialize(views, Some(meta)).map_err(|e| io_err(OP, path, e))?;
    write_atomic(OP, path, &bytes)
}

/// Read states saved by [`save_states`], checking the optimizer kind, parameter names and the
/// state shapes/dtypes of known parameters (`shapes`: what the optimizer makes for each,
/// `Optimizer::state_shape`, the weight's shape, which the master copy
/// [`crate::optimizer::MASTER_SLOT`] has, and the states' dtype).
pub(crate) fn load_states(
    path: &Path,
    optimizer: &str,
    names: &[String],
    shapes: &HashMap<usize, (Vec<usize>, Vec<usize>, DType)>,
) -> Result<(u64, Vec<Option<State>>)> {
    let (num_update, states, _) = load_states_with(path, optimizer, names, shapes, &[])?;
    Ok((num_update, states))
}

/// What [`load_states_with`] read: the update count, the states, and the file's metadata with
/// the `extra` tensors asked for (in their order).
pub(crate) type Loaded = (
    u64,
    Vec<Option<State>>,
    (HashMap<String, String>, Vec<NDArray>),
);

/// The metadata of a state file, read from its header alone (not its tensors) and checked
/// against its metadata checksum: enough to decide whether the file is needed at all.
pub(crate) fn read_meta(path: &Path) -> Result<HashMap<String, String>> {
    use std::io::Read;
    const OP: &str = "load_states";
    let mut f = std::fs::File::open(path).map_err(|e| io_err(OP, path, e))?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(|e| io_err(OP, path, e))?;
    let n = u64::from_le_bytes(len);
    let file_len = f.metadata().map_err(|e| io_err(OP, path, e))?.len();
    if n > file_len.saturating_sub(8) || n > (100 << 20) {
        return Err(io_err(
            OP,
            path,
            format!("header of {n} bytes in a file of {file_len}"),
        ));
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header).map_err(|e| io_err(OP, path, e))?;
    let v: Value = serde_json::from_slice(&header).map_err(|e| io_err(OP, path, e))?;
    let meta: HashMap<String, String> = v
        .get("__metadata__")
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .ok_or_else(|| io_err(OP, path, "no sparrow metadata in the header"))?;
    if meta.get(META_CHECKSUM) != Some(&checksum_hex(checksum_pairs(&meta, META_CHECKSUM))) {
        return Err(io_err(
            OP,
            path,
            "metadata checksum mismatch (file corrupted)",
        ));
    }
    Ok(meta)
}

/// [`load_states`], also reading the tensors `extra` names (each must be in the file) and
/// handing back the metadata (checked by the same checksums) for the caller to check.
pub(crate) fn load_states_with(
    path: &Path,
    optimizer: &str,
    names: &[String],
    shapes: &HashMap<usize, (Vec<usize>, Vec<usize>, DType)>,
    extra: &[&str],
) -> Result<Loaded> {
    const OP: &str = "load_states";
    let bytes = std::fs::read(path).map_err(|e| io_err(OP, path, e))?;
    let (_, header) = SafeTensors::read_metadata(&bytes).map_err(|e| io_err(OP, path, e))?;
    let meta = header
        .metadata()
        .clone()
        .ok_or_else(|| io_err(OP, path, "no sparrow metadata in the header"))?;
    let get = |k: &str| {
        meta.get(k)
            .ok_or_else(|| io_err(OP, path, format!("header metadata lacks '{k}'")))
    };
    let checked = match get("format")?.as_str() {
        FORMAT_V2 => true,
        FORMAT_V1 => false,
        other => {
            return Err(io_err(
                OP,
                path,
                format!("format {other:?} is not an optimizer state file this sparrow reads"),
            ))
        }
    };
    if checked
        && meta.get(META_CHECKSUM) != Some(&checksum_hex(checksum_pairs(&meta, META_CHECKSUM)))
    {
        return Err(io_err(
            OP,
            path,
            "metadata checksum mismatch (file corrupted)",
        ));
    }
    let saved_opt = get("optimizer")?;
    if saved_opt != optimizer {
        return Err(io_err(
            OP,
            path,
            format!("states of optimizer '{saved_opt}', this trainer uses '{optimizer}'"),
        ));
    }
    let saved_names: Vec<String> =
        serde_json::from_str(get("params")?).map_err(|e| io_err(OP, path, e))?;
    if saved_names != names {
        return Err(io_err(
            OP,
            path,
            format!("saved for parameters {saved_names:?}, trainer has {names:?}"),
        ));
    }
    let num_update: u64 = get("num_update")?
        .parse()
        .map_err(|e| io_err(OP, path, e))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| io_err(OP, path, e))?;
    if checked {
        for (tname, t) in st.tensors() {
            let want = meta.get(&format!("checksum:{tname}"));
            if want != Some(&checksum_hex(checksum64(t.data()))) {
                return Err(io_err(
                    OP,
                    path,
                    format!("tensor '{tname}': checksum missing or mismatched (file corrupted)"),
                ));
            }
        }
    }
    let mut states = Vec::with_capacity(names.len());
    for (i, pname) in names.iter().enumerate() {
        let v: Value =
            serde_json::from_str(get(&format!("state.{i}"))?).map_err(|e| io_err(OP, path, e))?;
        if v.is_null() {
            states.push(None);
            continue;
        }
        let bad = |what: &str| io_err(OP, path, format!("state of '{pname}': {what}"));
        let t = v["t"].as_u64().ok_or_else(|| bad("missing t"))?;
        let mut state = State {
            t,
            arrays: Vec::new(),
            scalars: Vec::new(),
        };
        if let Some(obj) = v["scalars"].as_object() {
            for (k, x) in obj {
                state.set_scalar(k, x.as_f64().ok_or_else(|| bad("scalar is not a number"))?);
            }
        }
        for slot in v["slots"].as_array().ok_or_else(|| bad("missing slots"))? {
            let slot = slot.as_str().ok_or_else(|| bad("slot name"))?;
            let tv = st
                .tensor(&format!("{i}.{slot}"))
                .map_err(|e| bad(&e.to_string()))?;
            let shape = tv.shape().to_vec();
            let checked = match tv.dtype() {
                Dtype::F32 => check_values(optimizer, slot, le_f32(tv.data()).map(f64::from)),
                Dtype::F64 => check_values(optimizer, slot, le_f64(tv.data())),
                Dtype::F16 | Dtype::BF16 => {
                    let d = if tv.dtype() == Dtype::F16 {
                        DType::F16
                    } else {
                        DType::BF16
                    };
                    let a = NDArray::from_le_bytes(tv.data(), d, &shape)
                        .map_err(|e| bad(&format!("slot {slot}: {e}")))?;
                    check_values(optimizer, slot, a.to_f64_vec().into_iter())
                }
                _ => Ok(()),
            };
            checked.map_err(|m| bad(&m))?;
            let arr = tensor_array(&tv).map_err(|e| bad(&format!("slot {slot}: {e}")))?;
            state.arrays.push((slot.to_string(), arr));
        }
        if optimizer == "cocob" {
            // Files from before COCOB packed its five states into one array.
            state = crate::optimizer::cocob::pack_states(state).map_err(|e| bad(&e.to_string()))?;
        }
        if let Some((sshape, wshape, pdtype)) = shapes.get(&i) {
            for (slot, arr) in &state.arrays {
                let shape = arr.shape();
                let pshape = if slot == crate::optimizer::MASTER_SLOT {
                    wshape
                } else {
                    sshape
                };
                if pshape[..] != shape[..] || *pdtype != arr.dtype() {
                    return Err(bad(&format!(
                        "slot {slot} is {shape:?} {}, the parameter's states are {pshape:?} {}",
                        arr.dtype().name(),
                        pdtype.name()
                    )));
                }
            }
        }
        states.push(Some(state));
    }
    let mut extras = Vec::with_capacity(extra.len());
    for name in extra {
        let tv = st
            .tensor(name)
            .map_err(|e| io_err(OP, path, format!("tensor '{name}': {e}")))?;
        let finite = match tv.dtype() {
            Dtype::F32 => le_f32(tv.data()).all(f32::is_finite),
            Dtype::F64 => le_f64(tv.data()).all(f64::is_finite),
            _ => true,
        };
        if !finite {
            return Err(io_err(
                OP,
                path,
                format!("tensor '{name}' holds non-finite values"),
            ));
        }
        extras.push(
            tensor_array(&tv).map_err(|e| io_err(OP, path, format!("tensor '{name}': {e}")))?,
        );
    }
    Ok((num_update, states, (meta, extras)))
}

/// State slots that hold sums of squares or other magnitudes (Adam's `var`, AdaGrad's
/// `history`, FTRL's `n`, ...): a negative value there is no state any step made, and the
/// next update takes its square root.
const NON_NEGATIVE_SLOTS: &[&str] = &[
    "var",
    "history",
    "acc_grad",
    "acc_delta",
    "n",
    "inf_norm",
    "v",
    "d",
    // COCOB's largest |gradient|, sum of |gradient| and reward.
    "l",
    "s",
    "r",
];

/// A state array from a file must hold what a step can have made: finite values, and no
/// negative ones in a magnitude slot. A file whose checksums were recomputed over such values
/// (crafted, or written by a buggy tool) turned every weight NaN one step after loading.
fn check_values(
    optimizer: &str,
    slot: &str,
    values: impl Iterator<Item = f64>,
) -> std::result::Result<(), String> {
    let plain = NON_NEGATIVE_SLOTS.contains(&slot);
    // COCOB's packed states: l, s and r (the first three of each five) are magnitudes.
    let packed = optimizer == "cocob" && slot == crate::optimizer::cocob::PACKED;
    let non_negative = |i: usize| plain || (packed && i % sparrow_core::update::COCOB_STATES < 3);
    match values
        .enumerate()
        .find(|(i, v)| !v.is_finite() || (non_negative(*i) && *v < 0.0))
    {
        None => Ok(()),
        Some((k, v)) => Err(format!(
            "slot {slot} holds {v} at element {k}{}",
            if non_negative(k) {
                " (it must be finite and >= 0)"
            } else {
                " (it must be finite)"
            }
        )),
    }
}

/// Little-endian f32 values of a tensor's bytes.
fn le_f32(b: &[u8]) -> impl Iterator<Item = f32> + '_ {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

/// Little-endian f64 values of a tensor's bytes.
fn le_f64(b: &[u8]) -> impl Iterator<Item = f64> + '_ {
    b.chunks_exact(8).map(|c| {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        f64::from_le_bytes(w)
    })
}
