//! NumPy broadcasting: shape rules and the axes a backward sums to undo a broadcast. The strided
//! kernel is `crate::cpu::broadcast`.

use crate::error::{Error, Result};

pub(crate) use crate::cpu::broadcast::broadcast_strides;

/// The broadcast shape of two shapes (NumPy rules), or an error naming `op`.
pub fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::shape(
                op,
                format!("cannot broadcast shapes {a:?} and {b:?}"),
            ));
        };
    }
    Ok(out)
}

/// The axes of `out_shape` that were broadcast from `shape` (to be summed in backward), as
/// positions in `out_shape`, plus whether leading axes were added.
pub(crate) fn reduced_axes(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let lead = out_shape.len() - shape.len();
    (0..out_shape.len())
        .filter(|&i| i < lead || (shape[i - lead] == 1 && out_shape[i] != 1))
        .collect()
}
