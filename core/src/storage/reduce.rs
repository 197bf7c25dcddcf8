//! The reduction family of the backend interface: reductions over axes (sum, max, min, prod,
//! norms), arg-reductions, softmax along an axis, and the sort order along an axis.
//!
//! An operator names what to compute with a small enum ([`ReduceOp`], [`ArgReduceOp`],
//! [`SoftmaxOp`]) and a backend turns each variant into a kernel: the CPU monomorphizes one
//! loop per variant (`crate::cpu::reduce`). Axis kernels see the array as `[outer, n, inner]`
//! around the axis (`crate::ops::axis::split3`). Nothing here validates shapes or axes: the
//! operator did that.

use super::Storage;
use crate::error::Result;

/// A reduction over axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReduceOp {
    /// Sum: float arrays in their own dtype; integer arrays exactly into i64 (so a sum over
    /// billions of u8 values cannot overflow).
    Sum,
    /// Maximum (any dtype; the axes must not be empty).
    Max,
    /// Minimum (any dtype; the axes must not be empty).
    Min,
    /// Product (float).
    Prod,
    /// Sum of absolute values (float).
    L1,
    /// Square root of the sum of squares (float).
    L2,
}

impl ReduceOp {
    /// The operator's name in errors.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Prod => "prod",
            ReduceOp::L1 | ReduceOp::L2 => "norm",
        }
    }
}

/// Which extreme an arg-reduction locates (the first occurrence wins ties).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArgReduceOp {
    /// Position of the maximum.
    Max,
    /// Position of the minimum.
    Min,
}

/// Softmax or its logarithm along an axis (both subtract the line's maximum first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SoftmaxOp {
    /// `exp(x - max) / sum(exp(x - max))`
    Softmax,
    /// `x - max - ln(sum(exp(x - max)))`
    LogSoftmax,
}

impl SoftmaxOp {
    /// The operator's name in errors.
    pub(crate) fn name(self) -> &'static str {
        match self {
            SoftmaxOp::Softmax => "softmax",
            SoftmaxOp::LogSoftmax => "log_softmax",
        }
    }
}

/// What a backend implements for reductions. `dims` is `(outer, n, inner)` around the axis.
pub(crate) trait ReduceOps: Sized {
    /// `op` over `axes` (sorted, unique) of an array of `shape`, in keepdims layout (the
    /// caller gives the result its shape). Float-only variants fail on other dtypes.
    fn reduce(&self, shape: &[usize], axes: &[usize], op: ReduceOp) -> Result<Self>;
    /// The i64 position of the extreme `op` of every line along the middle axis of `dims`,
    /// laid out as `[outer, inner]` (any dtype; `n > 0`).
    fn arg_reduce(&self, dims: (usize, usize, usize), op: ArgReduceOp) -> Result<Self>;
    /// `op` of every line along the middle axis of `dims` (float).
    fn softmax(&self, dims: (usize, usize, usize), op: SoftmaxOp) -> Result<Self>;
    /// [`ReduceOps::softmax`] written into `out`, a buffer of `self`'s length and dtype.
    fn softmax_into(
        &self,
        dims: (usize, usize, usize),
        op: SoftmaxOp,
        out: &mut Self,
    ) -> Result<()>;
    /// For every line along the middle axis of `dims`, the i64 positions of its `k <= n` first
    /// elements in stable sorted order, laid out as `[outer, k, inner]` (any dtype).
    fn argsort(&self, dims: (usize, usize, usize), k: usize, ascending: bool) -> Result<Self>;
}

impl Storage {
    /// See [`ReduceOps::reduce`].
    pub(crate) fn reduce(&self, shape: &[usize], axes: &[usize], op: ReduceOp) -> Result<Storage> {
        super::on_backend!(self, b => Ok(Storage::from(b.reduce(shape, axes, op)?)))
    }
    /// See [`ReduceOps::arg_reduce`].
    pub(crate) fn arg_reduce(
        &self,
        dims: (usize, usize, usize),
        op: ArgReduceOp,
    ) -> Result<Storage> {
        super::on_backend!(self, b => Ok(Storage::from(b.arg_reduce(dims, op)?)))
    }
    /// See [`ReduceOps::softmax`].
    pub(crate) fn softmax(&self, dims: (usize, usize, usize), op: SoftmaxOp) -> Result<Storage> {
        super::on_backend!(self, b => Ok(Storage::from(b.softmax(dims, op)?)))
    }
    /// See [`ReduceOps::softmax_into`].
    pub(crate) fn softmax_into(
        &self,
        dims: (usize, usize, usize),
        op: SoftmaxOp,
        out: &mut Storage,
    ) -> Result<()> {
        super::on_backends!(op.name(), (self, out), (a, o) => a.softmax_into(dims, op, o))
    }
    /// Every line along the middle axis of `dims` sorted (stable), values only. The CPU
    /// sorts the values themselves; another backend sorts positions and gathers.
    pub(crate) fn sort_values(
        &self,
        dims: (usize, usize, usize),
        ascending: bool,
    ) -> Result<Storage> {
        match self {
            Storage::Cpu(c) => Ok(Storage::Cpu(c.sort_values(dims, ascending))),
            #[allow(unreachable_patterns)]
            other => other.gather_along(dims, &other.argsort(dims, dims.1, ascending)?, dims.1),
        }
    }
    /// See [`ReduceOps::argsort`].
    pub(crate) fn argsort(
        &self,
        dims: (usize, usize, usize),
        k: usize,
        ascending: bool,
    ) -> Result<Storage> {
        super::on_backend!(self, b => Ok(Storage::from(b.argsort(dims, k, ascending)?)))
    }
}
