//! Classification and distribution losses: sigmoid/softmax cross-entropy, logistic, KL
//! divergence, Poisson NLL, cosine embedding.

use sparrow_core::{Error, NDArray, Result};

use super::regression::opts_builders;
use super::{apply_weighting, batch_mean, finish, label_like, Loss, LossOpts};

/// Binary cross-entropy. On logits (default) it uses the stable form
/// `max(x, 0) - x z + log(1 + exp(-|x|))`, finite for any |x|; with `from_sigmoid` the
/// predictions are probabilities and `-(z log(p + eps) + (1 - z) log(1 - p + eps))` is used.
#[derive(Debug, Clone, Default)]
pub struct SigmoidBinaryCrossEntropyLoss {
    from_sigmoid: bool,
    opts: LossOpts,
}
impl SigmoidBinaryCrossEntropyLoss {
    /// On logits.
    pub fn new() -> Self {
        Self::default()
    }
    /// Builder: predictions are already probabilities.
    pub fn from_sigmoid(mut self, yes: bool) -> Self {
        self.from_sigmoid = yes;
        self
    }
}
opts_builders!(SigmoidBinaryCrossEntropyLoss);
impl Loss for SigmoidBinaryCrossEntropyLoss {
    fn forward_weighted(
        &self,
        pred: &NDArray,
        label: &NDArray,
        sw: Option<&NDArray>,
    ) -> Result<NDArray> {
        if !self.from_sigmoid && sw.is_none() && self.opts.weight == 1.0 {
            // One sample per slice of length 1 (the usual `(batch, 1)` logits): label reshape,
            // elementwise loss and batch mean are one recorded op (three otherwise, with two
            // reshapes and their nodes). Anything it declines takes the general path below.
            if let Some(shape) = per_sample_shape(pred, self.opts.batch_axis) {
                if let Some(l) =
                    sparrow_core::ops::fused::sigmoid_bce_logits_to(pred, label, &shape)?
                {
                    return Ok(l);
                }
            }
        }
        let z = label_like(label, pred, "SigmoidBinaryCrossEntropyLoss")?;
        let l = if self.from_sigmoid {
            let eps = 1e-12;
            let a = pred.add_scalar(eps)?.log()?.mul(&z)?;
            let b = pred
                .rsub_scalar(1.0 + eps)?
                .log()?
                .mul(&z.rsub_scalar(1.0)?)?;
            a.add(&b)?.neg()?
        } else if let Some(l) = sparrow_core::ops::fused::sigmoid_bce_logits(pred, &z)? {
            l
        } else {
            pred.relu()?
                .sub(&pred.mul(&z)?)?
                .add(&pred.abs()?.neg()?.softrelu()?)?
        };
        finish(&l, &self.opts, sw, "SigmoidBinaryCrossEntropyLoss")
    }
}

/// The shape of a per-sample loss of `pred` when every axis but `batch_axis` has length 1 (so
/// the batch mean is the elementwise loss itself): `[batch]`. `None` otherwise.
fn per_sample_shape(pred: &NDArray, batch_axis: usize) -> Option<[usize; 1]> {
    let dims = pred.dims();
    let per_sample = batch_axis < dims.len()
        && dims
            .iter()
            .enumerate()
            .all(|(a, &d)| a == batch_axis || d == 1);
    per_sample.then(|| [dims[batch_axis]])
}

/// Softmax cross-entropy along the last axis. `sparse_label` (default): labels are class
/// indices of shape `(batch,)`; otherwise labels are distributions shaped like `pred`.
/// `from_logits`: `pred` already holds log-probabilities.
#[derive(Debug, Clone)]
pub struct SoftmaxCrossEntropyLoss {
    sparse_label: bool,
    from_logits: bool,
    opts: LossOpts,
}
impl Default for SoftmaxCrossEntropyLoss {
    fn default() -> Self {
        SoftmaxCrossEntropyLoss {
            sparse_label: true,
            from_logits: false,
            opts: LossOpts::default(),
        }
    }
}
impl SoftmaxCrossEntropyLoss {
    /// Sparse labels, raw scores.
    pub fn new() -> Self {
        Self::default()
    }
    /// Builder: labels are class indices (true) or distributions (false).
    pub fn sparse_label(mut self, yes: bool) -> Self {
        self.sparse_label = yes;
        self
    }
    /// Builder: predictions are log-probabilities.
    pub fn from_logits(mut self, yes: bool) -> Self {
        self.from_logits = yes;
        self
    }
}
opts_builders!(SoftmaxCrossEntropyLoss);
impl Loss for SoftmaxCrossEntropyLoss {
    fn forward_weighted(
        &self,
        pred: &NDArray,
        label: &NDArray,
        sw: Option<&NDArray>,
    ) -> Result<NDArray> {
        let op = "SoftmaxCrossEntropyLoss";
        let shape = pred.shape();
        let Some(&classes) = shape.last() else {
            return Err(Error::shape(op, "prediction must have a class axis"));
        };
        use sparrow_core::ops::fused::{softmax_ce_ids, softmax_ce_logits};
        let target = if self.sparse_label {
            // Validated by an operator (not a host read here), so a hybridized loss keeps
            // checking its labels.
            let label = label.check_class_ids(classes, pred.size() / classes.max(1))?;
            // Raw scores against ids take the fused op where it applies (dense float of the
            // prediction's dtype, on the host): no one-hot block is made.
            if !self.from_logits {
                if let Some(l) = softmax_ce_ids(pred, &label)? {
                    return finish(&l, &self.opts, sw, op);
                }
            }
            let lead = &shape[..shape.len() - 1];
            label
                .reshape(lead)?
                .one_hot(classes, 1.0, 0.0, pred.dtype())?
        } else {
            label_like(label, pred, op)?
        };
        // Raw scores take the fused op where it applies: one pass forward and one backward
        // instead of the chain below.
        let fused = if self.from_logits {
            None
        } else {
            softmax_ce_logits(pred, &target)?
        };
        let l = match fused {
            Some(l) => l,
            None => {
                let logp = if self.from_logits {
                    pred.clone()
                } else {
                    pred.log_softmax(-1)?
                };
                logp.mul(&target)?.sum(Some(&[-1]), true)?.neg()?
            }
        };
        finish(&l, &self.opts, sw, op)
    }
}

/// Logistic loss `log(1 + exp(-pred * label))` (stable form), labels signed {-1, 1} or, with
/// `binary_labels`, {0, 1}.
#[derive(Debug, Clone, Default)]
pub struct LogisticLoss {
    binary_labels: bool,
    opts: LossOpts,
}
impl LogisticLoss {
    /// Signed labels.
    pub fn new() -> Self {
        Self::default()
    }
    /// Builder: labels are {0, 1} (Gluon's `label_format='binary'`).
    pub fn binary_labels(mut self, yes: bool) -> Self {
        self.binary_labels = yes;
        self
    }
}
opts_builders!(LogisticLoss);
impl Loss for LogisticLoss {
    fn forward_weighted(
        &self,
        pred: &NDArray,
        label: &NDArray,
        sw: Option<&NDArray>,
    ) -> Result<NDArray> {
        let mut y = label_like(label, pred, "LogisticLoss")?;
        if self.binary_labels {
            y = y.mul_scalar(2.0)?.sub_scalar(1.0)?;
        }
        let m = pred.mul(&y)?.neg()?;
        let l = m.relu()?.add(&pred.abs()?.neg()?.softrelu()?)?;
        finish(&l, &self.opts, sw, "LogisticLoss")
    }
}

/// KL divergence `label * (log(label + 1e-12) - pred)` with `pred` log-probabilities
/// (`from_logits`, default) or raw scores passed through `log_softmax` on the last axis.
#[derive(Debug, Clone)]
pub struct KLDivLoss {
    from_logits: bool,
    opts: LossOpts,
}
impl Default for KLDivLoss {
    fn default() -> Self {
        KLDivLoss {
            from_logits: true,
            opts: LossOpts::default(),
        }
    }
}
impl KLDivLoss {
    /// Predictions are log-probabilities.
    pub fn new() -> Self {
        Self::default()
    }
    /// Builder: predictions are log-probabilities (true) or raw scores (false).
    pub fn from_logits(mut self, yes: bool) -> Self {
        self.from_logits = yes;
        self
    }
}
opts_builders!(KLDivLoss);
impl Loss for KLDivLoss {
    fn forward_weighted(
        &self,
        pred: &NDArray,
        label: &NDArray,
        sw: Option<&NDArray>,
    ) -> Result<NDArray> {
        let logp = if self.from_logits {
            pred.clone()
        } else {
            pred.log_softmax(-1)?
        };
        let y = label_like(label, pred, "KLDivLoss")?;
        let l = y.mul(&y.add_scalar(1e-12)?.log()?.sub(&logp)?)?;
        finish(&l, &self.opts, sw, "KLDivLoss")
    }
}

/// Poisson negative log-likelihood. `from_logits` (default): `exp(pred) - target * pred`;
/// otherwise `pred - target * log(pred + eps)`. `compute_full` adds Stirling's term for
/// targets > 1. As in Gluon, the result is the mean over all elements (a scalar).
#[derive(Debug, Clone)]
pub struct PoissonNLLLoss {
    from_logits: bool,
    compute_full: bool,
    epsilon: f64,
    opts: LossOpts,
}
impl Default for PoissonNLLLoss {
    fn default() -> Self {
        PoissonNLLLoss {
            from_logits: true,
            compute_full: false,
            epsilon: 1e-8,
            opts: LossOpts::default(),
        }
    }
}
impl PoissonNLLLoss {
    /// Log-rate predictions, no Stirling term.
    pub fn new() -> Self {
        Self::default()
    }
    /// Builder: predictions are log-rates (true) or rates (false).
    pub fn from_logits(mut self, yes: bool) -> Self {
        self.from_logits = yes;
        self
    }
    /// Builder: add Stirling's approximation term.
    pub fn compute_full(mut self, yes: bool) -> Self {
        self.compute_full = yes;
        self
    }
}
opts_builders!(PoissonNLLLoss);
impl Loss for PoissonNLLLoss {
    fn forward_weighted(
        &self,
        pred: &NDArray,
        label: &NDArray,
        sw: Option<&NDArray>,
    ) -> Result<NDArray> {
        let t = label_like(label, pred, "PoissonNLLLoss")?;
        let mut l = if self.from_logits {
            pred.exp()?.sub(&t.mul(pred)?)?
        } else {
            pred.sub(&t.mul(&pred.add_scalar(self.epsilon)?.log()?)?)?
        };
        if self.compute_full {
            // t log t - t + 0.5 log(2 pi t), only where t > 1 (constant in pred).
            let tc = t.maximum_scalar(1.0)?;
            let st = tc.mul(&tc.log()?)?.sub(&tc)?.add(
                &tc.mul_scalar(2.0 * std::f64::consts::PI)?
                    .log()?
                    .mul_scalar(0.5)?,
            )?;
            let st = st.mul(&t.greater_scalar(1.0)?)?;
            l = l.add(&st)?;
        }
        apply_weighting(&l, self.opts.weight, sw)?.mean(None, false)
    }
}

/// Cosine embedding loss for pairs: `1 - cos(x1, x2)` for label 1, `max(0, cos - margin)` for
/// label -1; cosine along the last axis. One value per sample.
#[derive(Debug, Clone, Default)]
pub struct CosineEmbeddingLoss {
    margin: f64,
    opts: LossOpts,
}
impl CosineEmbeddingLoss {
    /// Margin (Gluon's default 0).
    pub fn new(margin: f64) -> Self {
        CosineEmbeddingLoss {
            margin,
            opts: LossOpts::default(),
        }
    }
    /// Builder: global scale.
    pub fn weight(mut self, w: f64) -> Self {
        self.opts.weight = w;
        self
    }

    /// The loss of pairs `(x1[i], x2[i])` with labels in {1, -1}.
    pub fn forward_pair(
        &self,
        x1: &NDArray,
        x2: &NDArray,
        label: &NDArray,
        sample_weight: Option<&NDArray>,
    ) -> Result<NDArray> {
        let op = "CosineEmbeddingLoss";
        let x1 = if x1.shape() != x2.shape() {
            label_like(x1, x2, op)?
        } else {
            x1.clone()
        };
        let dotp = x1.mul(x2)?.sum(Some(&[-1]), false)?;
        let n1 = x1.norm(2, Some(&[-1]), false)?;
        let n2 = x2.norm(2, Some(&[-1]), false)?;
        let cos = dotp.div(&n1.mul(&n2)?.maximum_scalar(1e-12)?)?;
        let y = label_like(label, &cos, op)?;
        let pos = cos.rsub_scalar(1.0)?;
        let neg = cos.sub_scalar(self.margin)?.relu()?;
        let l = NDArray::where_(&y.equal_scalar(1.0)?, &pos, &neg)?;
        batch_mean(
            &apply_weighting(&l, self.opts.weight, sample_weight)?,
            0,
            op,
        )
    }
}
