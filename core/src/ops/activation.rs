//! The activations beyond relu / sigmoid / tanh / softrelu that Gluon's layers and PyTorch's
//! `nn` offer (ELU, SELU, GELU in both forms, Swish / SiLU, Softsign, LogSigmoid, Mish): each
//! one map kernel forward and one fused backward from the input ([`ActFn`]), rather than the
//! 3-8 allocating operators each would be composed of, and one graph node when traced.
//!
//! Sparse operands are densified (none of these is zero-preserving in MXNet's sparse
//! operator set), as for `sigmoid`.

use crate::autograd::record_op;
use crate::error::Result;
use crate::storage::{Map, MapGrad};
use crate::{Error, NDArray};

/// SELU's scale `lambda` (Klambauer et al. 2017; the constant PyTorch and MXNet use).
pub const SELU_LAMBDA: f64 = 1.050_700_987_355_480_5;
/// SELU's `alpha`.
pub const SELU_ALPHA: f64 = 1.673_263_242_354_377_3;

/// An activation with a fused backward from its input.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ActFn {
    /// `x` for `x > 0`, else `alpha (e^x - 1)`.
    Elu(f64),
    /// `lambda * elu_alpha(x)` with [`SELU_LAMBDA`] and [`SELU_ALPHA`].
    Selu,
    /// `x Phi(x)` with the normal CDF `Phi(x) = (1 + erf(x / sqrt 2)) / 2` (exact GELU).
    Gelu,
    /// GELU's tanh approximation `x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2`.
    GeluTanh,
    /// `x sigmoid(beta x)` (SiLU for `beta = 1`).
    Swish(f64),
    /// `x / (1 + |x|)`.
    Softsign,
    /// `ln sigmoid(x) = -softplus(-x)`.
    LogSigmoid,
    /// `x tanh(softplus(x))`.
    Mish,
}

impl ActFn {
    /// The operator's name (in the exported graph format and in errors).
    pub fn name(self) -> &'static str {
        match self {
            ActFn::Elu(_) => "elu",
            ActFn::Selu => "selu",
            ActFn::Gelu => "gelu",
            ActFn::GeluTanh => "gelu_tanh",
            ActFn::Swish(_) => "swish",
            ActFn::Softsign => "softsign",
            ActFn::LogSigmoid => "log_sigmoid",
            ActFn::Mish => "mish",
        }
    }

    /// The name of its one parameter and its value, where it has one.
    pub fn param(self) -> Option<(&'static str, f64)> {
        match self {
            ActFn::Elu(a) => Some(("alpha", a)),
            ActFn::Swish(b) => Some(("beta", b)),
            _ => None,
        }
    }

    /// The activation of a name, with its parameter where it takes one (`None` for an
    /// unknown name, or a parameter given to one without, or missing).
    pub fn from_name(name: &str, param: Option<f64>) -> Option<ActFn> {
        Some(match (name, param) {
            ("elu", Some(a)) => ActFn::Elu(a),
            ("swish", Some(b)) => ActFn::Swish(b),
            ("selu", None) => ActFn::Selu,
            ("gelu", None) => ActFn::Gelu,
            ("gelu_tanh", None) => ActFn::GeluTanh,
            ("softsign", None) => ActFn::Softsign,
            ("log_sigmoid", None) => ActFn::LogSigmoid,
            ("mish", None) => ActFn::Mish,
            _ => return None,
        })
    }

    /// The activation itself when its parameter is finite; an infinite or NaN `alpha` /
    /// `beta` is an error naming it (layers check where they are made).
    pub fn check(self) -> Result<ActFn> {
        match self.param() {
            Some((p, v)) if !v.is_finite() => Err(Error::arg(
                self.name(),
                format!("{p} must be finite, got {v}"),
            )),
            _ => Ok(self),
        }
    }
}

/// The fused backward `op` of the saved array `s` and the head gradient `g` (same shape;
/// sparse ones densified): the eager backward here and the graph's `GradFn` nodes.
pub(crate) fn fused_map_grad(s: &NDArray, g: &NDArray, op: MapGrad) -> Result<NDArray> {
    g.with_dense2(s, |g, s| {
        if g.shape != s.shape {
            return Err(Error::shape(
                op.name(),
                format!("a gradient of {:?} for {:?}", g.shape, s.shape),
            ));
        }
        NDArray::from_buffer(g.buf.map_grad(&s.buf, op)?, &g.shape)
    })
}

impl NDArray {
    /// The activation `f` elementwise (any float dtype, any shape; a sparse array is
    /// densified), its backward one fused pass from the input.
    pub fn activation(&self, f: ActFn) -> Result<NDArray> {
        crate::graph::traced!(Op::Act(f), [self], self.activation(f));
        let f = f.check()?;
        let out = self.map_raw(Map::Act(f))?;
        let x = self.detach();
        Ok(record_op(f.name(), out, &[self], move |g| {
            // A sparse head gradient or input is densified: the gradient is dense.
            Ok(vec![Some(fused_map_grad(&x, g, MapGrad::Act(f))?)])
        }))
    }

    /// ELU: `x` for `x > 0`, else `alpha (e^x - 1)` (Gluon's `nn.ELU`, default `alpha` 1).
    pub fn elu(&self, alpha: f64) -> Result<NDArray> {
        self.activation(ActFn::Elu(alpha))
    }

    /// SELU: `lambda * elu_alpha(x)` with the self-normalizing constants.
    pub fn selu(&self) -> Result<NDArray> {
        self.activation(ActFn::Selu)
    }

    /// GELU, exact: `x Phi(x)` with the normal CDF (through `erf`).
    pub fn gelu(&self) -> Result<NDArray> {
        self.activation(ActFn::Gelu)
    }

    /// GELU's tanh approximation (PyTorch's `gelu(approximate="tanh")`).
    pub fn gelu_tanh(&self) -> Result<NDArray> {
        self.activation(ActFn::GeluTanh)
    }

    /// Swish: `x sigmoid(beta x)`.
    pub fn swish(&self, beta: f64) -> Result<NDArray> {
        self.activation(ActFn::Swish(beta))
    }

    /// SiLU: `x sigmoid(x)` (Swish with `beta = 1`).
    pub fn silu(&self) -> Result<NDArray> {
        self.activation(ActFn::Swish(1.0))
    }

    /// Softsign: `x / (1 + |x|)`.
    pub fn softsign(&self) -> Result<NDArray> {
        self.activation(ActFn::Softsign)
    }

    /// `ln sigmoid(x)`, stable for large `|x|`.
    pub fn log_sigmoid(&self) -> Result<NDArray> {
        self.activation(ActFn::LogSigmoid)
    }

    /// Mish: `x tanh(softplus(x))`.
    pub fn mish(&self) -> Result<NDArray> {
        self.activation(ActFn::Mish)
    }
}
