//! `Activation` and the activation layers of Gluon's `nn` (`LeakyReLU`, `PReLU`, `ELU`,
//! `SELU`, `GELU`, `Swish`, `SiLU`), and the named activations shared by layers.

use sparrow_core::ops::ActFn;
use sparrow_core::{DType, Error, NDArray, Result};

use crate::block::Block;
use crate::init::Initializer;
use crate::parameter::Parameter;

/// The activation names [`apply_activation`] knows, for its error message.
const KNOWN: &str = "relu, sigmoid, tanh, softrelu, softsign, elu, selu, gelu, gelu_tanh, \
silu, swish, log_sigmoid, mish, linear";

/// Apply a named activation: Gluon's `relu`, `sigmoid`, `tanh`, `softrelu`, `softsign`,
/// `log_sigmoid`, `mish`, and (with their default parameters) the activations of its layers,
/// `elu` (alpha 1), `selu`, `gelu` (exact), `gelu_tanh` (the tanh approximation), `silu` /
/// `swish` (beta 1); `linear` / `identity` return the input.
pub fn apply_activation(name: &str, x: &NDArray) -> Result<NDArray> {
    match name {
        "relu" => x.relu(),
        "sigmoid" => x.sigmoid(),
        "tanh" => x.tanh(),
        "softrelu" => x.softrelu(),
        "softsign" => x.softsign(),
        "elu" => x.elu(1.0),
        "selu" => x.selu(),
        "gelu" => x.gelu(),
        "gelu_tanh" => x.gelu_tanh(),
        "silu" | "swish" => x.silu(),
        "log_sigmoid" => x.log_sigmoid(),
        "mish" => x.mish(),
        "linear" | "identity" => Ok(x.clone()),
        other => Err(Error::arg(
            "Activation",
            format!("unknown activation '{other}' (known: {KNOWN})"),
        )),
    }
}

/// An activation layer (Gluon's `nn.Activation`).
#[derive(Debug, Clone)]
pub struct Activation {
    name: String,
}

impl Activation {
    /// An activation by name; unknown names are an error here rather than at forward.
    pub fn new(name: &str) -> Result<Activation> {
        apply_activation(name, &NDArray::scalar(0.0f32))?;
        Ok(Activation {
            name: name.to_string(),
        })
    }
}

impl Block for Activation {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        apply_activation(&self.name, x)
    }
    fn kind(&self) -> &'static str {
        "activation"
    }
    fn describe(&self) -> String {
        format!("Activation({})", self.name)
    }
}

/// Leaky ReLU with a fixed slope (Gluon's `nn.LeakyReLU`).
#[derive(Debug, Clone)]
pub struct LeakyReLU {
    alpha: f64,
}

impl LeakyReLU {
    /// `x` for `x > 0`, `alpha * x` otherwise.
    pub fn new(alpha: f64) -> LeakyReLU {
        LeakyReLU { alpha }
    }
}

impl Block for LeakyReLU {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        x.leaky_relu(self.alpha)
    }
    fn kind(&self) -> &'static str {
        "leakyrelu"
    }
    fn describe(&self) -> String {
        format!("LeakyReLU({})", self.alpha)
    }
}

/// A layer applying one [`ActFn`] (the parameter checked when it is made).
macro_rules! act_layer {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name {
            f: ActFn,
        }

        impl Block for $name {
            fn forward(&self, x: &NDArray) -> Result<NDArray> {
                x.activation(self.f)
            }
            fn kind(&self) -> &'static str {
                $kind
            }
            fn describe(&self) -> String {
                match self.f.param() {
                    Some((p, v)) => format!("{}({p}={v})", stringify!($name)),
                    None => format!("{}({})", stringify!($name), self.f.name()),
                }
            }
        }
    };
}

act_layer!(
    /// Exponential linear unit (Gluon's `nn.ELU`): `x` for `x > 0`, else `alpha (e^x - 1)`.
    ELU,
    "elu"
);

impl ELU {
    /// ELU with slope parameter `alpha` (Gluon's default 1); a non-finite one is an error.
    pub fn new(alpha: f64) -> Result<ELU> {
        Ok(ELU {
            f: ActFn::Elu(alpha).check()?,
        })
    }
}

act_layer!(
    /// Scaled exponential linear unit (Gluon's `nn.SELU`): `lambda * elu_alpha(x)` with the
    /// self-normalizing constants `sparrow_core::ops::{SELU_LAMBDA, SELU_ALPHA}`.
    SELU,
    "selu"
);

impl SELU {
    /// SELU.
    pub fn new() -> SELU {
        SELU { f: ActFn::Selu }
    }
}

impl Default for SELU {
    fn default() -> Self {
        SELU::new()
    }
}

act_layer!(
    /// Gaussian error linear unit (Gluon's `nn.GELU`): `x Phi(x)`, exact (`erf`) or by the
    /// tanh approximation.
    GELU,
    "gelu"
);

impl GELU {
    /// Exact GELU (Gluon's default `approximation='erf'`).
    pub fn new() -> GELU {
        GELU { f: ActFn::Gelu }
    }

    /// GELU by its approximation: `"erf"` (exact) or `"tanh"`; another name is an error.
    pub fn with_approximation(approximation: &str) -> Result<GELU> {
        let f = match approximation {
            "erf" => ActFn::Gelu,
            "tanh" => ActFn::GeluTanh,
            other => {
                return Err(Error::arg(
                    "GELU",
                    format!("approximation '{other}' is not 'erf' or 'tanh'"),
                ))
            }
        };
        Ok(GELU { f })
    }
}

impl Default for GELU {
    fn default() -> Self {
        GELU::new()
    }
}

act_layer!(
    /// Swish (Gluon's `nn.Swish`): `x sigmoid(beta x)`.
    Swish,
    "swish"
);

impl Swish {
    /// Swish with `beta` (Gluon's default 1); a non-finite one is an error.
    pub fn new(beta: f64) -> Result<Swish> {
        Ok(Swish {
            f: ActFn::Swish(beta).check()?,
        })
    }
}

act_layer!(
    /// Sigmoid linear unit (Gluon's `nn.SiLU`): `x sigmoid(x)`.
    SiLU,
    "silu"
);

impl SiLU {
    /// SiLU.
    pub fn new() -> SiLU {
        SiLU {
            f: ActFn::Swish(1.0),
        }
    }
}

impl Default for SiLU {
    fn default() -> Self {
        SiLU::new()
    }
}

/// Parametric ReLU (Gluon's `nn.PReLU`): `x` for `x > 0`, else `alpha x`, with `alpha` a
/// learned parameter: one value shared by every element (`in_channels = 1`), or one per
/// channel of axis 1 (`(N, C, ...)` inputs with `C = in_channels`).
#[derive(Debug, Clone)]
pub struct PReLU {
    in_channels: usize,
    alpha: Parameter,
}

impl PReLU {
    /// One shared slope, initialized to 0.25 (Gluon's default `Constant(0.25)`).
    pub fn new() -> PReLU {
        PReLU::with_channels(1)
    }

    /// One slope per channel of axis 1 (`in_channels` of them, at least 1), initialized to
    /// 0.25.
    pub fn with_channels(in_channels: usize) -> PReLU {
        let in_channels = in_channels.max(1);
        PReLU {
            in_channels,
            alpha: Parameter::new("alpha", &[in_channels]).with_init(Initializer::Constant(0.25)),
        }
    }

    /// Builder: the slopes' dtype (f32 by default).
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.alpha = self.alpha.with_dtype(dtype);
        self
    }

    /// Builder: the slopes' own initializer.
    pub fn alpha_initializer(self, init: Initializer) -> Self {
        self.alpha.set_init(Some(init));
        self
    }

    /// The slope parameter.
    pub fn alpha(&self) -> &Parameter {
        &self.alpha
    }
}

impl Default for PReLU {
    fn default() -> Self {
        PReLU::new()
    }
}

impl Block for PReLU {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        let shape = x.shape();
        // The slopes broadcast along axis 1 (every axis when there is one slope).
        let mut bshape = vec![1usize; shape.len().max(1)];
        if self.in_channels > 1 {
            if shape.len() < 2 || shape[1] != self.in_channels {
                return Err(Error::shape(
                    "PReLU",
                    format!(
                        "an input of shape {shape:?} for {} channels on axis 1",
                        self.in_channels
                    ),
                ));
            }
            bshape[1] = self.in_channels;
        }
        let alpha = self.alpha.data()?.reshape(&bshape)?;
        // relu(x) + alpha min(x, 0): the derivative in x is 1 for x > 0, else alpha (alpha at
        // 0 too, as PyTorch's), and in alpha min(x, 0) summed over the broadcast axes.
        x.relu()?.add(&alpha.mul(&x.minimum_scalar(0.0)?)?)
    }
    fn kind(&self) -> &'static str {
        "prelu"
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        vec![("alpha".into(), self.alpha.clone())]
    }
    fn describe(&self) -> String {
        format!("PReLU({})", self.in_channels)
    }
}
