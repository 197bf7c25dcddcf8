//! NumPy broadcasting: shape rules, the strided binary kernel, and the reduction that undoes a
//! broadcast in backward.

use crate::error::{Error, Result};

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

/// Row-major strides of `shape` aligned to an output of rank `n`, with 0 for broadcast dims.
pub(crate) fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let n = out.len();
    let mut strides = vec![0; n];
    let mut s = 1;
    for i in (0..shape.len()).rev() {
        let oi = i + n - shape.len();
        strides[oi] = if shape[i] == 1 && out[oi] != 1 { 0 } else { s };
        s *= shape[i];
    }
    strides
}

/// Apply `f` elementwise with broadcasting. Fast paths for equal shapes and scalar operands.
pub(crate) fn broadcast_apply<A, B, D>(
    a: &[A],
    ash: &[usize],
    b: &[B],
    bsh: &[usize],
    out_shape: &[usize],
    f: impl Fn(A, B) -> D + Sync + Send,
) -> Vec<D>
where
    A: Copy + Send + Sync,
    B: Copy + Send + Sync,
    D: Send + Copy + Default,
{
    let n: usize = out_shape.iter().product();
    if ash == bsh && a.len() == n {
        return super::zip_slices(a, b, f);
    }
    if b.len() == 1 && a.len() == n {
        let y = b[0];
        return super::map_slice(a, |x| f(x, y));
    }
    if a.len() == 1 && b.len() == n {
        let x = a[0];
        return super::map_slice(b, |y| f(x, y));
    }
    let sa = broadcast_strides(ash, out_shape);
    let sb = broadcast_strides(bsh, out_shape);
    let nd = out_shape.len();
    let inner = out_shape[nd - 1];
    let (ia, ib) = (sa[nd - 1], sb[nd - 1]);
    let mut out = vec![D::default(); n];
    let fill_row = |row: usize, dst: &mut [D]| {
        // Offset of the row start in a and b from the outer multi-index.
        let (mut oa, mut ob, mut rem) = (0, 0, row);
        for d in (0..nd - 1).rev() {
            let idx = rem % out_shape[d];
            rem /= out_shape[d];
            oa += idx * sa[d];
            ob += idx * sb[d];
        }
        for (j, o) in dst.iter_mut().enumerate() {
            *o = f(a[oa + j * ia], b[ob + j * ib]);
        }
    };
    if inner == 0 {
        return out;
    }
    if n >= super::PAR_THRESHOLD {
        use rayon::prelude::*;
        out.par_chunks_mut(inner)
            .enumerate()
            .for_each(|(r, dst)| fill_row(r, dst));
    } else {
        out.chunks_mut(inner)
            .enumerate()
            .for_each(|(r, dst)| fill_row(r, dst));
    }
    out
}

/// The axes of `out_shape` that were broadcast from `shape` (to be summed in backward), as
/// positions in `out_shape`, plus whether leading axes were added.
pub(crate) fn reduced_axes(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let lead = out_shape.len() - shape.len();
    (0..out_shape.len())
        .filter(|&i| i < lead || (shape[i - lead] == 1 && out_shape[i] != 1))
        .collect()
}
