//! What global-norm gradient clipping needs: the sum of squares of an array's stored values and
//! an in-place rescale of them, for every storage type.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::storage::Storage;
use crate::{ArrayData, NDArray};

/// The positions of an array's stored values in its value buffer. A csr array may be a row
/// slice sharing its parent's values: only its own range counts.
fn stored_range(d: &ArrayData) -> Range<usize> {
    match d {
        ArrayData::Dense(x) => 0..x.buf.len(),
        ArrayData::RowSparse(r) => 0..r.data.len(),
        ArrayData::Csr(c) => c.offset..c.offset + c.nnz(),
    }
}

fn stored_buffer_mut(d: &mut ArrayData) -> &mut Storage {
    match d {
        ArrayData::Dense(x) => &mut x.buf,
        ArrayData::RowSparse(r) => &mut r.data,
        ArrayData::Csr(c) => &mut c.data,
    }
}

fn float_error(op: &'static str, buf: &Storage) -> Error {
    Error::dtype(
        op,
        format!(
            "needs a float32 or float64 (or float16 / bfloat16) array, got {}",
            buf.dtype().name()
        ),
    )
}

/// The sum of the squares of `array`'s stored values, accumulated in f64: every element of a
/// dense array, the stored rows of a row_sparse one, the non-zeros of a csr one. Absent values
/// are zeros and add nothing, so this is the squared L2 norm of the array, computed without
/// densifying anything.
///
/// Fails on a dtype other than f32 or f64.
///
/// ```
/// use sparrow_core::update::stored_sum_sq;
/// use sparrow_core::NDArray;
/// let g = NDArray::row_sparse_from_parts(vec![3.0f32, 4.0], vec![7], &[10, 2]).unwrap();
/// assert_eq!(stored_sum_sq(&g).unwrap(), 25.0);
/// ```
pub fn stored_sum_sq(array: &NDArray) -> Result<f64> {
    let d = array.read();
    let range = stored_range(&d);
    let buf = match &*d {
        ArrayData::Dense(x) => &x.buf,
        ArrayData::RowSparse(r) => &r.data,
        ArrayData::Csr(c) => &c.data,
    };
    if !buf.dtype().is_float() {
        return Err(float_error("stored_sum_sq", buf));
    }
    buf.sum_sq_range(range)
}

/// Multiply `array`'s stored values by `factor` in place (every element of a dense array, the
/// stored rows or non-zeros of a sparse one), keeping its storage type and sparsity pattern.
/// The factor is rounded to the array's dtype first. Not recorded by autograd.
///
/// Fails on a dtype other than f32 or f64 or a non-finite `factor`, changing nothing.
///
/// ```
/// use sparrow_core::update::scale_stored;
/// use sparrow_core::NDArray;
/// let g = NDArray::from_vec(vec![2.0f32, -4.0], &[2]).unwrap();
/// scale_stored(&g, 0.5).unwrap();
/// assert_eq!(g.to_vec::<f32>().unwrap(), vec![1.0, -2.0]);
/// ```
pub fn scale_stored(array: &NDArray, factor: f64) -> Result<()> {
    const OP: &str = "scale_stored";
    if !factor.is_finite() {
        return Err(Error::arg(
            OP,
            format!("factor must be finite, got {factor}"),
        ));
    }
    let mut d = array.write();
    let range = stored_range(&d);
    let buf = stored_buffer_mut(&mut d);
    if !buf.dtype().is_float() {
        return Err(float_error(OP, buf));
    }
    buf.scale_range(range, factor)
}
