//! Global-norm gradient clipping that understands row_sparse gradients.

use sparrow_core::{ArrayData, Error, NDArray, Result};

fn sum_squares(a: &NDArray) -> Result<f64> {
    let d = a.read();
    let buf = match &*d {
        ArrayData::Dense(x) => &x.buf,
        ArrayData::RowSparse(r) => &r.data,
        ArrayData::Csr(c) => &c.data,
    };
    if let Some(s) = buf.as_slice::<f32>() {
        Ok(s.iter().map(|&x| (x as f64) * (x as f64)).sum())
    } else if let Some(s) = buf.as_slice::<f64>() {
        Ok(s.iter().map(|&x| x * x).sum())
    } else {
        Err(Error::dtype(
            "clip_global_norm",
            "gradients must be float32 or float64",
        ))
    }
}

fn scale_in_place(a: &NDArray, f: f64) -> Result<()> {
    let mut d = a.write();
    let buf = match &mut *d {
        ArrayData::Dense(x) => &mut x.buf,
        ArrayData::RowSparse(r) => &mut r.data,
        ArrayData::Csr(c) => &mut c.data,
    };
    if let Some(s) = buf.as_mut_slice::<f32>() {
        let f = f as f32;
        s.iter_mut().for_each(|x| *x *= f);
    } else if let Some(s) = buf.as_mut_slice::<f64>() {
        s.iter_mut().for_each(|x| *x *= f);
    }
    Ok(())
}

/// Rescale `arrays` in place so that their joint L2 norm is at most `max_norm`, as Gluon's
/// `clip_global_norm` does (`scale = max_norm / (norm + 1e-8)`, applied when below 1). Sparse
/// arrays (row_sparse, csr) contribute and are scaled through their stored values only.
/// Returns the norm before scaling; a non-finite norm is returned without scaling anything.
pub fn clip_global_norm(arrays: &[NDArray], max_norm: f64) -> Result<f64> {
    if !(max_norm.is_finite() && max_norm > 0.0) {
        return Err(Error::arg(
            "clip_global_norm",
            format!("max_norm must be finite and > 0, got {max_norm}"),
        ));
    }
    let mut total = 0.0;
    for a in arrays {
        total += sum_squares(a)?;
    }
    let norm = total.sqrt();
    if !norm.is_finite() {
        return Ok(norm);
    }
    let scale = max_norm / (norm + 1e-8);
    if scale < 1.0 {
        for a in arrays {
            scale_in_place(a, scale)?;
        }
    }
    Ok(norm)
}
