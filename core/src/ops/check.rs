//! Label validation as an operator, so that a traced loss keeps validating its labels when it
//! runs as a graph (a host check in the loss itself would be data-dependent code the graph
//! cannot see).

use crate::error::{Error, Result};
use crate::NDArray;

impl NDArray {
    /// `self` unchanged after checking that it holds `count` class ids, each a whole number in
    /// `[0, classes)`: an error names the first label that is not (what a sparse-label loss
    /// needs before `one_hot`, which maps out-of-range ids to all-off rows).
    pub fn check_class_ids(&self, classes: usize, count: usize) -> Result<NDArray> {
        crate::graph::traced!(
            Op::CheckClassIds { classes, count },
            [self],
            self.check_class_ids(classes, count)
        );
        let op = "check_class_ids";
        let n = self.size();
        if n != count {
            return Err(Error::shape(
                op,
                format!("{n} sparse labels where {count} are needed"),
            ));
        }
        let ids = self.to_f64_vec();
        if let Some((k, v)) = ids
            .iter()
            .enumerate()
            .find(|(_, &v)| v.fract() != 0.0 || v < 0.0 || v >= classes as f64)
        {
            return Err(Error::index(
                op,
                format!("label {v} at position {k} is not a class in [0, {classes})"),
            ));
        }
        Ok(self.clone())
    }
}
