//! One graph per input signature, as Gluon's CachedOp keeps them: the first call with a
//! signature traces the forward (which also computes the result eagerly), later calls run
//! the graph; a forward that cannot be traced runs eagerly for that signature, with a message
//! printed once saying which block and why. Inference runs go through the graph's
//! [`Executor`] (its memory plan, buffers reused across calls); runs under `autograd::record`
//! run the graph's forward and record one tape node whose backward runs the graph's backward
//! (`recorded.rs`), or, where the graph has no backward, replay the operators so that they
//! record the tape.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::exec::Executor;
use super::ir::Graph;
use super::recorded::Recorded;
use super::trace::{is_tracing, trace};
use crate::{autograd, DType, NDArray, Result, SType};

/// What selects a graph: each input's shape, dtype and storage type, and the training flag
/// (Dropout and BatchNorm compute differently in training).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Signature {
    /// Per input: shape, dtype, storage type.
    pub inputs: Vec<(Vec<usize>, DType, SType)>,
    /// `autograd::is_training()` at the call.
    pub training: bool,
}

impl Signature {
    /// The signature of a call with `inputs` in the current training mode.
    pub fn of(inputs: &[NDArray]) -> Signature {
        Signature {
            inputs: inputs
                .iter()
                .map(|a| (a.shape(), a.dtype(), a.stype()))
                .collect(),
            training: autograd::is_training(),
        }
    }
}

/// A graph and the ways it runs: its [`Executor`] (made at the first run outside
/// `autograd::record`), and its split forward and backward for runs under `record`
/// (`recorded.rs`), per set of inputs and parameters that need a gradient (`None`: the graph
/// has no backward for it, and such runs replay the operators). What a hybridized block's
/// cache holds per signature, and what an imported graph runs through.
pub struct CompiledGraph {
    name: String,
    graph: Arc<Graph>,
    exec: Mutex<Option<Executor>>,
    recorded: Mutex<Vec<RecordedEntry>>,
    /// Runs so far by way (see [`RunCounts`]).
    planned: AtomicUsize,
    recorded_runs: AtomicUsize,
    replayed: AtomicUsize,
}

/// How a hybridized block's graph calls ran (after the tracing call): out of the executor's
/// memory plan (inference), as the split forward with one tape node (under
/// `autograd::record`), or by replaying the operators (a graph without a backward for what
/// was asked, operands on several devices, the executor busy on another thread). A model
/// whose calls replay gets none of the plan's buffers or fused kernels: this says whether
/// that happens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunCounts {
    /// Calls run by the planned executor.
    pub planned: usize,
    /// Calls under `record` run as the split forward (one tape node).
    pub recorded: usize,
    /// Calls that replayed the operators.
    pub replayed: usize,
}

impl std::ops::Add for RunCounts {
    type Output = RunCounts;
    fn add(self, o: RunCounts) -> RunCounts {
        RunCounts {
            planned: self.planned + o.planned,
            recorded: self.recorded + o.recorded,
            replayed: self.replayed + o.replayed,
        }
    }
}

/// Which inputs and parameters need a gradient, and the split for them (`None`: no graph
/// backward).
type RecordedEntry = (Vec<bool>, Option<Arc<Recorded>>);

impl CompiledGraph {
    /// `graph`, run as the type docs say; `name` (the block's) is for messages.
    pub fn new(graph: Arc<Graph>, name: &str) -> CompiledGraph {
        CompiledGraph {
            name: name.to_string(),
            graph,
            exec: Mutex::new(None),
            recorded: Mutex::new(Vec::new()),
            planned: AtomicUsize::new(0),
            recorded_runs: AtomicUsize::new(0),
            replayed: AtomicUsize::new(0),
        }
    }

    /// How this graph's calls ran so far.
    pub fn run_counts(&self) -> RunCounts {
        RunCounts {
            planned: self.planned.load(Ordering::Relaxed),
            recorded: self.recorded_runs.load(Ordering::Relaxed),
            replayed: self.replayed.load(Ordering::Relaxed),
        }
    }

    fn count(counter: &AtomicUsize) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The graph.
    pub fn graph(&self) -> &Arc<Graph> {
        &self.graph
    }

    /// Under `autograd::record`, with a gradient asked of an input or parameter: run the
    /// split forward and record one tape node whose backward runs the backward graph
    /// (`recorded.rs`). `None` where that cannot be done (operands on several devices, no
    /// graph backward, outputs of several dtypes, the forward busy on another thread): the
    /// caller replays.
    fn run_recorded(&self, inputs: &[NDArray], params: &[NDArray]) -> Result<Option<Vec<NDArray>>> {
        if !one_device(inputs, params) {
            return Ok(None);
        }
        self.graph.check_call(inputs, params)?;
        let wrt: Vec<bool> = inputs
            .iter()
            .chain(params)
            .map(NDArray::requires_grad)
            .collect();
        if !wrt.iter().any(|&w| w) {
            return Ok(None);
        }
        let rec = {
            let mut cache = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
            match cache.iter().find(|(w, _)| *w == wrt) {
                Some((_, r)) => r.clone(),
                None => {
                    let r = match Recorded::new(&self.graph, &wrt) {
                        Ok(r) => Some(Arc::new(r)),
                        Err(why) => {
                            eprintln!(
                                "hybridize: block '{}' replays its operators under \
                                 autograd::record: {why}",
                                self.name
                            );
                            None
                        }
                    };
                    cache.push((wrt, r.clone()));
                    r
                }
            }
        };
        let out = match rec {
            Some(r) => r.call(inputs, params)?,
            None => None,
        };
        if out.is_some() {
            Self::count(&self.recorded_runs);
        }
        Ok(out)
    }

    /// Run the graph: out of its memory plan when nothing records (inference); under
    /// `record`, the split forward with one tape node (`recorded.rs`), or else the operators
    /// (`Graph::run`: they build the tape for backward). The executor runs on the operands'
    /// device (CPU or CUDA); a run while another thread holds the executor, or on operands
    /// on several devices (the eager operators' error), replays too.
    pub fn run(&self, inputs: &[NDArray], params: &[NDArray]) -> Result<Vec<NDArray>> {
        if autograd::is_recording() {
            if let Some(outs) = self.run_recorded(inputs, params)? {
                return Ok(outs);
            }
        }
        match self.executor(inputs, params) {
            Some(mut e) => {
                Self::count(&self.planned);
                e.get_or_insert_with(|| Executor::new(self.graph.clone()))
                    .run(inputs, params)
            }
            None => {
                Self::count(&self.replayed);
                self.graph.run(inputs, params)
            }
        }
    }

    /// [`CompiledGraph::run`]'s first output (without making a list of outputs).
    pub fn run_first(&self, inputs: &[NDArray], params: &[NDArray]) -> Result<NDArray> {
        if autograd::is_recording() {
            if let Some(outs) = self.run_recorded(inputs, params)? {
                return first(outs);
            }
        }
        match self.executor(inputs, params) {
            Some(mut e) => {
                Self::count(&self.planned);
                e.get_or_insert_with(|| Executor::new(self.graph.clone()))
                    .run_first(inputs, params)
            }
            None => {
                Self::count(&self.replayed);
                first(self.graph.run(inputs, params)?)
            }
        }
    }

    /// The executor, when this run may use it.
    fn executor(
        &self,
        inputs: &[NDArray],
        params: &[NDArray],
    ) -> Option<std::sync::MutexGuard<'_, Option<Executor>>> {
        if autograd::is_recording() {
            return None;
        }
        if !one_device(inputs, params) {
            return None;
        }
        self.exec.try_lock().ok()
    }
}

/// True when every operand is on one device (a planned run is; operands on several devices
/// replay, so that the eager operator gives its error).
fn one_device(inputs: &[NDArray], params: &[NDArray]) -> bool {
    let mut all = inputs.iter().chain(params).map(NDArray::device);
    match all.next() {
        Some(d) => all.all(|e| e == d),
        None => true,
    }
}

/// The first of a graph's outputs (a graph has at least one).
fn first(outs: Vec<NDArray>) -> Result<NDArray> {
    outs.into_iter()
        .next()
        .ok_or_else(|| crate::Error::arg("graph", "the graph returned no output"))
}

#[derive(Clone)]
enum Entry {
    Graph(Arc<CompiledGraph>),
    Eager(String),
}

/// The cache of graphs of one hybridized block or function.
pub struct CachedGraph {
    name: String,
    input_names: Vec<String>,
    entries: Mutex<HashMap<Signature, Entry>>,
    last: Mutex<Option<Arc<Graph>>>,
    /// The graph of the latest call and its training flag: a call with the same signature
    /// (the common case: every step of a training loop) is recognized by comparing its inputs
    /// with the graph's, without building and hashing a [`Signature`].
    hit: Mutex<Option<(bool, Arc<CompiledGraph>)>>,
}

/// The parameters a forward may read, by hierarchical name, as they are now.
pub type ParamsFn<'a> = &'a dyn Fn() -> Result<Vec<(String, NDArray)>>;
/// The parameters a graph reads, in its order ([`Graph::params`]), as they are now.
/// (Shared, so that a caller can keep the list across calls: a step then allocates none.)
pub type GraphParamsFn<'a> = &'a dyn Fn(&Arc<Graph>) -> Result<Arc<[NDArray]>>;
/// The eager forward.
pub type ForwardFn<'a> = &'a dyn Fn(&[NDArray]) -> Result<Vec<NDArray>>;

impl CachedGraph {
    /// An empty cache for the block `name` whose inputs are called `input_names`.
    pub fn new(name: &str, input_names: &[&str]) -> CachedGraph {
        CachedGraph {
            name: name.to_string(),
            input_names: input_names.iter().map(|s| s.to_string()).collect(),
            entries: Mutex::new(HashMap::new()),
            last: Mutex::new(None),
            hit: Mutex::new(None),
        }
    }

    /// Call the block: run the graph of `inputs`' signature, tracing `forward` first if there
    /// is none, or run `forward` eagerly where the signature could not be traced. `params`
    /// lists the parameters by name for a trace; `graph_params` gives a graph's parameters in
    /// its order for a run. Inside a parent's trace the forward runs inline (its operators
    /// join the parent's graph).
    pub fn call(
        &self,
        inputs: &[NDArray],
        params: ParamsFn<'_>,
        graph_params: GraphParamsFn<'_>,
        forward: ForwardFn<'_>,
    ) -> Result<Vec<NDArray>> {
        if is_tracing() {
            return forward(inputs);
        }
        let training = autograd::is_training();
        let hit = self
            .hit
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .filter(|(t, c)| *t == training && c.graph.accepts(inputs))
            .map(|(_, c)| c.clone());
        if let Some(c) = hit {
            return c.run(inputs, &graph_params(&c.graph)?);
        }
        let sig = Signature::of(inputs);
        let entry = self.lock_entries().get(&sig).cloned();
        match entry {
            Some(Entry::Graph(c)) => {
                *self.hit.lock().unwrap_or_else(|e| e.into_inner()) = Some((training, c.clone()));
                c.run(inputs, &graph_params(&c.graph)?)
            }
            Some(Entry::Eager(_)) => forward(inputs),
            None => {
                let (outs, log) = trace(|| forward(inputs))?;
                let outs = outs?;
                let all = params()?;
                let names: Vec<String> = if inputs.len() == self.input_names.len() {
                    self.input_names.clone()
                } else {
                    (0..inputs.len()).map(|k| format!("data{k}")).collect()
                };
                let entry = match Graph::from_trace(log, &names, inputs, &outs, &all) {
                    Ok(g) => {
                        let g = Arc::new(g);
                        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(g.clone());
                        Entry::Graph(Arc::new(CompiledGraph::new(g, &self.name)))
                    }
                    Err(why) => {
                        let msg = format!(
                            "hybridize: block '{}' runs eagerly for inputs {:?}: {why}",
                            self.name, sig.inputs
                        );
                        eprintln!("{msg}");
                        Entry::Eager(msg)
                    }
                };
                self.lock_entries().insert(sig, entry);
                Ok(outs)
            }
        }
    }

    /// [`CachedGraph::call`] for a block with one output, returning it: a call that runs an
    /// already traced graph makes no list of outputs.
    pub fn call_first(
        &self,
        inputs: &[NDArray],
        params: ParamsFn<'_>,
        graph_params: GraphParamsFn<'_>,
        forward: ForwardFn<'_>,
    ) -> Result<NDArray> {
        if !is_tracing() {
            let training = autograd::is_training();
            let hit = self
                .hit
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .filter(|(t, c)| *t == training && c.graph.accepts(inputs))
                .map(|(_, c)| c.clone());
            if let Some(c) = hit {
                return c.run_first(inputs, &graph_params(&c.graph)?);
            }
        }
        first(self.call(inputs, params, graph_params, forward)?)
    }

    fn lock_entries(&self) -> std::sync::MutexGuard<'_, HashMap<Signature, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The graph of the most recent trace that succeeded.
    pub fn last_graph(&self) -> Option<Arc<Graph>> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The graph cached for a signature, if it was traced.
    pub fn graph_for(&self, sig: &Signature) -> Option<Arc<Graph>> {
        match self.lock_entries().get(sig) {
            Some(Entry::Graph(c)) => Some(c.graph.clone()),
            _ => None,
        }
    }

    /// Why each signature that runs eagerly could not be traced.
    pub fn fallback_reasons(&self) -> Vec<String> {
        self.lock_entries()
            .values()
            .filter_map(|e| match e {
                Entry::Eager(m) => Some(m.clone()),
                Entry::Graph(_) => None,
            })
            .collect()
    }

    /// How the calls of every cached graph ran so far (tracing calls and signatures that
    /// run eagerly are not counted).
    pub fn run_counts(&self) -> RunCounts {
        self.lock_entries()
            .values()
            .filter_map(|e| match e {
                Entry::Graph(c) => Some(c.run_counts()),
                Entry::Eager(_) => None,
            })
            .fold(RunCounts::default(), |a, b| a + b)
    }

    /// Number of cached signatures (traced or eager).
    pub fn len(&self) -> usize {
        self.lock_entries().len()
    }

    /// True when nothing was traced yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forget every graph (after a change that tracing cannot see, such as a new activation).
    pub fn clear(&self) {
        self.lock_entries().clear();
        *self.hit.lock().unwrap_or_else(|e| e.into_inner()) = None;
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// `g`'s parameters, in its order, from the block's current parameters.
pub fn select_params(g: &Graph, all: &[(String, NDArray)]) -> Result<Vec<NDArray>> {
    g.params()
        .iter()
        .map(|p| {
            all.iter()
                .find(|(n, _)| *n == p.name)
                .map(|(_, a)| a.clone())
                .ok_or_else(|| {
                    crate::Error::arg(
                        "graph",
                        format!(
                            "the graph reads parameter '{}', which the block does not have",
                            p.name
                        ),
                    )
                })
        })
        .collect()
}
