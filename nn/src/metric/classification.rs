//! Classification metrics: accuracy, top-k accuracy, binary accuracy, F1, MCC.

use sparrow_core::{NDArray, Result};

use super::{class_rows, flat_pair, Metric};

fn argmax(row: &[f64]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}

/// Fraction of samples whose argmax prediction (or predicted id, for 1-D predictions) equals
/// the label.
#[derive(Debug, Clone, Default)]
pub struct Accuracy {
    correct: u64,
    total: u64,
}
impl Accuracy {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }
}
impl Metric for Accuracy {
    fn name(&self) -> String {
        "accuracy".into()
    }
    fn update(&mut self, labels: &NDArray, preds: &NDArray) -> Result<()> {
        let (l, p, k) = class_rows("Accuracy", labels, preds)?;
        for (i, &y) in l.iter().enumerate() {
            let guess = if k == 1 {
                p[i].round() as usize
            } else {
                argmax(&p[i * k..(i + 1) * k])
            };
            self.correct += (guess as f64 == y) as u64;
        }
        self.total += l.len() as u64;
        Ok(())
    }
    fn get(&self) -> f64 {
        self.correct as f64 / self.total as f64
    }
    fn reset(&mut self) {
        *self = Self::default();
    }
}

/// Fraction of samples whose label is among the `k` highest scores.
#[derive(Debug, Clone)]
pub struct TopKAccuracy {
    k: usize,
    correct: u64,
    total: u64,
}
impl TopKAccuracy {
    /// Top-`k`.
    pub fn new(k: usize) -> Self {
        TopKAccuracy {
            k,
            correct: 0,
            total: 0,
        }
    }
}
impl Metric for TopKAccuracy {
    fn name(&self) -> String {
        format!("top_k_accuracy_{}", self.k)
    }
    fn update(&mut self, labels: &NDArray, preds: &NDArray) -> Result<()> {
        let (l, p, c) = class_rows("TopKAccuracy", labels, preds)?;
        for (i, &y) in l.iter().enumerate() {
            let row = &p[i * c..(i + 1) * c];
            let yi = y as usize;
            if yi >= c {
                continue;
            }
            // Rank of the label's score: classes scoring strictly higher (ties favour the label).
            let higher = row.iter().filter(|&&v| v > row[yi]).count();
            self.correct += (higher < self.k) as u64;
        }
        self.total += l.len() as u64;
        Ok(())
    }
    fn get(&self) -> f64 {
        self.correct as f64 / self.total as f64
    }
    fn reset(&mut self) {
        self.correct = 0;
        self.total = 0;
    }
}

/// Accuracy of `pred > threshold` against {0, 1} labels.
#[derive(Debug, Clone)]
pub struct BinaryAccuracy {
    threshold: f64,
    correct: u64,
    total: u64,
}
impl BinaryAccuracy {
    /// Threshold (0.5 for probabilities, 0 for logits).
    pub fn new(threshold: f64) -> Self {
        BinaryAccuracy {
            threshold,
            correct: 0,
            total: 0,
        }
    }
}
impl Metric for BinaryAccuracy {
    fn name(&self) -> String {
        "binary_accuracy".into()
    }
    fn update(&mut self, labels: &NDArray, preds: &NDArray) -> Result<()> {
        let (l, p) = flat_pair("BinaryAccuracy", labels, preds)?;
        for (y, v) in l.iter().zip(&p) {
            self.correct += ((*v > self.threshold) == (*y > 0.5)) as u64;
        }
        self.total += l.len() as u64;
        Ok(())
    }
    fn get(&self) -> f64 {
        self.correct as f64 / self.total as f64
    }
    fn reset(&mut self) {
        self.correct = 0;
        self.total = 0;
    }
}

/// Binary confusion counts from `(n, 2)` scores (argmax) or `(n,)` probabilities (> 0.5).
#[derive(Debug, Clone, Copy, Default)]
struct Confusion {
    tp: u64,
    fp: u64,
    tn: u64,
    fn_: u64,
}

impl Confusion {
    fn update(&mut self, op: &'static str, labels: &NDArray, preds: &NDArray) -> Result<()> {
        let (l, p, k) = class_rows(op, labels, preds)?;
        for (i, &y) in l.iter().enumerate() {
            let guess = if k == 1 {
                p[i] > 0.5
            } else {
                argmax(&p[i * k..(i + 1) * k]) == 1
            };
            let truth = y > 0.5;
            match (guess, truth) {
                (true, true) => self.tp += 1,
                (true, false) => self.fp += 1,
                (false, false) => self.tn += 1,
                (false, true) => self.fn_ += 1,
            }
        }
        Ok(())
    }
}

/// Binary F1 score of the positive class.
#[derive(Debug, Clone, Default)]
pub struct F1 {
    c: Confusion,
}
impl F1 {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }
}
impl Metric for F1 {
    fn name(&self) -> String {
        "f1".into()
    }
    fn update(&mut self, labels: &NDArray, preds: &NDArray) -> Result<()> {
        self.c.update("F1", labels, preds)
    }
    fn get(&self) -> f64 {
        let Confusion { tp, fp, fn_, .. } = self.c;
        let prec = if tp + fp > 0 {
            tp as f64 / (tp + fp) as f64
        } else {
            0.0
        };
        let rec = if tp + fn_ > 0 {
            tp as f64 / (tp + fn_) as f64
        } else {
            0.0
        };
        if prec + rec > 0.0 {
            2.0 * prec * rec / (prec + rec)
        } else {
            0.0
        }
    }
    fn reset(&mut self) {
        self.c = Confusion::default();
    }
}

/// Matthews correlation coefficient (binary).
#[derive(Debug, Clone, Default)]
pub struct MCC {
    c: Confusion,
}
impl MCC {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }
}
impl Metric for MCC {
    fn name(&self) -> String {
        "mcc".into()
    }
    fn update(&mut self, labels: &NDArray, preds: &NDArray) -> Result<()> {
        self.c.update("MCC", labels, preds)
    }
    fn get(&self) -> f64 {
        let Confusion { tp, fp, tn, fn_ } = self.c;
        let (tp, fp, tn, fn_) = (tp as f64, fp as f64, tn as f64, fn_ as f64);
        let den = ((tp + fp) * (tp + fn_) * (tn + fp) * (tn + fn_)).sqrt();
        if den == 0.0 {
            0.0
        } else {
            (tp * tn - fp * fn_) / den
        }
    }
    fn reset(&mut self) {
        self.c = Confusion::default();
    }
}
