//! Losses with Gluon's definitions: each returns one value per sample (shape `(batch,)`, the
//! mean over every axis but `batch_axis`), scaled by a global `weight` and an optional
//! broadcastable `sample_weight`.
//!
//! ```
//! use sparrow_nn::loss::{Loss, L2Loss};
//! use sparrow_core::NDArray;
//! let pred = NDArray::from_vec(vec![1.0f32, 2.0], &[2, 1]).unwrap();
//! let label = NDArray::from_vec(vec![0.0f32, 0.0], &[2]).unwrap();
//! let l = L2Loss::new().forward(&pred, &label).unwrap();
//! assert_eq!(l.to_vec::<f32>().unwrap(), vec![0.5, 2.0]);
//! ```

mod classification;
mod regression;

pub use classification::{
    CosineEmbeddingLoss, KLDivLoss, LogisticLoss, PoissonNLLLoss, SigmoidBinaryCrossEntropyLoss,
    SoftmaxCrossEntropyLoss,
};
pub use regression::{HingeLoss, HuberLoss, L1Loss, L2Loss, SquaredHingeLoss};

use sparrow_core::{Error, NDArray, Result};

/// A loss between predictions and labels.
pub trait Loss: Send + Sync {
    /// Per-sample loss with an optional sample weight (broadcast against the elementwise loss).
    fn forward_weighted(
        &self,
        pred: &NDArray,
        label: &NDArray,
        sample_weight: Option<&NDArray>,
    ) -> Result<NDArray>;

    /// Per-sample loss.
    fn forward(&self, pred: &NDArray, label: &NDArray) -> Result<NDArray> {
        self.forward_weighted(pred, label, None)
    }
}

/// Options every loss shares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossOpts {
    /// Global scale.
    pub weight: f64,
    /// The axis that indexes samples.
    pub batch_axis: usize,
}

impl Default for LossOpts {
    fn default() -> Self {
        LossOpts {
            weight: 1.0,
            batch_axis: 0,
        }
    }
}

/// Labels as the prediction's dtype, reshaped to `like` when they hold the same number of
/// elements (Gluon's `_reshape_like`). Labels never need a gradient.
pub(crate) fn label_like(label: &NDArray, like: &NDArray, op: &'static str) -> Result<NDArray> {
    let l = if label.dtype() != like.dtype() {
        label.astype(like.dtype())?
    } else {
        label.clone()
    };
    if l.same_shape(like) {
        return Ok(l);
    }
    let (ls, ps) = (l.dims(), like.dims());
    if l.size() != like.size() {
        return Err(Error::shape(
            op,
            format!("label shape {ls:?} does not fit prediction shape {ps:?}"),
        ));
    }
    l.reshape(&ps)
}

/// `loss * sample_weight * weight` (Gluon's `_apply_weighting`).
pub(crate) fn apply_weighting(
    loss: &NDArray,
    weight: f64,
    sample_weight: Option<&NDArray>,
) -> Result<NDArray> {
    let mut l = loss.clone();
    if let Some(sw) = sample_weight {
        let sw = if sw.dtype() != l.dtype() {
            sw.astype(l.dtype())?
        } else {
            sw.clone()
        };
        l = l.mul(&sw)?;
    }
    if weight != 1.0 {
        l = l.mul_scalar(weight)?;
    }
    Ok(l)
}

/// Mean over every axis except `batch_axis` (Gluon's `mean(axis=batch_axis, exclude=True)`).
pub(crate) fn batch_mean(loss: &NDArray, batch_axis: usize, op: &'static str) -> Result<NDArray> {
    let nd = loss.ndim();
    if nd == 0 {
        return Ok(loss.clone());
    }
    if batch_axis >= nd {
        return Err(Error::index(
            op,
            format!("batch_axis {batch_axis} out of range for a {nd}-D loss"),
        ));
    }
    let dims = loss.dims();
    if dims
        .iter()
        .enumerate()
        .all(|(a, &d)| a == batch_axis || d == 1)
    {
        // Every other axis has one element (a `(batch, 1)` loss): the mean is a reshape, and
        // going straight to it skips the reduction's axis bookkeeping (~1K instructions of a
        // tutorial step).
        return if nd == 1 {
            Ok(loss.clone())
        } else {
            loss.reshape(&[dims[batch_axis]])
        };
    }
    let axes: Vec<i64> = (0..nd)
        .filter(|&a| a != batch_axis)
        .map(|a| a as i64)
        .collect();
    loss.mean(Some(&axes), false)
}

/// Weighting then batch mean: the tail every Gluon loss shares.
pub(crate) fn finish(
    loss: &NDArray,
    opts: &LossOpts,
    sample_weight: Option<&NDArray>,
    op: &'static str,
) -> Result<NDArray> {
    batch_mean(
        &apply_weighting(loss, opts.weight, sample_weight)?,
        opts.batch_axis,
        op,
    )
}
