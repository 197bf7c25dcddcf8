//! A training step through a graph: the forward graph and its backward (`grad.rs`) as one joint
//! graph, planned together ([`MemoryPlan`] over the joint node list: an activation the backward
//! reads stays live until that read, everything else shares buffers) and run by one
//! [`Executor`], whose buffers are allocated at the first step and reused by every later one.

use std::sync::Arc;

use super::capture::{self, Capture};
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
    /// The CUDA graph of the step, when asked for ([`TrainStep::set_cuda_graph`]).
    capture: Capture,
    /// Steps run by replaying the CUDA graph, and captures made.
    replays: usize,
    captures: usize,
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
            capture: Capture::Off,
            replays: 0,
            captures: 0,
        })
    }

    /// Capture the step as a CUDA graph and replay it (`true`), as PyTorch's
    /// `torch.cuda.graph` does by hand: on a CUDA device, the first step allocates the plan's
    /// buffers, the second is captured, and later steps copy their inputs into the graph's own
    /// and launch it (one launch for the whole step; small batches are bound by launches).
    /// Outputs of the last step that the caller still holds keep their values (moved to
    /// copies before a replay writes their buffers). A step whose graph no longer fits (a
    /// parameter replaced by another buffer, a view sharing an output's buffer, an input on
    /// another device) runs normally and the graph is captured again at the next one. Steps on
    /// the host run as before. A step that cannot be captured (dense device inputs only; work
    /// that needs the host mid-step) runs normally, with one message saying why
    /// ([`TrainStep::cuda_graph_refused`]).
    pub fn set_cuda_graph(&mut self, on: bool) {
        self.capture = if on { Capture::Warming } else { Capture::Off };
    }

    /// Steps run so far by replaying a captured CUDA graph (the capturing steps included),
    /// and the number of captures made.
    pub fn cuda_graph_runs(&self) -> (usize, usize) {
        (self.replays, self.captures)
    }

    /// Why the step is not captured as a CUDA graph, when it was asked for and could not be.
    pub fn cuda_graph_refused(&self) -> Option<&str> {
        match &self.capture {
            Capture::Refused(why) => Some(why),
            _ => None,
        }
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
        let device = inputs.first().map_or(crate::Device::Cpu, |x| x.device());
        if self.head.device() != device {
            self.head = self.head.to_device(device)?;
        }
        self.args.clear();
        self.args.extend(inputs.iter().cloned());
        self.args.push(self.head.clone());
        let r = if device == crate::Device::Cpu {
            self.run_planned(params)
        } else {
            self.run_on_device(device, params)
        };
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

    /// The joint graph run by the executor on `self.args`.
    fn run_planned(&mut self, params: &[NDArray]) -> Result<()> {
        let (exec, args, outs) = (&mut self.exec, &self.args, &mut self.outs);
        crate::autograd::pause(|| exec.run_to(args, params, outs))
    }

    /// A step on a device: replayed, captured or run as [`TrainStep::set_cuda_graph`] says.
    fn run_on_device(&mut self, device: crate::Device, params: &[NDArray]) -> Result<()> {
        match std::mem::take(&mut self.capture) {
            // `take` left `Off` in place.
            Capture::Off => self.run_planned(params),
            Capture::Warming => {
                let r = self.run_planned(params);
                self.capture = if r.is_ok() {
                    Capture::Armed
                } else {
                    Capture::Warming
                };
                r
            }
            Capture::Armed => {
                // Outputs of the last step still held move to copies first; one that cannot
                // (a view shares its buffer) would give the graph an allocation of its own:
                // captured at a later step.
                match self.exec.reclaim_outputs() {
                    Ok(true) => {}
                    Ok(false) => {
                        self.capture = Capture::Armed;
                        return self.run_planned(params);
                    }
                    Err(e) => {
                        self.capture = Capture::Armed;
                        return Err(e);
                    }
                }
                let made =
                    capture::capture(&mut self.exec, device, &self.args, params, &mut self.outs);
                let made = match made {
                    Ok(m) => m,
                    Err(e) => {
                        self.capture = Capture::Armed;
                        return Err(e);
                    }
                };
                match made {
                    Ok(c) => {
                        self.capture = Capture::Ready(Box::new(c));
                        self.captures += 1;
                        self.replays += 1;
                        Ok(())
                    }
                    Err(why) => {
                        eprintln!("CUDA graph: the training step runs without one: {why}");
                        self.capture = Capture::Refused(why);
                        self.run_planned(params)
                    }
                }
            }
            Capture::Ready(c) => {
                let replayed = if c.fits(&self.args, params) {
                    c.replay(&mut self.exec, &self.args, params, &mut self.outs)
                } else {
                    Ok(false)
                };
                match replayed {
                    Ok(true) => {
                        self.replays += 1;
                        self.capture = Capture::Ready(c);
                        Ok(())
                    }
                    Ok(false) => {
                        // Captured again at the next step, over the buffers this one leaves.
                        self.capture = Capture::Armed;
                        self.run_planned(params)
                    }
                    Err(e) => {
                        self.capture = Capture::Ready(c);
                        Err(e)
                    }
                }
            }
            Capture::Refused(why) => {
                self.capture = Capture::Refused(why);
                self.run_planned(params)
            }
        }
    }
}
