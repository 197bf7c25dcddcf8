//! Regression and margin losses: L1, L2, Huber, Hinge, SquaredHinge.

use sparrow_core::{NDArray, Result};

use super::{finish, label_like, Loss, LossOpts};

macro_rules! opts_builders {
    ($t:ty) => {
        impl $t {
            /// Builder: global scale.
            pub fn weight(mut self, w: f64) -> Self {
                self.opts.weight = w;
                self
            }
            /// Builder: sample axis.
            pub fn batch_axis(mut self, a: usize) -> Self {
                self.opts.batch_axis = a;
                self
            }
        }
    };
}
pub(crate) use opts_builders;

/// `|label - pred|`.
#[derive(Debug, Clone, Default)]
pub struct L1Loss {
    opts: LossOpts,
}
impl L1Loss {
    /// Weight 1, batch axis 0.
    pub fn new() -> Self {
        Self::default()
    }
}
opts_builders!(L1Loss);
impl Loss for L1Loss {
    fn forward_weighted(
        &self,
        pred: &NDArray,
        label: &NDArray,
        sw: Option<&NDArray>,
    ) -> Result<NDArray> {
        let label = label_like(label, pred, "L1Loss")?;
        finish(&label.sub(pred)?.abs()?, &self.opts, sw, "L1Loss")
    }
}

/// `(label - pred)^2 / 2`.
#[derive(Debug, Clone, Default)]
pub struct L2Loss {
    opts: LossOpts,
}
impl L2Loss {
    /// Weight 1, batch axis 0.
    pub fn new() -> Self {
        Self::default()
    }
}
opts_builders!(L2Loss);
impl Loss for L2Loss {
    fn forward_weighted(
        &self,
        pred: &NDArray,
        label: &NDArray,
        sw: Option<&NDArray>,
    ) -> Result<NDArray> {
        let label = label_like(label, pred, "L2Loss")?;
        let l = label.sub(pred)?.square()?.mul_scalar(0.5)?;
        finish(&l, &self.opts, sw, "L2Loss")
    }
}

/// Smooth L1: `|d| - rho/2` where `|d| > rho`, else `d^2 / (2 rho)`.
#[derive(Debug, Clone)]
pub struct HuberLoss {
    rho: f64,
    opts: LossOpts,
}
impl HuberLoss {
    /// Threshold `rho` (Gluon's default 1).
    pub fn new(rho: f64) -> Self {
        HuberLoss {
            rho,
            opts: LossOpts::default(),
        }
    }
}
opts_builders!(HuberLoss);
impl Loss for HuberLoss {
    fn forward_weighted(
        &self,
        pred: &NDArray,
        label: &NDArray,
        sw: Option<&NDArray>,
    ) -> Result<NDArray> {
        let label = label_like(label, pred, "HuberLoss")?;
        let d = label.sub(pred)?.abs()?;
        let big = d.greater_scalar(self.rho)?;
        let lin = d.sub_scalar(0.5 * self.rho)?;
        let quad = d.square()?.mul_scalar(0.5 / self.rho)?;
        let l = NDArray::where_(&big, &lin, &quad)?;
        finish(&l, &self.opts, sw, "HuberLoss")
    }
}

/// `max(0, margin - pred * label)` for labels in {-1, 1}.
#[derive(Debug, Clone)]
pub struct HingeLoss {
    margin: f64,
    opts: LossOpts,
}
impl HingeLoss {
    /// Margin (Gluon's default 1).
    pub fn new(margin: f64) -> Self {
        HingeLoss {
            margin,
            opts: LossOpts::default(),
        }
    }
}
opts_builders!(HingeLoss);
impl Loss for HingeLoss {
    fn forward_weighted(
        &self,
        pred: &NDArray,
        label: &NDArray,
        sw: Option<&NDArray>,
    ) -> Result<NDArray> {
        let label = label_like(label, pred, "HingeLoss")?;
        let l = pred.mul(&label)?.rsub_scalar(self.margin)?.relu()?;
        finish(&l, &self.opts, sw, "HingeLoss")
    }
}

/// `max(0, margin - pred * label)^2` for labels in {-1, 1}.
#[derive(Debug, Clone)]
pub struct SquaredHingeLoss {
    margin: f64,
    opts: LossOpts,
}
impl SquaredHingeLoss {
    /// Margin (Gluon's default 1).
    pub fn new(margin: f64) -> Self {
        SquaredHingeLoss {
            margin,
            opts: LossOpts::default(),
        }
    }
}
opts_builders!(SquaredHingeLoss);
impl Loss for SquaredHingeLoss {
    fn forward_weighted(
        &self,
        pred: &NDArray,
        label: &NDArray,
        sw: Option<&NDArray>,
    ) -> Result<NDArray> {
        let label = label_like(label, pred, "SquaredHingeLoss")?;
        let l = pred
            .mul(&label)?
            .rsub_scalar(self.margin)?
            .relu()?
            .square()?;
        finish(&l, &self.opts, sw, "SquaredHingeLoss")
    }
}
