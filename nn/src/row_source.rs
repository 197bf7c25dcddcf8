//! [`RowSource`]: where the rows of a parameter no one process holds whole come from.
//!
//! A table sharded across the workers of a distributed store (sparrow-optim's
//! `Trainer::shard_parameter`) leaves each worker only its block of rows; the parameter keeps
//! its shape and dtype and a `RowSource` through which its layers fetch the rows a batch
//! reads. Gluon's row_sparse weight on a distributed store does the same
//! (`param.row_sparse_data(row_ids)` pulls through the trainer's kvstore), so a model's code
//! does not change when its table is sharded.

use std::sync::Arc;

use sparrow_core::{sparse, Device, NDArray, Result};

/// Fetches rows of a parameter that lives elsewhere (split across the workers of a store).
///
/// Implemented by the trainer that sharded the parameter; layers reach it through
/// [`crate::Parameter::csr_dot`], [`crate::Parameter::stage_for_csr`] and
/// [`crate::Parameter::stage_for_ids`].
pub trait RowSource: Send + Sync {
    /// The rows `ids` (sorted, distinct, each below the parameter's row count) as one dense
    /// `[ids.len(), shape[1..]...]` array: a leaf with a gradient attached, whose gradient the
    /// source's owner sends back to the rows' owners at its next step. Collective for a
    /// distributed source: every worker calls it at the same point of its step.
    fn pull_rows(&self, ids: &[i64]) -> Result<NDArray>;

    /// `x . table` for a csr batch `x` with one column per table row, `[x rows, shape[1]]`
    /// (a 2-d table); inside `autograd::record` the table's gradient goes where
    /// [`RowSource::pull_rows`]' does. Collective like `pull_rows`. The default pulls the rows
    /// the batch reads and multiplies; a source whose rows' owners can compute their part of
    /// the product themselves (a table sharded across workers) overrides it, so that the
    /// batch and the product travel instead of the rows.
    fn csr_dot(&self, x: &NDArray) -> Result<NDArray> {
        let (cols, xc) = sparse::compact_columns(&x.to_device(Device::Cpu)?)?;
        xc.dot(&self.pull_rows(&cols)?)
    }

    /// What the rows are, for error messages (e.g. "a table sharded over 4 workers").
    fn describe(&self) -> String;
}

/// A parameter's [`RowSource`], shared by its clones.
#[derive(Clone)]
pub(crate) struct Rows(pub(crate) Arc<dyn RowSource>);

impl std::fmt::Debug for Rows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rows({})", self.0.describe())
    }
}
