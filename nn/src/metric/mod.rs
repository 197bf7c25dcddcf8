//! Evaluation metrics with `update`, `get`, `reset` (Gluon's `mx.metric`), and
//! [`CompositeMetric`] to track several at once.
//!
//! Predictions and labels are read as f64 values (dense or sparse arrays, any dtype).

mod classification;
mod regression;

pub use classification::{Accuracy, BinaryAccuracy, TopKAccuracy, F1, MCC};
pub use regression::{Auc, CrossEntropy, LogLoss, Perplexity, MAE, MSE, RMSE};

use sparrow_core::{Error, NDArray, Result};

/// A streaming evaluation metric.
pub trait Metric: Send {
    /// Name (`accuracy`, `f1`, ...).
    fn name(&self) -> String;
    /// Accumulate one batch.
    fn update(&mut self, labels: &NDArray, preds: &NDArray) -> Result<()>;
    /// The value over everything seen since the last reset (NaN before any update).
    fn get(&self) -> f64;
    /// Forget everything.
    fn reset(&mut self);
}

/// Several metrics updated together.
#[derive(Default)]
pub struct CompositeMetric {
    metrics: Vec<Box<dyn Metric>>,
}

impl CompositeMetric {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }
    /// Add a metric.
    pub fn add(&mut self, m: impl Metric + 'static) -> &mut Self {
        self.metrics.push(Box::new(m));
        self
    }
    /// `(name, value)` of every metric.
    pub fn get_all(&self) -> Vec<(String, f64)> {
        self.metrics.iter().map(|m| (m.name(), m.get())).collect()
    }
}

impl Metric for CompositeMetric {
    fn name(&self) -> String {
        let names: Vec<String> = self.metrics.iter().map(|m| m.name()).collect();
        format!("composite({})", names.join(", "))
    }
    fn update(&mut self, labels: &NDArray, preds: &NDArray) -> Result<()> {
        for m in &mut self.metrics {
            m.update(labels, preds)?;
        }
        Ok(())
    }
    /// The first metric's value (use [`CompositeMetric::get_all`] for all).
    fn get(&self) -> f64 {
        self.metrics.first().map_or(f64::NAN, |m| m.get())
    }
    fn reset(&mut self) {
        for m in &mut self.metrics {
            m.reset();
        }
    }
}

/// Labels and predictions as f64 with matching element counts.
pub(crate) fn flat_pair(
    op: &'static str,
    labels: &NDArray,
    preds: &NDArray,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let (l, p) = (labels.to_f64_vec(), preds.to_f64_vec());
    if l.len() != p.len() {
        return Err(Error::shape(
            op,
            format!(
                "labels {:?} and predictions {:?} differ in size",
                labels.shape(),
                preds.shape()
            ),
        ));
    }
    Ok((l, p))
}

/// Class scores `(n, classes)` (or `(n,)` of class ids) and `n` labels.
pub(crate) fn class_rows(
    op: &'static str,
    labels: &NDArray,
    preds: &NDArray,
) -> Result<(Vec<f64>, Vec<f64>, usize)> {
    let l = labels.to_f64_vec();
    let p = preds.to_f64_vec();
    let n = l.len();
    if n == 0 {
        return Ok((l, p, 0));
    }
    if p.len() / n * n != p.len() {
        return Err(Error::shape(
            op,
            format!(
                "predictions {:?} do not hold one row per label ({n} labels)",
                preds.shape()
            ),
        ));
    }
    Ok((l, p.clone(), p.len() / n))
}
