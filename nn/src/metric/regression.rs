//! Regression and probabilistic metrics: MAE, MSE, RMSE, cross-entropy / log loss,
//! perplexity, and exact ROC AUC.

use sparrow_core::{NDArray, Result};

use super::{class_rows, flat_pair, Metric};

#[derive(Debug, Clone, Copy, Default)]
struct Mean {
    sum: f64,
    n: u64,
}

macro_rules! error_metric {
    ($t:ident, $name:literal, $f:expr, $post:expr, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, Default)]
        pub struct $t {
            m: Mean,
        }
        impl $t {
            /// Empty.
            pub fn new() -> Self {
                Self::default()
            }
        }
        impl Metric for $t {
            fn name(&self) -> String {
                $name.into()
            }
            fn update(&mut self, labels: &NDArray, preds: &NDArray) -> Result<()> {
                let (l, p) = flat_pair($name, labels, preds)?;
                let f: fn(f64) -> f64 = $f;
                self.m.sum += l.iter().zip(&p).map(|(a, b)| f(a - b)).sum::<f64>();
                self.m.n += l.len() as u64;
                Ok(())
            }
            fn get(&self) -> f64 {
                let post: fn(f64) -> f64 = $post;
                post(self.m.sum / self.m.n as f64)
            }
            fn reset(&mut self) {
                self.m = Mean::default();
            }
        }
    };
}

error_metric!(MAE, "mae", |d| d.abs(), |v| v, "Mean absolute error.");
error_metric!(MSE, "mse", |d| d * d, |v| v, "Mean squared error.");
error_metric!(
    RMSE,
    "rmse",
    |d| d * d,
    |v| v.sqrt(),
    "Root mean squared error (over everything seen)."
);

/// Mean negative log-probability of the true class: `-log(p[label] + eps)` from `(n, classes)`
/// probabilities (Gluon's `CrossEntropy`, eps 1e-12), or `(n,)` / `(n, 1)` probabilities of the
/// positive class for binary labels. With [`CrossEntropy::from_logits`] the predictions are
/// logits (what a network without a final softmax or sigmoid outputs) and the log-probability
/// is computed from them stably: `log_softmax` over classes, or `-softplus(-x)` / `-softplus(x)`
/// for a binary logit. A label that is not a class index is an error.
#[derive(Debug, Clone, Default)]
pub struct CrossEntropy {
    m: Mean,
    from_logits: bool,
}
impl CrossEntropy {
    /// Empty, for probabilities.
    pub fn new() -> Self {
        Self::default()
    }
    /// Read predictions as logits (`true`) or probabilities (`false`, the default).
    pub fn from_logits(mut self, yes: bool) -> Self {
        self.from_logits = yes;
        self
    }
}

/// `log(1 + exp(x))` without overflow.
fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

fn ce_update(
    m: &mut Mean,
    op: &'static str,
    labels: &NDArray,
    preds: &NDArray,
    from_logits: bool,
) -> Result<()> {
    let (l, p, k) = class_rows(op, labels, preds)?;
    let mut sum = 0.0;
    for (i, &y) in l.iter().enumerate() {
        sum += if k == 1 {
            // The positive class's probability (or logit) of a binary label.
            let positive = y > 0.5;
            match (from_logits, positive) {
                (false, true) => -(p[i] + 1e-12).ln(),
                (false, false) => -(1.0 - p[i] + 1e-12).ln(),
                (true, true) => softplus(-p[i]),
                (true, false) => softplus(p[i]),
            }
        } else {
            if y.fract() != 0.0 || y < 0.0 || y >= k as f64 {
                return Err(sparrow_core::Error::index(
                    op,
                    format!("label {y} at row {i} is not a class in [0, {k})"),
                ));
            }
            let row = &p[i * k..(i + 1) * k];
            if from_logits {
                let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let lse = max + row.iter().map(|&v| (v - max).exp()).sum::<f64>().ln();
                lse - row[y as usize]
            } else {
                -(row[y as usize] + 1e-12).ln()
            }
        };
    }
    m.sum += sum;
    m.n += l.len() as u64;
    Ok(())
}
impl Metric for CrossEntropy {
    fn name(&self) -> String {
        "cross-entropy".into()
    }
    fn update(&mut self, labels: &NDArray, preds: &NDArray) -> Result<()> {
        ce_update(&mut self.m, "CrossEntropy", labels, preds, self.from_logits)
    }
    fn get(&self) -> f64 {
        self.m.sum / self.m.n as f64
    }
    fn reset(&mut self) {
        self.m = Mean::default();
    }
}

/// Log loss: cross-entropy, also for `(n,)` binary probabilities (or logits, with
/// `LogLoss::new().from_logits(true)`).
pub type LogLoss = CrossEntropy;

/// `exp(cross-entropy)`, from probabilities or (with [`Perplexity::from_logits`]) logits, as
/// [`CrossEntropy`] reads them.
#[derive(Debug, Clone, Default)]
pub struct Perplexity {
    m: Mean,
    from_logits: bool,
}
impl Perplexity {
    /// Empty, for probabilities.
    pub fn new() -> Self {
        Self::default()
    }
    /// Read predictions as logits (`true`) or probabilities (`false`, the default).
    pub fn from_logits(mut self, yes: bool) -> Self {
        self.from_logits = yes;
        self
    }
}
impl Metric for Perplexity {
    fn name(&self) -> String {
        "perplexity".into()
    }
    fn update(&mut self, labels: &NDArray, preds: &NDArray) -> Result<()> {
        ce_update(&mut self.m, "Perplexity", labels, preds, self.from_logits)
    }
    fn get(&self) -> f64 {
        (self.m.sum / self.m.n as f64).exp()
    }
    fn reset(&mut self) {
        self.m = Mean::default();
    }
}

/// Exact area under the ROC curve over all samples seen (scores of the positive class; labels
/// {0, 1}). Ties count one half (the trapezoid through tied scores), computed by sorting once
/// in `get`.
#[derive(Debug, Clone, Default)]
pub struct Auc {
    scores: Vec<(f64, bool)>,
}
impl Auc {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }
}
impl Metric for Auc {
    fn name(&self) -> String {
        "auc".into()
    }
    fn update(&mut self, labels: &NDArray, preds: &NDArray) -> Result<()> {
        let (l, p, k) = class_rows("Auc", labels, preds)?;
        for (i, &y) in l.iter().enumerate() {
            // (n, 2) scores: the positive column; (n,) scores as they are.
            let s = if k == 1 { p[i] } else { p[i * k + k - 1] };
            self.scores.push((s, y > 0.5));
        }
        Ok(())
    }
    fn get(&self) -> f64 {
        let mut v = self.scores.clone();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        let pos = v.iter().filter(|x| x.1).count() as f64;
        let neg = v.len() as f64 - pos;
        if pos == 0.0 || neg == 0.0 {
            return f64::NAN;
        }
        // Mann-Whitney U with mid-ranks for ties.
        let mut rank_sum = 0.0;
        let mut i = 0;
        while i < v.len() {
            let mut j = i;
            while j < v.len() && v[j].0 == v[i].0 {
                j += 1;
            }
            let mid = (i + j + 1) as f64 / 2.0; // average of ranks i+1 ..= j
            rank_sum += mid * v[i..j].iter().filter(|x| x.1).count() as f64;
            i = j;
        }
        (rank_sum - pos * (pos + 1.0) / 2.0) / (pos * neg)
    }
    fn reset(&mut self) {
        self.scores.clear();
    }
}
