//! Shape operators (reshape; more beside it).

use crate::autograd::record_op;
use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, DenseData};
use crate::NDArray;

impl NDArray {
    /// Same elements, new shape (one dim may be `-1`, inferred). Shares the buffer.
    pub fn reshape_i(&self, shape: &[i64]) -> Result<NDArray> {
        let n = self.size();
        let dims: Vec<usize> = shape
            .iter()
            .filter(|&&d| d >= 0)
            .map(|&d| d as usize)
            .collect();
        let known = crate::ndarray::checked_size("reshape", &dims)?;
        let infer = shape.iter().filter(|&&d| d < 0).count();
        if infer > 1 || shape.iter().any(|&d| d < -1) {
            return Err(Error::shape(
                "reshape",
                format!("bad target shape {shape:?}"),
            ));
        }
        let target: Vec<usize> = shape
            .iter()
            .map(|&d| {
                if d < 0 {
                    n.checked_div(known).unwrap_or(0)
                } else {
                    d as usize
                }
            })
            .collect();
        self.reshape(&target)
    }

    /// Same elements, new shape. Shares the buffer (no copy).
    pub fn reshape(&self, shape: &[usize]) -> Result<NDArray> {
        crate::graph::traced!(Op::Reshape(shape.to_vec()), [self], self.reshape(shape));
        crate::sparse::densifying("reshape", &[self])?;
        let d = self.dense_data()?;
        let n = crate::ndarray::checked_size("reshape", shape)?;
        if n != d.buf.len() {
            return Err(Error::shape(
                "reshape",
                format!(
                    "cannot reshape {:?} ({} elements) to {shape:?}",
                    d.shape,
                    d.buf.len()
                ),
            ));
        }
        let old = d.shape.clone();
        let out = NDArray::from_data(ArrayData::Dense(DenseData {
            shape: crate::Shape::from_slice(shape),
            buf: d.buf,
        }));
        Ok(record_op("reshape", out, &[self], move |g| {
            Ok(vec![Some(g.reshape(&old)?)])
        }))
    }
}
