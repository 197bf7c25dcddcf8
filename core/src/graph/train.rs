//! A training step through a graph: the forward graph and its backward (`grad.rs`) as one joint
//! graph, planned together ([`MemoryPlan`] over the joint node list: an activation the backward
//! reads stays live until that read, everything else shares buffers) and run by one
//! [`Executor`], whose buffers are allocated at the first step and reused by every later one.

use std::sync::Arc;

use super::exec::Executor;
use super::grad::backward_graph;
use super::ir::Graph;
use super::plan::MemoryPlan;
use super::recompute::{with_recompute, Recompute, RecomputePlan};
use crate::{NDArray, Result};

/// A forward graph with one output (the loss) and its backward, run as one planned graph.
/// [`TrainStep::run`] gives the loss and each parameter's gradient (storage types as the eager
/// backward makes them: a csr product's weight gradient is row_sparse).
pub struct TrainStep {
    exec: Executor,
    forward: Arc<Graph>,
    param_grad: Vec<Option<usize>>,
    forward_nodes: usize,
    /// What recomputation did, when it was asked for.
    recompute: Option<RecomputePlan>,
    /// The loss output's head gradient (ones), made once.
    head: NDArray,
    /// Call inputs followed by the head gradient (capacity kept across steps).
    args: Vec<NDArray>,
    /// The joint graph's outputs of the last step (capacity kept across steps).
    outs: Vec<NDArray>,
}

impl TrainStep {
    /// The training step of `forward`, or the reason it has none (an operator on the
    /// gradient path without a graph backward, named in the message).
    pub fn new(forward: Arc<Graph>) -> std::result::Result<TrainStep, String> {
        TrainStep::with_recompute(forward, Recompute::Off)
    }

    /// [`TrainStep::new`] with the forward values the backward reads kept or recomputed as
    /// `mode` asks (see [`Recompute`]): less memory for about one more forward. The results are
    /// the same bits either way.
    pub fn with_recompute(
        forward: Arc<Graph>,
        mode: Recompute,
    ) -> std::result::Result<TrainStep, String> {
        let mut b = backward_graph(&forward)?;
        let mut recompute = None;
        if mode != Recompute::Off {
            let (g, plan) = with_recompute(&b.graph, b.forward_nodes, mode)?;
            b.graph = g;
            recompute = Some(plan);
        }
        let loss = &forward.values()[forward.outputs()[0]];
        let head = NDArray::ones(&loss.shape, loss.dtype).map_err(|e| e.to_string())?;
        Ok(TrainStep {
            exec: Executor::new(Arc::new(b.graph)),
            forward,
            param_grad: b.param_grad,
            forward_nodes: b.forward_nodes,
            recompute,
            head,
            args: Vec::new(),
            outs: Vec::new(),
        })
    }

    /// The forward graph.
    pub fn forward(&self) -> &Arc<Graph> {
        &self.forward
    }

    /// The joint (forward + backward) graph.
    pub fn graph(&self) -> &Arc<Graph> {
        self.exec.graph()
    }

    /// Number of forward nodes (the joint graph's first ones).
    pub fn forward_nodes(&self) -> usize {
        self.forward_nodes
    }

    /// What recomputation did ([`TrainStep::with_recompute`]); `None` when it was off.
    pub fn recompute(&self) -> Option<&RecomputePlan> {
        self.recompute.as_ref()
    }

    /// The memory plan of the joint graph.
    pub fn plan(&self) -> &MemoryPlan {
        self.exec.plan()
    }

    /// The operator names of the joint graph's nodes that run their eager operator (and
    /// allocate their output each step).
    pub fn fallback_ops(&self) -> Vec<&'static str> {
        self.exec.fallback_ops()
    }

    /// One step on `inputs` and `params` (in the forward graph's [`Graph::params`] order):
    /// the loss, and per parameter its gradient (`None` where the loss does not depend on it).
    /// Nothing is recorded; gradients are returned, not stored (the caller delivers them).
    pub fn run(
        &mut self,
        inputs: &[NDArray],
        params: &[NDArray],
    ) -> Result<(NDArray, Vec<Option<NDArray>>)> {
        let mut grads = Vec::with_capacity(self.param_grad.len());
        let loss = self.run_to(inputs, params, &mut grads)?;
        Ok((loss, grads))
    }

    /// [`TrainStep::run`] with the gradients written to `grads` (cleared first, one entry per
    /// parameter): a caller that keeps `grads` across steps makes no list per step.
    pub fn run_to(
        &mut self,
        inputs: &[NDArray],
        params: &[NDArray],
        grads: &mut Vec<Option<NDArray>>,
    ) -> Result<NDArray> {
        grads.clear();
        self.args.clear();
        self.args.extend(inputs.iter().cloned());
        self.args.push(self.head.clone());
        let (exec, args, outs) = (&mut self.exec, &self.args, &mut self.outs);
        let r = crate::autograd::pause(|| exec.run_to(args, params, outs));
        self.args.clear();
        r?;
        let loss = self
            .outs
            .first()
            .cloned()
            .ok_or_else(|| crate::Error::arg("graph train step", "the graph has no outputs"))?;
        let outs = &self.outs;
        grads.extend(self.param_grad.iter().map(|k| k.map(|k| outs[k].clone())));
        // Let go of the outputs here: the caller holds what it keeps, and the executor's
        // buffers are free for the next step.
        self.outs.clear();
        Ok(loss)
    }
}
