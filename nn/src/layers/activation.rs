//! `Activation` and the activation functions shared by layers.

use sparrow_core::{Error, NDArray, Result};

use crate::block::Block;

/// Apply a named activation: `relu`, `sigmoid`, `tanh`, `softrelu`, `softsign`
/// (also `linear`/`identity`, which return the input).
pub fn apply_activation(name: &str, x: &NDArray) -> Result<NDArray> {
    match name {
        "relu" => x.relu(),
        "sigmoid" => x.sigmoid(),
        "tanh" => x.tanh(),
        "softrelu" => x.softrelu(),
        "softsign" => x.div(&x.abs()?.add_scalar(1.0)?),
        "linear" | "identity" => Ok(x.clone()),
        other => Err(Error::arg(
            "Activation",
            format!(
                "unknown activation '{other}' (known: relu, sigmoid, tanh, softrelu, softsign, linear)"
            ),
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
