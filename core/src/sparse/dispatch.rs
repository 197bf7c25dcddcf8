//! Storage-type dispatch for operators: a sparse kernel where one exists, otherwise a dense
//! fallback with a one-time warning naming the op and the storage types (or an error in strict
//! mode).

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::unary::ZeroOp;
use crate::autograd::Node;
use crate::error::{Error, Result};
use crate::ops::BinaryOp;
use crate::{NDArray, SType};

static STRICT: AtomicBool = AtomicBool::new(false);
/// The combinations warned about so far: a set to warn once each, and the messages in the
/// order they were first given (what [`densify_warnings`] returns).
static WARNED: Mutex<Option<(HashSet<String>, Vec<String>)>> = Mutex::new(None);

thread_local! {
    /// The recorded operator whose backward is running on this thread, if any: a fallback
    /// inside it is reported as part of that backward.
    static BACKWARD_OF: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Strict mode: a storage-type combination without a sparse kernel is an error instead of a
/// densifying fallback. Off by default. Returns the previous setting.
///
/// Strict mode covers every operator, forward and backward: an operator that would turn a
/// csr or row_sparse operand (or gradient) into a dense result it has no sparse kernel for
/// fails with [`Error::SType`]. Dense results that are right by design are not refused; each
/// such operator says so in its documentation: `dot` of csr and dense operands, sparse
/// `add`/`sub` dense, `sum`/`mean` of csr, `square_sum`/`norm`, `tostype(Dense)` /
/// `cast_storage`, and the gradients of sparse operands whose exact gradient is dense because
/// the head gradient is dense (see [`crate::autograd::Node::run_backward`]).
pub fn set_strict_stype(on: bool) -> bool {
    STRICT.swap(on, Ordering::SeqCst)
}

/// Whether strict storage-type mode is on.
pub fn strict_stype() -> bool {
    STRICT.load(Ordering::SeqCst)
}

/// Record a dense fallback for `op` on inputs of these storage types: warn once per
/// combination on stderr, or fail in strict mode. Inside a backward pass the warning and the
/// error name the operator whose backward it is.
pub fn fallback(op: &'static str, stypes: &[SType]) -> Result<()> {
    let outer = BACKWARD_OF.with(|b| b.get());
    let (err_op, what) = match outer {
        Some(o) if o != op => (o, format!("backward of {o}: {op}")),
        Some(o) => (o, format!("backward of {o}")),
        None => (op, op.to_string()),
    };
    if strict_stype() {
        return Err(Error::stype(
            err_op,
            format!("{what}: no sparse kernel for storage types {stypes:?} and strict mode forbids the dense fallback"),
        ));
    }
    let key = format!("{what} {stypes:?}");
    let mut w = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    let (seen, log) = w.get_or_insert_with(|| (HashSet::new(), Vec::new()));
    if seen.insert(key.clone()) {
        eprintln!("sparrow warning: {what} has no kernel for storage types {stypes:?}; falling back to dense (set_strict_stype(true) makes this an error)");
        log.push(key);
    }
    Ok(())
}

/// Every densifying fallback warned about so far in this process, in order, once each: the
/// operator (`"tanh"`, or `"backward of relu: mul"` inside a backward pass) followed by the
/// storage types of its operands, e.g. `"tanh [Csr]"`.
pub fn densify_warnings() -> Vec<String> {
    let w = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    w.as_ref().map(|(_, log)| log.clone()).unwrap_or_default()
}

/// The one check an operator makes before computing densely on operands that may be sparse:
/// nothing when all are dense, else [`fallback`] with their storage types (a warning once, or
/// the strict-mode error).
pub(crate) fn densifying(op: &'static str, inputs: &[&NDArray]) -> Result<()> {
    if inputs.iter().all(|a| a.stype() == SType::Dense) {
        return Ok(());
    }
    let stypes: Vec<SType> = inputs.iter().map(|a| a.stype()).collect();
    fallback(op, &stypes)
}

/// Run `f` (a recorded operator's backward) with `op` as this thread's backward context, so
/// fallbacks inside it are reported as part of `op`'s backward. Restored on exit.
pub(crate) fn in_backward_of<R>(op: &'static str, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<&'static str>);
    impl Drop for Restore {
        fn drop(&mut self) {
            BACKWARD_OF.with(|b| b.set(self.0));
        }
    }
    let _restore = Restore(BACKWARD_OF.with(|b| b.replace(Some(op))));
    f()
}

/// Recorded operators whose kernels take sparse operands as they are (sparse kernels): with a
/// dense head gradient the exact gradient of their sparse operand may be dense by design
/// (`dot(csr, w)` with respect to the csr operand is `dy . w^T`; `x_csr + dense` passes `dy`
/// on; `sin(csr)` has `cos(0) = 1` off the stored entries). Any other operator given a sparse
/// operand computed densely, which its forward already reported through [`fallback`].
const SPARSE_KERNEL_NODES: &[&str] = &[
    "sparse_binary",
    "dot_csr_dense",
    "dot_csr_rsp",
    "dot_csr_t_dense",
    "dot_dense_csr",
    "dot_dense_csr_to_csr",
    "dot_csr_dense_t",
    "dot_csr_csr",
    "concat_csr",
    "sum_csr",
    "square_sum",
    "embedding",
    "cast_storage",
    "scatter_set_nd",
];

/// Run a recorded operator's backward with head gradient `g` and check the storage types of
/// what it returns: a sparse operand (`needed(i)` says which operands want a gradient) whose
/// gradient comes back dense is a densification, reported through [`fallback`] as part of
/// the operator's backward, unless the dense gradient is exact by design (a dense head
/// gradient through one of the sparse kernels above).
pub(crate) fn run_backward_checked(
    node: &Node,
    g: &NDArray,
    needed: impl Fn(usize) -> bool,
) -> Result<Vec<Option<NDArray>>> {
    let grads = in_backward_of(node.op, || (node.backward)(g))?;
    let g_sparse = g.stype() != SType::Dense;
    for (i, (x, gx)) in node.inputs.iter().zip(&grads).enumerate() {
        let Some(gx) = gx else { continue };
        let sx = x.stype();
        if sx == SType::Dense || gx.stype() != SType::Dense || !needed(i) {
            continue;
        }
        let sparse_kernel = SPARSE_KERNEL_NODES.contains(&node.op) || ZeroOp::is_name(node.op);
        if g_sparse || !sparse_kernel {
            in_backward_of(node.op, || fallback(node.op, &[sx, g.stype()]))?;
        }
    }
    Ok(grads)
}

/// Sparse kernels for binary elementwise ops. `Ok(None)`: use the dense path.
pub(crate) fn dispatch_binary(op: BinaryOp, a: &NDArray, b: &NDArray) -> Result<Option<NDArray>> {
    let (sa, sb) = (a.stype(), b.stype());
    if sa == SType::Dense && sb == SType::Dense {
        return Ok(None);
    }
    if let Some(out) = super::binary::binary(op, a, b)? {
        return Ok(Some(out));
    }
    fallback(op_name(op), &[sa, sb])?;
    Ok(None)
}

/// Sparse kernels for zero-preserving unary ops. `Ok(None)`: use the dense path.
pub(crate) fn dispatch_unary(op: &'static str, a: &NDArray) -> Result<Option<NDArray>> {
    zero_preserving(op, a, 0.0, 0.0)
}

fn zero_preserving(op: &'static str, a: &NDArray, s: f64, hi: f64) -> Result<Option<NDArray>> {
    let st = a.stype();
    if st == SType::Dense {
        return Ok(None);
    }
    if let Some(z) = ZeroOp::from_name(op, s, hi) {
        return Ok(Some(super::unary::unary(z, a)?));
    }
    fallback(op, &[st])?;
    Ok(None)
}

/// Sparse kernels for scalar mul/div. `Ok(None)`: use the dense path.
pub(crate) fn dispatch_scalar(op: &'static str, a: &NDArray, s: f64) -> Result<Option<NDArray>> {
    zero_preserving(op, a, s, 0.0)
}

/// Sparse kernel for clip (when `lo <= 0 <= hi`). `Ok(None)`: use the dense path.
pub(crate) fn dispatch_clip(a: &NDArray, lo: f64, hi: f64) -> Result<Option<NDArray>> {
    zero_preserving("clip", a, lo, hi)
}

/// Sparse kernels for dot. `Ok(None)`: use the dense path.
pub(crate) fn dispatch_dot(
    a: &NDArray,
    b: &NDArray,
    ta: bool,
    tb: bool,
) -> Result<Option<NDArray>> {
    let (sa, sb) = (a.stype(), b.stype());
    if sa == SType::Dense && sb == SType::Dense {
        return Ok(None);
    }
    if let Some(out) = super::dot::dispatch(a, b, (sa, sb), ta, tb)? {
        return Ok(Some(out));
    }
    fallback("dot", &[sa, sb])?;
    Ok(None)
}

fn op_name(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "add",
        BinaryOp::Sub => "sub",
        BinaryOp::Mul => "mul",
        BinaryOp::Div => "div",
        BinaryOp::Pow => "pow",
        BinaryOp::Maximum => "maximum",
        BinaryOp::Minimum => "minimum",
    }
}
