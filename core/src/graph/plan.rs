//! Memory planning over a graph, as MXNet's `PlanMemory` does it: walk the nodes in execution
//! order; a node's output runs in place of an input that dies at that node when the node can
//! overwrite its input ([`Form::in_place_capable`]: elementwise maps, bias + activation) and
//! the buffers agree; otherwise it takes a free buffer of its dtype and element count, or a
//! new one; buffers of values read for the last time are freed after the node. Inputs and
//! parameters are the caller's and are not planned; neither are outputs of nodes that have no
//! "write into" form (they run the eager operator, which allocates: [`MemoryPlan::fallback`]).
//!
//! A buffer is shared only by values of one dtype and element count, so every value is a whole
//! buffer (a dense array's storage is exactly its elements); in the MLPs this loses nothing,
//! their activations all have one size.

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
        let forms = node_forms(g);
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
            let bytes = info.bytes;
            total += bytes;
            live += bytes;
            live_peak = live_peak.max(live);
            if !outs[node.output] {
                act += bytes;
                act_peak = act_peak.max(act);
            }
            let dies = |x: usize| last[x] == Some(i) && !outs[x];
            let fits = |s: usize| slot_dtype[s] == info.dtype && slot_bytes[s] == bytes;
            match forms[i] {
                None => fallback.push(i),
                Some(form) => {
                    // In place: the input dies here, is read once by this node and sits in a
                    // buffer of the output's size.
                    let x = node.inputs[0];
                    let donor = form.in_place_capable()
                        && dies(x)
                        && node.inputs.iter().filter(|&&y| y == x).count() == 1
                        && slot_of[x].is_some_and(fits);
                    let slot = if donor {
                        runs_in_place[i] = true;
                        slot_of[x].expect("checked above")
                    } else {
                        match free.iter().position(|&s| fits(s)) {
                            Some(k) => free.swap_remove(k),
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
                        live -= values[x].bytes.min(live);
                        act -= values[x].bytes.min(act);
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

    /// Bytes of the planned buffers that never hold one of `g`'s outputs: the planned memory
    /// of activations and temporaries (a training step's gradient buffers left out).
    pub fn planned_activation_bytes(&self, g: &Graph) -> usize {
        let mut holds_output = vec![false; self.slot_bytes.len()];
        for &o in g.outputs() {
            if let Some(s) = self.slot_of.get(o).copied().flatten() {
                holds_output[s] = true;
            }
        }
        self.slot_bytes
            .iter()
            .zip(&holds_output)
            .filter(|(_, &o)| !o)
            .map(|(b, _)| b)
            .sum()
    }

    /// Bytes of the outputs of fallback nodes (allocated by their operators at each run).
    pub fn fallback_bytes(&self, g: &Graph) -> usize {
        self.fallback
            .iter()
            .map(|&i| g.values()[g.nodes()[i].output].bytes)
            .sum()
    }
}

/// Per node: its "write into" form, or `None` (the eager operator runs).
pub(crate) fn node_forms(g: &Graph) -> Vec<Option<Form>> {
    let values = g.values();
    g.nodes()
        .iter()
        .map(|n| {
            let ins: Vec<&super::ir::ValueInfo> = n.inputs.iter().map(|&x| &values[x]).collect();
            Form::of(&n.op, &ins, &values[n.output])
        })
        .collect()
}
