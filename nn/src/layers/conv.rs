//! Convolution layers (Gluon's `nn.Conv1D`, `Conv2D`, `Conv3D`, `Conv1DTranspose`,
//! `Conv2DTranspose`, `Conv3DTranspose`), layouts NCW / NCHW / NCDHW.
//!
//! Weights are laid out as Gluon and PyTorch hold them: `(channels, in_channels / groups,
//! kernel...)` for a convolution, `(in_channels, channels / groups, kernel...)` for a
//! transposed one; the bias is `(channels,)`, zeros by default. `in_channels` left at 0 is
//! inferred from the first batch (deferred initialization, as Dense's `in_units`). The
//! computation is core's [`NDArray::convolution`] / [`NDArray::conv_transpose`].

use sparrow_core::ops::ConvParams;
use sparrow_core::{DType, Error, NDArray, Result};

use super::activation::apply_activation;
use crate::block::Block;
use crate::init::Initializer;
use crate::parameter::Parameter;

/// What every convolution layer holds; the public types wrap it with their rank.
#[derive(Debug, Clone)]
struct ConvLayer {
    name: &'static str,
    nd: usize,
    transposed: bool,
    channels: usize,
    kernel: Vec<usize>,
    params: ConvParams,
    in_channels: usize,
    activation: Option<String>,
    use_bias: bool,
    dtype: DType,
    weight_init: Option<Initializer>,
    bias_init: Initializer,
    weight: Parameter,
    bias: Option<Parameter>,
}

impl ConvLayer {
    fn new(
        name: &'static str,
        nd: usize,
        transposed: bool,
        channels: usize,
        kernel: &[usize],
    ) -> Self {
        let kernel = if kernel.len() == 1 {
            vec![kernel[0]; nd]
        } else {
            kernel.to_vec()
        };
        let mut c = ConvLayer {
            name,
            nd,
            transposed,
            channels,
            kernel,
            params: ConvParams::new(),
            in_channels: 0,
            activation: None,
            use_bias: true,
            dtype: DType::F32,
            weight_init: None,
            bias_init: Initializer::Zero,
            weight: Parameter::new("weight", &[]),
            bias: None,
        };
        c.rebuild();
        c
    }

    /// The weight shape for `in_channels` inputs (0: not known yet).
    fn weight_shape(&self, in_channels: usize) -> Vec<usize> {
        let g = self.params.groups.max(1);
        let mut s = if self.transposed {
            vec![in_channels, self.channels / g]
        } else {
            vec![self.channels, in_channels / g]
        };
        s.extend_from_slice(&self.kernel);
        s
    }

    fn rebuild(&mut self) {
        // Fans come from dims 0 and 1 as MXNet computes them, for a transposed weight too
        // (MXNet's Deconvolution and PyTorch's ConvTranspose initialize it the same way).
        let mut w =
            Parameter::new("weight", &self.weight_shape(self.in_channels)).with_dtype(self.dtype);
        if let Some(i) = &self.weight_init {
            w = w.with_init(i.clone());
        }
        self.weight = w;
        self.bias = self.use_bias.then(|| {
            Parameter::new("bias", &[self.channels])
                .with_dtype(self.dtype)
                .with_init(self.bias_init.clone())
        });
    }

    fn check(&self, x: &NDArray) -> Result<usize> {
        let shape = x.dims();
        if shape.len() != self.nd + 2 {
            return Err(Error::shape(
                self.name,
                format!(
                    "expects (batch, channels, {} spatial dims), got {:?}",
                    self.nd,
                    shape.as_slice()
                ),
            ));
        }
        if self.kernel.len() != self.nd {
            return Err(Error::arg(
                self.name,
                format!(
                    "kernel_size {:?} must have 1 or {} values",
                    self.kernel, self.nd
                ),
            ));
        }
        if self.params.groups == 0 || !self.channels.is_multiple_of(self.params.groups) {
            return Err(Error::arg(
                self.name,
                format!(
                    "{} channels do not split into {} groups",
                    self.channels, self.params.groups
                ),
            ));
        }
        Ok(shape[1])
    }

    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        let in_ch = self.check(x)?;
        if self.in_channels != 0 && in_ch != self.in_channels {
            return Err(Error::shape(
                self.name,
                format!(
                    "built for {} input channels, got {:?}",
                    self.in_channels,
                    x.shape()
                ),
            ));
        }
        let w = self.weight.data_for_shape(&self.weight_shape(in_ch))?;
        let b = match &self.bias {
            Some(b) => Some(b.data_for_shape(&[self.channels])?),
            None => None,
        };
        let y = if self.transposed {
            x.conv_transpose(&w, b.as_ref(), &self.params)?
        } else {
            x.convolution(&w, b.as_ref(), &self.params)?
        };
        match &self.activation {
            Some(a) => apply_activation(a, &y),
            None => Ok(y),
        }
    }

    fn params(&self) -> Vec<(String, Parameter)> {
        let mut v = vec![("weight".to_string(), self.weight.clone())];
        if let Some(b) = &self.bias {
            v.push(("bias".to_string(), b.clone()));
        }
        v
    }

    fn describe(&self) -> String {
        let shape = self.weight.shape();
        let in_ch = shape
            .get(if self.transposed { 0 } else { 1 })
            .copied()
            .unwrap_or(0)
            * if self.transposed {
                1
            } else {
                self.params.groups.max(1)
            };
        let inu = if in_ch == 0 {
            "None".to_string()
        } else {
            in_ch.to_string()
        };
        let mut s = format!(
            "{}({inu} -> {}, kernel_size={:?}",
            self.name, self.channels, self.kernel
        );
        for (n, v) in [
            ("stride", &self.params.stride),
            ("padding", &self.params.padding),
            ("dilation", &self.params.dilation),
            ("output_padding", &self.params.output_padding),
        ] {
            if !v.is_empty() {
                s.push_str(&format!(", {n}={v:?}"));
            }
        }
        if self.params.groups != 1 {
            s.push_str(&format!(", groups={}", self.params.groups));
        }
        if let Some(a) = &self.activation {
            s.push_str(&format!(", {a}"));
        }
        if !self.use_bias {
            s.push_str(", no bias");
        }
        s + ")"
    }
}

/// Defines one public convolution layer over [`ConvLayer`].
macro_rules! conv_layer {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $nd:literal, $transposed:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $ty(ConvLayer);

        impl $ty {
            /// `channels` output channels and a kernel of `kernel_size` (one value for every
            /// spatial dim, or one per dim); stride 1, no padding, dilation 1, one group,
            /// bias on, `in_channels` inferred at the first forward.
            pub fn new(channels: usize, kernel_size: &[usize]) -> Self {
                $ty(ConvLayer::new($name, $nd, $transposed, channels, kernel_size))
            }
            /// Builder: the stride (one value, or one per spatial dim).
            pub fn strides(mut self, s: &[usize]) -> Self {
                self.0.params.stride = s.to_vec();
                self
            }
            /// Builder: zero padding on both sides (one value, or one per spatial dim).
            pub fn padding(mut self, p: &[usize]) -> Self {
                self.0.params.padding = p.to_vec();
                self
            }
            /// Builder: the dilation (one value, or one per spatial dim).
            pub fn dilation(mut self, d: &[usize]) -> Self {
                self.0.params.dilation = d.to_vec();
                self
            }
            /// Builder: channel groups (`groups = in_channels = channels`: depthwise).
            pub fn groups(mut self, g: usize) -> Self {
                self.0.params.groups = g;
                self.0.rebuild();
                self
            }
            /// Builder: the number of input channels (otherwise inferred at the first forward).
            pub fn in_channels(mut self, n: usize) -> Self {
                self.0.in_channels = n;
                self.0.rebuild();
                self
            }
            /// Builder: activation applied to the output, by a name of
            /// [`apply_activation`](crate::layers::apply_activation) (`relu`, `sigmoid`,
            /// `tanh`, `gelu`, `silu`, ...); an unknown name is reported at the first forward.
            pub fn activation(mut self, name: &str) -> Self {
                self.0.activation = Some(name.to_string());
                self
            }
            /// Builder: add a bias (default true).
            pub fn use_bias(mut self, yes: bool) -> Self {
                self.0.use_bias = yes;
                self.0.rebuild();
                self
            }
            /// Builder: element type of the parameters.
            pub fn dtype(mut self, dtype: DType) -> Self {
                self.0.dtype = dtype;
                self.0.rebuild();
                self
            }
            /// Builder: the weight's own initializer.
            pub fn weight_initializer(mut self, init: Initializer) -> Self {
                self.0.weight_init = Some(init);
                self.0.rebuild();
                self
            }
            /// Builder: the bias initializer (default zeros).
            pub fn bias_initializer(mut self, init: Initializer) -> Self {
                self.0.bias_init = init;
                self.0.rebuild();
                self
            }
            /// The weight parameter.
            pub fn weight(&self) -> &Parameter {
                &self.0.weight
            }
            /// The bias parameter, if any.
            pub fn bias(&self) -> Option<&Parameter> {
                self.0.bias.as_ref()
            }
            /// Number of output channels.
            pub fn channels(&self) -> usize {
                self.0.channels
            }
            /// The convolution's stride, padding, dilation and groups.
            pub fn conv_params(&self) -> &ConvParams {
                &self.0.params
            }
        }

        impl Block for $ty {
            fn forward(&self, x: &NDArray) -> Result<NDArray> {
                self.0.forward(x)
            }
            fn kind(&self) -> &'static str {
                "conv"
            }
            fn params(&self) -> Vec<(String, Parameter)> {
                self.0.params()
            }
            fn describe(&self) -> String {
                self.0.describe()
            }
        }
    };
}

/// Defines the output-padding builder of a transposed convolution layer.
macro_rules! output_padding {
    ($ty:ident) => {
        impl $ty {
            /// Builder: extra size at the end of each output dim (smaller than the stride),
            /// choosing among the input sizes a strided convolution maps to one size.
            pub fn output_padding(mut self, p: &[usize]) -> Self {
                self.0.params.output_padding = p.to_vec();
                self
            }
        }
    };
}

conv_layer!(
    /// 1-D convolution over `(batch, channels, width)` (Gluon's `nn.Conv1D`).
    Conv1D, "Conv1D", 1, false
);
conv_layer!(
    /// 2-D convolution over `(batch, channels, height, width)` (Gluon's `nn.Conv2D`).
    ///
    /// ```
    /// use sparrow_nn::{Block, Conv2D, Initializer};
    /// use sparrow_core::{DType, Device, NDArray};
    /// let conv = Conv2D::new(8, &[3]).padding(&[1]).activation("relu");
    /// conv.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    /// let y = conv.forward(&NDArray::ones(&[2, 3, 5, 5], DType::F32).unwrap()).unwrap();
    /// assert_eq!(y.shape(), vec![2, 8, 5, 5]);
    /// assert_eq!(conv.weight().shape(), vec![8, 3, 3, 3]);
    /// ```
    Conv2D, "Conv2D", 2, false
);
conv_layer!(
    /// 3-D convolution over `(batch, channels, depth, height, width)` (Gluon's `nn.Conv3D`).
    Conv3D, "Conv3D", 3, false
);
conv_layer!(
    /// 1-D transposed convolution (Gluon's `nn.Conv1DTranspose`).
    Conv1DTranspose, "Conv1DTranspose", 1, true
);
conv_layer!(
    /// 2-D transposed convolution (Gluon's `nn.Conv2DTranspose`): the gradient of a Conv2D
    /// with respect to its input, used to upsample. Weight `(in_channels, channels / groups,
    /// kh, kw)`.
    ///
    /// ```
    /// use sparrow_nn::{Block, Conv2DTranspose, Initializer};
    /// use sparrow_core::{DType, Device, NDArray};
    /// let up = Conv2DTranspose::new(4, &[3]).strides(&[2]).padding(&[1]).output_padding(&[1]);
    /// up.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    /// let y = up.forward(&NDArray::ones(&[1, 6, 5, 5], DType::F32).unwrap()).unwrap();
    /// assert_eq!(y.shape(), vec![1, 4, 10, 10]);
    /// ```
    Conv2DTranspose, "Conv2DTranspose", 2, true
);
conv_layer!(
    /// 3-D transposed convolution (Gluon's `nn.Conv3DTranspose`).
    Conv3DTranspose, "Conv3DTranspose", 3, true
);
output_padding!(Conv1DTranspose);
output_padding!(Conv2DTranspose);
output_padding!(Conv3DTranspose);
