//! Fusion of elementwise chains: consecutive map nodes (unary functions, scalar arithmetic,
//! clip) where each reads only the previous one's output, which nothing else reads, run as
//! one node that passes over memory once (`ElementwiseOps::map_chain_into` /
//! `map_chain_in_place`: each cache-sized block goes through every map of the chain).
//!
//! The pass works on the plan's node order: a chain's nodes are consecutive, so no other node
//! runs between them (and none can reuse the buffer of the chain's input in between), and
//! every node after the first runs in place of its predecessor's output, so the chain's
//! buffer is its first node's.

use super::into::Form;
use super::ir::Graph;
use super::plan::MemoryPlan;
use crate::storage::Map;

/// A fused chain of map nodes `head..=tail`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Chain {
    /// Its first node.
    pub(crate) head: usize,
    /// Its last node (whose output the chain computes).
    pub(crate) tail: usize,
    /// The maps, in order.
    pub(crate) maps: Vec<Map>,
}

/// The chains of two or more map nodes in `g` under `plan`.
pub(crate) fn map_chains(g: &Graph, forms: &[Option<Form>], plan: &MemoryPlan) -> Vec<Chain> {
    let nodes = g.nodes();
    let mut readers = vec![0usize; g.values().len()];
    for n in nodes {
        for &x in &n.inputs {
            readers[x] += 1;
        }
    }
    let map_of = |i: usize| match forms[i] {
        Some(Form::Map(m)) => Some(m),
        _ => None,
    };
    let mut chains: Vec<Chain> = Vec::new();
    for i in 1..nodes.len() {
        let (Some(m), Some(prev)) = (map_of(i), map_of(i - 1)) else {
            continue;
        };
        let x = nodes[i - 1].output;
        let joins = nodes[i].inputs[0] == x
            && readers[x] == 1
            && !g.is_output()[x]
            && plan.runs_in_place[i];
        if !joins {
            continue;
        }
        match chains.last_mut() {
            Some(c) if c.tail == i - 1 => {
                c.tail = i;
                c.maps.push(m);
            }
            _ => chains.push(Chain {
                head: i - 1,
                tail: i,
                maps: vec![prev, m],
            }),
        }
    }
    chains
}
