//! The convolution and pooling family of the backend interface: N-d convolution (forward,
//! its data gradient, which is also the transposed convolution, and its weight gradient) and
//! max / average pooling with its backward.
//!
//! Operators describe the computation by its geometry ([`ConvGeom`], [`PoolGeom`]); 1-D and
//! 2-D problems are 3-D ones whose leading spatial dims have size 1 (kernel 1, stride 1, no
//! padding), so one kernel serves every rank. How the products are formed (im2col + GEMM on
//! the CPU, an implicit-GEMM library on a device) is the backend's business. Every method
//! validates nothing about shapes: the operator did that.

use super::Storage;
use crate::error::Result;

/// Spatial dims every geometry is lifted to: 1-D and 2-D problems pad the front with 1s.
pub(crate) const SPATIAL: usize = 3;

/// One convolution `y = conv(x, w)`: `x` is `(batch, in_channels, input...)`, `w` is
/// `(out_channels, in_channels / groups, kernel...)`, `y` is `(batch, out_channels,
/// output...)`, all row-major, spatial dims lifted to three (see [`SPATIAL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConvGeom {
    /// Batch size.
    pub(crate) batch: usize,
    /// Channels of `x`.
    pub(crate) in_channels: usize,
    /// Channels of `y`.
    pub(crate) out_channels: usize,
    /// Channel groups; each output channel sees `in_channels / groups` inputs.
    pub(crate) groups: usize,
    /// Spatial size of `x`.
    pub(crate) input: [usize; SPATIAL],
    /// Spatial size of the kernel.
    pub(crate) kernel: [usize; SPATIAL],
    /// Spatial size of `y`.
    pub(crate) output: [usize; SPATIAL],
    /// Step between windows.
    pub(crate) stride: [usize; SPATIAL],
    /// Implicit zeros before (and after) each spatial dim.
    pub(crate) pad: [usize; SPATIAL],
    /// Step between kernel taps.
    pub(crate) dilation: [usize; SPATIAL],
}

impl ConvGeom {
    /// Elements of one input plane.
    pub(crate) fn in_plane(&self) -> usize {
        self.input.iter().product()
    }
    /// Elements of one output plane.
    pub(crate) fn out_plane(&self) -> usize {
        self.output.iter().product()
    }
    /// Taps of the kernel.
    pub(crate) fn taps(&self) -> usize {
        self.kernel.iter().product()
    }
    /// Elements of `x`.
    pub(crate) fn x_len(&self) -> usize {
        self.batch * self.in_channels * self.in_plane()
    }
    /// Elements of `y`.
    pub(crate) fn y_len(&self) -> usize {
        self.batch * self.out_channels * self.out_plane()
    }
    /// Elements of `w`.
    pub(crate) fn w_len(&self) -> usize {
        self.out_channels * (self.in_channels / self.groups) * self.taps()
    }
}

/// What a pooling window computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolKind {
    /// The largest element of the window (padding never wins).
    Max,
    /// The mean of the window; `count_include_pad` divides by the window clipped to the
    /// padded input, otherwise by the number of input elements it covers.
    Avg {
        /// Whether padding counts in the divisor.
        count_include_pad: bool,
    },
}

/// One pooling over `planes` independent planes (batch x channels) of `input` elements each,
/// spatial dims lifted to three as in [`ConvGeom`]. Every window holds at least one input
/// element (the operator guarantees it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolGeom {
    /// Batch x channels.
    pub(crate) planes: usize,
    /// Spatial size of the input.
    pub(crate) input: [usize; SPATIAL],
    /// Spatial size of the window.
    pub(crate) kernel: [usize; SPATIAL],
    /// Spatial size of the output.
    pub(crate) output: [usize; SPATIAL],
    /// Step between windows.
    pub(crate) stride: [usize; SPATIAL],
    /// Implicit padding before each spatial dim.
    pub(crate) pad: [usize; SPATIAL],
    /// What each window computes.
    pub(crate) kind: PoolKind,
}

impl PoolGeom {
    /// Elements of one input plane.
    pub(crate) fn in_plane(&self) -> usize {
        self.input.iter().product()
    }
    /// Elements of one output plane.
    pub(crate) fn out_plane(&self) -> usize {
        self.output.iter().product()
    }
}

/// What a backend implements for convolution and pooling. Operands share one float dtype and
/// have the lengths their geometry implies (checked by the operator).
pub(crate) trait ConvOps: Sized {
    /// `y = conv(self, w) (+ bias per output channel)`, `self` being `x`.
    fn conv(&self, w: &Self, bias: Option<&Self>, g: &ConvGeom) -> Result<Self>;
    /// The gradient of [`ConvOps::conv`] with respect to `x` for the head gradient `self`
    /// (`y`-shaped): `dx = conv_transpose(dy, w)`, `x`-shaped. This is also the transposed
    /// convolution of `self` (whose channels are `g.out_channels`).
    fn conv_data_grad(&self, w: &Self, g: &ConvGeom) -> Result<Self>;
    /// The gradient of [`ConvOps::conv`] with respect to `w`, for input `self` (`x`) and head
    /// gradient `dy`: `w`-shaped, summed over the batch.
    fn conv_weight_grad(&self, dy: &Self, g: &ConvGeom) -> Result<Self>;
    /// Pool `self` (`planes x input`) to `planes x output`.
    fn pool(&self, g: &PoolGeom) -> Result<Self>;
    /// The gradient of [`ConvOps::pool`] for input `self` and head gradient `dy`: max pooling
    /// routes each window's gradient to its first largest element, average pooling spreads it
    /// over the window's input elements by the divisor.
    fn pool_grad(&self, dy: &Self, g: &PoolGeom) -> Result<Self>;
}

impl Storage {
    /// See [`ConvOps::conv`].
    pub(crate) fn conv(
        &self,
        w: &Storage,
        bias: Option<&Storage>,
        g: &ConvGeom,
    ) -> Result<Storage> {
        const OP: &str = "convolution";
        match bias {
            None => {
                super::on_backends!(OP, (self, w), (x, w) => Ok(Storage::from(x.conv(w, None, g)?)))
            }
            Some(b) => match (self, w, b) {
                (Storage::Cpu(x), Storage::Cpu(w), Storage::Cpu(b)) => {
                    Ok(Storage::from(x.conv(w, Some(b), g)?))
                }
                #[cfg(feature = "cuda")]
                (Storage::Cuda(x), Storage::Cuda(w), Storage::Cuda(b)) => {
                    Ok(Storage::from(x.conv(w, Some(b), g)?))
                }
                #[allow(unreachable_patterns)]
                (x, w, b) => Err(super::linalg::device_mismatch3(
                    OP,
                    x.device(),
                    w.device(),
                    b.device(),
                )),
            },
        }
    }
    /// See [`ConvOps::conv_data_grad`].
    pub(crate) fn conv_data_grad(&self, w: &Storage, g: &ConvGeom) -> Result<Storage> {
        super::on_backends!("convolution data gradient", (self, w), (dy, w) =>
            Ok(Storage::from(dy.conv_data_grad(w, g)?)))
    }
    /// See [`ConvOps::conv_weight_grad`].
    pub(crate) fn conv_weight_grad(&self, dy: &Storage, g: &ConvGeom) -> Result<Storage> {
        super::on_backends!("convolution weight gradient", (self, dy), (x, dy) =>
            Ok(Storage::from(x.conv_weight_grad(dy, g)?)))
    }
    /// See [`ConvOps::pool`].
    pub(crate) fn pool(&self, g: &PoolGeom) -> Result<Storage> {
        super::on_backend!(self, x => Ok(Storage::from(x.pool(g)?)))
    }
    /// See [`ConvOps::pool_grad`].
    pub(crate) fn pool_grad(&self, dy: &Storage, g: &PoolGeom) -> Result<Storage> {
        super::on_backends!("pooling backward", (self, dy), (x, dy) =>
            Ok(Storage::from(x.pool_grad(dy, g)?)))
    }
}
