//! Hybridized training: a block's forward and a loss traced together into one graph, whose
//! backward is built as graph nodes and planned with the forward
//! ([`sparrow_core::graph::TrainStep`]), run once per step with buffers allocated at the first
//! graph step and reused after.
//!
//! This is an explicit step object rather than a graph path behind `autograd::record` +
//! `loss.backward()`: the tape's backward is a chain of closures built during the forward, and
//! a graph backward planned with the forward has to own both halves of the step. The
//! parameters' gradients land where `loss.backward()` puts them (each weight's gradient, with
//! its storage type: a row_sparse weight gradient stays row_sparse), so `Trainer::step` runs
//! unchanged after [`HybridTrainStep::step`].

use sparrow_core::autograd::{self, GradReq};
use sparrow_core::graph::{trace, Graph, Recompute, TrainStep, ValueInfo};
use sparrow_core::{NDArray, Result};

use crate::block::Block;
use crate::loss::Loss;
use crate::parameter::Parameter;

/// A signature's way of training: through its graph, or eagerly (with the reason).
enum Entry {
    Graph {
        step: Box<TrainStep>,
        params: Vec<Parameter>,
        /// The weights of `params` (refreshed each step; capacity kept).
        data: Vec<NDArray>,
        /// The gradients of the last step (capacity kept).
        grads: Vec<Option<NDArray>>,
    },
    Eager(String),
}

/// Forward, loss and backward of `net` and `loss` as one planned graph per input signature
/// (shapes, dtypes and storage types of the batch and the labels). The first step of a
/// signature runs eagerly under `autograd::record` while it is traced; later steps run the
/// joint graph. A signature whose forward cannot be traced, or whose graph has an operator
/// without a graph backward, trains eagerly, with one printed message naming the reason.
///
/// ```
/// use sparrow_nn::{Block, Dense, Initializer, Sequential, HybridTrainStep};
/// use sparrow_nn::loss::L2Loss;
/// use sparrow_core::{Device, NDArray};
/// let mut net = Sequential::new();
/// net.add(Dense::new(3).activation("relu")).add(Dense::new(1));
/// net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
/// let loss = L2Loss::new();
/// let mut step = HybridTrainStep::new(&net, &loss);
/// let x = NDArray::ones(&[4, 5], Default::default()).unwrap();
/// let y = NDArray::zeros(&[4, 1], Default::default()).unwrap();
/// step.step(&x, &y).unwrap(); // eager, traced
/// step.step(&x, &y).unwrap(); // the joint graph
/// assert!(step.fallback_reasons().is_empty());
/// ```
pub struct HybridTrainStep<'a> {
    net: &'a dyn Block,
    loss: &'a dyn Loss,
    recompute: Recompute,
    cuda_graph: bool,
    entries: Vec<(Vec<ValueInfo>, Entry)>,
}

impl<'a> HybridTrainStep<'a> {
    /// Train `net` against `loss`.
    pub fn new(net: &'a dyn Block, loss: &'a dyn Loss) -> HybridTrainStep<'a> {
        HybridTrainStep {
            net,
            loss,
            recompute: Recompute::Off,
            cuda_graph: false,
            entries: Vec::new(),
        }
    }

    /// On a CUDA device, capture each signature's step as a CUDA graph and replay it
    /// ([`TrainStep::set_cuda_graph`]): one launch a step instead of one per kernel, the same
    /// values. The parameters must be updated in place between steps (the trainer's
    /// optimizers do), or the graph is captured again. Steps on the host are unchanged.
    pub fn with_cuda_graph(mut self, on: bool) -> HybridTrainStep<'a> {
        self.cuda_graph = on;
        for (_, e) in &mut self.entries {
            if let Entry::Graph { step, .. } = e {
                step.set_cuda_graph(on);
            }
        }
        self
    }

    /// Recompute forward values in the backward instead of keeping them, as `mode` asks
    /// (MXNet's backward mirroring, PyTorch's checkpointing): [`Recompute::Sqrt`] holds about
    /// `2 sqrt(n)` of a deep chain's `n` activations for about one more forward a step. The
    /// gradients are the same bits. Signatures already traced are traced again at their next
    /// step.
    pub fn with_recompute(mut self, mode: Recompute) -> HybridTrainStep<'a> {
        self.recompute = mode;
        self.entries.clear();
        self
    }

    /// One step on a batch `x` with labels `label`: the per-sample loss is returned and every
    /// parameter's gradient is stored as `loss.backward()` stores it (head gradient of ones).
    pub fn step(&mut self, x: &NDArray, label: &NDArray) -> Result<NDArray> {
        let k = self
            .entries
            .iter()
            .position(|(sig, _)| sig.len() == 2 && sig[0].matches(x) && sig[1].matches(label));
        let Some(k) = k else {
            return self.trace_step(x, label);
        };
        match &mut self.entries[k].1 {
            Entry::Eager(_) => self.eager_step(x, label),
            Entry::Graph {
                step,
                params,
                data,
                grads,
            } => {
                data.clear();
                for p in params.iter() {
                    let w = p.data()?;
                    // The last step's gradient is let go first (as a backward replaces it), so
                    // the graph writes this step's into the same buffer, not a new one.
                    if p.grad_req() == GradReq::Write {
                        w.set_grad(None);
                    }
                    data.push(w);
                }
                let l = step.run_to(&[x.clone(), label.clone()], data, grads)?;
                data.clear();
                for (p, g) in params.iter().zip(grads.drain(..)) {
                    if let Some(g) = g {
                        deliver(p, g)?;
                    }
                }
                Ok(l)
            }
        }
    }

    /// The joint graph's step of the most recent traced signature.
    pub fn train_step(&self) -> Option<&TrainStep> {
        self.entries.iter().rev().find_map(|(_, e)| match e {
            Entry::Graph { step, .. } => Some(&**step),
            Entry::Eager(_) => None,
        })
    }

    /// For each signature that trains eagerly: why.
    pub fn fallback_reasons(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter_map(|(_, e)| match e {
                Entry::Eager(m) => Some(m.clone()),
                Entry::Graph { .. } => None,
            })
            .collect()
    }

    fn eager_step(&self, x: &NDArray, label: &NDArray) -> Result<NDArray> {
        let l = autograd::record(|| self.loss.forward(&self.net.forward(x)?, label))?;
        l.backward()?;
        Ok(l)
    }

    /// The first step of a signature: eager under `record`, traced; then its graph is built.
    fn trace_step(&mut self, x: &NDArray, label: &NDArray) -> Result<NDArray> {
        let (l, log) =
            trace(|| autograd::record(|| self.loss.forward(&self.net.forward(x)?, label)))?;
        let l = l?;
        l.backward()?;
        let all: Vec<(String, Parameter)> = self
            .net
            .collect_params()?
            .iter()
            .map(|(n, p)| (n.to_string(), p.clone()))
            .collect();
        let mut arrays = Vec::with_capacity(all.len());
        for (n, p) in &all {
            if p.is_initialized() {
                arrays.push((n.clone(), p.data()?));
            }
        }
        let names = ["data".to_string(), "label".to_string()];
        let ins = [x.clone(), label.clone()];
        let built = Graph::from_trace(log, &names, &ins, std::slice::from_ref(&l), &arrays)
            .and_then(|g| {
                let params = g
                    .params()
                    .iter()
                    .map(|pi| {
                        all.iter()
                            .find(|(n, _)| *n == pi.name)
                            .map(|(_, p)| p.clone())
                            .ok_or_else(|| format!("parameter '{}' is not the block's", pi.name))
                    })
                    .collect::<std::result::Result<Vec<_>, String>>()?;
                if let Some(p) = params.iter().find(|p| p.grad_req() == GradReq::Add) {
                    return Err(format!(
                        "parameter '{}' accumulates gradients (grad_req add)",
                        p.name()
                    ));
                }
                let mut step = TrainStep::with_recompute(std::sync::Arc::new(g), self.recompute)?;
                step.set_cuda_graph(self.cuda_graph);
                Ok((step, params))
            });
        let entry = match built {
            Ok((step, params)) => Entry::Graph {
                step: Box::new(step),
                data: Vec::with_capacity(params.len()),
                grads: Vec::with_capacity(params.len()),
                params,
            },
            Err(why) => {
                let msg = format!(
                    "hybridized training: block '{}' trains eagerly for inputs {:?} {:?}: {why}",
                    self.net.kind(),
                    x.shape(),
                    label.shape()
                );
                eprintln!("{msg}");
                Entry::Eager(msg)
            }
        };
        self.entries
            .push((vec![ValueInfo::of(x), ValueInfo::of(label)], entry));
        Ok(l)
    }
}

/// Store `g` as `p`'s gradient, converted to its gradient storage type, as the tape's backward
/// stores a leaf's (grad_req write; parameters with add train eagerly).
fn deliver(p: &Parameter, g: NDArray) -> Result<()> {
    if p.grad_req() == GradReq::Null {
        return Ok(());
    }
    let g = if g.stype() != p.grad_stype() {
        g.tostype(p.grad_stype())?
    } else {
        g
    };
    p.data()?.set_grad(Some(g));
    Ok(())
}
