//! Parameter-free layers: `Dropout`, `Flatten`, `Identity`, `Lambda`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sparrow_core::{autograd, float_dispatch, Error, NDArray, Result};

use crate::block::Block;
use crate::init;

/// Dropout (Gluon's `nn.Dropout`): in training mode (`autograd::is_training()`, true inside
/// `autograd::record`) each element is zeroed with probability `rate` and the survivors are
/// scaled by `1 / (1 - rate)`; in predict mode the input passes unchanged.
#[derive(Debug)]
pub struct Dropout {
    rate: f64,
    seed: u64,
    calls: AtomicU64,
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
            seed: init::next_seed(),
            calls: AtomicU64::new(0),
        })
    }
}

impl Block for Dropout {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        if !autograd::is_training() || self.rate == 0.0 {
            return Ok(x.clone());
        }
        sparrow_core::graph::not_traceable("Dropout", "training mode draws a random mask");
        let n = x.size();
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        let seed = self.seed ^ call.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let keep = 1.0 / (1.0 - self.rate);
        let p = self.rate;
        // Half inputs: the f32 mask rounded (0 and 1 / (1 - p) in the input's dtype).
        let mask_dtype = if x.dtype().is_half() {
            sparrow_core::DType::F32
        } else {
            x.dtype()
        };
        let mask = float_dispatch!(mask_dtype, "Dropout", T => {
            let mut u = vec![0.0 as T; n];
            init::fill_uniform(&mut u, 0.0, 1.0, seed);
            let (pt, kt) = (p as T, keep as T);
            let m: Vec<T> = u.iter().map(|&v| if v < pt { 0.0 } else { kt }).collect();
            NDArray::from_vec(m, &x.shape())?
        });
        x.mul(&mask.astype(x.dtype())?)
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
