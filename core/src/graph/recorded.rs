//! A hybridized block called under `autograd::record` (MXNet's CachedOp inside
//! `autograd.record()`): the block's graph and the backward of its output (`grad.rs`, with
//! respect to the inputs and parameters that need a gradient) are split into two graphs, each
//! run by its own planned [`Executor`]:
//!
//! - the forward graph returns the block's output and the forward values its backward reads
//!   (the "saved" values);
//! - the backward graph takes those saved values, the inputs it reads and the outputs' head
//!   gradients, and returns the gradients.
//!
//! The forward runs at the call; the tape gets one node for the whole block, whose backward
//! runs the backward graph. The tape's nodes have one output: a block with several outputs
//! records the node over their concatenation (one copy) and hands out slices of it, so the
//! gradients reaching the slices reach the node as one head gradient, cut up again for the
//! backward graph. A training loop written with `record` + `backward()` so gets the
//! planned buffers and fused kernels of [`super::TrainStep`] without changing. The saved values
//! are handed out by the forward executor and held by the tape node until its backward has
//! run (or the tape is dropped): a second forward before that backward gets new buffers for
//! them (the executor never writes a buffer its caller still holds), so several recorded calls
//! may be pending at once.

use std::sync::{Arc, Mutex};

use super::exec::Executor;
use super::grad::backward_graph_wrt;
use super::ir::Graph;
use crate::{autograd, NDArray, Result, SType};

/// The split forward and backward of one graph for one set of gradients asked for.
pub(crate) struct Recorded {
    fwd: Mutex<Executor>,
    /// Shared with the tape nodes (which do not hold the forward executor: its output handle
    /// holds the tape node, and a node holding the executor would keep both alive forever).
    bwd: Arc<BackwardRun>,
    /// Per backward-graph parameter, the index of the forward parameter it is.
    bwd_params: Vec<usize>,
    /// The block inputs the backward graph reads (after the saved values), by index.
    inputs_read: Vec<usize>,
    /// Number of block outputs.
    outputs: usize,
}

/// The backward graph's executor and how its outputs map to the block's. Its inputs are the
/// saved values, then the block inputs listed in [`Recorded::inputs_read`], then the head
/// gradient.
struct BackwardRun {
    exec: Mutex<Executor>,
    /// Per block input, then per parameter: its gradient's index among the backward graph's
    /// outputs (`None`: none asked for, or the output does not depend on it).
    grads: Vec<Option<usize>>,
}

impl Recorded {
    /// The split of `fwd` with gradients for the inputs, then the parameters,
    /// marked in `wrt`; the reason there is none (an operator without a graph backward, an
    /// output that is not a dense float array, no gradient reaching anything marked).
    pub(crate) fn new(fwd: &Graph, wrt: &[bool]) -> std::result::Result<Recorded, String> {
        let n_in = fwd.inputs().len();
        if wrt.len() != n_in + fwd.params().len() {
            return Err(format!(
                "{} gradient flags for {} inputs and parameters",
                wrt.len(),
                n_in + fwd.params().len()
            ));
        }
        let k_out = fwd.outputs().len();
        let dtypes: Vec<_> = fwd
            .outputs()
            .iter()
            .map(|&o| fwd.values()[o].dtype)
            .collect();
        if dtypes.windows(2).any(|w| w[0] != w[1]) {
            return Err(format!(
                "its outputs have different dtypes ({dtypes:?}), which one tape node cannot join"
            ));
        }
        let b = backward_graph_wrt(fwd, &wrt[..n_in], &wrt[n_in..])?;
        let j = &b.graph;
        let fnodes = b.forward_nodes;
        if b.input_grad
            .iter()
            .chain(&b.param_grad)
            .all(Option::is_none)
        {
            return Err("no gradient reaches an input or parameter that asks for one".into());
        }
        let nv = j.values().len();
        let mut produced = vec![false; nv];
        for n in &j.nodes()[..fnodes] {
            produced[n.output] = true;
        }
        // What the backward reads: its nodes' inputs and the gradients it returns.
        let mut read = vec![false; nv];
        for n in &j.nodes()[fnodes..] {
            for &x in &n.inputs {
                read[x] = true;
            }
        }
        for &o in &j.outputs()[k_out..] {
            read[o] = true;
        }
        let saved: Vec<usize> = (0..nv).filter(|&v| produced[v] && read[v]).collect();

        let fwd_inputs = &j.inputs()[..n_in];
        let mut f_outputs = j.outputs()[..k_out].to_vec();
        f_outputs.extend(&saved);
        let f = Graph::renumbered(
            j.values(),
            fwd.input_names().to_vec(),
            fwd_inputs.to_vec(),
            j.params().to_vec(),
            &j.nodes()[..fnodes],
            f_outputs,
        )?;

        let inputs_read: Vec<usize> = (0..n_in).filter(|&k| read[fwd_inputs[k]]).collect();
        let mut b_names: Vec<String> = (0..saved.len()).map(|k| format!("saved{k}")).collect();
        let mut b_inputs = saved;
        for &k in &inputs_read {
            b_inputs.push(fwd_inputs[k]);
            b_names.push(fwd.input_names()[k].clone());
        }
        for k in 0..k_out {
            b_inputs.push(j.inputs()[n_in + k]);
            b_names.push(format!("head_grad{k}"));
        }
        let mut b_params = Vec::new();
        let mut bwd_params = Vec::new();
        for (k, p) in j.params().iter().enumerate() {
            if read[p.value] {
                b_params.push(p.clone());
                bwd_params.push(k);
            }
        }
        let bg = Graph::renumbered(
            j.values(),
            b_names,
            b_inputs,
            b_params,
            &j.nodes()[fnodes..],
            j.outputs()[k_out..].to_vec(),
        )?;
        let grads = b
            .input_grad
            .iter()
            .chain(&b.param_grad)
            .map(|k| k.map(|k| k - k_out))
            .collect();
        Ok(Recorded {
            fwd: Mutex::new(Executor::new(Arc::new(f))),
            bwd: Arc::new(BackwardRun {
                exec: Mutex::new(Executor::new(Arc::new(bg))),
                grads,
            }),
            bwd_params,
            inputs_read,
            outputs: k_out,
        })
    }

    /// Run the forward on `inputs` and `params` and record one tape node for it, whose backward
    /// runs the backward graph: the block's outputs, or `None` when another thread is running
    /// this forward (the caller replays the graph instead).
    pub(crate) fn call(
        self: &Arc<Self>,
        inputs: &[NDArray],
        params: &[NDArray],
    ) -> Result<Option<Vec<NDArray>>> {
        let Ok(mut f) = self.fwd.try_lock() else {
            return Ok(None);
        };
        let mut outs = Vec::with_capacity(f.graph().outputs().len());
        autograd::pause(|| f.run_to(inputs, params, &mut outs))?;
        drop(f);
        if outs.len() < self.outputs {
            return Err(crate::Error::arg(
                "hybrid graph",
                "the forward returned fewer outputs than the graph has",
            ));
        }
        let saved = outs.split_off(self.outputs);
        // Several outputs: one array holding them all (flattened, in order) is the tape node's
        // output; the block's outputs are recorded slices of it.
        let shapes: Vec<Vec<usize>> = outs.iter().map(NDArray::shape).collect();
        let out = if outs.len() == 1 {
            outs.pop().expect("one output")
        } else {
            autograd::pause(|| -> Result<NDArray> {
                let flat = outs
                    .iter()
                    .map(|o| o.reshape(&[o.size()]))
                    .collect::<Result<Vec<_>>>()?;
                NDArray::concat(&flat.iter().collect::<Vec<_>>(), 0)
            })?
        };
        // A saved value that is an output itself is kept through a second handle: the tape
        // node lives in the output's handle, and holding that handle from the node would be a
        // cycle.
        // The backward graph's inputs but the head gradients: the saved values, then the block
        // inputs it reads (only those are kept alive until the backward).
        let mut kept: Vec<NDArray> = saved
            .into_iter()
            .map(|s| {
                if s.same_array(&out) || outs.iter().any(|o| s.same_array(o)) {
                    s.detach()
                } else {
                    s
                }
            })
            .collect();
        drop(outs);
        kept.extend(self.inputs_read.iter().map(|&k| inputs[k].clone()));
        let ps: Vec<NDArray> = self.bwd_params.iter().map(|&k| params[k].clone()).collect();
        // Parameters whose gradient this backward overwrites (grad_req write): their last
        // gradient is let go before the backward graph runs, so that it writes this one into
        // the same buffer rather than a new one (the tape replaces the stored gradient anyway).
        let n_in = inputs.len();
        let overwritten: Vec<NDArray> = params
            .iter()
            .enumerate()
            .filter(|&(k, p)| {
                self.bwd.grads[n_in + k].is_some() && p.grad_req() == autograd::GradReq::Write
            })
            .map(|(_, p)| p.clone())
            .collect();
        let operands: Vec<&NDArray> = inputs.iter().chain(params).collect();
        let bwd = self.bwd.clone();
        let split = shapes.clone();
        let node = autograd::record_op("hybrid_graph", out, &operands, move |g| {
            for p in &overwritten {
                p.set_grad(None);
            }
            let heads = if split.len() == 1 {
                vec![g.clone()]
            } else {
                autograd::pause(|| pieces(g, &split))?
            };
            bwd.run(&kept, &ps, &heads)
        });
        if shapes.len() == 1 {
            return Ok(Some(vec![node]));
        }
        pieces(&node, &shapes).map(Some)
    }

    /// The forward graph (the block's output, then the saved values).
    #[cfg(test)]
    pub(crate) fn forward_graph(&self) -> Arc<Graph> {
        self.fwd.lock().unwrap().graph().clone()
    }

    /// The backward graph.
    #[cfg(test)]
    pub(crate) fn backward_graph(&self) -> Arc<Graph> {
        self.bwd.exec.lock().unwrap().graph().clone()
    }
}

impl BackwardRun {
    /// The backward graph on `kept` (its inputs but the last) and the head gradient `g`: per
    /// block input, then per parameter, its gradient.
    fn run(
        &self,
        kept: &[NDArray],
        params: &[NDArray],
        heads: &[NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let mut args = Vec::with_capacity(kept.len() + heads.len());
        args.extend_from_slice(kept);
        // The graph's head gradients are dense, as the outputs are; a sparse one (an output
        // read by a sparse operator) is made dense here.
        for g in heads {
            args.push(if g.stype() == SType::Dense {
                g.clone()
            } else {
                g.tostype(SType::Dense)?
            });
        }
        let mut outs = Vec::new();
        {
            let mut b = self.exec.lock().unwrap_or_else(|e| e.into_inner());
            autograd::pause(|| b.run_to(&args, params, &mut outs))?;
        }
        Ok(self
            .grads
            .iter()
            .map(|k| k.map(|k| outs[k].clone()))
            .collect())
    }
}

/// The consecutive pieces of the 1-D `joined` shaped as `shapes` (the block's outputs out of
/// the tape node's array, and their head gradients out of its gradient); recorded when
/// recording.
fn pieces(joined: &NDArray, shapes: &[Vec<usize>]) -> Result<Vec<NDArray>> {
    let mut begin = 0;
    shapes
        .iter()
        .map(|shape| {
            let len: usize = shape.iter().product();
            let piece = joined.slice_run(0, begin, 1, len)?.reshape(shape);
            begin += len;
            piece
        })
        .collect()
}
