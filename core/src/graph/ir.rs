//! The graph: values (shape, dtype, storage type) and nodes (operator + attributes + input
//! values), built from a trace or from parts, validated, and run by replaying each node.

use std::collections::HashMap;

use super::op::Op;
use super::trace::TraceLog;
use crate::{DType, Error, NDArray, Result, SType};

/// What a value is: its shape, dtype and storage type, and the bytes it held when traced
/// (a sparse value's size depends on its stored entries; the traced size is the estimate).
#[derive(Debug, Clone, PartialEq)]
pub struct ValueInfo {
    /// Logical shape.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
    /// Storage type.
    pub stype: SType,
    /// Bytes of its buffers when traced.
    pub bytes: usize,
}

impl ValueInfo {
    /// The info of an array.
    pub fn of(a: &NDArray) -> ValueInfo {
        ValueInfo {
            shape: a.shape(),
            dtype: a.dtype(),
            stype: a.stype(),
            bytes: a.nbytes(),
        }
    }

    /// True when `a` has this value's shape, dtype and storage type.
    pub fn matches(&self, a: &NDArray) -> bool {
        // One read of the array's storage (this runs for every value of every run).
        let d = a.read();
        d.stype() == self.stype && d.dtype() == self.dtype && d.shape() == self.shape.as_slice()
    }

    fn describe(&self) -> String {
        format!(
            "{:?} {} {}",
            self.shape,
            self.dtype.name(),
            super::op::stype_name(self.stype)
        )
    }
}

/// One node: `output = op(inputs...)`, inputs and output by value id.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The operator and its attributes.
    pub op: Op,
    /// Input value ids, in the operator's order.
    pub inputs: Vec<usize>,
    /// The value this node defines.
    pub output: usize,
}

/// A parameter the graph reads: its name (the block's hierarchical parameter name), the value
/// it defines and the storage type of its gradient.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamInfo {
    /// Hierarchical parameter name (`dense0.weight`).
    pub name: String,
    /// The value id.
    pub value: usize,
    /// Storage type of its gradient (a row_sparse weight gradient stays row_sparse).
    pub grad_stype: SType,
}

/// A static graph: inputs and parameters in, nodes in execution order, outputs out.
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    values: Vec<ValueInfo>,
    input_names: Vec<String>,
    inputs: Vec<usize>,
    params: Vec<ParamInfo>,
    nodes: Vec<Node>,
    outputs: Vec<usize>,
    /// Per value: the last node reading it (`None`: no node reads it).
    last_use: Vec<Option<usize>>,
    /// Per value: whether it is a graph output (kept to the end).
    is_output: Vec<bool>,
}

const OP: &str = "graph";

impl Graph {
    /// Build a graph from a trace of a forward called with `inputs` that returned `outputs`.
    /// `params` names the parameter arrays the forward may read. An array read by a logged
    /// operator is resolved as an input, then a parameter, then the latest earlier output of a
    /// logged operator; anything else (a constant made inside the forward, the output of an
    /// operator without a hook) makes the trace fail with a message naming it. Nodes whose
    /// outputs nothing needs are dropped.
    pub fn from_trace(
        log: TraceLog,
        input_names: &[String],
        inputs: &[NDArray],
        outputs: &[NDArray],
        params: &[(String, NDArray)],
    ) -> std::result::Result<Graph, String> {
        if let Some(p) = log.problem {
            return Err(p);
        }
        let mut values: Vec<ValueInfo> = Vec::new();
        // id -> value; later definitions shadow earlier ones (an op returning its input).
        let mut by_id: HashMap<u64, usize> = HashMap::new();
        let mut in_ids = Vec::new();
        for x in inputs {
            let v = values.len();
            values.push(ValueInfo::of(x));
            by_id.entry(x.id()).or_insert(v);
            in_ids.push(v);
        }
        let param_of: HashMap<u64, (&String, &NDArray)> =
            params.iter().map(|(n, a)| (a.id(), (n, a))).collect();
        let mut used_params: Vec<ParamInfo> = Vec::new();
        let mut param_value: HashMap<u64, usize> = HashMap::new();
        let untraced: HashMap<u64, &'static str> =
            log.untraced.iter().map(|(a, n)| (a.id(), *n)).collect();
        let mut nodes: Vec<Node> = Vec::new();
        let resolve = |a: &NDArray,
                       by_id: &HashMap<u64, usize>,
                       values: &mut Vec<ValueInfo>,
                       used_params: &mut Vec<ParamInfo>,
                       param_value: &mut HashMap<u64, usize>|
         -> std::result::Result<usize, String> {
            if let Some(&v) = param_value.get(&a.id()) {
                return Ok(v);
            }
            if let Some((name, arr)) = param_of.get(&a.id()) {
                let v = values.len();
                values.push(ValueInfo::of(arr));
                used_params.push(ParamInfo {
                    name: (*name).clone(),
                    value: v,
                    grad_stype: arr.grad_stype(),
                });
                param_value.insert(a.id(), v);
                return Ok(v);
            }
            if let Some(&v) = by_id.get(&a.id()) {
                return Ok(v);
            }
            Err(match untraced.get(&a.id()) {
                Some(name) => format!(
                    "operator '{name}' is not traced (it has no graph hook); its output of \
                     shape {:?} is used",
                    a.shape()
                ),
                None => format!(
                    "uses an array of shape {:?} that is neither an input, a parameter nor the \
                     output of a traced operator (a constant made inside the forward, a host \
                     copy, or the output of an untraced operator)",
                    a.shape()
                ),
            })
        };
        // Parameters are resolved first for every logged input, so a parameter created by
        // operators during deferred initialization is still a parameter.
        for e in &log.entries {
            let mut ins = Vec::with_capacity(e.inputs.len());
            for a in &e.inputs {
                ins.push(resolve(
                    a,
                    &by_id,
                    &mut values,
                    &mut used_params,
                    &mut param_value,
                )?);
            }
            let v = values.len();
            values.push(ValueInfo::of(&e.output));
            by_id.insert(e.output.id(), v);
            nodes.push(Node {
                op: e.op.clone(),
                inputs: ins,
                output: v,
            });
        }
        let mut outs = Vec::new();
        for o in outputs {
            outs.push(resolve(
                o,
                &by_id,
                &mut values,
                &mut used_params,
                &mut param_value,
            )?);
        }
        // Dead-node elimination: keep what the outputs need, and every node that must run
        // once per run (`Op::runs_once`: a running statistic's update has no reader).
        let mut live = vec![false; values.len()];
        for &o in &outs {
            live[o] = true;
        }
        let mut keep = vec![false; nodes.len()];
        for (i, n) in nodes.iter().enumerate().rev() {
            if live[n.output] || n.op.runs_once() {
                keep[i] = true;
                for &x in &n.inputs {
                    live[x] = true;
                }
            }
        }
        let nodes: Vec<Node> = nodes
            .into_iter()
            .zip(keep)
            .filter_map(|(n, k)| k.then_some(n))
            .collect();
        used_params.retain(|p| live[p.value]);
        // Renumber the surviving values densely: inputs, parameters, node outputs in order.
        Graph::renumbered(
            &values,
            input_names.to_vec(),
            in_ids,
            used_params,
            &nodes,
            outs,
        )
    }

    /// The graph of `nodes` (ids into `values`) with the given inputs, parameters and
    /// outputs, its values renumbered densely (inputs, parameters, node outputs in order) and
    /// validated as [`Graph::new`] does; a node or output reading a value none of them defines
    /// is an error. (A trace's surviving nodes; the halves of a split graph.)
    pub(crate) fn renumbered(
        values: &[ValueInfo],
        input_names: Vec<String>,
        inputs: Vec<usize>,
        params: Vec<ParamInfo>,
        nodes: &[Node],
        outputs: Vec<usize>,
    ) -> std::result::Result<Graph, String> {
        let mut map = vec![usize::MAX; values.len()];
        let mut new_values = Vec::new();
        let mut take = |v: usize, map: &mut Vec<usize>| {
            if map[v] == usize::MAX {
                map[v] = new_values.len();
                new_values.push(values[v].clone());
            }
            map[v]
        };
        let inputs: Vec<usize> = inputs.iter().map(|&v| take(v, &mut map)).collect();
        let params: Vec<ParamInfo> = params
            .into_iter()
            .map(|p| ParamInfo {
                value: take(p.value, &mut map),
                ..p
            })
            .collect();
        let defined = |x: usize, map: &[usize], what: &dyn Fn() -> String| match map[x] {
            usize::MAX => Err(format!(
                "{} reads value {x}, which the graph does not define",
                what()
            )),
            m => Ok(m),
        };
        let mut new_nodes = Vec::with_capacity(nodes.len());
        for n in nodes {
            let ins = n
                .inputs
                .iter()
                .map(|&x| defined(x, &map, &|| format!("node '{}'", n.op.name())))
                .collect::<std::result::Result<Vec<_>, String>>()?;
            new_nodes.push(Node {
                op: n.op.clone(),
                inputs: ins,
                output: take(n.output, &mut map),
            });
        }
        let outputs = outputs
            .iter()
            .map(|&v| defined(v, &map, &|| "an output".to_string()))
            .collect::<std::result::Result<Vec<_>, String>>()?;
        Graph::new(new_values, input_names, inputs, params, new_nodes, outputs)
            .map_err(|e| e.to_string())
    }

    /// A graph from its parts (an imported file), validated: every id in range, every value
    /// defined exactly once (as an input, a parameter or a node's output) before it is read,
    /// operator arities, unique non-empty parameter names, shapes whose sizes fit `usize`,
    /// csr values 2-D. A node that folds its producer into itself (`bias_act` with `absorb`)
    /// does so only where its first input has no other reader.
    pub fn new(
        values: Vec<ValueInfo>,
        input_names: Vec<String>,
        inputs: Vec<usize>,
        params: Vec<ParamInfo>,
        mut nodes: Vec<Node>,
        outputs: Vec<usize>,
    ) -> Result<Graph> {
        let n = values.len();
        let bad = |msg: String| Err(Error::arg(OP, msg));
        if input_names.len() != inputs.len() {
            return bad(format!(
                "{} input names for {} inputs",
                input_names.len(),
                inputs.len()
            ));
        }
        for (i, v) in values.iter().enumerate() {
            if v.shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .is_none()
            {
                return bad(format!("value {i}: shape {:?} is too large", v.shape));
            }
            if v.stype != SType::Dense && v.shape.len() != 2 && v.stype == SType::Csr {
                return bad(format!(
                    "value {i}: a csr value must be 2-D, got {:?}",
                    v.shape
                ));
            }
        }
        let mut defined = vec![false; n];
        let define = |v: usize, what: &str, defined: &mut Vec<bool>| -> Result<()> {
            if v >= n {
                return Err(Error::arg(
                    OP,
                    format!("{what} names value {v}, but the graph has {n} values"),
                ));
            }
            if defined[v] {
                return Err(Error::arg(
                    OP,
                    format!("{what} defines value {v} a second time"),
                ));
            }
            defined[v] = true;
            Ok(())
        };
        for &v in &inputs {
            define(v, "an input", &mut defined)?;
        }
        let mut names = std::collections::HashSet::new();
        for p in &params {
            if p.name.is_empty() || !names.insert(p.name.as_str()) {
                return bad(format!(
                    "parameter name '{}' is empty or used twice",
                    p.name
                ));
            }
            define(p.value, &format!("parameter '{}'", p.name), &mut defined)?;
        }
        let mut readers = vec![0usize; n];
        for (i, node) in nodes.iter().enumerate() {
            if node.inputs.len() != node.op.arity() {
                return bad(format!(
                    "node {i} ({}) has {} inputs, the operator takes {}",
                    node.op.name(),
                    node.inputs.len(),
                    node.op.arity()
                ));
            }
            for &x in &node.inputs {
                if x >= n || !defined[x] {
                    return bad(format!(
                        "node {i} ({}) reads value {x} before it is defined",
                        node.op.name()
                    ));
                }
                readers[x] += 1;
            }
            define(
                node.output,
                &format!("node {i} ({})", node.op.name()),
                &mut defined,
            )?;
        }
        if outputs.is_empty() {
            return bad("the graph has no outputs".into());
        }
        let mut is_output = vec![false; n];
        for &o in &outputs {
            if o >= n || !defined[o] {
                return bad(format!("output value {o} is not defined"));
            }
            is_output[o] = true;
        }
        if let Some(v) = (0..n).find(|&v| !defined[v]) {
            return bad(format!("value {v} is never defined"));
        }
        // Folding a producer into a node is only safe for a value nothing else reads; the
        // node's first input must also be a node output (a product), not an input or param.
        let produced: Vec<bool> = {
            let mut p = vec![false; n];
            for node in &nodes {
                p[node.output] = true;
            }
            p
        };
        for node in nodes.iter_mut() {
            if let Op::BiasAct { absorb, .. } = &mut node.op {
                let y = node.inputs[0];
                if *absorb && (readers[y] != 1 || is_output[y] || !produced[y]) {
                    *absorb = false;
                }
            }
        }
        let mut last_use = vec![None; n];
        for (i, node) in nodes.iter().enumerate() {
            for &x in &node.inputs {
                last_use[x] = Some(i);
            }
        }
        Ok(Graph {
            values,
            input_names,
            inputs,
            params,
            nodes,
            outputs,
            last_use,
            is_output,
        })
    }

    /// Every value's info, by id.
    pub fn values(&self) -> &[ValueInfo] {
        &self.values
    }
    /// The names of the inputs, in call order.
    pub fn input_names(&self) -> &[String] {
        &self.input_names
    }
    /// Input value ids, in call order.
    pub fn inputs(&self) -> &[usize] {
        &self.inputs
    }
    /// The parameters the graph reads, in the order [`Graph::run`] takes them.
    pub fn params(&self) -> &[ParamInfo] {
        &self.params
    }
    /// Nodes in execution order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }
    /// Output value ids.
    pub fn outputs(&self) -> &[usize] {
        &self.outputs
    }
    /// The last node reading each value (`None`: none reads it).
    pub fn last_use(&self) -> &[Option<usize>] {
        &self.last_use
    }
    /// Whether each value is a graph output.
    pub fn is_output(&self) -> &[bool] {
        &self.is_output
    }

    /// True when `inputs` have the shapes, dtypes and storage types of the graph's inputs.
    pub fn accepts(&self, inputs: &[NDArray]) -> bool {
        inputs.len() == self.inputs.len()
            && inputs
                .iter()
                .zip(&self.inputs)
                .all(|(a, &v)| self.values[v].matches(a))
    }

    /// Run the graph on `inputs` and `params` (in [`Graph::params`] order). Every array must
    /// have the shape, dtype and storage type the graph was built for, and so must every node's
    /// output (a graph file that lies about a shape fails at that node). Each value is
    /// released after its last reader. Under `autograd::record` the nodes record their
    /// backwards as the eager operators do.
    pub fn run(&self, inputs: &[NDArray], params: &[NDArray]) -> Result<Vec<NDArray>> {
        self.check_call(inputs, params)?;
        let mut slots: Vec<Option<NDArray>> = vec![None; self.values.len()];
        for (a, &v) in inputs.iter().zip(&self.inputs) {
            slots[v] = Some(a.clone());
        }
        for (a, p) in params.iter().zip(&self.params) {
            slots[p.value] = Some(a.clone());
        }
        self.run_nodes(slots)
    }

    /// The checks of a call: as many inputs and parameters as the graph takes, each with the
    /// shape, dtype and storage type the graph was built for.
    pub(crate) fn check_call(&self, inputs: &[NDArray], params: &[NDArray]) -> Result<()> {
        if inputs.len() != self.inputs.len() || params.len() != self.params.len() {
            return Err(Error::arg(
                OP,
                format!(
                    "the graph takes {} inputs and {} parameters, got {} and {}",
                    self.inputs.len(),
                    self.params.len(),
                    inputs.len(),
                    params.len()
                ),
            ));
        }
        for ((a, &v), name) in inputs.iter().zip(&self.inputs).zip(&self.input_names) {
            let info = &self.values[v];
            if !info.matches(a) {
                return Err(Error::shape(
                    OP,
                    format!(
                        "input '{name}' is {}, the graph was built for {}",
                        ValueInfo::of(a).describe(),
                        info.describe()
                    ),
                ));
            }
        }
        for (a, p) in params.iter().zip(&self.params) {
            let info = &self.values[p.value];
            if !info.matches(a) {
                return Err(Error::shape(
                    OP,
                    format!(
                        "parameter '{}' is {}, the graph was built for {}",
                        p.name,
                        ValueInfo::of(a).describe(),
                        info.describe()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Replay the nodes with `slots` holding the inputs and parameters.
    fn run_nodes(&self, mut slots: Vec<Option<NDArray>>) -> Result<Vec<NDArray>> {
        let mut args: Vec<NDArray> = Vec::with_capacity(3);
        for (i, node) in self.nodes.iter().enumerate() {
            args.clear();
            for (k, &x) in node.inputs.iter().enumerate() {
                // A node reading one value twice (`x * x`) takes the second from the first.
                if let Some(j) = node.inputs[..k].iter().position(|&y| y == x) {
                    let a = args[j].clone();
                    args.push(a);
                    continue;
                }
                // At its last reader the slot lets go, so the value is freed as soon as this
                // node is done with it.
                let a = if self.last_use[x] == Some(i) && !self.is_output[x] {
                    slots[x].take()
                } else {
                    slots[x].clone()
                };
                args.push(a.ok_or_else(|| {
                    Error::arg(OP, format!("node {i} reads value {x}, which holds nothing"))
                })?);
            }
            let out = node.op.apply(&args)?;
            let info = &self.values[node.output];
            if !info.matches(&out) {
                return Err(Error::shape(
                    OP,
                    format!(
                        "node {i} ({}) produced {}, the graph says {}",
                        node.op.name(),
                        ValueInfo::of(&out).describe(),
                        info.describe()
                    ),
                ));
            }
            slots[node.output] = Some(out);
        }
        args.clear();
        self.outputs
            .iter()
            .map(|&o| {
                slots[o]
                    .clone()
                    .ok_or_else(|| Error::arg(OP, format!("output value {o} holds nothing")))
            })
            .collect()
    }
}
