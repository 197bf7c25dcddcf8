//! Recomputation in the backward (MXNet's "mirror" / `MXNET_BACKWARD_DO_MIRROR`, Chen et al.'s
//! sublinear-memory training, PyTorch's `checkpoint`): trade one more forward for memory.
//!
//! A joint graph (forward nodes, then backward nodes) keeps every forward value the backward
//! reads alive from the forward until that read, so a deep network holds all its activations at
//! the turn from forward to backward. This pass keeps only some of them (the checkpoints) and
//! gives each backward node that read another one a recomputed copy instead: the forward nodes
//! that produce it, cloned and placed just before the first backward node that needs it,
//! starting from the nearest kept values. The original values then die inside the forward.
//!
//! Checkpoints are chosen greedily along the forward's order: the values the backward reads
//! are summed in bytes, and the value that brings the sum to the budget is kept and restarts
//! it. With a budget of about `sqrt(total * largest)` bytes, a chain of `n` equal layers keeps
//! about `sqrt(n)` checkpoints and recomputes one segment of about `sqrt(n)` layers at a time,
//! so it holds about `2 sqrt(n)` activations instead of `n`, for about one more forward.
//!
//! Values of operators that must run once per run (dropout's mask, a running statistic's
//! update: [`Op::runs_once`](super::Op::runs_once)) are always kept, never recomputed (a second
//! draw would be another mask, a second update another statistic); every other operator is
//! deterministic, so a recomputed value has the bits of the original and the step's
//! results do not change.

use super::ir::{Graph, Node};

/// How a training step's backward gets the forward values it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recompute {
    /// Keep every forward value the backward reads (fastest; the most memory).
    #[default]
    Off,
    /// Keep checkpoints about every `sqrt(n)` values and recompute the rest in the backward.
    Sqrt,
    /// Keep a checkpoint each time the values read by the backward since the last one reach
    /// this many bytes (0 keeps everything, as [`Recompute::Off`]).
    Budget(usize),
}

/// What [`with_recompute`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct RecomputePlan {
    /// The checkpoint budget in bytes that was used.
    pub budget: usize,
    /// Forward values the backward reads that stay alive as checkpoints (graph outputs are
    /// always kept and not counted).
    pub kept: usize,
    /// Forward values the backward reads through a recomputed copy.
    pub dropped: usize,
    /// Forward nodes cloned into the backward.
    pub cloned_nodes: usize,
}

/// The joint graph `joint` (its first `forward_nodes` nodes the forward) with the forward
/// values its backward reads recomputed as `mode` asks, and what was done. `Recompute::Off`
/// (or a graph with nothing to drop) returns the graph unchanged.
pub fn with_recompute(
    joint: &Graph,
    forward_nodes: usize,
    mode: Recompute,
) -> std::result::Result<(Graph, RecomputePlan), String> {
    let nodes = joint.nodes();
    if forward_nodes > nodes.len() {
        return Err(format!(
            "recompute: {forward_nodes} forward nodes in a graph of {} nodes",
            nodes.len()
        ));
    }
    let nv = joint.values().len();
    let is_output = joint.is_output();
    let mut producer: Vec<Option<usize>> = vec![None; nv];
    for (i, n) in nodes[..forward_nodes].iter().enumerate() {
        producer[n.output] = Some(i);
    }
    let mut read_back = vec![false; nv];
    for n in &nodes[forward_nodes..] {
        for &x in &n.inputs {
            read_back[x] |= producer[x].is_some();
        }
    }
    let once: Vec<bool> = (0..nv)
        .map(|v| producer[v].is_some_and(|i| nodes[i].op.runs_once()))
        .collect();
    // The values the backward reads that could be dropped, and their bytes.
    let candidate = |v: usize| read_back[v] && !is_output[v] && !once[v];
    let cand_bytes: Vec<usize> = nodes[..forward_nodes]
        .iter()
        .map(|n| n.output)
        .filter(|&v| candidate(v))
        .map(|v| joint.values()[v].bytes)
        .collect();
    let budget = match mode {
        Recompute::Off => 0,
        Recompute::Budget(b) => b,
        Recompute::Sqrt => {
            let total: usize = cand_bytes.iter().sum();
            let largest = cand_bytes.iter().copied().max().unwrap_or(0);
            ((total as f64) * (largest as f64)).sqrt().ceil() as usize
        }
    };
    let unchanged = |budget| RecomputePlan {
        budget,
        kept: cand_bytes.len(),
        dropped: 0,
        cloned_nodes: 0,
    };
    if budget == 0 || cand_bytes.is_empty() {
        return Ok((joint.clone(), unchanged(budget)));
    }

    // Kept: everything the forward does not produce, outputs, values of nodes that run once,
    // and the checkpoints.
    let mut keep: Vec<bool> = (0..nv)
        .map(|v| producer[v].is_none() || is_output[v] || once[v])
        .collect();
    let (mut acc, mut kept, mut dropped) = (0usize, 0usize, 0usize);
    for n in &nodes[..forward_nodes] {
        let v = n.output;
        if !candidate(v) {
            continue;
        }
        acc += joint.values()[v].bytes;
        if acc >= budget {
            keep[v] = true;
            acc = 0;
            kept += 1;
        } else {
            dropped += 1;
        }
    }
    if dropped == 0 {
        return Ok((joint.clone(), unchanged(budget)));
    }

    let mut values = joint.values().to_vec();
    let mut out: Vec<Node> = nodes[..forward_nodes].to_vec();
    // Per forward value: its recomputed copy, once made.
    let mut copy: Vec<Option<usize>> = vec![None; nv];
    let mut cloned = 0usize;
    for n in &nodes[forward_nodes..] {
        let mut inputs = Vec::with_capacity(n.inputs.len());
        for &x in &n.inputs {
            if keep[x] {
                inputs.push(x);
                continue;
            }
            // Post-order over the producers back to kept values: each input's copy exists
            // before the clone that reads it.
            let mut stack = vec![(x, false)];
            while let Some((u, expanded)) = stack.pop() {
                if keep[u] || copy[u].is_some() {
                    continue;
                }
                let p = &nodes[producer[u].expect("a value not kept is a forward output")];
                if !expanded {
                    stack.push((u, true));
                    stack.extend(p.inputs.iter().map(|&y| (y, false)));
                    continue;
                }
                let ins = p
                    .inputs
                    .iter()
                    .map(|&y| {
                        if keep[y] {
                            y
                        } else {
                            copy[y].expect("made first")
                        }
                    })
                    .collect();
                let id = values.len();
                values.push(values[u].clone());
                out.push(Node {
                    op: p.op.clone(),
                    inputs: ins,
                    output: id,
                });
                copy[u] = Some(id);
                cloned += 1;
            }
            inputs.push(copy[x].expect("made above"));
        }
        out.push(Node {
            op: n.op.clone(),
            inputs,
            output: n.output,
        });
    }
    let input_names = joint.input_names().to_vec();
    let g = Graph::new(
        values,
        input_names,
        joint.inputs().to_vec(),
        joint.params().to_vec(),
        out,
        joint.outputs().to_vec(),
    )
    .map_err(|e| format!("recompute: {e}"))?;
    Ok((
        g,
        RecomputePlan {
            budget,
            kept,
            dropped,
            cloned_nodes: cloned,
        },
    ))
}
