//! Running a graph out of its memory plan: the buffers of the plan are allocated at the first
//! run and reused by every later one; each node with a "write into" form ([`Form`]) writes its
//! output into its planned buffer, in place of its dying input where the plan says so; nodes
//! without one run the eager operator (which allocates; [`MemoryPlan::fallback`] lists them).
//!
//! Every value a node defines has one array handle, kept across runs, and a planned buffer
//! lives in the handle of the value that holds it now: when the next value of that buffer is
//! computed, the buffer moves (a swap of storages, no allocation) into that value's handle.
//!
//! Outputs are handed out, not copied: the caller gets the output's handle. If the caller still
//! holds it (or any array sharing its buffer) when a later run would write that buffer, the
//! executor leaves it to the caller and makes a new handle and buffer for itself (so a kept
//! output never changes under its holder); a caller that lets go of its outputs before the next
//! run gets runs without allocations. Chains of map nodes run fused (`fuse.rs`). Nothing is
//! recorded: under `autograd::record` the graph runs through [`Graph::run`], whose operators
//! record the tape.

use std::sync::Arc;

use super::fuse::{map_chains, Chain};
use super::into::Form;
use super::ir::Graph;
use super::plan::{node_forms, MemoryPlan};
use crate::storage::{Map, Storage};
use crate::{ArrayData, DenseData, Device, Error, NDArray, Result, Shape};

const OP: &str = "graph executor";

/// Where a value comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Source {
    /// The call's input `k`.
    Input(usize),
    /// The call's parameter `k`.
    Param(usize),
    /// A node's output.
    Node,
}

/// A graph with its memory plan and the buffers of the plan (see the module docs).
pub struct Executor {
    graph: Arc<Graph>,
    plan: MemoryPlan,
    forms: Vec<Option<Form>>,
    source: Vec<Source>,
    /// Per value: a fallback node's output that the node can rewrite in place
    /// ([`Op::apply_over`](super::Op::apply_over)); as a graph output its handle is kept
    /// after the run, so the next run rewrites it if the caller let it go.
    rewritable: Vec<bool>,
    /// Per value defined by a node: its handle (kept across runs for planned values and
    /// rewritable outputs; released after the last reader for other fallback outputs).
    handles: Vec<Option<NDArray>>,
    /// Per planned buffer: the value whose handle holds it now.
    holder: Vec<Option<usize>>,
    /// Argument handles of a fallback node (capacity kept across runs).
    scratch: Vec<NDArray>,
    /// Fused chains of map nodes (`fuse.rs`).
    chains: Vec<Chain>,
    /// Per node: the chain it belongs to.
    chain_of: Vec<Option<usize>>,
    /// The device of the planned buffers (that of the last run's operands).
    device: Device,
    /// Run `check_class_ids` nodes as copies: their inputs were checked by the caller (a
    /// captured CUDA graph cannot read labels on the host; see [`Executor::host_checks`]).
    checks_done: bool,
}

impl Executor {
    /// An executor of `graph` (buffers are allocated by the first run).
    pub fn new(graph: Arc<Graph>) -> Executor {
        let plan = MemoryPlan::of(&graph);
        let forms = node_forms(&graph, true);
        let mut source = vec![Source::Node; graph.values().len()];
        for (k, &v) in graph.inputs().iter().enumerate() {
            source[v] = Source::Input(k);
        }
        for (k, p) in graph.params().iter().enumerate() {
            source[p.value] = Source::Param(k);
        }
        let (chains, chain_of) = chains_of(&graph, &forms, &plan);
        let rewritable = rewritable_of(&graph, &forms);
        Executor {
            rewritable,
            chains,
            chain_of,
            handles: vec![None; graph.values().len()],
            holder: vec![None; plan.slot_bytes.len()],
            scratch: Vec::with_capacity(3),
            graph,
            plan,
            forms,
            source,
            device: Device::Cpu,
            checks_done: false,
        }
    }

    /// Plan for `device` (the CPU's plan shares a buffer across sizes, a CUDA device's only
    /// within one size) and drop the buffers of the last one.
    fn plan_for(&mut self, device: Device) {
        self.plan = match device {
            Device::Cpu => MemoryPlan::of(&self.graph),
            _ => MemoryPlan::exact_sizes(&self.graph),
        };
        // A device runs forms without device kernels as eager nodes (see `node_forms`).
        self.forms = node_forms(&self.graph, device == Device::Cpu);
        self.rewritable = rewritable_of(&self.graph, &self.forms);
        (self.chains, self.chain_of) = chains_of(&self.graph, &self.forms, &self.plan);
        self.handles = vec![None; self.graph.values().len()];
        self.holder = vec![None; self.plan.slot_bytes.len()];
        self.device = device;
    }

    /// The device the planned buffers are on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The checks of the graph's label nodes that read the labels on the host
    /// (`check_class_ids`, and `one_hot` of float ids, which checks they are whole numbers),
    /// as the call input each checks: what a caller that runs the graph without host reads
    /// ([`Executor::set_checks_done`]) checks itself first. An error names a node whose
    /// operand is not a call input (nor the checked labels of one).
    pub(crate) fn host_checks(&self) -> std::result::Result<Vec<(usize, HostCheck)>, String> {
        let nodes = self.graph.nodes();
        let mut producer = vec![None; self.graph.values().len()];
        for (i, n) in nodes.iter().enumerate() {
            producer[n.output] = Some(i);
        }
        let mut checks = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            let Some(&x) = node.inputs.first() else {
                continue;
            };
            // The value checked on the host: a call input (before any reshapes, which keep
            // the values), or `None` where a label check of a call input made it (checked).
            let (checked, check) = match node.op {
                super::op::Op::CheckClassIds { classes, count } => {
                    (Some(x), HostCheck::ClassIds { classes, count })
                }
                super::op::Op::OneHot { .. } if self.graph.values()[x].dtype.is_float() => {
                    let mut from = Some(x);
                    while let Some(p) = from.and_then(|v| producer[v]) {
                        match nodes[p].op {
                            super::op::Op::Reshape(_) => from = Some(nodes[p].inputs[0]),
                            super::op::Op::CheckClassIds { .. }
                                if matches!(self.source[nodes[p].inputs[0]], Source::Input(_)) =>
                            {
                                from = None;
                            }
                            _ => break,
                        }
                    }
                    (from, HostCheck::WholeIds)
                }
                _ => continue,
            };
            match checked.map(|v| self.source[v]) {
                None => {}
                Some(Source::Input(k)) => checks.push((k, check)),
                Some(_) => {
                    return Err(format!(
                        "node {i} ({}) reads values on the host that are not a call input",
                        node.op.name()
                    ))
                }
            }
        }
        Ok(checks)
    }

    /// Run `check_class_ids` nodes as copies and `one_hot` without its check of whole numbers
    /// (`true`): the caller checked their inputs ([`Executor::host_checks`]).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn set_checks_done(&mut self, done: bool) {
        self.checks_done = done;
    }

    /// True when every output of the graph lives in a planned buffer (none is made by an
    /// eager operator at each run).
    pub(crate) fn outputs_planned(&self) -> bool {
        self.graph
            .outputs()
            .iter()
            .all(|&o| self.plan.slot_of[o].is_some())
    }

    /// Make every output's buffer this executor's alone, so that the next run may write it
    /// where it is (a captured CUDA graph writes fixed addresses): an output the caller still
    /// holds keeps its values in a copy of the buffer (its array now shows the copy), and the
    /// executor keeps the buffer itself under a new handle. `false` where an output's buffer
    /// is shared by another array (a view the caller made): that run must take new buffers.
    pub(crate) fn reclaim_outputs(&mut self) -> Result<bool> {
        for &o in self.graph.outputs() {
            let Some(h) = self.handles[o].as_ref() else {
                return Ok(false);
            };
            let mine = {
                let mut w = h.write();
                let ArrayData::Dense(d) = &mut *w else {
                    return Ok(false);
                };
                if !d.buf.is_unshared() {
                    return Ok(false);
                }
                if Arc::strong_count(&h.inner) == 1 {
                    continue;
                }
                let copy = d.buf.duplicate()?;
                DenseData {
                    shape: d.shape.clone(),
                    buf: std::mem::replace(&mut d.buf, copy),
                }
            };
            self.handles[o] = Some(NDArray::from_data(ArrayData::Dense(mine)));
        }
        Ok(true)
    }

    /// The outputs of a run made outside [`Executor::run`] (a replayed CUDA graph wrote the
    /// planned buffers), handed out as [`Executor::run_to`] hands them.
    pub(crate) fn outputs_to(
        &mut self,
        inputs: &[NDArray],
        params: &[NDArray],
        outs: &mut Vec<NDArray>,
    ) -> Result<()> {
        outs.clear();
        for k in 0..self.graph.outputs().len() {
            let o = self.output(k, inputs, params)?;
            outs.push(o);
        }
        Ok(())
    }

    /// The graph.
    pub fn graph(&self) -> &Arc<Graph> {
        &self.graph
    }

    /// The memory plan it runs.
    pub fn plan(&self) -> &MemoryPlan {
        &self.plan
    }

    /// The operator names of the nodes that run the eager (allocating) operator, in order.
    pub fn fallback_ops(&self) -> Vec<&'static str> {
        self.plan
            .fallback
            .iter()
            .map(|&i| self.graph.nodes()[i].op.name())
            .collect()
    }

    /// The number of nodes of each fused chain of maps (see `fuse.rs`).
    pub fn fused_chains(&self) -> Vec<usize> {
        self.chains.iter().map(|c| c.tail - c.head + 1).collect()
    }

    /// Run the graph on `inputs` and `params` (in [`Graph::params`] order), as [`Graph::run`]
    /// does (same checks, same values), writing into the planned buffers, on the device of the
    /// operands (all on one device; buffers planned again when it changes). On a CUDA device
    /// nodes whose forms have no device kernels (`Form::has_device_kernels`) run their eager
    /// operator, whose result is the value; those that make a graph output copy it into the
    /// output's planned buffer.
    pub fn run(&mut self, inputs: &[NDArray], params: &[NDArray]) -> Result<Vec<NDArray>> {
        let mut outs = Vec::with_capacity(self.graph.outputs().len());
        self.run_to(inputs, params, &mut outs)?;
        Ok(outs)
    }

    /// [`Executor::run`] with the outputs written to `outs` (cleared first): a caller that
    /// keeps `outs` across runs reuses its capacity (a training step's gradients).
    pub fn run_to(
        &mut self,
        inputs: &[NDArray],
        params: &[NDArray],
        outs: &mut Vec<NDArray>,
    ) -> Result<()> {
        self.execute(inputs, params)?;
        self.outputs_to(inputs, params, outs)
    }

    /// [`Executor::run`] returning the first output only (a block's forward): no list is
    /// made, so a warm run of a graph whose nodes all have forms allocates nothing.
    pub fn run_first(&mut self, inputs: &[NDArray], params: &[NDArray]) -> Result<NDArray> {
        self.execute(inputs, params)?;
        self.output(0, inputs, params)
    }

    /// Output `k` of the last run, handed to the caller.
    fn output(&mut self, k: usize, inputs: &[NDArray], params: &[NDArray]) -> Result<NDArray> {
        let o = self.graph.outputs()[k];
        if self.plan.slot_of[o].is_some() {
            // Each run's output is a new array to its holder, though it reuses the buffer of
            // the last run's when the caller let that go.
            if let Some(h) = self.handles[o].as_mut() {
                h.renew_id();
            }
        }
        let a = self.value(o, inputs, params, usize::MAX)?.clone();
        if self.plan.slot_of[o].is_none() && self.source[o] == Source::Node && !self.rewritable[o] {
            // A fallback output is the caller's now.
            self.handles[o] = None;
        }
        Ok(a)
    }

    /// Run every node (the body of [`Executor::run`]).
    fn execute(&mut self, inputs: &[NDArray], params: &[NDArray]) -> Result<()> {
        let graph = self.graph.clone();
        graph.check_call(inputs, params)?;
        let device = inputs
            .iter()
            .chain(params)
            .next()
            .map_or(self.device, |a| a.device());
        if let Some(a) = inputs.iter().chain(params).find(|a| a.device() != device) {
            return Err(Error::arg(
                OP,
                format!(
                    "a planned run is on one device; operands are on {device:?} and {:?}",
                    a.device()
                ),
            ));
        }
        if device != self.device {
            self.plan_for(device);
        }
        let values = graph.values();
        for (i, node) in graph.nodes().iter().enumerate() {
            let v = node.output;
            if let Some(k) = self.chain_of[i] {
                let (head, tail) = (self.chains[k].head, self.chains[k].tail);
                if i != tail {
                    continue; // computed with the chain's last node
                }
                // The maps are lent out for the call (not cloned: a warm run allocates
                // nothing).
                let maps = std::mem::take(&mut self.chains[k].maps);
                let r = self.run_chain(head, &maps, v, inputs, params);
                self.chains[k].maps = maps;
                r?;
                self.release(&graph, head..=i);
                continue;
            }
            match self.forms[i] {
                Some(form) => {
                    let slot = self.plan.slot_of[v].ok_or_else(|| {
                        Error::arg(OP, format!("node {i} has a form but no planned buffer"))
                    })?;
                    self.acquire(v, slot)?;
                    let out = self.handles[v].take().expect("acquire made it");
                    let r = {
                        let mut args: [Option<&NDArray>; 3] = [None; 3];
                        for (k, &x) in node.inputs.iter().enumerate() {
                            args[k] = Some(self.value(x, inputs, params, i)?);
                        }
                        let args: smallvec::SmallVec<[&NDArray; 3]> = args
                            .iter()
                            .take(node.inputs.len())
                            .flatten()
                            .copied()
                            .collect();
                        // What the caller checked (see `set_checks_done`) runs unchecked.
                        let checked = if self.checks_done { Some(form) } else { None };
                        let mut w = out.write();
                        match (&mut *w, checked) {
                            (ArrayData::Dense(od), _) if self.plan.runs_in_place[i] => {
                                form.run_in_place(&args, od)
                            }
                            (ArrayData::Dense(od), Some(Form::CheckClassIds { .. })) => {
                                with_dense(args[0], |x| x.buf.copy_into(&mut od.buf))
                            }
                            (ArrayData::Dense(od), Some(Form::OneHot { depth, on, off })) => {
                                with_dense(args[0], |x| {
                                    let dtype = od.buf.dtype();
                                    x.buf.one_hot(depth, on, off, dtype)?.copy_into(&mut od.buf)
                                })
                            }
                            // The mask's key comes from the node's stream, one per run.
                            (ArrayData::Dense(od), _)
                                if self.device == Device::Cpu
                                    && matches!(form, Form::DropoutMask { .. }) =>
                            {
                                match &node.op {
                                    super::op::Op::DropoutMask { p, stream } => {
                                        od.buf.dropout_mask_into(*p, stream.next_key())
                                    }
                                    _ => Err(Error::arg(OP, "a mask form on another operator")),
                                }
                            }
                            (ArrayData::Dense(od), _)
                                if self.device == Device::Cpu || form.has_device_kernels() =>
                            {
                                form.write_into(&args, od)
                            }
                            // Elsewhere a form without device kernels runs the eager
                            // operator, whose result is copied into the planned buffer (the
                            // same bits as eagerly).
                            (ArrayData::Dense(od), _) => unchecked(node, &args, od),
                            _ => Err(Error::arg(OP, "a planned buffer is not dense")),
                        }
                    };
                    self.handles[v] = Some(out);
                    r.map_err(|e| Error::arg(OP, format!("node {i} ({}): {e}", node.op.name())))?;
                }
                None => {
                    self.scratch.clear();
                    for &x in &node.inputs {
                        let a = self.value(x, inputs, params, i)?.clone();
                        self.scratch.push(a);
                    }
                    // Last run's result, if nobody else holds it, is rewritten in place (a
                    // new id: a new array to its readers).
                    let mut prev = self.handles[v]
                        .take()
                        .filter(|h| Arc::strong_count(&h.inner) == 1);
                    let over = match &prev {
                        Some(p) => node.op.apply_over(&self.scratch, p),
                        None => Ok(false),
                    };
                    if let (Ok(true), Some(p)) = (&over, prev.as_mut()) {
                        self.scratch.clear();
                        p.renew_id();
                        self.handles[v] = prev;
                        self.release(&graph, i..=i);
                        continue;
                    }
                    drop(prev);
                    let r = over.and_then(|_| node.op.apply(&self.scratch));
                    self.scratch.clear();
                    let out = r?;
                    if !values[v].matches(&out) {
                        return Err(Error::shape(
                            OP,
                            format!(
                                "node {i} ({}) produced {:?}, the graph says {:?}",
                                node.op.name(),
                                out.shape(),
                                values[v].shape
                            ),
                        ));
                    }
                    self.handles[v] = Some(out);
                }
            }
            self.release(&graph, i..=i);
        }
        Ok(())
    }

    /// Fallback outputs are released after their last reader (among `nodes`), as
    /// `Graph::run` does; planned values keep their handles (their buffers are the plan's).
    fn release(&mut self, graph: &Graph, nodes: std::ops::RangeInclusive<usize>) {
        for i in nodes {
            for &x in &graph.nodes()[i].inputs {
                if self.source[x] == Source::Node
                    && graph.last_use()[x] == Some(i)
                    && !graph.is_output()[x]
                    && self.plan.slot_of[x].is_none()
                {
                    self.handles[x] = None;
                }
            }
        }
    }

    /// Compute the chain of maps `maps` starting at node `head` into value `v`, its last
    /// node's output: in place over the head's input where the plan runs the head in place.
    fn run_chain(
        &mut self,
        head: usize,
        maps: &[Map],
        v: usize,
        inputs: &[NDArray],
        params: &[NDArray],
    ) -> Result<()> {
        let slot = self.plan.slot_of[v]
            .ok_or_else(|| Error::arg(OP, format!("a fused chain at node {head} has no buffer")))?;
        self.acquire(v, slot)?;
        let out = self.handles[v].take().expect("acquire made it");
        let r = {
            let mut w = out.write();
            match &mut *w {
                ArrayData::Dense(od) if self.plan.runs_in_place[head] => {
                    od.buf.map_chain_in_place(maps)
                }
                ArrayData::Dense(od) => {
                    let x = self.graph.nodes()[head].inputs[0];
                    let a = self.value(x, inputs, params, head)?;
                    let g = a.read();
                    match &*g {
                        ArrayData::Dense(xd) if xd.buf.len() == od.buf.len() => {
                            xd.buf.map_chain_into(maps, &mut od.buf)
                        }
                        _ => Err(Error::arg(OP, "a fused chain's input is not its size")),
                    }
                }
                _ => Err(Error::arg(OP, "a planned buffer is not dense")),
            }
        };
        self.handles[v] = Some(out);
        r.map_err(|e| Error::arg(OP, format!("fused chain from node {head}: {e}")))
    }

    /// The array of value `x` for node `i`.
    fn value<'a>(
        &'a self,
        x: usize,
        inputs: &'a [NDArray],
        params: &'a [NDArray],
        i: usize,
    ) -> Result<&'a NDArray> {
        match self.source[x] {
            Source::Input(k) => Ok(&inputs[k]),
            Source::Param(k) => Ok(&params[k]),
            Source::Node => self.handles[x].as_ref().ok_or_else(|| {
                Error::arg(OP, format!("node {i} reads value {x}, which holds nothing"))
            }),
        }
    }

    /// Make value `v`'s handle one only this executor holds, with buffer `slot` in it.
    fn acquire(&mut self, v: usize, slot: usize) -> Result<()> {
        let info = &self.graph.values()[v];
        let mine = self.handles[v]
            .as_ref()
            .is_some_and(|h| Arc::strong_count(&h.inner) == 1);
        if !mine {
            // First run, or the caller kept this output: a new handle (the kept one, and the
            // buffer in it, stay the caller's).
            self.handles[v] = Some(NDArray::from_data(ArrayData::Dense(DenseData {
                shape: Shape::from_slice(&info.shape),
                buf: Storage::zeros_on(info.dtype, 0, self.device)?,
            })));
            if self.holder[slot] == Some(v) {
                self.holder[slot] = None;
            }
        }
        let hv = self.handles[v].as_ref().expect("made above");
        match self.holder[slot] {
            Some(u) if u == v => {}
            Some(u) => {
                let hu = self.handles[u]
                    .as_ref()
                    .filter(|h| Arc::strong_count(&h.inner) == 1);
                match hu {
                    Some(hu) => {
                        // Move the buffer over; `u` (dead, or recomputed later) gets `v`'s
                        // placeholder.
                        let (mut a, mut b) = (hu.write(), hv.write());
                        match (&mut *a, &mut *b) {
                            (ArrayData::Dense(x), ArrayData::Dense(y)) => {
                                std::mem::swap(&mut x.buf, &mut y.buf)
                            }
                            _ => return Err(Error::arg(OP, "a planned buffer is not dense")),
                        }
                    }
                    None => {
                        // `u` was an output the caller still holds: it keeps that buffer.
                        fill(hv, slot, &self.plan, self.device)?;
                        self.handles[u] = None;
                    }
                }
            }
            None => fill(hv, slot, &self.plan, self.device)?,
        }
        self.holder[slot] = Some(v);
        // The buffer may be larger than the value (the plan shares buffers across sizes): the
        // value sees its first elements. A buffer that cannot change its view (shared with an
        // array the caller holds, or replaced by a copy on a write) is replaced by a new one.
        let n: usize = info.shape.iter().product();
        let hv = self.handles[v].as_ref().expect("made above");
        if !set_len(hv, n)? {
            fill(hv, slot, &self.plan, self.device)?;
            if !set_len(hv, n)? {
                return Err(Error::arg(
                    OP,
                    format!("value {v} of {n} elements does not fit its planned buffer"),
                ));
            }
        }
        Ok(())
    }
}

/// Per value: made by a node without a form whose operator can rewrite last run's result in
/// place ([`super::op::Op::rewrites_over`]).
fn rewritable_of(graph: &Graph, forms: &[Option<Form>]) -> Vec<bool> {
    let mut rewritable = vec![false; graph.values().len()];
    for (n, form) in graph.nodes().iter().zip(forms) {
        rewritable[n.output] = form.is_none() && n.op.rewrites_over();
    }
    rewritable
}

/// Make `h`'s buffer show `n` elements (no allocation): `false` where it cannot.
fn set_len(h: &NDArray, n: usize) -> Result<bool> {
    match &mut *h.write() {
        ArrayData::Dense(d) => Ok(d.buf.len() == n || d.buf.set_view_len(n)),
        _ => Err(Error::arg(OP, "a planned buffer is not dense")),
    }
}

/// Put a new buffer of `slot`'s size and dtype on `device` into `h`.
fn fill(h: &NDArray, slot: usize, plan: &MemoryPlan, device: Device) -> Result<()> {
    let dtype = plan.slot_dtype[slot];
    let n = plan.slot_bytes[slot] / dtype.size_of();
    let buf = Storage::zeros_on(dtype, n, device)?;
    match &mut *h.write() {
        ArrayData::Dense(d) => d.buf = buf,
        _ => return Err(Error::arg(OP, "a planned buffer is not dense")),
    }
    Ok(())
}

/// The fused map chains of a plan, and per node the chain it belongs to.
fn chains_of(
    graph: &Graph,
    forms: &[Option<Form>],
    plan: &MemoryPlan,
) -> (Vec<Chain>, Vec<Option<usize>>) {
    let chains = map_chains(graph, forms, plan);
    let mut chain_of = vec![None; graph.nodes().len()];
    for (k, c) in chains.iter().enumerate() {
        for slot in &mut chain_of[c.head..=c.tail] {
            *slot = Some(k);
        }
    }
    (chains, chain_of)
}

/// What a caller checks on the host for a graph run without host reads
/// ([`Executor::host_checks`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum HostCheck {
    /// `check_class_ids`: `count` whole numbers in `[0, classes)`.
    ClassIds {
        /// Number of classes.
        classes: usize,
        /// Number of labels.
        count: usize,
    },
    /// `one_hot` of float ids: whole numbers.
    WholeIds,
}

impl HostCheck {
    /// Run the check on `x` (the eager operator's error).
    pub(crate) fn run(&self, x: &NDArray) -> Result<()> {
        match *self {
            HostCheck::ClassIds { classes, count } => x.check_class_ids(classes, count).map(drop),
            HostCheck::WholeIds => crate::ops::axis::index_values("one_hot", x).map(drop),
        }
    }
}

/// A node's eager operator on `args`, its result copied into the planned buffer `od` (a form
/// without device kernels on a device).
fn unchecked(node: &super::ir::Node, args: &[&NDArray], od: &mut DenseData) -> Result<()> {
    let owned: smallvec::SmallVec<[NDArray; 3]> = args.iter().map(|a| (*a).clone()).collect();
    let r = node.op.apply(&owned)?;
    with_dense(&r, |rd| rd.buf.copy_into(&mut od.buf))
}

/// Run `f` on the dense storage of `a` (read-locked for the call).
fn with_dense<R>(a: &NDArray, f: impl FnOnce(&DenseData) -> Result<R>) -> Result<R> {
    match &*a.read() {
        ArrayData::Dense(d) => f(d),
        _ => Err(Error::arg(OP, "a planned node read a sparse value")),
    }
}
