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
//! run gets runs without allocations. Chains of map nodes run fused (`fuse.rs`). Inference only: under `autograd::record` the graph runs
//! through [`Graph::run`], whose operators record the tape.

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
    /// Per value defined by a node: its handle (kept across runs for planned values; released
    /// after the last reader for fallback outputs).
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
        let forms = node_forms(&graph);
        let mut source = vec![Source::Node; graph.values().len()];
        for (k, &v) in graph.inputs().iter().enumerate() {
            source[v] = Source::Input(k);
        }
        for (k, p) in graph.params().iter().enumerate() {
            source[p.value] = Source::Param(k);
        }
        let (chains, chain_of) = chains_of(&graph, &forms, &plan);
        Executor {
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
        (self.chains, self.chain_of) = chains_of(&self.graph, &self.forms, &self.plan);
        self.handles = vec![None; self.graph.values().len()];
        self.holder = vec![None; self.plan.slot_bytes.len()];
        self.device = device;
    }

    /// The device the planned buffers are on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The label checks of the graph as (call input, classes, count): what a caller that runs
    /// the graph without host reads ([`Executor::set_checks_done`]) checks itself first. An
    /// error names a check whose operand is not a call input.
    pub(crate) fn host_checks(&self) -> std::result::Result<Vec<(usize, usize, usize)>, String> {
        let mut checks = Vec::new();
        for (i, node) in self.graph.nodes().iter().enumerate() {
            if let super::op::Op::CheckClassIds { classes, count } = node.op {
                match self.source[node.inputs[0]] {
                    Source::Input(k) => checks.push((k, classes, count)),
                    _ => {
                        return Err(format!(
                            "node {i} checks labels that are not a call input on the host"
                        ))
                    }
                }
            }
        }
        Ok(checks)
    }

    /// Run `check_class_ids` nodes as copies (`true`): the caller checked their inputs
    /// ([`Executor::host_checks`]).
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

    /// True when no one but this executor holds an output of the last run or shares its
    /// buffer: the next run may write them where they are.
    pub(crate) fn outputs_free(&self) -> bool {
        self.graph.outputs().iter().all(|&o| {
            self.handles[o].as_ref().is_some_and(|h| {
                Arc::strong_count(&h.inner) == 1
                    && matches!(&*h.read(), ArrayData::Dense(d) if d.buf.is_unshared())
            })
        })
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
    /// does (same checks, same values), writing into the planned buffers. Host arrays only:
    /// arrays on another device are an error naming it (run those through [`Graph::run`]).
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
        outs.clear();
        self.execute(inputs, params)?;
        for k in 0..self.graph.outputs().len() {
            let o = self.output(k, inputs, params)?;
            outs.push(o);
        }
        Ok(())
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
        if self.plan.slot_of[o].is_none() && self.source[o] == Source::Node {
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
                        let mut w = out.write();
                        match &mut *w {
                            ArrayData::Dense(od) if self.plan.runs_in_place[i] => {
                                form.run_in_place(&args, od)
                            }
                            ArrayData::Dense(od) if self.checks_done && is_check(&form) => {
                                with_dense(args[0], |x| x.buf.copy_into(&mut od.buf))
                            }
                            ArrayData::Dense(od)
                                if self.device == Device::Cpu || form.has_device_kernels() =>
                            {
                                form.write_into(&args, od)
                            }
                            // Elsewhere a form without device kernels runs the eager
                            // operator, whose result is copied into the planned buffer (the
                            // same bits as eagerly).
                            ArrayData::Dense(od) => {
                                let owned: smallvec::SmallVec<[NDArray; 3]> =
                                    args.iter().map(|a| (*a).clone()).collect();
                                node.op.apply(&owned).and_then(|r| {
                                    with_dense(&r, |rd| rd.buf.copy_into(&mut od.buf))
                                })
                            }
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
                    let r = node.op.apply(&self.scratch);
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

/// A label check (run as a copy once its caller has checked the labels).
fn is_check(form: &Form) -> bool {
    matches!(form, Form::CheckClassIds { .. })
}

/// Run `f` on the dense storage of `a` (read-locked for the call).
fn with_dense<R>(a: &NDArray, f: impl FnOnce(&DenseData) -> Result<R>) -> Result<R> {
    match &*a.read() {
        ArrayData::Dense(d) => f(d),
        _ => Err(Error::arg(OP, "a planned node read a sparse value")),
    }
}
