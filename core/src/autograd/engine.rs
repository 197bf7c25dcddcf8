//! The backward pass: topological order over recorded nodes, gradient accumulation that keeps
//! storage types, and delivery into leaves according to `grad_req` and `grad_stype`.

use std::sync::Arc;

use super::idmap::{IdMap, IdSet};
use super::{GradReq, Node};
use crate::error::{Error, Result};
use crate::NDArray;

/// Sum two gradients, keeping sparsity where both are sparse: rs + rs -> coalesced rs,
/// rs + dense -> dense, dense + dense -> dense. Never recorded.
pub fn accumulate(a: &NDArray, b: &NDArray) -> Result<NDArray> {
    crate::autograd::pause(|| crate::sparse::add_grads(a, b))
}

/// Run backward from `head`. `head_grad` defaults to ones of the head's shape. With
/// `retain_graph = false` the recorded nodes are released afterwards.
pub fn backward_with(
    head: &NDArray,
    head_grad: Option<&NDArray>,
    retain_graph: bool,
) -> Result<()> {
    let detect = super::anomaly::is_detecting_anomaly();
    if detect {
        super::anomaly::forward_error()?;
    }
    let head_grad = match head_grad {
        Some(g) => {
            if !g.same_shape(head) {
                return Err(Error::shape(
                    "backward",
                    format!(
                        "head gradient shape {:?} differs from output shape {:?}",
                        g.shape(),
                        head.shape()
                    ),
                ));
            }
            g.clone()
        }
        None => head.ones_like(),
    };
    // Post-order DFS (iterative, graphs can be deep) gives a topological order. Each array's
    // autograd state is locked once, here: the backward loop below reuses what was read (the
    // node, whether a gradient is attached, whether it takes part in the graph). Every lock and
    // reference count is an atomic read-modify-write, ~3 ns apiece, and a
    // tutorial step took ~170 of them in this function before.
    // Sized for a typical training step's graph (tens of nodes), so the vectors do not grow
    // several times per backward; larger graphs grow them as usual.
    const TYPICAL_NODES: usize = 64;
    let mut order: Vec<Visit> = Vec::with_capacity(TYPICAL_NODES);
    // Arrays already looked at, and those of them that take part in the graph.
    let mut seen = IdSet::new();
    let mut in_graph = IdSet::new();
    let mut stack: Vec<Pending> = Vec::with_capacity(TYPICAL_NODES);
    stack.push(Pending::Enter(head.clone()));
    while let Some(p) = stack.pop() {
        let a = match p {
            Pending::Exit(v) => {
                order.push(v);
                continue;
            }
            Pending::Enter(a) => a,
        };
        if !seen.insert(a.id()) {
            continue;
        }
        let (attached, node) = {
            let mut m = a.inner.meta.lock().unwrap_or_else(|e| e.into_inner());
            // Without retain_graph the graph is released by this backward: the node moves out
            // of the array now, rather than being cloned and cleared under a second lock.
            let node = if retain_graph {
                m.node.clone()
            } else {
                m.node.take()
            };
            (m.attached, node)
        };
        if !attached && node.is_none() {
            if a.same_array(head) {
                return Err(Error::Autograd(
                    "backward on an array that is not part of a recorded graph: call \
                     attach_grad() on the inputs and compute inside autograd::record"
                        .into(),
                ));
            }
            continue;
        }
        in_graph.insert(a.id());
        // The inputs go above the array's exit entry (they must leave the stack first); the
        // entry is slid in under them, which moves a few stack slots, not a heap allocation.
        let slot = stack.len();
        if let Some(n) = &node {
            for x in n.inputs.iter().filter(|x| !seen.contains(x.id())) {
                stack.push(Pending::Enter(x.clone()));
            }
        }
        stack.insert(
            slot,
            Pending::Exit(Visit {
                array: a,
                node,
                attached,
            }),
        );
    }

    let _pause = super::PauseGuard::pause(super::is_training());
    let mut grads: IdMap<NDArray> = IdMap::new();
    grads.insert(head.id(), head_grad);
    for v in order.iter_mut().rev() {
        let a = &v.array;
        let Some(g) = grads.remove(a.id()) else {
            continue;
        };
        // Released as soon as it has run (without retain_graph this is its last holder), so
        // the activations it keeps alive are freed during the pass, not after it.
        let Some(node) = v.node.take() else {
            // A leaf: its total gradient goes nowhere else, so it can be stored as it is.
            if v.attached {
                deliver_leaf(a, g)?;
            }
            continue;
        };
        if v.attached {
            deliver_leaf(a, g.clone())?;
        }
        let in_grads = crate::sparse::run_backward_checked(&node, &g, |i| {
            in_graph.contains(node.inputs[i].id())
        })?;
        if detect {
            super::anomaly::check_backward(node.op, &g, &in_grads)?;
        }
        if in_grads.len() != node.inputs.len() {
            return Err(Error::Autograd(format!(
                "{}: backward returned {} gradients for {} inputs",
                node.op,
                in_grads.len(),
                node.inputs.len()
            )));
        }
        for (x, gx) in node.inputs.iter().zip(in_grads) {
            let Some(gx) = gx else { continue };
            if !in_graph.contains(x.id()) {
                continue;
            }
            if !gx.same_shape(x) {
                return Err(Error::Autograd(format!(
                    "{}: gradient of shape {:?} for an input of shape {:?}",
                    node.op,
                    gx.shape(),
                    x.shape()
                )));
            }
            let total = match grads.remove(x.id()) {
                Some(prev) => accumulate(&prev, &gx)?,
                None => gx,
            };
            grads.insert(x.id(), total);
        }
    }
    Ok(())
}

/// An array on the DFS stack: to look at, or looked at and ready for the topological order.
enum Pending {
    Enter(NDArray),
    Exit(Visit),
}

/// An array of the graph, with the autograd state the DFS read from it.
struct Visit {
    array: NDArray,
    /// The operator that produced it (`None` for a leaf; taken once it has run).
    node: Option<Arc<Node>>,
    /// Whether it has a gradient buffer attached (a leaf, or an attached intermediate).
    attached: bool,
}

/// Store the total gradient of an array into its gradient buffer when it has one attached.
/// The array's autograd state is locked twice (read the request, swap the new gradient in)
/// and nothing is cloned for `grad_req = write`: this runs for every parameter every step.
fn deliver_leaf(a: &NDArray, g: NDArray) -> Result<()> {
    let (req, stype, prev) = {
        let m = a.inner.meta.lock().unwrap_or_else(|e| e.into_inner());
        if !m.attached {
            return Ok(());
        }
        // Only accumulation reads the previous gradient.
        let prev = match m.grad_req {
            GradReq::Add => m.grad.clone(),
            _ => None,
        };
        (m.grad_req, m.grad_stype, prev)
    };
    let converted = |mut g: NDArray| -> Result<NDArray> {
        if g.stype() != stype {
            return crate::sparse::cast_storage(&g, stype);
        }
        // The stored gradient must share no graph with what produced it and be nobody
        // else's array (zero_grad and the optimizers change it in place). A gradient the
        // backward pass created and holds alone, without a node, already is that: no new
        // handle (~230 instructions per parameter per step). Anything else is detached.
        // Held alone, its state is reached without a lock.
        let alone_without_node = std::sync::Arc::get_mut(&mut g.inner)
            .is_some_and(|inner| inner.meta.get_mut().is_ok_and(|m| m.node.is_none()));
        if alone_without_node {
            Ok(g)
        } else {
            Ok(g.detach())
        }
    };
    let new = match (req, prev) {
        (GradReq::Null, _) => return Ok(()),
        (GradReq::Write, _) | (GradReq::Add, None) => converted(g)?,
        (GradReq::Add, Some(p)) => {
            let sum = accumulate(&p, &g)?;
            if sum.stype() == stype {
                sum
            } else {
                crate::sparse::cast_storage(&sum, stype)?
            }
        }
    };
    // A gradient of another storage type than requested was converted above, once (a dense
    // one requested from a row_sparse flow, a csr one for a csr leaf).
    let replaced = a
        .inner
        .meta
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .grad
        .replace(new);
    // A replaced gradient nobody else holds is dropped here, and its (large) buffer goes to the
    // recycle pool to serve the next step's.
    drop(replaced);
    Ok(())
}
