//! The shapes, dtypes and storage types every update operator relies on.

use crate::error::{Error, Result};
use crate::{DType, NDArray, SType, Shape};

/// Check an update's arrays and return their dtype (f32 or f64): a dense float weight, a dense
/// or row_sparse gradient of the weight's shape and dtype, and dense states (named for the
/// messages) of the weight's shape and dtype, none of them the same array as another.
///
/// Each array is read once (one lock round trip, not one per property: this runs for every
/// parameter of every training step).
pub(crate) fn check_arrays(
    op: &'static str,
    weight: &NDArray,
    grad: &NDArray,
    states: &[(&'static str, &NDArray)],
) -> Result<DType> {
    check_arrays_shaped(op, weight, grad, states, None)
}

/// [`check_arrays`] with the states' shape given (`Some`) instead of the weight's: GroupAdaGrad
/// keeps one history value per row, shape `(rows, 1)`.
pub(crate) fn check_arrays_shaped(
    op: &'static str,
    weight: &NDArray,
    grad: &NDArray,
    states: &[(&'static str, &NDArray)],
    state_shape: Option<&[usize]>,
) -> Result<DType> {
    if weight.same_array(grad) {
        return Err(Error::arg(op, "weight and gradient are the same array"));
    }
    let (w_stype, w_dtype, w_shape) = {
        let w = weight.read();
        (w.stype(), w.dtype(), Shape::from_slice(w.shape()))
    };
    let (g_stype, g_dtype, g_same_shape) = {
        let g = grad.read();
        (g.stype(), g.dtype(), g.shape() == &w_shape[..])
    };
    if w_stype != SType::Dense {
        return Err(Error::stype(
            op,
            format!("weight must be dense, got {w_stype:?}"),
        ));
    }
    if !w_dtype.is_float() {
        return Err(Error::dtype(
            op,
            format!(
                "weight must be float32 or float64 (or float16 / bfloat16), got {}",
                w_dtype.name()
            ),
        ));
    }
    if g_dtype != w_dtype {
        return Err(Error::dtype_mismatch(op, w_dtype, g_dtype));
    }
    if !g_same_shape {
        return Err(Error::shape(
            op,
            format!("weight {:?} vs gradient {:?}", &w_shape[..], grad.shape()),
        ));
    }
    match g_stype {
        SType::Dense | SType::RowSparse => {}
        SType::Csr => {
            return Err(Error::stype(
                op,
                "csr gradients are not supported; use a row_sparse gradient",
            ))
        }
    }
    if g_stype == SType::RowSparse && w_shape.is_empty() {
        return Err(Error::shape(op, "row_sparse gradient of a 0-d weight"));
    }
    for (k, (name, a)) in states.iter().enumerate() {
        if a.same_array(weight) || a.same_array(grad) {
            return Err(Error::arg(
                op,
                format!("state {name} aliases the weight or gradient"),
            ));
        }
        // The driver write-locks every state at once: the same array twice would deadlock.
        if let Some((other, _)) = states[..k].iter().find(|(_, b)| b.same_array(a)) {
            return Err(Error::arg(
                op,
                format!("states {other} and {name} are the same array"),
            ));
        }
        let want = state_shape.unwrap_or(&w_shape[..]);
        let (a_stype, a_dtype, a_same_shape) = {
            let r = a.read();
            (r.stype(), r.dtype(), r.shape() == want)
        };
        if !a_same_shape || a_dtype != w_dtype || a_stype != SType::Dense {
            let must = match state_shape {
                Some(s) => format!("it must be dense {s:?} {}", w_dtype.name()),
                None => format!("weight is {:?} {}", &w_shape[..], w_dtype.name()),
            };
            return Err(Error::shape(
                op,
                format!(
                    "state {name} is {:?} {} {a_stype:?}, {must}",
                    a.shape(),
                    a_dtype.name(),
                ),
            ));
        }
    }
    Ok(w_dtype)
}
