//! Global-norm gradient clipping that understands row_sparse gradients.

use sparrow_core::update::{scale_stored, stored_sum_sq};
use sparrow_core::{Error, NDArray, Result};

/// Rescale `arrays` in place so that their joint L2 norm is at most `max_norm`, as Gluon's
/// `clip_global_norm` does (`scale = max_norm / (norm + 1e-8)`, applied when below 1). Sparse
/// arrays (row_sparse, csr) contribute and are scaled through their stored values only.
/// Returns the norm before scaling. A non-finite norm (a gradient holds NaN or ±inf) is an
/// error and nothing is scaled: clipping by it would turn every gradient NaN (Gluon warns
/// there, PyTorch's `error_if_nonfinite` refuses).
pub fn clip_global_norm(arrays: &[NDArray], max_norm: f64) -> Result<f64> {
    if !(max_norm.is_finite() && max_norm > 0.0) {
        return Err(Error::arg(
            "clip_global_norm",
            format!("max_norm must be finite and > 0, got {max_norm}"),
        ));
    }
    let mut total = 0.0;
    for a in arrays {
        total += stored_sum_sq(a)?;
    }
    let norm = total.sqrt();
    if !norm.is_finite() {
        return Err(Error::arg(
            "clip_global_norm",
            format!("the global norm is {norm}: a gradient holds NaN or inf; nothing was scaled"),
        ));
    }
    let scale = max_norm / (norm + 1e-8);
    if scale < 1.0 {
        for a in arrays {
            scale_stored(a, scale)?;
        }
    }
    Ok(norm)
}
