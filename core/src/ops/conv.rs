//! N-d convolution and transposed convolution (1-D, 2-D, 3-D; layouts NCW, NCHW, NCDHW) with
//! stride, padding, dilation, groups and bias, as MXNet's `Convolution` / `Deconvolution` and
//! PyTorch's `conv{1,2,3}d` / `conv_transpose{1,2,3}d` define them.
//!
//! Three kernels through the seam (`Storage::conv`, `conv_data_grad`, `conv_weight_grad`; on
//! the CPU im2col + GEMM in `crate::cpu::conv`, Winograd for 3x3 stride-1 kernels in
//! `crate::cpu::winograd`), and backwards written with them:
//! - `y = conv(x, w)`: `dx = conv_data(dy, w)`, `dw = conv_weight(x, dy)`;
//! - `z = conv_data(u, w)` (the transposed convolution): `du = conv(dz, w)`,
//!   `dw = conv_weight(dz, u)`.
//!
//! The bias gradient is the sum of `dy` over the batch and spatial axes. A backward computes
//! only the gradients its inputs need (a network's first layer skips `dx`).

use crate::autograd::{is_recording, record_op};
use crate::error::{Error, Result};
use crate::storage::{ConvGeom, SPATIAL};
use crate::{DenseData, NDArray};

/// Stride, padding, dilation, groups and (for the transposed convolution) output padding.
///
/// Each per-dimension list may be empty (the default: stride 1, padding 0, dilation 1, output
/// padding 0), one value for every spatial dim, or one value per spatial dim.
///
/// ```
/// use sparrow_core::ops::ConvParams;
/// let p = ConvParams::new().stride(&[2]).padding(&[1, 1]).groups(4);
/// assert_eq!(p.groups, 4);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvParams {
    /// Step between windows per spatial dim.
    pub stride: Vec<usize>,
    /// Zeros added before and after each spatial dim.
    pub padding: Vec<usize>,
    /// Step between kernel taps per spatial dim.
    pub dilation: Vec<usize>,
    /// Channel groups: input and output channels are split into `groups` blocks and block `i`
    /// of the output sees block `i` of the input only (`groups = in_channels`: depthwise).
    pub groups: usize,
    /// Transposed convolution only: extra rows added at the end of each output dim (smaller
    /// than the stride), to pick one of the input sizes a strided convolution maps to one
    /// output size.
    pub output_padding: Vec<usize>,
}

impl Default for ConvParams {
    fn default() -> ConvParams {
        ConvParams {
            stride: Vec::new(),
            padding: Vec::new(),
            dilation: Vec::new(),
            groups: 1,
            output_padding: Vec::new(),
        }
    }
}

impl ConvParams {
    /// Stride 1, padding 0, dilation 1, one group.
    pub fn new() -> ConvParams {
        ConvParams::default()
    }
    /// Builder: the stride (one value, or one per spatial dim).
    pub fn stride(mut self, s: &[usize]) -> Self {
        self.stride = s.to_vec();
        self
    }
    /// Builder: the padding (one value, or one per spatial dim).
    pub fn padding(mut self, p: &[usize]) -> Self {
        self.padding = p.to_vec();
        self
    }
    /// Builder: the dilation (one value, or one per spatial dim).
    pub fn dilation(mut self, d: &[usize]) -> Self {
        self.dilation = d.to_vec();
        self
    }
    /// Builder: the channel groups.
    pub fn groups(mut self, g: usize) -> Self {
        self.groups = g;
        self
    }
    /// Builder: the output padding of a transposed convolution.
    pub fn output_padding(mut self, p: &[usize]) -> Self {
        self.output_padding = p.to_vec();
        self
    }
}

/// `v` as one value per spatial dim, lifted to [`SPATIAL`] dims (the leading, missing ones get
/// `lift`): empty gives `default` everywhere, one value is repeated.
pub(crate) fn per_dim(
    op: &'static str,
    name: &str,
    v: &[usize],
    nd: usize,
    default: usize,
    lift: usize,
) -> Result<[usize; SPATIAL]> {
    let vals: Vec<usize> = match v.len() {
        0 => vec![default; nd],
        1 => vec![v[0]; nd],
        n if n == nd => v.to_vec(),
        n => {
            return Err(Error::arg(
                op,
                format!("{name} has {n} values for {nd} spatial dims (give 1 or {nd}): {v:?}"),
            ))
        }
    };
    let mut out = [lift; SPATIAL];
    out[SPATIAL - nd..].copy_from_slice(&vals);
    Ok(out)
}

/// An error unless every value is at least 1.
pub(crate) fn positive(op: &'static str, name: &str, v: &[usize; SPATIAL]) -> Result<()> {
    if v.contains(&0) {
        return Err(Error::arg(
            op,
            format!("{name} must be at least 1, got {v:?}"),
        ));
    }
    Ok(())
}

/// The spatial dims of a `(batch, channels, spatial...)` shape lifted to [`SPATIAL`], or an
/// error unless it has 1 to 3 spatial dims.
pub(crate) fn spatial_of(
    op: &'static str,
    what: &str,
    shape: &[usize],
) -> Result<[usize; SPATIAL]> {
    if !(3..=2 + SPATIAL).contains(&shape.len()) {
        return Err(Error::shape(
            op,
            format!(
                "{what} must be (batch, channels, 1 to 3 spatial dims) (NCW, NCHW or NCDHW), got {shape:?}"
            ),
        ));
    }
    let mut out = [1; SPATIAL];
    out[SPATIAL + 2 - shape.len()..].copy_from_slice(&shape[2..]);
    Ok(out)
}

/// `a * b * ...` or an error naming `op` when it overflows `isize` (buffers never exceed it).
pub(crate) fn checked_elems(op: &'static str, dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= isize::MAX as usize / 8)
        .ok_or_else(|| Error::shape(op, format!("sizes {dims:?} overflow the address space")))
}

/// The float dense data of the operands of `op`, all of one dtype.
fn operands(op: &'static str, arrays: &[&NDArray]) -> Result<Vec<DenseData>> {
    crate::sparse::densifying(op, arrays)?;
    let ds = arrays
        .iter()
        .map(|a| a.dense_data())
        .collect::<Result<Vec<_>>>()?;
    let dt = ds[0].buf.dtype();
    if !dt.is_float() {
        return Err(Error::dtype(
            op,
            format!("needs float32 or float64 arrays, got {}", dt.name()),
        ));
    }
    for d in &ds[1..] {
        if d.buf.dtype() != dt {
            return Err(Error::dtype_mismatch(op, dt, d.buf.dtype()));
        }
    }
    Ok(ds)
}

/// Check the weight against the data's channels and build the geometry of the convolution
/// (`transposed`: of the convolution whose data gradient this is), with the output shape.
fn geometry(
    op: &'static str,
    xshape: &[usize],
    wshape: &[usize],
    p: &ConvParams,
    transposed: bool,
) -> Result<(ConvGeom, Vec<usize>)> {
    let data_sp = spatial_of(op, "the data", xshape)?;
    let nd = xshape.len() - 2;
    if wshape.len() != xshape.len() {
        return Err(Error::shape(
            op,
            format!(
                "the weight must have {} dims like the data {xshape:?}, got {wshape:?}",
                xshape.len()
            ),
        ));
    }
    let groups = p.groups;
    if groups == 0 {
        return Err(Error::arg(op, "groups must be at least 1"));
    }
    let kernel = spatial_of(op, "the weight", wshape)?;
    positive(op, "the kernel size", &kernel)?;
    let stride = per_dim(op, "stride", &p.stride, nd, 1, 1)?;
    let pad = per_dim(op, "padding", &p.padding, nd, 0, 0)?;
    let dilation = per_dim(op, "dilation", &p.dilation, nd, 1, 1)?;
    positive(op, "stride", &stride)?;
    positive(op, "dilation", &dilation)?;
    let (batch, data_ch) = (xshape[0], xshape[1]);
    // The conv's (x channels, y channels) and the weight's expected second dim.
    let (in_ch, out_ch) = if transposed {
        (wshape[1] * groups, wshape[0])
    } else {
        (data_ch, wshape[0])
    };
    let chan = |msg: String| Err(Error::shape(op, msg));
    if transposed {
        if wshape[0] != data_ch {
            return chan(format!(
                "the weight {wshape:?} must be (in_channels = {data_ch}, out_channels / groups, kernel...)"
            ));
        }
        if data_ch % groups != 0 {
            return chan(format!(
                "{data_ch} input channels do not split into {groups} groups"
            ));
        }
    } else {
        if data_ch % groups != 0 || out_ch % groups != 0 {
            return chan(format!(
                "{data_ch} input and {out_ch} output channels must both split into {groups} groups"
            ));
        }
        if wshape[1] != data_ch / groups {
            return chan(format!(
                "the weight {wshape:?} must be (out_channels, in_channels / groups = {}, kernel...)",
                data_ch / groups
            ));
        }
    }
    let mut conv_in = [1; SPATIAL];
    let mut conv_out = [1; SPATIAL];
    if transposed {
        let opad = per_dim(op, "output_padding", &p.output_padding, nd, 0, 0)?;
        for d in 0..SPATIAL {
            if opad[d] >= stride[d] {
                return Err(Error::arg(
                    op,
                    format!("output_padding {opad:?} must be smaller than the stride {stride:?}"),
                ));
            }
            let ek = extent(op, kernel[d], dilation[d])?;
            // (in - 1) * s - 2 p + ek + output_padding, computed without going negative.
            let grown = (data_sp[d].max(1) - 1)
                .checked_mul(stride[d])
                .and_then(|v| v.checked_add(ek)?.checked_add(opad[d]));
            let out = grown.and_then(|v| v.checked_sub(pad[d].checked_mul(2)?));
            match out {
                Some(o) if o > 0 && data_sp[d] > 0 => conv_in[d] = o,
                _ => {
                    return Err(Error::shape(
                        op,
                        format!(
                            "the data {xshape:?} with kernel {kernel:?}, stride {stride:?}, padding {pad:?}, dilation {dilation:?} gives an empty output"
                        ),
                    ))
                }
            }
            conv_out[d] = data_sp[d];
        }
    } else {
        if !p.output_padding.is_empty() && p.output_padding.iter().any(|&v| v != 0) {
            return Err(Error::arg(
                op,
                "output_padding applies to transposed convolutions only",
            ));
        }
        for d in 0..SPATIAL {
            let ek = extent(op, kernel[d], dilation[d])?;
            let padded = pad[d]
                .checked_mul(2)
                .and_then(|p2| p2.checked_add(data_sp[d]))
                .ok_or_else(|| Error::arg(op, format!("padding {pad:?} overflows")))?;
            if padded < ek {
                return Err(Error::shape(
                    op,
                    format!(
                        "the kernel {kernel:?} (dilation {dilation:?}) is larger than the padded data {xshape:?} (padding {pad:?})"
                    ),
                ));
            }
            conv_in[d] = data_sp[d];
            conv_out[d] = (padded - ek) / stride[d] + 1;
        }
    }
    let g = ConvGeom {
        batch,
        in_channels: in_ch,
        out_channels: out_ch,
        groups,
        input: conv_in,
        kernel,
        output: conv_out,
        stride,
        pad,
        dilation,
    };
    // Every buffer the kernels make must be addressable: x, y and the column matrix.
    checked_elems(op, &[batch, in_ch, g.in_plane()])?;
    checked_elems(op, &[batch, out_ch, g.out_plane()])?;
    checked_elems(op, &[in_ch, g.taps(), g.out_plane()])?;
    let (ch, sp) = if transposed {
        (in_ch, conv_in)
    } else {
        (out_ch, conv_out)
    };
    let mut shape = vec![batch, ch];
    shape.extend_from_slice(&sp[SPATIAL - nd..]);
    Ok((g, shape))
}

/// The span `dilation (kernel - 1) + 1` a kernel covers, or an error when it overflows.
fn extent(op: &'static str, kernel: usize, dilation: usize) -> Result<usize> {
    (kernel - 1)
        .checked_mul(dilation)
        .and_then(|v| v.checked_add(1))
        .ok_or_else(|| {
            Error::arg(
                op,
                format!("kernel {kernel} with dilation {dilation} overflows"),
            )
        })
}

/// The conv's `x` shape (`(batch, in_channels, input...)`) at the caller's rank `nd + 2`.
fn x_shape(g: &ConvGeom, nd: usize) -> Vec<usize> {
    let mut s = vec![g.batch, g.in_channels];
    s.extend_from_slice(&g.input[SPATIAL - nd..]);
    s
}

/// The conv's `y` shape.
fn y_shape(g: &ConvGeom, nd: usize) -> Vec<usize> {
    let mut s = vec![g.batch, g.out_channels];
    s.extend_from_slice(&g.output[SPATIAL - nd..]);
    s
}

/// Which of `inputs` need a gradient (all false when not recording).
fn needs(inputs: &[&NDArray]) -> Vec<bool> {
    let rec = is_recording();
    inputs.iter().map(|x| rec && x.requires_grad()).collect()
}

/// `conv(x, w) (+ b)`, recorded.
fn conv_op(
    x: &NDArray,
    w: &NDArray,
    b: Option<&NDArray>,
    g: ConvGeom,
    nd: usize,
) -> Result<NDArray> {
    const OP: &str = "convolution";
    let mut arrays = vec![x, w];
    arrays.extend(b);
    let ds = operands(OP, &arrays)?;
    let out = NDArray::from_buffer(
        ds[0].buf.conv(&ds[1].buf, ds.get(2).map(|d| &d.buf), &g)?,
        &y_shape(&g, nd),
    )?;
    let need = needs(&arrays);
    let (xc, wc, has_bias) = (x.clone(), w.clone(), b.is_some());
    Ok(record_op(OP, out, &arrays, move |dy| {
        let dx = need[0].then(|| conv_data_op(dy, &wc, g, nd)).transpose()?;
        let dw = need[1]
            .then(|| conv_weight_op(&xc, dy, g, nd))
            .transpose()?;
        let mut grads = vec![dx, dw];
        if has_bias {
            grads.push(need[2].then(|| bias_grad(dy, nd)).transpose()?);
        }
        Ok(grads)
    }))
}

/// The gradient of a per-channel bias: `dy` summed over the batch and spatial axes, as two
/// reductions of contiguous runs (each plane's sum, then over the batch): the one reduction
/// over axes (0, 2, 3) took 5% of a ResNet layer's step.
fn bias_grad(dy: &NDArray, nd: usize) -> Result<NDArray> {
    let s = dy.shape();
    let plane: usize = s[2..2 + nd].iter().product();
    dy.reshape(&[s[0], s[1], plane])?
        .sum(Some(&[2]), false)?
        .sum(Some(&[0]), false)
}

/// `conv_data(dy, w)`: the data gradient of `conv`, the transposed convolution; recorded.
fn conv_data_op(dy: &NDArray, w: &NDArray, g: ConvGeom, nd: usize) -> Result<NDArray> {
    const OP: &str = "convolution data gradient";
    let ds = operands(OP, &[dy, w])?;
    let out = NDArray::from_buffer(ds[0].buf.conv_data_grad(&ds[1].buf, &g)?, &x_shape(&g, nd))?;
    let need = needs(&[dy, w]);
    let (dyc, wc) = (dy.clone(), w.clone());
    Ok(record_op(OP, out, &[dy, w], move |dz| {
        let ddy = need[0].then(|| conv_op(dz, &wc, None, g, nd)).transpose()?;
        let dw = need[1]
            .then(|| conv_weight_op(dz, &dyc, g, nd))
            .transpose()?;
        Ok(vec![ddy, dw])
    }))
}

/// `conv_weight(x, dy)`: the weight gradient of `conv`. Not recorded: it only runs inside
/// backward passes, which autograd runs with recording paused.
fn conv_weight_op(x: &NDArray, dy: &NDArray, g: ConvGeom, nd: usize) -> Result<NDArray> {
    const OP: &str = "convolution weight gradient";
    let ds = operands(OP, &[x, dy])?;
    let mut wshape = vec![g.out_channels, g.in_channels / g.groups];
    wshape.extend_from_slice(&g.kernel[SPATIAL - nd..]);
    NDArray::from_buffer(ds[0].buf.conv_weight_grad(&ds[1].buf, &g)?, &wshape)
}

/// The data gradient of `x.convolution(w, _, params)` for an `x` of `x_shape`, from its
/// output gradient `dy`: the eager backward's kernel (a graph's backward node).
pub(crate) fn conv_data_grad(
    dy: &NDArray,
    w: &NDArray,
    params: &ConvParams,
    x_shape: &[usize],
) -> Result<NDArray> {
    const OP: &str = "convolution data gradient";
    let (g, y) = geometry(OP, x_shape, &w.shape(), params, false)?;
    if dy.shape() != y {
        return Err(Error::shape(
            OP,
            format!("output gradient {:?} for an output {y:?}", dy.shape()),
        ));
    }
    conv_data_op(dy, w, g, x_shape.len() - 2)
}

/// The weight gradient of a convolution of `x` (`transposed`: of a transposed convolution
/// whose input is `y`) with a `w_shape` weight: `conv_weight(x, y)` of the eager backward,
/// `x` shaped as the convolution's input and `y` as its output (a graph's backward node).
pub(crate) fn conv_weight_grad(
    x: &NDArray,
    y: &NDArray,
    params: &ConvParams,
    w_shape: &[usize],
    transposed: bool,
) -> Result<NDArray> {
    const OP: &str = "convolution weight gradient";
    let (g, out) = if transposed {
        geometry(OP, &y.shape(), w_shape, params, true)?
    } else {
        geometry(OP, &x.shape(), w_shape, params, false)?
    };
    let (other, want) = if transposed { (x, out) } else { (y, out) };
    if other.shape() != want {
        return Err(Error::shape(
            OP,
            format!("gradient {:?} where {want:?} is needed", other.shape()),
        ));
    }
    conv_weight_op(x, y, g, w_shape.len() - 2)
}

/// An error unless `b` is a `(channels,)` bias.
fn check_bias(op: &'static str, b: Option<&NDArray>, channels: usize) -> Result<()> {
    if let Some(b) = b {
        if !b.has_shape(&[channels]) {
            return Err(Error::shape(
                op,
                format!("the bias must be ({channels},), got {:?}", b.shape()),
            ));
        }
    }
    Ok(())
}

impl NDArray {
    /// N-d convolution of `self`, a `(batch, in_channels, spatial...)` array with 1 to 3
    /// spatial dims (NCW, NCHW, NCDHW), by `weight` `(out_channels, in_channels / groups,
    /// kernel...)`, plus an optional `(out_channels,)` bias: MXNet's `Convolution`, PyTorch's
    /// `conv{1,2,3}d`. The output is `(batch, out_channels, out...)` with
    /// `out = (in + 2 padding - dilation (kernel - 1) - 1) / stride + 1` per dim.
    /// Float only; differentiable in all three operands.
    ///
    /// ```
    /// use sparrow_core::{ops::ConvParams, DType, NDArray};
    /// let x = NDArray::ones(&[2, 3, 8, 8], DType::F32).unwrap();
    /// let w = NDArray::ones(&[4, 3, 3, 3], DType::F32).unwrap();
    /// let y = x.convolution(&w, None, &ConvParams::new().padding(&[1])).unwrap();
    /// assert_eq!(y.shape(), vec![2, 4, 8, 8]);
    /// ```
    pub fn convolution(
        &self,
        weight: &NDArray,
        bias: Option<&NDArray>,
        params: &ConvParams,
    ) -> Result<NDArray> {
        const OP: &str = "convolution";
        let conv = |bias| crate::graph::Op::Conv {
            params: params.clone(),
            bias,
        };
        match bias {
            Some(b) => crate::graph::traced!(
                conv(true),
                [self, weight, b],
                self.convolution(weight, bias, params)
            ),
            None => crate::graph::traced!(
                conv(false),
                [self, weight],
                self.convolution(weight, None, params)
            ),
        }
        let (g, _) = geometry(OP, &self.shape(), &weight.shape(), params, false)?;
        check_bias(OP, bias, g.out_channels)?;
        conv_op(self, weight, bias, g, self.ndim() - 2)
    }

    /// Transposed convolution (MXNet's `Deconvolution`, PyTorch's `conv_transpose{1,2,3}d`):
    /// the gradient of [`NDArray::convolution`] with respect to its data, applied to `self`,
    /// a `(batch, in_channels, spatial...)` array, with `weight` `(in_channels, out_channels /
    /// groups, kernel...)` and an optional `(out_channels,)` bias. The output is `(batch,
    /// out_channels, out...)` with `out = (in - 1) stride - 2 padding + dilation (kernel - 1)
    /// + output_padding + 1` per dim. Float only; differentiable in all three operands.
    ///
    /// ```
    /// use sparrow_core::{ops::ConvParams, DType, NDArray};
    /// let x = NDArray::ones(&[1, 4, 5, 5], DType::F32).unwrap();
    /// let w = NDArray::ones(&[4, 2, 3, 3], DType::F32).unwrap();
    /// let p = ConvParams::new().stride(&[2]).padding(&[1]).output_padding(&[1]);
    /// assert_eq!(x.conv_transpose(&w, None, &p).unwrap().shape(), vec![1, 2, 10, 10]);
    /// ```
    pub fn conv_transpose(
        &self,
        weight: &NDArray,
        bias: Option<&NDArray>,
        params: &ConvParams,
    ) -> Result<NDArray> {
        const OP: &str = "conv_transpose";
        // Traced as the transposed convolution without bias, then the bias's broadcast add.
        if bias.is_none() {
            crate::graph::traced!(
                Op::ConvTranspose(params.clone()),
                [self, weight],
                self.conv_transpose(weight, None, params)
            );
        }
        let (g, shape) = geometry(OP, &self.shape(), &weight.shape(), params, true)?;
        check_bias(OP, bias, shape[1])?;
        let nd = self.ndim() - 2;
        match bias {
            None => conv_data_op(self, weight, g, nd),
            Some(b) => {
                let z = self.conv_transpose(weight, None, params)?;
                let mut bshape = vec![1; nd + 2];
                bshape[1] = shape[1];
                z.add(&b.reshape(&bshape)?)
            }
        }
    }
}
