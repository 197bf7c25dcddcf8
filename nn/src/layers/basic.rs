//! Parameter-free layers: `Dropout`, `Flatten`, `Identity`, `Lambda`.

use std::sync::Arc;

use sparrow_core::ops::MaskStream;
use sparrow_core::{autograd, Error, NDArray, Result};

use crate::block::Block;
use crate::init;

/// Dropout (Gluon's `nn.Dropout`): in training mode (`autograd::is_training()`, true inside
/// `autograd::record`) each element is zeroed with probability `rate` and the survivors are
/// scaled by `1 / (1 - rate)`; in predict mode the input passes unchanged. The mask is the
/// operator [`NDArray::dropout_mask`] from the layer's own [`MaskStream`] (seeded from
/// [`init::next_seed`]): hybridized, each run of the graph draws the mask the eager layer
/// would have drawn at that call.
#[derive(Debug)]
pub struct Dropout {
    rate: f64,
    stream: Arc<MaskStream>,
}

impl Dropout {
    /// Dropout with probability `rate` in `[0, 1)`.
    pub fn new(rate: f64) -> Result<Dropout> {
        if !(0.0..1.0).contains(&rate) {
            return Err(Error::arg(
                "Dropout",
                format!("rate {rate} must be in [0, 1)"),
            ));
        }
        Ok(Dropout {
            rate,
            stream: MaskStream::new(init::next_seed()),
        })
    }

    /// The layer's stream of masks (its seed, and how many masks it has drawn).
    pub fn mask_stream(&self) -> &Arc<MaskStream> {
        &self.stream
    }
}

impl Block for Dropout {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        if !autograd::is_training() || self.rate == 0.0 {
            return Ok(x.clone());
        }
        x.mul(&x.dropout_mask(self.rate, &self.stream)?)
    }
    fn kind(&self) -> &'static str {
        "dropout"
    }
    fn describe(&self) -> String {
        format!("Dropout(p = {})", self.rate)
    }
}

/// Flattens `(batch, d1, d2, ...)` to `(batch, d1 * d2 * ...)`.
#[derive(Debug, Clone, Default)]
pub struct Flatten;

impl Block for Flatten {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        let s = x.shape();
        if s.is_empty() {
            return Err(Error::shape("Flatten", "input must have at least 1 dim"));
        }
        x.reshape(&[s[0], s[1..].iter().product()])
    }
    fn kind(&self) -> &'static str {
        "flatten"
    }
}

/// Returns its input.
#[derive(Debug, Clone, Default)]
pub struct Identity;

impl Block for Identity {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        Ok(x.clone())
    }
    fn kind(&self) -> &'static str {
        "identity"
    }
}

type LambdaFn = dyn Fn(&NDArray) -> Result<NDArray> + Send + Sync;

/// A block from a closure (Gluon's `nn.Lambda`), e.g. `Lambda::new(|x| x.tanh())`.
#[derive(Clone)]
pub struct Lambda {
    f: Arc<LambdaFn>,
}

impl Lambda {
    /// Wrap a closure; it runs under autograd like any other forward.
    pub fn new(f: impl Fn(&NDArray) -> Result<NDArray> + Send + Sync + 'static) -> Lambda {
        Lambda { f: Arc::new(f) }
    }
}

impl Block for Lambda {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        (self.f)(x)
    }
    fn kind(&self) -> &'static str {
        "lambda"
    }
}
