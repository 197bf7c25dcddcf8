//! Storage-type dispatch for operators: a sparse kernel where one exists, otherwise a dense
//! fallback with a one-time warning naming the op and the storage types (or an error in strict
//! mode).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::unary::ZeroOp;
use crate::error::{Error, Result};
use crate::ops::BinaryOp;
use crate::{NDArray, SType};

static STRICT: AtomicBool = AtomicBool::new(false);
static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Strict mode: a storage-type combination without a sparse kernel is an error instead of a
/// densifying fallback. Off by default. Returns the previous setting.
pub fn set_strict_stype(on: bool) -> bool {
    STRICT.swap(on, Ordering::SeqCst)
}

/// Whether strict storage-type mode is on.
pub fn strict_stype() -> bool {
    STRICT.load(Ordering::SeqCst)
}

/// Record a dense fallback for `op` on inputs of these storage types: warn once per
/// combination on stderr, or fail in strict mode.
pub fn fallback(op: &'static str, stypes: &[SType]) -> Result<()> {
    let key = format!("{op}{stypes:?}");
    if strict_stype() {
        return Err(Error::stype(op, format!("no sparse kernel for storage types {stypes:?} and strict mode forbids the dense fallback")));
    }
    let mut w = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if w.get_or_insert_with(HashSet::new).insert(key) {
        eprintln!("sparrow warning: {op} has no kernel for storage types {stypes:?}; falling back to dense (set_strict_stype(true) makes this an error)");
    }
    Ok(())
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
