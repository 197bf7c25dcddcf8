//! Max and average pooling, 1-D to 3-D (NCW, NCHW, NCDHW), with MXNet / Gluon's `ceil_mode`
//! (`pooling_convention = "full"`) and `count_include_pad`, and global pooling.
//!
//! The forward and the backward are each one kernel through the seam (`Storage::pool`,
//! `Storage::pool_grad`; on the CPU `crate::cpu::pool`). The backward is its own operator,
//! not recorded (pooling is differentiable once).

use super::conv::{checked_elems, per_dim, positive, spatial_of};
use crate::autograd::record_op;
use crate::error::{Error, Result};
use crate::storage::{PoolGeom, PoolKind, SPATIAL};
use crate::NDArray;

/// What a pooling window computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolType {
    /// The window's largest element.
    Max,
    /// The window's mean.
    Avg,
}

/// The parameters of [`NDArray::pool`].
///
/// Output size per spatial dim: `(in + 2 padding - kernel) / stride + 1`, the division
/// rounded down, or up with `ceil_mode` (Gluon's `ceil_mode`, MXNet's `"full"` convention).
/// With `ceil_mode` a last window that would start in the right padding (so hold padding
/// only) is dropped, as PyTorch does; padding must be smaller than the kernel, so every window
/// holds at least one input element.
///
/// ```
/// use sparrow_core::ops::{PoolParams, PoolType};
/// let p = PoolParams::new(PoolType::Max, &[2, 2]).stride(&[2]).ceil_mode(true);
/// assert!(p.ceil_mode);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolParams {
    /// Max or average.
    pub kind: PoolType,
    /// Window size (one value, or one per spatial dim); ignored when `global`.
    pub kernel: Vec<usize>,
    /// Step between windows; empty means the kernel size (Gluon's default).
    pub stride: Vec<usize>,
    /// Implicit padding before and after each spatial dim (max pooling never picks it).
    pub padding: Vec<usize>,
    /// Round the output size up instead of down.
    pub ceil_mode: bool,
    /// Average pooling: count padding in the divisor (Gluon's default, true).
    pub count_include_pad: bool,
    /// Pool each whole plane to one value (Gluon's `GlobalMaxPool*` / `GlobalAvgPool*`).
    pub global: bool,
}

impl PoolParams {
    /// A `kind` pooling with window `kernel`, stride = kernel, no padding, rounding down,
    /// padding counted in averages.
    pub fn new(kind: PoolType, kernel: &[usize]) -> PoolParams {
        PoolParams {
            kind,
            kernel: kernel.to_vec(),
            stride: Vec::new(),
            padding: Vec::new(),
            ceil_mode: false,
            count_include_pad: true,
            global: false,
        }
    }
    /// Pooling of each whole plane to one value.
    pub fn global(kind: PoolType) -> PoolParams {
        PoolParams {
            global: true,
            ..PoolParams::new(kind, &[])
        }
    }
    /// Builder: the stride.
    pub fn stride(mut self, s: &[usize]) -> Self {
        self.stride = s.to_vec();
        self
    }
    /// Builder: the padding.
    pub fn padding(mut self, p: &[usize]) -> Self {
        self.padding = p.to_vec();
        self
    }
    /// Builder: round the output size up.
    pub fn ceil_mode(mut self, yes: bool) -> Self {
        self.ceil_mode = yes;
        self
    }
    /// Builder: whether averages count the padding.
    pub fn count_include_pad(mut self, yes: bool) -> Self {
        self.count_include_pad = yes;
        self
    }
}

/// The geometry of pooling `shape` by `p`, with the output shape.
fn geometry(shape: &[usize], p: &PoolParams) -> Result<(PoolGeom, Vec<usize>)> {
    const OP: &str = "pooling";
    let input = spatial_of(OP, "the data", shape)?;
    let nd = shape.len() - 2;
    let (kernel, stride, pad) = if p.global {
        (input, [1; SPATIAL], [0; SPATIAL])
    } else {
        if p.kernel.is_empty() {
            return Err(Error::arg(OP, "needs a kernel size (or global pooling)"));
        }
        let kernel = per_dim(OP, "kernel", &p.kernel, nd, 1, 1)?;
        let stride = if p.stride.is_empty() {
            kernel
        } else {
            per_dim(OP, "stride", &p.stride, nd, 1, 1)?
        };
        let pad = per_dim(OP, "padding", &p.padding, nd, 0, 0)?;
        (kernel, stride, pad)
    };
    positive(OP, "the kernel size", &kernel)?;
    positive(OP, "stride", &stride)?;
    let mut output = [1; SPATIAL];
    for d in 0..SPATIAL {
        if pad[d] >= kernel[d] {
            return Err(Error::arg(
                OP,
                format!("padding {pad:?} must be smaller than the kernel {kernel:?}"),
            ));
        }
        let padded = pad[d]
            .checked_mul(2)
            .and_then(|p2| p2.checked_add(input[d]))
            .ok_or_else(|| Error::arg(OP, format!("padding {pad:?} overflows")))?;
        if padded < kernel[d] {
            return Err(Error::shape(
                OP,
                format!("the kernel {kernel:?} is larger than the padded data {shape:?} (padding {pad:?})"),
            ));
        }
        let span = padded - kernel[d];
        let mut out = if p.ceil_mode {
            span.div_ceil(stride[d]) + 1
        } else {
            span / stride[d] + 1
        };
        // A last window starting in the right padding holds padding only: dropped.
        if p.ceil_mode && (out - 1) * stride[d] >= input[d] + pad[d] {
            out -= 1;
        }
        output[d] = out;
    }
    let kind = match p.kind {
        PoolType::Max => PoolKind::Max,
        PoolType::Avg => PoolKind::Avg {
            count_include_pad: p.count_include_pad,
        },
    };
    let planes = shape[0]
        .checked_mul(shape[1])
        .ok_or_else(|| Error::shape(OP, format!("{shape:?} overflows")))?;
    let g = PoolGeom {
        planes,
        input,
        kernel,
        output,
        stride,
        pad,
        kind,
    };
    checked_elems(OP, &[planes, g.out_plane()])?;
    let mut out_shape = shape[..2].to_vec();
    out_shape.extend_from_slice(&output[SPATIAL - nd..]);
    Ok((g, out_shape))
}

/// The input gradient of a pooling of `x` (shape `xshape`) for head gradient `dy`.
fn pool_grad_op(x: &NDArray, dy: &NDArray, g: &PoolGeom, xshape: &[usize]) -> Result<NDArray> {
    let (xd, dyd) = (x.dense_data()?, dy.dense_data()?);
    if xd.buf.dtype() != dyd.buf.dtype() {
        return Err(Error::dtype_mismatch(
            "pooling backward",
            xd.buf.dtype(),
            dyd.buf.dtype(),
        ));
    }
    NDArray::from_buffer(xd.buf.pool_grad(&dyd.buf, g)?, xshape)
}

/// The input gradient of `x.pool(params)` for head gradient `dy`: the eager backward's
/// kernel (a graph's backward node).
pub(crate) fn pool_input_grad(x: &NDArray, dy: &NDArray, params: &PoolParams) -> Result<NDArray> {
    let shape = x.shape();
    let (g, out_shape) = geometry(&shape, params)?;
    if dy.shape() != out_shape {
        return Err(Error::shape(
            "pooling backward",
            format!("gradient {:?} for an output {out_shape:?}", dy.shape()),
        ));
    }
    pool_grad_op(x, dy, &g, &shape)
}

impl NDArray {
    /// Max or average pooling of `self`, a `(batch, channels, spatial...)` array with 1 to 3
    /// spatial dims, as [`PoolParams`] describes (Gluon's `MaxPool{1,2,3}D`,
    /// `AvgPool{1,2,3}D`, `GlobalMaxPool*`, `GlobalAvgPool*`). Float only; differentiable
    /// (max pooling routes each window's gradient to its first largest element).
    ///
    /// ```
    /// use sparrow_core::{ops::{PoolParams, PoolType}, DType, NDArray};
    /// let x = NDArray::ones(&[2, 3, 7, 7], DType::F32).unwrap();
    /// let y = x.pool(&PoolParams::new(PoolType::Max, &[2]).ceil_mode(true)).unwrap();
    /// assert_eq!(y.shape(), vec![2, 3, 4, 4]);
    /// ```
    pub fn pool(&self, params: &PoolParams) -> Result<NDArray> {
        crate::graph::traced!(Op::Pool(params.clone()), [self], self.pool(params));
        let shape = self.shape();
        let (g, out_shape) = geometry(&shape, params)?;
        crate::sparse::densifying("pooling", &[self])?;
        let d = self.dense_data()?;
        if !d.buf.dtype().is_float() {
            return Err(Error::dtype(
                "pooling",
                format!(
                    "needs a float32 or float64 array, got {}",
                    d.buf.dtype().name()
                ),
            ));
        }
        let out = NDArray::from_buffer(d.buf.pool(&g)?, &out_shape)?;
        let x = self.clone();
        Ok(record_op("pooling", out, &[self], move |dy| {
            Ok(vec![Some(pool_grad_op(&x, dy, &g, &shape)?)])
        }))
    }
}
