//! Memory planning over a graph, as MXNet's `PlanMemory` does it: walk the nodes in execution
//! order; a node's output runs in place of an input that dies at that node when the node can
//! overwrite its input ([`Form::in_place_capable`]: elementwise maps, bias + activation) and
//! the sizes agree; otherwise it takes a free buffer of its dtype (best fit by size), or a
//! new one; buffers of values read for the last time are freed after the node. Inputs and
//! parameters are the caller's and are not planned; neither are outputs of nodes that have no
//! "write into" form (they run the eager operator, which allocates: [`MemoryPlan::fallback`]).
//!
//! A buffer is shared by values of one dtype and any sizes: a value takes the smallest free
//! buffer that holds it, or grows the largest free one (MXNet's planner matches sizes within a
//! range the same way). The executor allocates each buffer once at its final size, and a value
//! in a larger buffer sees the first of its elements (`HostBuf::set_view_len`).

use super::into::Form;
use super::ir::Graph;
use crate::DType;

/// The result of planning a graph's intermediate values into shared buffers.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPlan {
    /// Per value: the buffer it lives in (`None` for inputs, parameters and the outputs of
    /// fallback nodes).
    pub slot_of: Vec<Option<usize>>,
    /// Size in bytes of each planned buffer.
    pub slot_bytes: Vec<usize>,
    /// Element type of each planned buffer.
    pub slot_dtype: Vec<DType>,
    /// Nodes that run in place of a dying input.
    pub in_place: usize,
    /// Per node: whether it runs in place of its input 0.
    pub runs_in_place: Vec<bool>,
    /// Nodes without a "write into" form: they run the eager operator, which allocates.
    pub fallback: Vec<usize>,
    /// Bytes of all node outputs together: what a run that keeps every intermediate holds
    /// (eager execution under `autograd::record`, where the tape keeps them for backward).
    pub total_bytes: usize,
    /// Peak bytes of live intermediates when each is freed after its last reader but nothing
    /// is shared (what [`Graph::run`]'s release gives without a plan).
    pub live_peak_bytes: usize,
    /// [`MemoryPlan::live_peak_bytes`] without the graph's outputs (a training step's loss and
    /// gradients): the peak of the activations and temporaries alone.
    pub activation_peak_bytes: usize,
}

impl MemoryPlan {
    /// Plan `g`'s intermediate values.
    pub fn of(g: &Graph) -> MemoryPlan {
        MemoryPlan::plan(g, false, false)
    }

    /// Plan `g`'s intermediate values for a device whose buffers cannot show a prefix of
    /// themselves (CUDA): a buffer is shared only by values of its own size, and nodes whose
    /// forms have no device kernels run their eager operator ([`node_forms`]).
    pub fn exact_sizes(g: &Graph) -> MemoryPlan {
        MemoryPlan::plan(g, false, true)
    }

    /// The plan of `g`, with its outputs left out of the buffers when `skip_outputs` (what the
    /// activations and temporaries alone would need), buffers shared only by values of one
    /// size when `exact`.
    fn plan(g: &Graph, skip_outputs: bool, exact: bool) -> MemoryPlan {
        // Exact sizes are a device's plan.
        let forms = node_forms(g, !exact);
        let values = g.values();
        let last = g.last_use();
        let outs = g.is_output();
        let mut slot_of: Vec<Option<usize>> = vec![None; values.len()];
        let mut slot_bytes: Vec<usize> = Vec::new();
        let mut slot_dtype: Vec<DType> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        let mut runs_in_place = vec![false; g.nodes().len()];
        let mut fallback = Vec::new();
        let (mut live, mut live_peak, mut total) = (0usize, 0usize, 0usize);
        let (mut act, mut act_peak) = (0usize, 0usize);
        // Only node outputs are counted live (inputs and parameters are the caller's).
        let mut produced = vec![false; values.len()];
        for n in g.nodes() {
            produced[n.output] = true;
        }
        for (i, node) in g.nodes().iter().enumerate() {
            let info = &values[node.output];
            let bytes = value_bytes(info);
            total += bytes;
            live += bytes;
            live_peak = live_peak.max(live);
            if !outs[node.output] {
                act += bytes;
                act_peak = act_peak.max(act);
            }
            let dies = |x: usize| last[x] == Some(i) && !outs[x];
            match forms[i] {
                None => fallback.push(i),
                Some(_) if skip_outputs && outs[node.output] => {}
                Some(form) => {
                    // In place: the input dies here, is read once by this node, has the
                    // output's size and sits in a buffer of the output's dtype.
                    let x = node.inputs[0];
                    let donor = form.in_place_capable()
                        && dies(x)
                        && node.inputs.iter().filter(|&&y| y == x).count() == 1
                        && value_bytes(&values[x]) == bytes
                        && slot_of[x].is_some_and(|s| slot_dtype[s] == info.dtype);
                    let slot = if donor {
                        runs_in_place[i] = true;
                        slot_of[x].expect("checked above")
                    } else {
                        let fit = if exact {
                            free.iter().position(|&s| {
                                slot_dtype[s] == info.dtype && slot_bytes[s] == bytes
                            })
                        } else {
                            best_fit(&free, &slot_bytes, &slot_dtype, info.dtype, bytes)
                        };
                        match fit {
                            Some(k) => {
                                let s = free.swap_remove(k);
                                slot_bytes[s] = slot_bytes[s].max(bytes);
                                s
                            }
                            None => {
                                slot_bytes.push(bytes);
                                slot_dtype.push(info.dtype);
                                slot_bytes.len() - 1
                            }
                        }
                    };
                    slot_of[node.output] = Some(slot);
                }
            }
            let mut seen = Vec::new();
            for &x in &node.inputs {
                if dies(x) && !seen.contains(&x) {
                    seen.push(x);
                    if produced[x] {
                        live -= value_bytes(&values[x]).min(live);
                        act -= value_bytes(&values[x]).min(act);
                    }
                    // A donor's buffer now holds this node's output: not free.
                    if let Some(s) =
                        slot_of[x].filter(|_| !(runs_in_place[i] && x == node.inputs[0]))
                    {
                        free.push(s);
                    }
                }
            }
        }
        MemoryPlan {
            slot_of,
            slot_bytes,
            slot_dtype,
            in_place: runs_in_place.iter().filter(|&&b| b).count(),
            runs_in_place,
            fallback,
            total_bytes: total,
            live_peak_bytes: live_peak,
            activation_peak_bytes: act_peak,
        }
    }

    /// Bytes of all planned buffers: the planned peak of intermediate memory (fallback nodes'
    /// outputs not included; see [`MemoryPlan::fallback_bytes`]).
    pub fn planned_bytes(&self) -> usize {
        self.slot_bytes.iter().sum()
    }

    /// The planned bytes of `g`'s activations and temporaries: of a plan of `g` whose outputs
    /// (a training step's gradients) take no buffer. (In `g`'s own plan buffers are shared
    /// across sizes, so a gradient's buffer may hold activations before the gradient is made.)
    pub fn activation_bytes(g: &Graph) -> usize {
        MemoryPlan::plan(g, true, false).planned_bytes()
    }

    /// Bytes of the outputs of fallback nodes (allocated by their operators at each run).
    pub fn fallback_bytes(&self, g: &Graph) -> usize {
        self.fallback
            .iter()
            .map(|&i| g.values()[g.nodes()[i].output].bytes)
            .sum()
    }
}

/// A value's bytes: a dense value's from its shape (an imported graph's recorded `bytes` is
/// not trusted for it), a sparse one's the traced estimate.
fn value_bytes(info: &super::ir::ValueInfo) -> usize {
    if info.stype == crate::SType::Dense {
        info.shape
            .iter()
            .fold(info.dtype.size_of(), |a, &d| a.saturating_mul(d))
    } else {
        info.bytes
    }
}

/// The free buffer a value of `bytes` bytes of `dtype` takes (its index in `free`): the
/// smallest of that dtype holding at least `bytes`, else the largest of that dtype (grown to
/// `bytes`: less new memory than a buffer of its own), else none.
fn best_fit(
    free: &[usize],
    slot_bytes: &[usize],
    slot_dtype: &[DType],
    dtype: DType,
    bytes: usize,
) -> Option<usize> {
    let same = || {
        free.iter()
            .enumerate()
            .filter(|&(_, &s)| slot_dtype[s] == dtype)
    };
    same()
        .filter(|&(_, &s)| slot_bytes[s] >= bytes)
        .min_by_key(|&(_, &s)| slot_bytes[s])
        .or_else(|| same().max_by_key(|&(_, &s)| slot_bytes[s]))
        .map(|(k, _)| k)
}

/// Per node: its "write into" form, or `None` (the eager operator runs). For a device
/// (`host = false`), a form without device kernels ([`Form::has_device_kernels`]) would run
/// the eager operator and copy its result into the planned buffer: one more kernel launch
/// and a buffer for nothing, so such a node runs the eager operator alone, its result the
/// value. Kept planned are graph outputs (a captured CUDA graph writes them at fixed
/// addresses) and the label checks, which a captured step runs as copies of inputs its caller
/// checked on the host.
pub(crate) fn node_forms(g: &Graph, host: bool) -> Vec<Option<Form>> {
    let values = g.values();
    let outs = g.is_output();
    // Per value: whether a node with a form defines it (`None`: an input or a parameter).
    let mut planned: Vec<Option<bool>> = vec![None; values.len()];
    let mut forms = Vec::with_capacity(g.nodes().len());
    for n in g.nodes() {
        let ins: Vec<&super::ir::ValueInfo> = n.inputs.iter().map(|&x| &values[x]).collect();
        let mut form = Form::of(&n.op, &ins, &values[n.output]);
        if !host
            && !outs[n.output]
            && form.is_some_and(|f| !f.has_device_kernels() && !f.checks_labels())
        {
            form = None;
        }
        // A reshape of a value no plan holds (a node without a form made it, fresh each run)
        // shares that value's buffer as the eager reshape does, instead of copying it into a
        // planned one. Graph outputs stay planned (a CUDA graph's replay writes them).
        if matches!(n.op, super::op::Op::Reshape(_))
            && planned[n.inputs[0]] == Some(false)
            && !outs[n.output]
        {
            form = None;
        }
        planned[n.output] = Some(form.is_some());
        forms.push(form);
    }
    forms
}
