//! The exported graph format and [`SymbolBlock`], which runs an exported graph without the
//! model's code. The format (`sparrow-graph`, version 1) is described in ARCHITECTURE.md:
//! one JSON object with `values` (shape, dtype, stype, bytes), `inputs` and `params` (names
//! and value ids), `nodes` (operator name, attributes, input ids, output id) and `outputs`.
//! Parameters go to a safetensors file through [`crate::io`] (checksums included).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use sparrow_core::autograd::GradReq;
use sparrow_core::graph::{
    dtype_from_name, stype_from_name, stype_name, AttrValue, CompiledGraph, Graph, Node, Op,
    ParamInfo, ValueInfo,
};
use sparrow_core::{Device, Error, NDArray, Result, SType};

use crate::block::Block;
use crate::init::Initializer;
use crate::io::{load_params, save_params, LoadOptions, SaveOptions};
use crate::param_dict::ParamDict;
use crate::parameter::Parameter;

/// The `format` field of an exported graph.
pub const GRAPH_FORMAT: &str = "sparrow-graph";
/// The `version` field this code writes and reads.
pub const GRAPH_VERSION: u64 = 1;

const OP_EXPORT: &str = "HybridBlock::export";
const OP_IMPORT: &str = "SymbolBlock::import";

fn attr_json(v: &AttrValue) -> Value {
    match v {
        AttrValue::Int(i) => json!(i),
        AttrValue::Float(f) => json!(f),
        AttrValue::Bool(b) => json!(b),
        AttrValue::Ints(v) => json!(v),
        AttrValue::Str(s) => json!(s),
    }
}

fn req_name(r: GradReq) -> &'static str {
    match r {
        GradReq::Write => "write",
        GradReq::Add => "add",
        GradReq::Null => "null",
    }
}

/// Write `g` and the parameters of `block` it reads.
pub(crate) fn export(
    g: &Graph,
    block: &dyn Block,
    graph_path: &Path,
    params_path: &Path,
) -> Result<()> {
    let all = block.collect_params()?;
    let mut used = ParamDict::new();
    let mut params = Vec::new();
    for p in g.params() {
        let param = all.get(&p.name).ok_or_else(|| {
            Error::arg(
                OP_EXPORT,
                format!("the graph reads '{}', which the block lacks", p.name),
            )
        })?;
        used.insert(p.name.clone(), param.clone())?;
        params.push(json!({
            "name": p.name,
            "value": p.value,
            "grad_stype": stype_name(p.grad_stype),
            "grad_req": req_name(param.grad_req()),
            "fan_in_first": param.fan_in_first(),
        }));
    }
    let values: Vec<Value> = g
        .values()
        .iter()
        .map(|v| {
            json!({
                "shape": v.shape,
                "dtype": v.dtype.name(),
                "stype": stype_name(v.stype),
                "bytes": v.bytes,
            })
        })
        .collect();
    let inputs: Vec<Value> = g
        .input_names()
        .iter()
        .zip(g.inputs())
        .map(|(n, v)| json!({"name": n, "value": v}))
        .collect();
    let nodes: Vec<Value> = g
        .nodes()
        .iter()
        .map(|n| {
            let attrs: Map<String, Value> =
                n.op.attrs()
                    .iter()
                    .map(|(k, v)| (k.to_string(), attr_json(v)))
                    .collect();
            json!({"op": n.op.name(), "attrs": attrs, "inputs": n.inputs, "output": n.output})
        })
        .collect();
    let doc = json!({
        "format": GRAPH_FORMAT,
        "version": GRAPH_VERSION,
        "values": values,
        "inputs": inputs,
        "params": params,
        "nodes": nodes,
        "outputs": g.outputs(),
    });
    let text = serde_json::to_string_pretty(&doc)
        .map_err(|e| Error::arg(OP_EXPORT, format!("cannot encode the graph: {e}")))?;
    sparrow_core::fsio::write_atomic(graph_path, |w| w.write_all(text.as_bytes())).map_err(
        |e| {
            Error::arg(
                OP_EXPORT,
                format!("cannot write '{}': {e}", graph_path.display()),
            )
        },
    )?;
    save_params(&used, params_path, SaveOptions::default())
}

/// A field of a JSON object, or an error naming where it is missing.
fn field<'a>(o: &'a Value, k: &str, at: &str) -> Result<&'a Value> {
    o.get(k)
        .ok_or_else(|| Error::arg(OP_IMPORT, format!("{at}: missing field '{k}'")))
}

fn as_index(v: &Value, at: &str) -> Result<usize> {
    v.as_u64()
        .and_then(|u| usize::try_from(u).ok())
        .ok_or_else(|| {
            Error::arg(
                OP_IMPORT,
                format!("{at}: expected a value id (a whole number >= 0), got {v}"),
            )
        })
}

fn as_str<'a>(v: &'a Value, at: &str) -> Result<&'a str> {
    v.as_str()
        .ok_or_else(|| Error::arg(OP_IMPORT, format!("{at}: expected a string, got {v}")))
}

fn as_array<'a>(v: &'a Value, at: &str) -> Result<&'a Vec<Value>> {
    v.as_array()
        .ok_or_else(|| Error::arg(OP_IMPORT, format!("{at}: expected a list, got {v}")))
}

fn json_attr(v: &Value, at: &str) -> Result<AttrValue> {
    Ok(match v {
        Value::Bool(b) => AttrValue::Bool(*b),
        Value::String(s) => AttrValue::Str(s.clone()),
        Value::Number(n) => match n.as_i64() {
            Some(i) => AttrValue::Int(i),
            None => AttrValue::Float(n.as_f64().ok_or_else(|| {
                Error::arg(OP_IMPORT, format!("{at}: number {n} is out of range"))
            })?),
        },
        Value::Array(a) => AttrValue::Ints(
            a.iter()
                .map(|x| {
                    x.as_i64().ok_or_else(|| {
                        Error::arg(OP_IMPORT, format!("{at}: expected whole numbers, got {x}"))
                    })
                })
                .collect::<Result<_>>()?,
        ),
        other => {
            return Err(Error::arg(
                OP_IMPORT,
                format!("{at}: unsupported attribute value {other}"),
            ))
        }
    })
}

/// Parse and validate an exported graph document; also returns, per parameter, its
/// `grad_req` and `fan_in_first`.
fn parse_graph(doc: &Value) -> Result<(Graph, Vec<(GradReq, bool)>)> {
    let fmt = as_str(field(doc, "format", "graph")?, "format")?;
    if fmt != GRAPH_FORMAT {
        return Err(Error::arg(
            OP_IMPORT,
            format!("format is '{fmt}', expected '{GRAPH_FORMAT}'"),
        ));
    }
    let version = field(doc, "version", "graph")?.as_u64();
    if version != Some(GRAPH_VERSION) {
        return Err(Error::arg(
            OP_IMPORT,
            format!("version {version:?} is not supported (this build reads {GRAPH_VERSION})"),
        ));
    }
    let mut values = Vec::new();
    for (i, v) in as_array(field(doc, "values", "graph")?, "values")?
        .iter()
        .enumerate()
    {
        let at = format!("values[{i}]");
        let shape = as_array(field(v, "shape", &at)?, &at)?
            .iter()
            .map(|d| as_index(d, &format!("{at}.shape")))
            .collect::<Result<Vec<usize>>>()?;
        let dt = as_str(field(v, "dtype", &at)?, &at)?;
        let dtype = dtype_from_name(dt)
            .ok_or_else(|| Error::arg(OP_IMPORT, format!("{at}: unknown dtype '{dt}'")))?;
        let st = as_str(field(v, "stype", &at)?, &at)?;
        let stype = stype_from_name(st)
            .ok_or_else(|| Error::arg(OP_IMPORT, format!("{at}: unknown stype '{st}'")))?;
        let bytes = as_index(field(v, "bytes", &at)?, &format!("{at}.bytes"))?;
        values.push(ValueInfo {
            shape,
            dtype,
            stype,
            bytes,
        });
    }
    let mut input_names = Vec::new();
    let mut inputs = Vec::new();
    for (i, x) in as_array(field(doc, "inputs", "graph")?, "inputs")?
        .iter()
        .enumerate()
    {
        let at = format!("inputs[{i}]");
        input_names.push(as_str(field(x, "name", &at)?, &at)?.to_string());
        inputs.push(as_index(field(x, "value", &at)?, &at)?);
    }
    let mut params = Vec::new();
    let mut extra = Vec::new();
    for (i, p) in as_array(field(doc, "params", "graph")?, "params")?
        .iter()
        .enumerate()
    {
        let at = format!("params[{i}]");
        let st = as_str(field(p, "grad_stype", &at)?, &at)?;
        let grad_stype = stype_from_name(st)
            .filter(|&s| s != SType::Csr)
            .ok_or_else(|| {
                Error::arg(
                    OP_IMPORT,
                    format!("{at}: grad_stype '{st}' is not default or row_sparse"),
                )
            })?;
        let req = match as_str(field(p, "grad_req", &at)?, &at)? {
            "write" => GradReq::Write,
            "add" => GradReq::Add,
            "null" => GradReq::Null,
            other => {
                return Err(Error::arg(
                    OP_IMPORT,
                    format!("{at}: unknown grad_req '{other}'"),
                ))
            }
        };
        let fan_in_first = field(p, "fan_in_first", &at)?.as_bool().ok_or_else(|| {
            Error::arg(
                OP_IMPORT,
                format!("{at}: fan_in_first must be true or false"),
            )
        })?;
        params.push(ParamInfo {
            name: as_str(field(p, "name", &at)?, &at)?.to_string(),
            value: as_index(field(p, "value", &at)?, &at)?,
            grad_stype,
        });
        extra.push((req, fan_in_first));
    }
    let mut nodes = Vec::new();
    for (i, n) in as_array(field(doc, "nodes", "graph")?, "nodes")?
        .iter()
        .enumerate()
    {
        let at = format!("nodes[{i}]");
        let name = as_str(field(n, "op", &at)?, &at)?;
        let attrs = field(n, "attrs", &at)?
            .as_object()
            .ok_or_else(|| Error::arg(OP_IMPORT, format!("{at}: attrs must be an object")))?
            .iter()
            .map(|(k, v)| Ok((k.clone(), json_attr(v, &format!("{at}.attrs.{k}"))?)))
            .collect::<Result<Vec<(String, AttrValue)>>>()?;
        let op = Op::from_attrs(name, &attrs)
            .map_err(|e| Error::arg(OP_IMPORT, format!("{at}: {e}")))?;
        let ins = as_array(field(n, "inputs", &at)?, &at)?
            .iter()
            .map(|x| as_index(x, &at))
            .collect::<Result<Vec<usize>>>()?;
        nodes.push(Node {
            op,
            inputs: ins,
            output: as_index(field(n, "output", &at)?, &at)?,
        });
    }
    let outputs = as_array(field(doc, "outputs", "graph")?, "outputs")?
        .iter()
        .map(|x| as_index(x, "outputs"))
        .collect::<Result<Vec<usize>>>()?;
    let g = Graph::new(values, input_names, inputs, params, nodes, outputs)
        .map_err(|e| Error::arg(OP_IMPORT, format!("inconsistent graph: {e}")))?;
    Ok((g, extra))
}

/// A block made from an exported graph and its parameter file (Gluon's `SymbolBlock`): it
/// runs inference and, under `autograd::record`, training (its parameters get gradients of
/// their recorded storage types) without the model's code.
pub struct SymbolBlock {
    /// The graph and how it runs: inference out of its memory plan, training under `record`
    /// through its split forward and backward graphs (as a hybridized block's graphs run).
    graph: CompiledGraph,
    params: Vec<(String, Parameter)>,
}

impl SymbolBlock {
    /// Read `graph_path` (JSON) and `params_path` (safetensors). A malformed or inconsistent
    /// graph, or parameters that do not fit it, are an error naming the problem.
    pub fn import(
        graph_path: impl AsRef<Path>,
        params_path: impl AsRef<Path>,
    ) -> Result<SymbolBlock> {
        let gp = graph_path.as_ref();
        let text = std::fs::read_to_string(gp)
            .map_err(|e| Error::arg(OP_IMPORT, format!("cannot read '{}': {e}", gp.display())))?;
        let doc: Value = serde_json::from_str(&text).map_err(|e| {
            Error::arg(
                OP_IMPORT,
                format!("'{}' is not valid JSON: {e}", gp.display()),
            )
        })?;
        let (graph, extra) = parse_graph(&doc)
            .map_err(|e| Error::arg(OP_IMPORT, format!("'{}': {e}", gp.display())))?;
        let mut dict = ParamDict::new();
        let mut params = Vec::new();
        for (p, (req, fan_in_first)) in graph.params().iter().zip(extra) {
            let v = &graph.values()[p.value];
            let param = Parameter::new(&p.name, &v.shape)
                .with_dtype(v.dtype)
                .with_stype(v.stype)
                .with_grad_stype(p.grad_stype)
                .with_grad_req(req)
                .with_fan_in_first(fan_in_first)
                .with_init(Initializer::Zero);
            param.initialize(&Initializer::Zero, Device::Cpu)?;
            dict.insert(p.name.clone(), param.clone())?;
            params.push((p.name.clone(), param));
        }
        load_params(&dict, params_path, LoadOptions::default())?;
        Ok(SymbolBlock {
            graph: CompiledGraph::new(Arc::new(graph), "symbolblock"),
            params,
        })
    }

    /// The imported graph.
    pub fn graph(&self) -> &Graph {
        self.graph.graph()
    }

    /// Run the graph on several inputs (in the graph's input order): out of its memory plan,
    /// or under `autograd::record` as one tape node whose backward runs the graph's backward
    /// (a graph without a backward rule, or with several outputs, replays its operators).
    pub fn forward_many(&self, inputs: &[NDArray]) -> Result<Vec<NDArray>> {
        let ps = self
            .params
            .iter()
            .map(|(_, p)| p.data())
            .collect::<Result<Vec<_>>>()?;
        self.graph.run(inputs, &ps)
    }
}

impl Block for SymbolBlock {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        let g = self.graph.graph();
        if g.inputs().len() != 1 || g.outputs().len() != 1 {
            return Err(Error::arg(
                "SymbolBlock",
                format!(
                    "forward takes one input to one output; the graph has {} inputs and {} \
                     outputs (use forward_many)",
                    g.inputs().len(),
                    g.outputs().len()
                ),
            ));
        }
        let ps = self
            .params
            .iter()
            .map(|(_, p)| p.data())
            .collect::<Result<Vec<_>>>()?;
        self.graph.run_first(std::slice::from_ref(x), &ps)
    }
    fn kind(&self) -> &'static str {
        "symbolblock"
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        self.params.clone()
    }
    fn describe(&self) -> String {
        format!("SymbolBlock({} nodes)", self.graph.graph().nodes().len())
    }
}
