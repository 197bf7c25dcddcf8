//! Hybridization (Gluon's `HybridBlock.hybridize()`, `SymbolBlock`): a block's forward is
//! traced into a static graph at its first call with an input signature (shapes, dtypes,
//! storage types, training flag); later calls with that signature run the graph (see
//! `sparrow_core::graph`). A forward that cannot be traced (a Dropout drawing its mask, a
//! BatchNorm updating its running statistics in training mode, data-dependent control flow,
//! an operator without a graph hook) runs eagerly for that signature, with a message naming
//! the block and the reason. `export.rs` writes a traced graph and its parameters to files;
//! [`SymbolBlock::import`] runs them without the model's code.
//!
//! ```
//! use sparrow_nn::{Block, Dense, Hybridize, Initializer, Sequential};
//! use sparrow_core::{Device, NDArray};
//! let mut net = Sequential::new();
//! net.add(Dense::new(8).activation("relu")).add(Dense::new(2));
//! let net = net.hybridize();
//! net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
//! let x = NDArray::ones(&[4, 5], Default::default()).unwrap();
//! let first = net.forward(&x).unwrap(); // traces
//! let again = net.forward(&x).unwrap(); // runs the graph
//! assert_eq!(first.to_vec::<f32>().unwrap(), again.to_vec::<f32>().unwrap());
//! assert_eq!(net.graph().unwrap().nodes().len(), 4); // two products, two bias(+relu)
//! ```

mod export;
mod loss;
mod train;

pub use export::{SymbolBlock, GRAPH_FORMAT, GRAPH_VERSION};
pub use loss::HybridLoss;
pub use train::HybridTrainStep;

use std::sync::Arc;

use sparrow_core::graph::{CachedGraph, Graph, MemoryPlan, RunCounts};
use sparrow_core::{NDArray, Result};

use crate::block::{Block, SummaryRow};
use crate::parameter::Parameter;

/// A block whose forward runs as a traced graph (see the module docs). Parameter names,
/// kind and children are the wrapped block's, so parameter files and trainers see no
/// difference.
pub struct HybridBlock<B: Block> {
    inner: B,
    cache: CachedGraph,
    /// The block's parameters by hierarchical name, collected once: the set of parameters
    /// is fixed once the block is wrapped, and collecting formats every name.
    params: std::sync::OnceLock<Vec<(String, Parameter)>>,
    /// Per traced graph, its parameters in its order (resolved by name once) and their
    /// weights as last handed out (shared with each run while no weight array is replaced).
    graph_params: std::sync::Mutex<Vec<GraphParams>>,
}

/// A graph, its parameters in its order, and their weight arrays as last handed out.
type GraphParams = (Arc<Graph>, Vec<Parameter>, Arc<[NDArray]>);

/// `block.hybridize()` for every block.
pub trait Hybridize: Block + Sized {
    /// Wrap the block so that its forward is traced and cached per input signature.
    fn hybridize(self) -> HybridBlock<Self> {
        HybridBlock::new(self)
    }
}

impl<B: Block> Hybridize for B {}

impl<B: Block> HybridBlock<B> {
    /// Wrap `inner`.
    pub fn new(inner: B) -> HybridBlock<B> {
        let cache = CachedGraph::new(inner.kind(), &["data"]);
        HybridBlock {
            inner,
            cache,
            params: std::sync::OnceLock::new(),
            graph_params: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The block's parameters by hierarchical name (collected at the first call).
    fn all_params(&self) -> Result<&Vec<(String, Parameter)>> {
        if let Some(v) = self.params.get() {
            return Ok(v);
        }
        let v: Vec<(String, Parameter)> = self
            .inner
            .collect_params()?
            .iter()
            .map(|(n, p)| (n.to_string(), p.clone()))
            .collect();
        Ok(self.params.get_or_init(|| v))
    }

    /// The weights `g` reads, in its order.
    fn params_of(&self, g: &Arc<Graph>) -> Result<Arc<[NDArray]>> {
        let mut cache = self.graph_params.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, ps, data)) = cache.iter_mut().find(|(h, _, _)| Arc::ptr_eq(h, g)) {
            // The same weight arrays as last time (optimizers update them in place): the
            // list is shared again, nothing is allocated. A replaced array makes a new list.
            let mut same = true;
            for (p, d) in ps.iter().zip(data.iter()) {
                same &= p.data()?.same_array(d);
            }
            if !same {
                *data = ps
                    .iter()
                    .map(Parameter::data)
                    .collect::<Result<Vec<_>>>()?
                    .into();
            }
            return Ok(data.clone());
        }
        let all = self.all_params()?;
        let ps = g
            .params()
            .iter()
            .map(|p| {
                all.iter()
                    .find(|(n, _)| *n == p.name)
                    .map(|(_, q)| q.clone())
                    .ok_or_else(|| {
                        sparrow_core::Error::arg(
                            "HybridBlock",
                            format!(
                                "the graph reads parameter '{}', which the block lacks",
                                p.name
                            ),
                        )
                    })
            })
            .collect::<Result<Vec<Parameter>>>()?;
        let data: Arc<[NDArray]> = ps
            .iter()
            .map(Parameter::data)
            .collect::<Result<Vec<_>>>()?
            .into();
        cache.push((g.clone(), ps, data.clone()));
        Ok(data)
    }

    /// The initialized parameters' weights by hierarchical name.
    fn param_arrays(&self) -> Result<Vec<(String, NDArray)>> {
        let all = self.all_params()?;
        let mut out = Vec::with_capacity(all.len());
        for (n, p) in all {
            if p.is_initialized() {
                out.push((n.clone(), p.data()?));
            }
        }
        Ok(out)
    }

    /// The wrapped block.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The graph of the most recent successful trace.
    pub fn graph(&self) -> Option<Arc<Graph>> {
        self.cache.last_graph()
    }

    /// The memory plan of the most recent graph.
    pub fn memory_plan(&self) -> Option<MemoryPlan> {
        self.graph().map(|g| MemoryPlan::of(&g))
    }

    /// For each signature that runs eagerly: which block and why.
    pub fn fallback_reasons(&self) -> Vec<String> {
        self.cache.fallback_reasons()
    }

    /// How the calls of its graphs ran so far: out of the memory plan, as one recorded tape
    /// node, or replaying the operators ([`RunCounts`]).
    pub fn run_counts(&self) -> RunCounts {
        self.cache.run_counts()
    }

    /// Number of cached signatures.
    pub fn cached_signatures(&self) -> usize {
        self.cache.len()
    }

    /// Forget the cached graphs (the next call traces again).
    pub fn clear_cache(&self) {
        self.cache.clear();
        self.graph_params
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Write the most recent graph to `graph_path` (JSON, see ARCHITECTURE.md) and the
    /// parameters it reads to `params_path` (safetensors). An error if nothing was traced yet.
    pub fn export(
        &self,
        graph_path: impl AsRef<std::path::Path>,
        params_path: impl AsRef<std::path::Path>,
    ) -> Result<()> {
        let g = self.graph().ok_or_else(|| {
            sparrow_core::Error::arg(
                "HybridBlock::export",
                "nothing traced yet: call forward once before export",
            )
        })?;
        export::export(&g, &self.inner, graph_path.as_ref(), params_path.as_ref())
    }
}

impl<B: Block> Block for HybridBlock<B> {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        self.cache.call_first(
            std::slice::from_ref(x),
            &|| self.param_arrays(),
            &|g| self.params_of(g),
            &|ins| Ok(vec![self.inner.forward(&ins[0])?]),
        )
    }
    /// Several inputs (a recurrent layer's `[x, states..]`) to the inner block's outputs:
    /// traced, cached per signature of all the inputs and run like [`Block::forward`] (under
    /// `record`, one tape node over the outputs joined; see `graph::CompiledGraph`). One
    /// input is [`Block::forward`]'s one output.
    fn forward_multi(&self, inputs: &[NDArray]) -> Result<Vec<NDArray>> {
        if let [x] = inputs {
            return Ok(vec![self.forward(x)?]);
        }
        self.cache.call(
            inputs,
            &|| self.param_arrays(),
            &|g| self.params_of(g),
            &|ins| self.inner.forward_multi(ins),
        )
    }
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        self.inner.params()
    }
    fn children(&self) -> Vec<(String, &dyn Block)> {
        self.inner.children()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn forward_summary(
        &self,
        x: &NDArray,
        name: &str,
        rows: &mut Vec<SummaryRow>,
    ) -> Result<NDArray> {
        self.inner.forward_summary(x, name, rows)
    }
}
