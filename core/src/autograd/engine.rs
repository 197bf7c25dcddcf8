//! The backward pass: topological order over recorded nodes, gradient accumulation that keeps
//! storage types, and delivery into leaves according to `grad_req` and `grad_stype`.

use std::sync::Arc;

use super::idmap::{IdMap, IdSet};
use super::{GradReq, Node};
use crate::error::{Error, Result};
use crate::{NDArray, SType};

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
    if !head.requires_grad() {
        return Err(Error::Autograd(
            "backward on an array that is not part of a recorded graph: call attach_grad() on the inputs and \
             compute inside autograd::record"
                .into(),
        ));
    }

    // Post-order DFS (iterative, graphs can be deep) gives a topological order.
    // Sized for a typical training step's graph (tens of nodes), so the vectors do not grow
    // several times per backward; larger graphs grow them as usual.
    const TYPICAL_NODES: usize = 64;
    let mut order: Vec<NDArray> = Vec::with_capacity(TYPICAL_NODES);
    let mut seen = IdSet::new();
    let mut stack: Vec<(NDArray, bool)> = Vec::with_capacity(TYPICAL_NODES);
    stack.push((head.clone(), false));
    while let Some((a, expanded)) = stack.pop() {
        if expanded {
            order.push(a);
            continue;
        }
        if !seen.insert(a.id()) {
            continue;
        }
        let node = a.node();
        stack.push((a, true));
        if let Some(n) = node {
            for x in &n.inputs {
                if !seen.contains(x.id()) && x.requires_grad() {
                    stack.push((x.clone(), false));
                }
            }
        }
    }

    let _pause = super::PauseGuard::pause(super::is_training());
    let mut grads: IdMap<NDArray> = IdMap::new();
    grads.insert(head.id(), head_grad);
    let mut visited_nodes: Vec<(NDArray, Arc<Node>)> = Vec::with_capacity(order.len());
    for a in order.iter().rev() {
        let Some(g) = grads.remove(a.id()) else {
            continue;
        };
        let Some(node) = a.node() else {
            // A leaf: its total gradient goes nowhere else, so it can be stored as it is.
            deliver_leaf(a, g)?;
            continue;
        };
        deliver_leaf(a, g.clone())?;
        let in_grads = (node.backward)(&g)?;
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
            if !x.requires_grad() {
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
        visited_nodes.push((a.clone(), node));
    }
    if !retain_graph {
        for (a, _) in visited_nodes {
            a.inner.meta.lock().unwrap_or_else(|e| e.into_inner()).node = None;
        }
    }
    Ok(())
}

/// Store the total gradient of an array into its gradient buffer when it has one attached.
fn deliver_leaf(a: &NDArray, g: NDArray) -> Result<()> {
    let (req, stype, prev) = {
        let m = a.inner.meta.lock().unwrap_or_else(|e| e.into_inner());
        if !m.attached {
            return Ok(());
        }
        (m.grad_req, m.grad_stype, m.grad.clone())
    };
    let converted = |g: NDArray| -> Result<NDArray> {
        if g.stype() != stype {
            return crate::sparse::cast_storage(&g, stype);
        }
        // The stored gradient must share no graph with what produced it and be nobody
        // else's array (zero_grad and the optimizers change it in place). A gradient the
        // backward pass created and holds alone, without a node, already is that: no new
        // handle (~230 instructions per parameter per step). Anything else is detached.
        if std::sync::Arc::strong_count(&g.inner) == 1 && g.node().is_none() {
            Ok(g)
        } else {
            Ok(g.detach())
        }
    };
    let mut replaced = None;
    let new = match (req, prev) {
        (GradReq::Null, _) => return Ok(()),
        (GradReq::Write, old) => {
            replaced = old;
            converted(g)?
        }
        (GradReq::Add, None) => converted(g)?,
        (GradReq::Add, Some(p)) => {
            let sum = accumulate(&p, &g)?;
            if sum.stype() == stype {
                sum
            } else {
                crate::sparse::cast_storage(&sum, stype)?
            }
        }
    };
    // A dense gradient requested from a row_sparse flow is densified here, once.
    debug_assert!(stype != SType::Csr);
    a.set_grad(Some(new));
    // A replaced gradient nobody else holds: its (large) buffer serves the next step's.
    if let Some(old) = replaced {
        old.recycle_buffer();
    }
    Ok(())
}
