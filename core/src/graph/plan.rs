//! Memory planning over a graph, as MXNet's `PlanMemory` does it: walk the nodes in execution
//! order; a node's output runs in place of an input that dies at that node when the operator
//! maps elements one to one and the sizes agree; otherwise it takes the smallest free buffer
//! that is large enough (best fit), or a new one; buffers of values read for the last time are
//! freed after the node. Inputs and parameters are the caller's and are not planned.

use super::ir::Graph;

/// The result of planning a graph's intermediate values into shared buffers.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPlan {
    /// Per value: the buffer it lives in (`None` for inputs and parameters).
    pub slot_of: Vec<Option<usize>>,
    /// Size in bytes of each planned buffer.
    pub slot_bytes: Vec<usize>,
    /// Nodes that run in place of a dying input.
    pub in_place: usize,
    /// Bytes of all node outputs together: what a run that keeps every intermediate holds
    /// (eager execution under `autograd::record`, where the tape keeps them for backward).
    pub total_bytes: usize,
    /// Peak bytes of live intermediates when each is freed after its last reader but nothing
    /// is shared (what [`Graph::run`]'s release gives without a plan).
    pub live_peak_bytes: usize,
}

impl MemoryPlan {
    /// Plan `g`'s intermediate values.
    pub fn of(g: &Graph) -> MemoryPlan {
        let values = g.values();
        let last = g.last_use();
        let outs = g.is_output();
        let mut slot_of: Vec<Option<usize>> = vec![None; values.len()];
        let mut slot_bytes: Vec<usize> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        let mut in_place = 0;
        let (mut live, mut live_peak, mut total) = (0usize, 0usize, 0usize);
        for (i, node) in g.nodes().iter().enumerate() {
            let bytes = values[node.output].bytes;
            total += bytes;
            live += bytes;
            live_peak = live_peak.max(live);
            let dies = |x: usize| last[x] == Some(i) && !outs[x];
            // In place: an elementwise map whose (planned) input dies here, same size.
            let donor = node
                .op
                .is_elementwise_unary()
                .then_some(node.inputs[0])
                .filter(|&x| dies(x) && slot_of[x].is_some_and(|s| slot_bytes[s] >= bytes));
            let slot = match donor {
                Some(x) => {
                    in_place += 1;
                    slot_of[x].take()
                }
                None => {
                    let best = free
                        .iter()
                        .enumerate()
                        .filter(|(_, &s)| slot_bytes[s] >= bytes)
                        .min_by_key(|(_, &s)| slot_bytes[s])
                        .map(|(k, _)| k);
                    match best {
                        Some(k) => Some(free.swap_remove(k)),
                        None => {
                            slot_bytes.push(bytes);
                            Some(slot_bytes.len() - 1)
                        }
                    }
                }
            };
            slot_of[node.output] = slot;
            let mut seen = Vec::new();
            for &x in &node.inputs {
                if dies(x) && !seen.contains(&x) {
                    seen.push(x);
                    live -= values[x].bytes.min(live);
                    if let Some(s) = slot_of[x] {
                        free.push(s);
                    }
                }
            }
        }
        MemoryPlan {
            slot_of,
            slot_bytes,
            in_place,
            total_bytes: total,
            live_peak_bytes: live_peak,
        }
    }

    /// Bytes of all planned buffers: the planned peak of intermediate memory.
    pub fn planned_bytes(&self) -> usize {
        self.slot_bytes.iter().sum()
    }
}
