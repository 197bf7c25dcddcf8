//! The dense-product family of the backend interface: matrix products (2-D with transposes,
//! and batched), and the fused kernels of a Dense layer's bias + activation and of the sigmoid
//! binary cross-entropy loss, with their backward passes.
//!
//! Operators describe a product by its dimensions and transposes ([`MatMul`]); how the
//! operands are walked (element strides on the CPU, leading dimensions and transpose flags for
//! a BLAS on a device) is the backend's business. Every method validates nothing about
//! shapes: the operator did that.

use super::Storage;
use crate::error::{Error, Result};
use crate::ops::fused::FusedAct;
use crate::Device;

/// One matrix product `op(a) (m x k) . op(b) (k x n)` of row-major operands, `op` being the
/// transpose where the flag is set: `a` is stored `(m, k)`, or `(k, m)` when `ta`; `b` is
/// stored `(k, n)`, or `(n, k)` when `tb`. The result is a row-major `(m, n)` matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MatMul {
    /// Rows of the result.
    pub(crate) m: usize,
    /// Columns of the result.
    pub(crate) n: usize,
    /// The inner (summed) dimension.
    pub(crate) k: usize,
    /// `a` is stored transposed.
    pub(crate) ta: bool,
    /// `b` is stored transposed.
    pub(crate) tb: bool,
}

impl MatMul {
    /// Columns of `a` as stored (its row length).
    pub(crate) fn a_cols(&self) -> usize {
        if self.ta {
            self.m
        } else {
            self.k
        }
    }
    /// Columns of `b` as stored (its row length).
    pub(crate) fn b_cols(&self) -> usize {
        if self.tb {
            self.k
        } else {
            self.n
        }
    }
}

/// What a backend implements for dense products and the fused layer and loss kernels. Shapes
/// are row-major and already checked by the operator; operands share one float dtype.
pub(crate) trait LinalgOps: Sized {
    /// The product `self . rhs` laid out as `mm` describes (a `mm.m * mm.n` buffer). The
    /// 2-D `dot`: small products may take a kernel other than the batched one's.
    fn matmul(&self, rhs: &Self, mm: &MatMul) -> Result<Self>;
    /// [`LinalgOps::matmul`] written into `out`, a buffer of `mm.m * mm.n` elements of the
    /// operands' dtype (every element overwritten; the same kernels, so the same values).
    fn matmul_into(&self, rhs: &Self, mm: &MatMul, out: &mut Self) -> Result<()>;
    /// `offsets.len()` products `mm`, one per batch entry, into consecutive `m * n` blocks:
    /// entry `i` reads its `a` matrix from element `offsets[i].0` of `self` and its `b`
    /// matrix from element `offsets[i].1` of `rhs` (broadcast batch dims repeat an offset).
    fn batched_matmul(&self, rhs: &Self, mm: &MatMul, offsets: &[(usize, usize)]) -> Result<Self>;
    /// `act(y[r, j] + bias[j])` for `self` = `y`, a row-major `(len / units, units)` matrix,
    /// and a `(units,)` bias (`act = None`: the bias alone).
    fn bias_act(&self, bias: &Self, units: usize, act: Option<FusedAct>) -> Result<Self>;
    /// [`LinalgOps::bias_act`] computed in place: `self` (the product `y`) becomes
    /// `act(y + bias)`.
    fn bias_act_in_place(&mut self, bias: &Self, units: usize, act: Option<FusedAct>)
        -> Result<()>;
    /// [`LinalgOps::bias_act`] written into `out`, a buffer of `self`'s length and dtype.
    fn bias_act_into(
        &self,
        bias: &Self,
        units: usize,
        act: Option<FusedAct>,
        out: &mut Self,
    ) -> Result<()>;
    /// The backward of [`LinalgOps::bias_act`] for a head gradient `self` of the output's
    /// length: `gp = g * act'(out)` (from the saved output `out`) and the bias gradient, the
    /// `(units,)` column sums of `gp`, from one read of `g`.
    fn bias_act_grad(&self, out: &Self, units: usize, act: FusedAct) -> Result<(Self, Self)>;
    /// `act'(x)` as a function of the output `y = act(x)` (`self`), for a head gradient the
    /// fused backward does not take (sparse or broadcast).
    fn act_derivative(&self, act: FusedAct) -> Result<Self>;
    /// The `(units,)` sums of the rows of `self`, a row-major `(len / units, units)` matrix.
    fn column_sums(&self, units: usize) -> Result<Self>;
    /// `max(x, 0) - x z + log(1 + exp(-|x|))` for logits `self` and labels `z` of one length.
    fn sigmoid_bce(&self, z: &Self) -> Result<Self>;
    /// The backward of [`LinalgOps::sigmoid_bce`] for a head gradient `self` of the same
    /// length: `dx = g (sigmoid(x) - z)` and, when `need_dz`, `dz = -g x`.
    fn sigmoid_bce_grad(&self, x: &Self, z: &Self, need_dz: bool) -> Result<(Self, Option<Self>)>;
}

/// The error for three operands that should share a device and do not: names the first pair
/// that differs.
pub(super) fn device_mismatch3(op: &'static str, a: Device, b: Device, c: Device) -> Error {
    if a != b {
        Error::device_mismatch(op, a, b)
    } else {
        Error::device_mismatch(op, a, c)
    }
}

impl Storage {
    /// See [`LinalgOps::matmul`].
    #[inline]
    pub(crate) fn matmul(&self, rhs: &Storage, mm: &MatMul) -> Result<Storage> {
        super::on_backends!("dot", (self, rhs), (a, b) => Ok(Storage::from(a.matmul(b, mm)?)))
    }
    /// See [`LinalgOps::matmul_into`].
    #[inline]
    pub(crate) fn matmul_into(&self, rhs: &Storage, mm: &MatMul, out: &mut Storage) -> Result<()> {
        super::on_backends_into!("dot", (self, rhs, out), (a, b, o) => a.matmul_into(b, mm, o))
    }
    /// See [`LinalgOps::bias_act_in_place`].
    #[inline]
    pub(crate) fn bias_act_in_place(
        &mut self,
        bias: &Storage,
        units: usize,
        act: Option<FusedAct>,
    ) -> Result<()> {
        super::on_backends!("bias_act", (self, bias), (y, b) => y.bias_act_in_place(b, units, act))
    }
    /// See [`LinalgOps::bias_act_into`].
    #[inline]
    pub(crate) fn bias_act_into(
        &self,
        bias: &Storage,
        units: usize,
        act: Option<FusedAct>,
        out: &mut Storage,
    ) -> Result<()> {
        super::on_backends_into!("bias_act", (self, bias, out), (y, b, o) =>
            y.bias_act_into(b, units, act, o))
    }
    /// See [`LinalgOps::batched_matmul`].
    #[inline]
    pub(crate) fn batched_matmul(
        &self,
        rhs: &Storage,
        mm: &MatMul,
        offsets: &[(usize, usize)],
    ) -> Result<Storage> {
        super::on_backends!("matmul", (self, rhs), (a, b) =>
            Ok(Storage::from(a.batched_matmul(b, mm, offsets)?)))
    }
    /// See [`LinalgOps::bias_act`].
    #[inline]
    pub(crate) fn bias_act(
        &self,
        bias: &Storage,
        units: usize,
        act: Option<FusedAct>,
    ) -> Result<Storage> {
        super::on_backends!("bias_act", (self, bias), (y, b) =>
            Ok(Storage::from(y.bias_act(b, units, act)?)))
    }
    /// See [`LinalgOps::bias_act_grad`].
    #[inline]
    pub(crate) fn bias_act_grad(
        &self,
        out: &Storage,
        units: usize,
        act: FusedAct,
    ) -> Result<(Storage, Storage)> {
        super::on_backends!("bias_act backward", (self, out), (g, y) => {
            let (gp, db) = g.bias_act_grad(y, units, act)?;
            Ok((Storage::from(gp), Storage::from(db)))
        })
    }
    /// See [`LinalgOps::act_derivative`].
    #[inline]
    pub(crate) fn act_derivative(&self, act: FusedAct) -> Result<Storage> {
        super::on_backend!(self, y => Ok(Storage::from(y.act_derivative(act)?)))
    }
    /// See [`LinalgOps::column_sums`].
    #[inline]
    pub(crate) fn column_sums(&self, units: usize) -> Result<Storage> {
        super::on_backend!(self, g => Ok(Storage::from(g.column_sums(units)?)))
    }
    /// See [`LinalgOps::sigmoid_bce`].
    #[inline]
    pub(crate) fn sigmoid_bce(&self, z: &Storage) -> Result<Storage> {
        super::on_backends!("SigmoidBinaryCrossEntropyLoss", (self, z), (x, z) =>
            Ok(Storage::from(x.sigmoid_bce(z)?)))
    }
    /// See [`LinalgOps::sigmoid_bce_grad`].
    #[inline]
    pub(crate) fn sigmoid_bce_grad(
        &self,
        x: &Storage,
        z: &Storage,
        need_dz: bool,
    ) -> Result<(Storage, Option<Storage>)> {
        const OP: &str = "SigmoidBinaryCrossEntropyLoss backward";
        match (self, x, z) {
            (Storage::Cpu(g), Storage::Cpu(x), Storage::Cpu(z)) => {
                let (dx, dz) = g.sigmoid_bce_grad(x, z, need_dz)?;
                Ok((Storage::from(dx), dz.map(Storage::from)))
            }
            #[cfg(feature = "cuda")]
            (Storage::Cuda(g), Storage::Cuda(x), Storage::Cuda(z))
                if g.ordinal() == x.ordinal() && g.ordinal() == z.ordinal() =>
            {
                let (dx, dz) = g.sigmoid_bce_grad(x, z, need_dz)?;
                Ok((Storage::from(dx), dz.map(Storage::from)))
            }
            #[allow(unreachable_patterns)]
            (g, x, z) => Err(device_mismatch3(OP, g.device(), x.device(), z.device())),
        }
    }
}
