//! Tape-based reverse-mode autograd with Gluon semantics.
//!
//! ```
//! use sparrow_core::{autograd, NDArray, DType};
//! let x = NDArray::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
//! x.attach_grad();
//! let y = autograd::record(|| x.mul(&x)?.sum_all()).unwrap();
//! y.backward().unwrap();
//! assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0]);
//! ```
//!
//! Operators record a [`Node`] on their output when recording is on and an input needs a
//! gradient. Gradients are `NDArray`s and so carry a storage type: a backward may return a
//! row_sparse gradient, and accumulation keeps it sparse where it can.

mod anomaly;
mod engine;
mod idmap;
mod mode;

pub use anomaly::{detect_anomaly, is_detecting_anomaly, set_detect_anomaly};
pub use engine::{accumulate, backward_with};
pub use mode::{
    is_recording, is_training, pause, predict_mode, record, record_with, set_recording,
    set_training, train_mode, PauseGuard, RecordGuard,
};

use std::sync::Arc;

use crate::error::Result;
use crate::{NDArray, SType};

/// How a leaf's gradient buffer is filled by `backward` (Gluon's `grad_req`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GradReq {
    /// Overwrite the gradient on every backward.
    #[default]
    Write,
    /// Add to the existing gradient (clear it yourself with `zero_grad`).
    Add,
    /// No gradient.
    Null,
}

/// The backward function of a recorded operator: given the gradient of the output, the
/// gradients of each input (`None` for inputs that need none).
pub type BackwardFn = Box<dyn Fn(&NDArray) -> Result<Vec<Option<NDArray>>> + Send + Sync>;

/// One recorded operator application.
pub struct Node {
    /// Operator name, for error messages.
    pub op: &'static str,
    /// The inputs, in the order the backward returns their gradients.
    pub inputs: Vec<NDArray>,
    /// The backward function.
    pub backward: BackwardFn,
}

/// Per-array autograd state.
#[derive(Default)]
pub(crate) struct AutogradMeta {
    /// The gradient buffer of a leaf (after `attach_grad`).
    pub grad: Option<NDArray>,
    /// Whether a gradient was attached (a leaf that wants a gradient).
    pub attached: bool,
    pub grad_req: GradReq,
    pub grad_stype: SType,
    /// The operator that produced this array, when recorded.
    pub node: Option<Arc<Node>>,
    /// The empty row_sparse gradient `zero_grad` last set, handed out again while it is still
    /// empty and nobody else holds it: clearing a consumed gradient after every step (what a
    /// trainer does) then allocates nothing.
    pub empty_grad: Option<NDArray>,
}

impl NDArray {
    /// Mark this array as a leaf that wants a dense gradient (`grad_req = write`).
    pub fn attach_grad(&self) {
        self.attach_grad_with(GradReq::Write, SType::Dense);
    }

    /// Mark this array as a leaf that wants a gradient with the given request and storage type.
    /// A row_sparse gradient starts empty (no rows): nothing dense is allocated. The gradient
    /// buffer lives on this array's device; when that device cannot allocate it, the leaf
    /// starts without one and the first backward writes its gradient (what `add` to zeros
    /// would give).
    pub fn attach_grad_with(&self, req: GradReq, stype: SType) {
        let grad = match req {
            GradReq::Null => None,
            _ => self.zero_grad_buffer(stype),
        };
        let mut m = self.inner.meta.lock().unwrap_or_else(|e| e.into_inner());
        m.attached = req != GradReq::Null;
        m.grad_req = req;
        m.grad_stype = stype;
        m.grad = grad;
        m.node = None;
    }

    /// The gradient buffer, if one was attached.
    pub fn grad(&self) -> Option<NDArray> {
        self.inner
            .meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .grad
            .clone()
    }

    /// The gradient request of this array.
    pub fn grad_req(&self) -> GradReq {
        self.inner
            .meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .grad_req
    }

    /// The storage type requested for this array's gradient.
    pub fn grad_stype(&self) -> SType {
        self.inner
            .meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .grad_stype
    }

    /// Replace the gradient buffer (used by trainers and for clearing).
    pub fn set_grad(&self, g: Option<NDArray>) {
        self.inner
            .meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .grad = g;
    }

    /// Reset the gradient to zeros of its storage type (a row_sparse gradient becomes empty).
    pub fn zero_grad(&self) {
        let mut m = self.inner.meta.lock().unwrap_or_else(|e| e.into_inner());
        if !m.attached {
            return;
        }
        if m.grad_stype == SType::RowSparse {
            let m = &mut *m;
            // The last empty gradient again, if only this meta holds it (as its cache, and
            // perhaps as the gradient) and it is still an empty table of this array's kind (a
            // gradient accumulated in place would have rows).
            let reusable = m.empty_grad.as_ref().is_some_and(|e| {
                let holders = 1 + usize::from(m.grad.as_ref().is_some_and(|g| g.same_array(e)));
                Arc::strong_count(&e.inner) == holders && self.is_empty_table(e)
            });
            if !reusable {
                m.empty_grad = self.zero_grad_buffer(SType::RowSparse);
            }
            m.grad = m.empty_grad.clone();
            return;
        }
        m.grad = self.zero_grad_buffer(m.grad_stype);
    }

    /// Whether `e` is a row_sparse array without rows of this array's shape, dtype and device.
    fn is_empty_table(&self, e: &NDArray) -> bool {
        let (d, ed) = (self.read(), e.read());
        match &*ed {
            crate::ndarray::ArrayData::RowSparse(r) => {
                r.indices.is_empty()
                    && r.shape.as_slice() == d.shape()
                    && r.data.dtype() == d.dtype()
                    && r.data.device() == d.device()
            }
            _ => false,
        }
    }

    /// Zeros of this array's shape and dtype, of storage type `stype`, on its device (`None`
    /// when the device cannot allocate them).
    fn zero_grad_buffer(&self, stype: SType) -> Option<NDArray> {
        let (shape, dtype, device) = {
            let d = self.read();
            (d.shape().to_vec(), d.dtype(), d.device())
        };
        crate::sparse::zeros_stype_on(&shape, dtype, stype, device).ok()
    }

    /// True when this array takes part in a graph: a leaf with an attached gradient or the
    /// output of a recorded operator.
    pub fn requires_grad(&self) -> bool {
        let m = self.inner.meta.lock().unwrap_or_else(|e| e.into_inner());
        m.attached || m.node.is_some()
    }

    /// Detach the recorded operator that produced this array and hand it over (`None` if there
    /// is none). For an op that folds its input's operator into its own node: the caller must
    /// own the only use of this array in the graph (a fresh intermediate it just computed),
    /// since the array no longer carries a gradient path afterwards.
    pub(crate) fn take_node(&self) -> Option<Arc<Node>> {
        self.inner
            .meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .node
            .take()
    }

    /// The recorded operator that produced this array, if any.
    pub fn node(&self) -> Option<Arc<Node>> {
        self.inner
            .meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .node
            .clone()
    }

    /// Backward from a scalar (or any array, with a head gradient of ones), like Gluon's
    /// `loss.backward()`. Frees the graph afterwards.
    pub fn backward(&self) -> Result<()> {
        backward_with(self, None, false)
    }

    /// Backward with an explicit head gradient of the same shape.
    pub fn backward_with_grad(&self, head_grad: &NDArray) -> Result<()> {
        backward_with(self, Some(head_grad), false)
    }

    /// Same as [`NDArray::detach`]: a handle that stops gradients.
    pub fn stop_gradient(&self) -> NDArray {
        self.detach()
    }
}

impl Node {
    /// Run this node's backward with head gradient `g` (the gradient of its output), as
    /// `backward` does for each node: the gradients of its inputs in order, `None` where an
    /// input needs none. A sparse input whose gradient would come back dense is reported like
    /// a forward fallback (a warning once, an [`crate::Error::SType`] in strict mode; see
    /// [`crate::sparse::set_strict_stype`]) unless that dense gradient is exact by design.
    pub fn run_backward(&self, g: &NDArray) -> Result<Vec<Option<NDArray>>> {
        crate::sparse::run_backward_checked(self, g, |_| true)
    }
}

/// Attach a backward to an operator's output if recording is on and an input needs a gradient.
/// Operators call this once per output; it costs one flag check when not recording.
pub fn record_op<F>(op: &'static str, out: NDArray, inputs: &[&NDArray], backward: F) -> NDArray
where
    F: Fn(&NDArray) -> Result<Vec<Option<NDArray>>> + Send + Sync + 'static,
{
    crate::graph::note_op(op, &out);
    if !is_recording() || !inputs.iter().any(|x| x.requires_grad()) {
        return out;
    }
    attach_node(op, out, inputs, backward)
}

/// [`record_op`] for a caller that has already found recording on and an input needing a
/// gradient (it asked each input's `requires_grad` to decide what its backward computes):
/// no second pass over the inputs' autograd state.
pub(crate) fn attach_node<F>(
    op: &'static str,
    out: NDArray,
    inputs: &[&NDArray],
    backward: F,
) -> NDArray
where
    F: Fn(&NDArray) -> Result<Vec<Option<NDArray>>> + Send + Sync + 'static,
{
    if anomaly::is_detecting_anomaly() {
        anomaly::check_forward(op, &out, inputs);
    }
    let node = Node {
        op,
        inputs: inputs.iter().map(|&x| x.clone()).collect(),
        backward: Box::new(backward),
    };
    let node = Some(Arc::new(node));
    let mut out = out;
    match Arc::get_mut(&mut out.inner) {
        // A fresh output (the usual case): no other handle, so no lock round trip (two atomic
        // read-modify-writes) is needed to reach its state.
        Some(inner) => inner.meta.get_mut().unwrap_or_else(|e| e.into_inner()).node = node,
        None => {
            out.inner
                .meta
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .node = node
        }
    }
    out
}
