//! A running statistic's update as an operator (BatchNorm's running mean and variance in
//! training), so that a traced forward keeps updating them when it runs as a graph: a host-side
//! replacement of the parameter would be code the graph cannot see.

use crate::error::{Error, Result};
use crate::{autograd, ArrayData, NDArray};

impl NDArray {
    /// Move this running statistic toward `batch`, in place: `self = momentum * self +
    /// (1 - momentum) * batch` (`batch` of the same shape, cast to `self`'s dtype first), and
    /// return the new values (a separate array). `self` keeps its buffer, so a graph captured
    /// over it stays valid; no gradient flows through the update. Inside a trace it is one
    /// graph node that updates at every run.
    pub fn update_running(&self, batch: &NDArray, momentum: f64) -> Result<NDArray> {
        crate::graph::traced!(
            Op::RunningUpdate { momentum },
            [self, batch],
            self.update_running(batch, momentum)
        );
        const OP: &str = "update_running";
        if self.shape() != batch.shape() {
            return Err(Error::shape(
                OP,
                format!(
                    "a running statistic of {:?} updated from {:?}",
                    self.shape(),
                    batch.shape()
                ),
            ));
        }
        if !(0.0..=1.0).contains(&momentum) {
            return Err(Error::arg(
                OP,
                format!("momentum {momentum} is outside [0, 1]"),
            ));
        }
        let new = autograd::pause(|| {
            let b = batch.astype(self.dtype())?;
            self.mul_scalar(momentum)?
                .add(&b.mul_scalar(1.0 - momentum)?)
        })?;
        {
            let src = new.read();
            let mut dst = self.write();
            match (&*src, &mut *dst) {
                (ArrayData::Dense(s), ArrayData::Dense(d)) => s.buf.copy_into(&mut d.buf)?,
                _ => return Err(Error::arg(OP, "a running statistic is a dense array")),
            }
        }
        Ok(new)
    }
}
