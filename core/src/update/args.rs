//! The arguments every update operator takes: [`UpdateArgs`] and [`RowSparseMode`].

use crate::error::{Error, Result};

/// How a row_sparse gradient is applied (a dense gradient updates every element either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowSparseMode {
    /// Only the rows the gradient holds change, in the weight and in every state array
    /// (MXNet's `lazy_update=True`, its default).
    #[default]
    Lazy,
    /// Every row changes, rows absent from the gradient as if their gradient were zero
    /// (MXNet's `lazy_update=False`).
    Standard,
}

/// The arguments of one update: what MXNet passes to every optimizer kernel, plus the
/// operator's own hyper-parameters in `hyper` (e.g. [`crate::update::AdamParams`]; `()` for
/// operators that have none, such as [`crate::update::sgd_update`]).
///
/// The gradient enters every formula as `clip(rescale_grad * grad)`; where the weight decay
/// goes depends on the operator (as in MXNet).
///
/// ```
/// use sparrow_core::update::{RowSparseMode, UpdateArgs};
/// let args = UpdateArgs::new(0.1, ())
///     .with_wd(1e-4)
///     .with_rescale_grad(1.0 / 32.0)
///     .with_clip_gradient(Some(5.0))
///     .with_row_sparse(RowSparseMode::Standard);
/// assert_eq!(args.lr, 0.1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UpdateArgs<P = ()> {
    /// Learning rate (for Adam and AdamW, the bias-corrected rate, as MXNet's `adam_update`
    /// receives it). Must be finite.
    pub lr: f64,
    /// Weight decay. Must be finite.
    pub wd: f64,
    /// Factor the gradient is multiplied by before anything else. Must be finite.
    pub rescale_grad: f64,
    /// Clip the rescaled gradient to `[-c, c]`; `None` turns clipping off. When set, it must
    /// be greater than 0.
    pub clip_gradient: Option<f64>,
    /// How a row_sparse gradient is applied.
    pub row_sparse: RowSparseMode,
    /// The operator's hyper-parameters.
    pub hyper: P,
}

impl<P> UpdateArgs<P> {
    /// Arguments with learning rate `lr` and MXNet's defaults for the rest: no weight decay,
    /// `rescale_grad = 1`, no clipping, lazy row_sparse updates.
    pub fn new(lr: f64, hyper: P) -> Self {
        UpdateArgs {
            lr,
            wd: 0.0,
            rescale_grad: 1.0,
            clip_gradient: None,
            row_sparse: RowSparseMode::Lazy,
            hyper,
        }
    }

    /// With weight decay `wd`.
    pub fn with_wd(self, wd: f64) -> Self {
        UpdateArgs { wd, ..self }
    }

    /// With the gradient multiplied by `rescale_grad` first.
    pub fn with_rescale_grad(self, rescale_grad: f64) -> Self {
        UpdateArgs {
            rescale_grad,
            ..self
        }
    }

    /// With the rescaled gradient clipped to `[-c, c]` (`None`: no clipping).
    pub fn with_clip_gradient(self, clip_gradient: Option<f64>) -> Self {
        UpdateArgs {
            clip_gradient,
            ..self
        }
    }

    /// With row_sparse gradients applied in `mode`.
    pub fn with_row_sparse(self, row_sparse: RowSparseMode) -> Self {
        UpdateArgs { row_sparse, ..self }
    }

    /// True for lazy row_sparse updates.
    pub(crate) fn lazy(&self) -> bool {
        self.row_sparse == RowSparseMode::Lazy
    }

    /// Check the shared arguments: finite rate, decay and rescale, a positive clip threshold.
    pub(crate) fn check(&self, op: &'static str) -> Result<()> {
        check_finite(
            op,
            &[
                ("lr", self.lr),
                ("wd", self.wd),
                ("rescale_grad", self.rescale_grad),
            ],
        )?;
        if let Some(c) = self.clip_gradient {
            if c.is_nan() || c <= 0.0 {
                return Err(Error::arg(
                    op,
                    format!("clip_gradient must be > 0 (None turns clipping off), got {c}"),
                ));
            }
        }
        Ok(())
    }
}

/// Fail, naming `op` and the argument, when one of `values` is not finite.
pub(crate) fn check_finite(op: &'static str, values: &[(&str, f64)]) -> Result<()> {
    match values.iter().find(|(_, v)| !v.is_finite()) {
        Some((name, v)) => Err(Error::arg(op, format!("{name} must be finite, got {v}"))),
        None => Ok(()),
    }
}

/// Fail, naming `op`, when an update count is 0 (the first update is number 1: the bias
/// corrections divide by `1 - beta^t`).
pub(crate) fn check_count(op: &'static str, t: u64) -> Result<()> {
    if t == 0 {
        return Err(Error::arg(op, "t counts updates from 1, got 0"));
    }
    Ok(())
}

/// Fail, naming `op` and the argument, when an optional bound is set but negative or NaN.
pub(crate) fn check_bound(op: &'static str, name: &str, v: Option<f64>, min: f64) -> Result<()> {
    match v {
        Some(b) if b.is_nan() || b < min => Err(Error::arg(
            op,
            format!("{name} must be >= {min} when set, got {b}"),
        )),
        _ => Ok(()),
    }
}
