//! Reductions along axes: sum, mean (more are added beside these).

use rayon::prelude::*;

use super::axis::{norm_axes, reduced_shape};
use crate::autograd::record_op;
use crate::dtype::Float;
use crate::error::{Error, Result};
use crate::float_dispatch;
use crate::NDArray;

/// Generic fold over `axes`: returns the values in keepdims layout (row-major over the kept
/// dims). `init` is the identity of `f`.
pub(crate) fn fold_axes<T: Copy + Send + Sync>(
    src: &[T],
    shape: &[usize],
    axes: &[usize],
    init: T,
    f: impl Fn(T, T) -> T + Sync + Send,
) -> Vec<T> {
    let nd = shape.len();
    let n = src.len();
    let kshape = reduced_shape(shape, axes, true);
    let out_n: usize = kshape.iter().product();
    if out_n == 1 {
        if n >= super::PAR_THRESHOLD {
            return vec![src
                .par_chunks(4096)
                .map(|c| c.iter().fold(init, |a, &b| f(a, b)))
                .reduce(|| init, &f)];
        }
        return vec![src.iter().fold(init, |a, &b| f(a, b))];
    }
    // Fast path: reducing only trailing axes -> contiguous segments.
    let trailing = axes
        .iter()
        .enumerate()
        .all(|(i, &a)| a == nd - axes.len() + i);
    if trailing && !axes.is_empty() {
        let seg: usize = axes.iter().map(|&a| shape[a]).product();
        if seg == 0 {
            return vec![init; out_n];
        }
        let red = |c: &[T]| c.iter().fold(init, |a, &b| f(a, b));
        return if n >= super::PAR_THRESHOLD {
            src.par_chunks(seg).map(red).collect()
        } else {
            src.chunks(seg).map(red).collect()
        };
    }
    // Fast path: reducing only leading axes (a bias gradient sums over the batch) -> fold whole
    // rows of the kept trailing block into the output, a vectorizable zip per row. Same
    // accumulation order as the odometer below, so results are bit-identical.
    let leading = axes.iter().enumerate().all(|(i, &a)| a == i);
    if leading && !axes.is_empty() && out_n > 0 {
        let mut out = vec![init; out_n];
        for row in src.chunks_exact(out_n) {
            for (o, &x) in out.iter_mut().zip(row) {
                *o = f(*o, x);
            }
        }
        return out;
    }
    // General path: odometer over the input, accumulating into the kept position.
    let mut ostride = vec![0usize; nd];
    let mut s = 1;
    for i in (0..nd).rev() {
        if !axes.contains(&i) {
            ostride[i] = s;
            s *= shape[i];
        }
    }
    let mut out = vec![init; out_n];
    let mut idx = vec![0usize; nd];
    let mut pos = 0usize;
    for &x in src {
        out[pos] = f(out[pos], x);
        for d in (0..nd).rev() {
            idx[d] += 1;
            pos += ostride[d];
            if idx[d] < shape[d] {
                break;
            }
            pos -= ostride[d] * shape[d];
            idx[d] = 0;
        }
    }
    out
}

impl NDArray {
    /// Sum over `axes` (`None`: all axes), keeping reduced dims as size 1 when `keepdims`.
    ///
    /// Float arrays sum in their own dtype and are differentiable. Integer arrays (u8, i32,
    /// i64) sum exactly into an **i64** result (not differentiable), so a sum over billions of
    /// u8 values cannot overflow.
    pub fn sum(&self, axes: Option<&[i64]>, keepdims: bool) -> Result<NDArray> {
        if let Some(out) = crate::sparse::dispatch_sum(self, axes, keepdims)? {
            return Ok(out);
        }
        if !self.dtype().is_float() && self.stype() == crate::SType::Dense {
            return super::reduce_more::sum_int(self, axes, keepdims);
        }
        let d = self.dense_data()?;
        let ax = norm_axes("sum", axes, d.shape.len())?;
        let out_shape = reduced_shape(&d.shape, &ax, keepdims);
        if ax.iter().all(|&a| d.shape[a] == 1) {
            // Nothing is summed (the reduced axes have size 1, e.g. a per-sample loss mean over
            // a (batch, 1) output): a reshape gives the same values with one cheap node.
            return self.reshape(&out_shape);
        }
        let out = float_dispatch!(d.buf.dtype(), "sum", T => {
            let s = d.buf.as_slice::<T>().unwrap();
            NDArray::from_vec(fold_axes(s, &d.shape, &ax, <T as num_traits::Zero>::zero(), |a, b| a + b), &out_shape)?
        });
        let in_shape = d.shape.clone();
        Ok(record_op("sum", out, &[self], move |g| {
            let kshape = reduced_shape(&in_shape, &ax, true);
            Ok(vec![Some(g.reshape(&kshape)?.broadcast_to(&in_shape)?)])
        }))
    }

    /// Sum of all elements as a 0-D array.
    pub fn sum_all(&self) -> Result<NDArray> {
        self.sum(None, false)
    }

    /// Mean over `axes` (`None`: all axes).
    pub fn mean(&self, axes: Option<&[i64]>, keepdims: bool) -> Result<NDArray> {
        let shape = self.shape();
        let ax = norm_axes("mean", axes, shape.len())?;
        let count: usize = ax.iter().map(|&a| shape[a]).product();
        let total = self.sum(axes, keepdims)?;
        if count == 1 {
            return Ok(total); // dividing by one changes nothing: no scaling node
        }
        total.mul_scalar(1.0 / count.max(1) as f64)
    }

    /// Broadcast to a larger shape (NumPy rules); differentiable.
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<NDArray> {
        let own = self.shape();
        let target = super::broadcast_shapes("broadcast_to", &own, shape)?;
        if target != shape {
            return Err(Error::shape(
                "broadcast_to",
                format!("cannot broadcast {own:?} to {shape:?}"),
            ));
        }
        if own == shape {
            return Ok(self.clone());
        }
        let d = self.dense_data()?;
        let out = crate::with_buffer!(&d.buf, v => {
            let zeros = [0u8; 1];
            let ones = [1usize];
            let o = crate::cpu::broadcast::broadcast_apply(v.as_slice(), &own, &zeros[..], &ones[..], shape, |x, _| x);
            NDArray::from_vec(o, shape)?
        });
        let own2 = own.clone();
        Ok(record_op("broadcast_to", out, &[self], move |g| {
            Ok(vec![Some(sum_to_shape(g, &own2)?)])
        }))
    }
}

/// Sum a broadcast gradient back down to `shape` (the backward of broadcasting).
pub fn sum_to_shape(g: &NDArray, shape: &[usize]) -> Result<NDArray> {
    let gs = g.shape();
    if gs == shape {
        return Ok(g.clone());
    }
    let axes: Vec<i64> = super::broadcast::reduced_axes(shape, &gs)
        .into_iter()
        .map(|a| a as i64)
        .collect();
    g.sum(Some(&axes), true)?.reshape(shape)
}

#[allow(dead_code)]
fn _assert_float<T: Float>() {}

#[cfg(test)]
mod tests {
    use super::fold_axes;

    #[test]
    fn leading_axes_fast_path_matches_a_direct_sum() {
        // (3, 4, 5): reduce axis 0, then axes 0 and 1 (the row-fold fast path), checked
        // against explicit loops; and a zero-sized kept dim.
        let shape = [3usize, 4, 5];
        let src: Vec<f64> = (0..60).map(|i| (i * 7 % 11) as f64 - 3.5).collect();
        let at = |a: usize, b: usize, c: usize| src[(a * 4 + b) * 5 + c];
        let s0 = fold_axes(&src, &shape, &[0], 0.0, |a, b| a + b);
        for b in 0..4 {
            for c in 0..5 {
                assert_eq!(s0[b * 5 + c], (0..3).map(|a| at(a, b, c)).sum::<f64>());
            }
        }
        let s01 = fold_axes(&src, &shape, &[0, 1], 0.0, |a, b| a + b);
        assert_eq!(s01.len(), 5);
        for (c, &got) in s01.iter().enumerate() {
            let want: f64 = (0..3)
                .flat_map(|a| (0..4).map(move |b| (a, b)))
                .map(|(a, b)| at(a, b, c))
                .sum();
            assert_eq!(got, want);
        }
        assert!(fold_axes::<f64>(&[], &[2, 0], &[0], 0.0, |a, b| a + b).is_empty());
    }
}
