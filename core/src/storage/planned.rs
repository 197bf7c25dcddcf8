//! The kernels a planned graph runs into its own buffers for the nodes of a training step's
//! backward and loss: gradient maps, broadcasting arithmetic, sums, broadcasts and copies, each
//! the "write into `out`" twin of an eager kernel (same per-element functions, same summation
//! order, so the same bits). Host kernels: on a CUDA device the graph executor runs these
//! nodes' eager operators and copies the results into its buffers, so only `copy_into` has a
//! CUDA arm here; the forwarders name any other operand as not supported.

use super::{CsrIndex, CsrView, IndexStorage, MapGrad, Storage};
use crate::error::{Error, Result};
use crate::ops::fused::FusedAct;
use crate::ops::BinaryOp;

/// What the CPU storage implements for planned graph nodes. Shapes were checked by the graph
/// executor; `out` is a buffer of the result's length and dtype, every element overwritten.
pub(crate) trait PlannedOps: Sized {
    /// [`super::ElementwiseOps::map_grad`] into `out`.
    fn map_grad_into(&self, saved: &Self, op: MapGrad, out: &mut Self) -> Result<()>;
    /// [`super::ElementwiseOps::zip`] (broadcasting `xs` and `ys` to `shape`) into `out`.
    fn zip_into(
        &self,
        xs: &[usize],
        y: &Self,
        ys: &[usize],
        shape: &[usize],
        op: BinaryOp,
        out: &mut Self,
    ) -> Result<()>;
    /// [`super::LayoutOps::broadcast`] of `self` (of `shape`) to `to`, into `out`.
    fn broadcast_into(&self, shape: &[usize], to: &[usize], out: &mut Self) -> Result<()>;
    /// The float sum over `axes` (sorted) of `self` (of `shape`) into `out`, for the axis
    /// patterns whose eager order is fixed: trailing axes, leading axes, or everything below
    /// the parallel threshold (others are an error: the planner does not choose them).
    fn sum_into(&self, shape: &[usize], axes: &[usize], out: &mut Self) -> Result<()>;
    /// The input gradient `g * act'(y)` of `bias_act` (the first result of
    /// [`super::LinalgOps::bias_act_grad`]) for `self` = `g`, into `out`.
    fn bias_act_grad_input_into(&self, y: &Self, act: FusedAct, out: &mut Self) -> Result<()>;
    /// The bias gradient of `bias_act` (the second result of
    /// [`super::LinalgOps::bias_act_grad`]) for `self` = `g`, into the `(units,)` `out`.
    fn bias_act_grad_bias_into(
        &self,
        y: &Self,
        units: usize,
        act: FusedAct,
        out: &mut Self,
    ) -> Result<()>;
    /// [`super::LinalgOps::column_sums`] into the `(units,)` `out`.
    fn column_sums_into(&self, units: usize, out: &mut Self) -> Result<()>;
    /// [`super::LinalgOps::sigmoid_bce`] of logits `self` and labels `z` into `out`.
    fn sigmoid_bce_into(&self, z: &Self, out: &mut Self) -> Result<()>;
    /// The logits' gradient of [`super::LinalgOps::sigmoid_bce_grad`] for `self` = `g`, into
    /// `out`.
    fn sigmoid_bce_grad_into(&self, x: &Self, z: &Self, out: &mut Self) -> Result<()>;
    /// A copy of `self` into `out` (a reshape's values in a planned buffer; float dtypes).
    fn copy_into(&self, out: &mut Self) -> Result<()>;
    /// `check_class_ids`: every float label of `self` a whole number in `[0, classes)` (else
    /// the eager operator's error), copied into `out`.
    fn check_class_ids_into(&self, classes: usize, out: &mut Self) -> Result<()>;
    /// `one_hot` of the float ids `self` into `out` (`self`'s length times `depth`, the ids'
    /// dtype), with the eager operator's check that each id is a whole number.
    fn one_hot_into(&self, depth: usize, on: f64, off: f64, out: &mut Self) -> Result<()>;
    /// Dropout's mask for drop rate `p` from `key` written over `self` (float32 / float64):
    /// the values `NDArray::dropout_mask` draws from the same key.
    fn dropout_mask_into(&mut self, p: f64, key: u64) -> Result<()>;
}

/// The error for operands that are not all host storage.
fn host_only(op: &'static str) -> Error {
    Error::arg(
        op,
        "a planned graph node runs on host storage; an operand is on another device",
    )
}

impl Storage {
    /// See [`PlannedOps::map_grad_into`].
    pub(crate) fn map_grad_into(
        &self,
        saved: &Storage,
        op: MapGrad,
        out: &mut Storage,
    ) -> Result<()> {
        match (self, saved, out) {
            (Storage::Cpu(g), Storage::Cpu(s), Storage::Cpu(o)) => g.map_grad_into(s, op, o),
            #[allow(unreachable_patterns)]
            _ => Err(host_only(op.name())),
        }
    }
    /// See [`PlannedOps::zip_into`].
    pub(crate) fn zip_into(
        &self,
        xs: &[usize],
        y: &Storage,
        ys: &[usize],
        shape: &[usize],
        op: BinaryOp,
        out: &mut Storage,
    ) -> Result<()> {
        match (self, y, out) {
            (Storage::Cpu(a), Storage::Cpu(b), Storage::Cpu(o)) => {
                a.zip_into(xs, b, ys, shape, op, o)
            }
            #[allow(unreachable_patterns)]
            _ => Err(host_only(op.name())),
        }
    }
    /// See [`PlannedOps::broadcast_into`].
    pub(crate) fn broadcast_into(
        &self,
        shape: &[usize],
        to: &[usize],
        out: &mut Storage,
    ) -> Result<()> {
        match (self, out) {
            (Storage::Cpu(a), Storage::Cpu(o)) => a.broadcast_into(shape, to, o),
            #[allow(unreachable_patterns)]
            _ => Err(host_only("broadcast_to")),
        }
    }
    /// See [`PlannedOps::sum_into`].
    pub(crate) fn sum_into(
        &self,
        shape: &[usize],
        axes: &[usize],
        out: &mut Storage,
    ) -> Result<()> {
        match (self, out) {
            (Storage::Cpu(a), Storage::Cpu(o)) => a.sum_into(shape, axes, o),
            #[allow(unreachable_patterns)]
            _ => Err(host_only("sum")),
        }
    }
    /// See [`PlannedOps::bias_act_grad_input_into`].
    pub(crate) fn bias_act_grad_input_into(
        &self,
        y: &Storage,
        act: FusedAct,
        out: &mut Storage,
    ) -> Result<()> {
        match (self, y, out) {
            (Storage::Cpu(g), Storage::Cpu(y), Storage::Cpu(o)) => {
                g.bias_act_grad_input_into(y, act, o)
            }
            #[allow(unreachable_patterns)]
            _ => Err(host_only("bias_act backward")),
        }
    }
    /// See [`PlannedOps::bias_act_grad_bias_into`].
    pub(crate) fn bias_act_grad_bias_into(
        &self,
        y: &Storage,
        units: usize,
        act: FusedAct,
        out: &mut Storage,
    ) -> Result<()> {
        match (self, y, out) {
            (Storage::Cpu(g), Storage::Cpu(y), Storage::Cpu(o)) => {
                g.bias_act_grad_bias_into(y, units, act, o)
            }
            #[allow(unreachable_patterns)]
            _ => Err(host_only("bias_act backward")),
        }
    }
    /// See [`PlannedOps::column_sums_into`].
    pub(crate) fn column_sums_into(&self, units: usize, out: &mut Storage) -> Result<()> {
        match (self, out) {
            (Storage::Cpu(g), Storage::Cpu(o)) => g.column_sums_into(units, o),
            #[allow(unreachable_patterns)]
            _ => Err(host_only("column sums")),
        }
    }
    /// See [`PlannedOps::sigmoid_bce_into`].
    pub(crate) fn sigmoid_bce_into(&self, z: &Storage, out: &mut Storage) -> Result<()> {
        match (self, z, out) {
            (Storage::Cpu(x), Storage::Cpu(z), Storage::Cpu(o)) => x.sigmoid_bce_into(z, o),
            #[allow(unreachable_patterns)]
            _ => Err(host_only("SigmoidBinaryCrossEntropyLoss")),
        }
    }
    /// See [`PlannedOps::sigmoid_bce_grad_into`].
    pub(crate) fn sigmoid_bce_grad_into(
        &self,
        x: &Storage,
        z: &Storage,
        out: &mut Storage,
    ) -> Result<()> {
        match (self, x, z, out) {
            (Storage::Cpu(g), Storage::Cpu(x), Storage::Cpu(z), Storage::Cpu(o)) => {
                g.sigmoid_bce_grad_into(x, z, o)
            }
            #[allow(unreachable_patterns)]
            _ => Err(host_only("SigmoidBinaryCrossEntropyLoss backward")),
        }
    }
    /// See [`PlannedOps::check_class_ids_into`].
    pub(crate) fn check_class_ids_into(&self, classes: usize, out: &mut Storage) -> Result<()> {
        match (self, out) {
            (Storage::Cpu(a), Storage::Cpu(o)) => a.check_class_ids_into(classes, o),
            #[allow(unreachable_patterns)]
            _ => Err(host_only("check_class_ids")),
        }
    }
    /// See [`PlannedOps::dropout_mask_into`].
    pub(crate) fn dropout_mask_into(&mut self, p: f64, key: u64) -> Result<()> {
        match self {
            Storage::Cpu(o) => o.dropout_mask_into(p, key),
            #[allow(unreachable_patterns)]
            _ => Err(host_only("dropout_mask")),
        }
    }
    /// See [`PlannedOps::one_hot_into`].
    pub(crate) fn one_hot_into(
        &self,
        depth: usize,
        on: f64,
        off: f64,
        out: &mut Storage,
    ) -> Result<()> {
        match (self, out) {
            (Storage::Cpu(a), Storage::Cpu(o)) => a.one_hot_into(depth, on, off, o),
            #[allow(unreachable_patterns)]
            _ => Err(host_only("one_hot")),
        }
    }
    /// `csr . dense` (`self` the csr's values, `x` its index) into `out` (`rows * n`): the
    /// eager product's kernels (`csr_dense`) writing into a planned buffer.
    pub(crate) fn csr_dense_into(
        &self,
        x: &CsrIndex<'_>,
        w: &Storage,
        n: usize,
        out: &mut Storage,
    ) -> Result<()> {
        match (x.indptr, x.indices, self, w, out) {
            (
                IndexStorage::Cpu(p),
                IndexStorage::Cpu(i),
                Storage::Cpu(v),
                Storage::Cpu(w),
                Storage::Cpu(o),
            ) => {
                let view = CsrView {
                    shape: x.shape,
                    indptr: p,
                    indices: i,
                    offset: x.offset,
                };
                v.csr_dense_into(view, w, n, o)
            }
            #[allow(unreachable_patterns)]
            _ => Err(host_only("dot")),
        }
    }
    /// The stored rows of `csr^T . dense` (`self` the csr's values, `x` its index, `groups`
    /// its column grouping) into `out` (`groups * n`): the eager product's kernel
    /// (`csr_t_dense`) rewriting a row_sparse result's buffer.
    pub(crate) fn csr_t_dense_into(
        &self,
        x: &CsrIndex<'_>,
        g: &Storage,
        n: usize,
        groups: &crate::sparse::ColumnGroups,
        out: &mut Storage,
    ) -> Result<()> {
        match (x.indptr, x.indices, self, g, out) {
            (
                IndexStorage::Cpu(p),
                IndexStorage::Cpu(i),
                Storage::Cpu(v),
                Storage::Cpu(g),
                Storage::Cpu(o),
            ) => {
                let view = CsrView {
                    shape: x.shape,
                    indptr: p,
                    indices: i,
                    offset: x.offset,
                };
                v.csr_t_dense_into(view, g, n, groups, o)
            }
            #[allow(unreachable_patterns)]
            _ => Err(host_only("dot")),
        }
    }
    /// See [`PlannedOps::copy_into`].
    pub(crate) fn copy_into(&self, out: &mut Storage) -> Result<()> {
        match (self, out) {
            (Storage::Cpu(a), Storage::Cpu(o)) => a.copy_into(o),
            #[cfg(feature = "cuda")]
            (Storage::Cuda(a), Storage::Cuda(o)) if a.ordinal() == o.ordinal() => o.copy_from(a),
            #[allow(unreachable_patterns)]
            _ => Err(host_only("reshape")),
        }
    }
}
