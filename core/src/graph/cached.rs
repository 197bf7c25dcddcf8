//! One graph per input signature, as Gluon's CachedOp keeps them: the first call with a
//! signature traces the forward (which also computes the result eagerly), later calls run
//! the graph; a forward that cannot be traced runs eagerly for that signature, with a message
//! printed once saying which block and why.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::ir::Graph;
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

#[derive(Clone)]
enum Entry {
    Graph(Arc<Graph>),
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
    hit: Mutex<Option<(bool, Arc<Graph>)>>,
}

/// The parameters a forward may read, by hierarchical name, as they are now.
pub type ParamsFn<'a> = &'a dyn Fn() -> Result<Vec<(String, NDArray)>>;
/// The parameters a graph reads, in its order ([`Graph::params`]), as they are now.
pub type GraphParamsFn<'a> = &'a dyn Fn(&Arc<Graph>) -> Result<Vec<NDArray>>;
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
            .filter(|(t, g)| *t == training && g.accepts(inputs))
            .map(|(_, g)| g.clone());
        if let Some(g) = hit {
            return g.run(inputs, &graph_params(&g)?);
        }
        let sig = Signature::of(inputs);
        let entry = self.lock_entries().get(&sig).cloned();
        match entry {
            Some(Entry::Graph(g)) => {
                *self.hit.lock().unwrap_or_else(|e| e.into_inner()) = Some((training, g.clone()));
                g.run(inputs, &graph_params(&g)?)
            }
            Some(Entry::Eager(_)) => forward(inputs),
            None => {
                let (outs, log) = trace(|| forward(inputs))?;
                let outs = outs?;
                let all = params()?;
                let entry = match Graph::from_trace(log, &self.input_names, inputs, &outs, &all) {
                    Ok(g) => {
                        let g = Arc::new(g);
                        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(g.clone());
                        Entry::Graph(g)
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
            Some(Entry::Graph(g)) => Some(g.clone()),
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
