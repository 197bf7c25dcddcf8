//! Optimizer states on disk: one safetensors file (readable by any framework) holding every
//! state array as `"<param index>.<slot>"`, with update counts, scalars and the parameter names
//! in the header metadata. Writes are atomic: a temporary file in the same folder, then rename.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use serde_json::{json, Value};
use sparrow_core::{DType, Error, NDArray, Result};

use crate::optimizer::State;

fn io_err(op: &'static str, path: &Path, e: impl std::fmt::Display) -> Error {
    Error::arg(op, format!("{}: {e}", path.display()))
}

/// Write `bytes` to `path` atomically.
pub(crate) fn write_atomic(op: &'static str, path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| io_err(op, path, "not a file path"))?
        .to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_err(op, path, e));
    }
    Ok(())
}

/// Serialize the states of all parameters.
pub(crate) fn save_states(
    path: &Path,
    optimizer: &str,
    num_update: u64,
    names: &[String],
    states: &[Option<State>],
) -> Result<()> {
    const OP: &str = "save_states";
    let mut blobs: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), "sparrow-optim-states-1".to_string());
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
            let (dt, bytes) = match a.dtype() {
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
                other => return Err(Error::dtype(OP, format!("state dtype {}", other.name()))),
            };
            blobs.push((format!("{i}.{slot}"), dt, a.shape(), bytes));
        }
    }
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
/// shapes/dtypes of known parameters.
pub(crate) fn load_states(
    path: &Path,
    optimizer: &str,
    names: &[String],
    shapes: &HashMap<usize, (Vec<usize>, DType)>,
) -> Result<(u64, Vec<Option<State>>)> {
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
            let arr = match tv.dtype() {
                Dtype::F32 => NDArray::from_vec(
                    tv.data()
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect::<Vec<_>>(),
                    &shape,
                )?,
                Dtype::F64 => NDArray::from_vec(
                    tv.data()
                        .chunks_exact(8)
                        .map(|c| f64::from_le_bytes(c.try_into().expect("8-byte chunk")))
                        .collect::<Vec<_>>(),
                    &shape,
                )?,
                other => return Err(bad(&format!("unsupported dtype {other:?}"))),
            };
            if let Some((pshape, pdtype)) = shapes.get(&i) {
                if *pshape != shape || *pdtype != arr.dtype() {
                    return Err(bad(&format!(
                        "slot {slot} is {shape:?} {}, the parameter is {pshape:?} {}",
                        arr.dtype().name(),
                        pdtype.name()
                    )));
                }
            }
            state.arrays.push((slot.to_string(), arr));
        }
        states.push(Some(state));
    }
    Ok((num_update, states))
}
