//! An Estimator-style training loop (Gluon's `contrib.estimator`): epochs over any batch
//! source, loss and metrics per epoch on training and validation data, a progress bar,
//! checkpoints, early stopping and event hooks.
//!
//! `fit` is a convenience, not a cage: the loop it runs is the one anybody writes by hand —
//! `record` the forward and loss, `backward`, `trainer.step(batch)` — and every piece it uses
//! ([`Trainer`], [`crate::clip_global_norm`], `save_states`) is public.
//!
//! Data comes from any [`DataSource`]: sparrow-data's `LibSVMIter`, `DataLoader` and
//! `NDArrayIter` directly (a new epoch resets them, so shuffling sources reshuffle), or a
//! closure returning a fresh iterator of `(data, label)` batches each epoch. After each epoch
//! one line with the loss and the metrics goes to stderr (Gluon's `LoggingHandler`), unless
//! [`FitOptions::log`] is off.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sparrow_core::{autograd, Device, Error, NDArray, Result};
use sparrow_nn::Block;

pub use crate::source::{BatchInputs, DataSource, Epoch, LabelledBatch};
use crate::Trainer;

// Metrics are nn's (`sparrow_nn::metric`): one trait for hand-written loops and for `fit`.
pub use sparrow_nn::metric::{Accuracy, Metric};

/// What one epoch produced: `(name, value)` pairs such as `loss`, `accuracy`, `val_loss`,
/// `val_accuracy`, plus throughput.
#[derive(Debug, Clone, Default)]
pub struct EpochStats {
    /// Epoch number, from 0.
    pub epoch: usize,
    /// Metric values of this epoch.
    pub values: Vec<(String, f64)>,
    /// Training samples per second.
    pub samples_per_sec: f64,
}

impl EpochStats {
    /// The value called `name`.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
}

/// Custom logic at the points of the loop (all methods default to doing nothing).
pub trait EventHandler {
    /// Before the first epoch.
    fn train_begin(&mut self) -> Result<()> {
        Ok(())
    }
    /// Before each epoch.
    fn epoch_begin(&mut self, _epoch: usize) -> Result<()> {
        Ok(())
    }
    /// After each training batch, with the batch's mean loss. Return `false` to stop training.
    fn batch_end(&mut self, _epoch: usize, _batch: usize, _loss: f64) -> Result<bool> {
        Ok(true)
    }
    /// After each epoch. Return `false` to stop training.
    fn epoch_end(&mut self, _stats: &EpochStats) -> Result<bool> {
        Ok(true)
    }
    /// After the last epoch.
    fn train_end(&mut self, _history: &[EpochStats]) -> Result<()> {
        Ok(())
    }
}

/// Early stopping on a monitored value (`val_loss`, `val_accuracy`, ...).
#[derive(Debug, Clone)]
pub struct EarlyStopping {
    /// Name of the monitored value in [`EpochStats`].
    pub monitor: String,
    /// Larger is better (accuracy) or smaller is better (loss).
    pub higher_is_better: bool,
    /// Epochs without improvement tolerated.
    pub patience: usize,
    /// Smallest change that counts as an improvement.
    pub min_delta: f64,
}

/// Settings of [`Estimator::fit`].
#[derive(Debug, Clone)]
pub struct FitOptions {
    /// Number of epochs.
    pub epochs: usize,
    /// Show a progress bar (still hidden when stderr is not a terminal or `CI` is set). With a
    /// source that knows its length it shows the total and an ETA.
    pub progress: bool,
    /// Print one line per epoch to stderr: its number, time, samples/s, loss and metrics, and
    /// the validation values (Gluon's `LoggingHandler`). Default on.
    pub log: bool,
    /// Save parameters and trainer state every this many epochs into `checkpoint_dir`.
    pub checkpoint_every: Option<usize>,
    /// Folder of the checkpoints (`<prefix>-epoch<N>.params` / `.states`, safetensors).
    pub checkpoint_dir: PathBuf,
    /// File-name prefix of the checkpoints.
    pub checkpoint_prefix: String,
    /// Stop early when the monitored value stops improving.
    pub early_stopping: Option<EarlyStopping>,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            epochs: 1,
            progress: true,
            log: true,
            checkpoint_every: None,
            checkpoint_dir: PathBuf::from("."),
            checkpoint_prefix: "model".into(),
            early_stopping: None,
        }
    }
}

/// The loss function: `(prediction, label) -> per-sample (or scalar) loss`. Its sum is
/// differentiated; its mean per sample is reported.
pub type LossFn<'a> = Box<dyn Fn(&NDArray, &NDArray) -> Result<NDArray> + 'a>;

/// A network, a loss, a trainer and metrics, trained by [`Estimator::fit`].
pub struct Estimator<'a, B: Block + ?Sized> {
    net: &'a B,
    loss: LossFn<'a>,
    trainer: &'a mut Trainer,
    metrics: Vec<Box<dyn Metric + 'a>>,
    val_metrics: Vec<Box<dyn Metric + 'a>>,
    handlers: Vec<Box<dyn EventHandler + 'a>>,
}

impl<'a, B: Block + ?Sized> Estimator<'a, B> {
    /// An estimator for `net` with `loss`, stepping `trainer`.
    pub fn new(
        net: &'a B,
        loss: impl Fn(&NDArray, &NDArray) -> Result<NDArray> + 'a,
        trainer: &'a mut Trainer,
    ) -> Self {
        Estimator {
            net,
            loss: Box::new(loss),
            trainer,
            metrics: Vec::new(),
            val_metrics: Vec::new(),
            handlers: Vec::new(),
        }
    }

    /// Track a metric on training data and (a clone) on validation data.
    pub fn metric<M: Metric + Clone + 'a>(mut self, m: M) -> Self {
        self.val_metrics.push(Box::new(m.clone()));
        self.metrics.push(Box::new(m));
        self
    }

    /// Add an event handler.
    pub fn handler(mut self, h: impl EventHandler + 'a) -> Self {
        self.handlers.push(Box::new(h));
        self
    }

    /// The trainer.
    pub fn trainer(&mut self) -> &mut Trainer {
        self.trainer
    }

    /// Train for `opts.epochs` epochs over `train`, evaluating on `val` after each epoch when
    /// given. Returns the per-epoch history.
    ///
    /// ```no_run
    /// # use sparrow_core::Result;
    /// # use sparrow_data::libsvm::{LibSVMIter, LibSVMIterParams};
    /// # use sparrow_nn::{loss::{Loss, SigmoidBinaryCrossEntropyLoss}, Block, Dense};
    /// # use sparrow_optim::{Estimator, FitOptions, Sgd, Trainer};
    /// # fn main() -> Result<()> {
    /// # let net = Dense::new(1);
    /// # let mut trainer = Trainer::from_params(&net.collect_params()?, Sgd::new(0.1))?;
    /// let mut train = LibSVMIter::new(LibSVMIterParams::new("train.libsvm", 1000, 256))?;
    /// let mut val = LibSVMIter::new(LibSVMIterParams::new("val.libsvm", 1000, 256))?;
    /// let bce = SigmoidBinaryCrossEntropyLoss::new();
    /// let mut est = Estimator::new(&net, |p, y| bce.forward(p, y), &mut trainer);
    /// let opts = FitOptions { epochs: 5, ..Default::default() };
    /// let history = est.fit(&mut train, Some(&mut val), &opts)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fit(
        &mut self,
        train: &mut dyn DataSource,
        mut val: Option<&mut dyn DataSource>,
        opts: &FitOptions,
    ) -> Result<Vec<EpochStats>> {
        let mut history: Vec<EpochStats> = Vec::new();
        let (mut best, mut since_best) = (None::<f64>, 0usize);
        for h in &mut self.handlers {
            h.train_begin()?;
        }
        let show =
            opts.progress && std::io::stderr().is_terminal() && std::env::var_os("CI").is_none();
        let device = self.device()?;
        'epochs: for epoch in 0..opts.epochs {
            for h in &mut self.handlers {
                h.epoch_begin(epoch)?;
            }
            let batches = train.epoch(epoch)?;
            let bar = progress_bar(show, epoch, batches.len);
            self.metrics.iter_mut().for_each(|m| m.reset());
            let (mut loss_sum, mut samples) = (0.0f64, 0usize);
            let start = Instant::now();
            let mut stop = false;
            for (b, batch) in batches.batches.enumerate() {
                let (inputs, label, _pad) = batch?;
                let (inputs, label) =
                    (on_device(inputs, &label, device)?, label.to_device(device)?);
                let n = inputs[0].shape().first().copied().unwrap_or(1).max(1);
                let (pred, total) = autograd::record(|| -> Result<(NDArray, NDArray)> {
                    let pred = forward(self.net, &inputs)?;
                    let l = (self.loss)(&pred, &label)?;
                    Ok((pred, l.sum_all()?))
                })?;
                total.backward()?;
                self.trainer.step(n)?;
                let batch_loss = total.item()?;
                loss_sum += batch_loss;
                samples += n;
                for m in &mut self.metrics {
                    m.update(&label, &pred.detach())?;
                }
                let rate = samples as f64 / start.elapsed().as_secs_f64().max(1e-9);
                bar.set_position(b as u64 + 1);
                bar.set_message(format!(
                    "loss {:.4} | {rate:.0} samples/s",
                    loss_sum / samples as f64
                ));
                for h in &mut self.handlers {
                    if !h.batch_end(epoch, b, batch_loss / n as f64)? {
                        stop = true;
                    }
                }
                if stop {
                    break;
                }
            }
            bar.finish_and_clear();
            let mut stats = EpochStats {
                epoch,
                values: vec![("loss".into(), loss_sum / samples.max(1) as f64)],
                samples_per_sec: samples as f64 / start.elapsed().as_secs_f64().max(1e-9),
            };
            for m in &self.metrics {
                stats.values.push((m.name(), m.get()));
            }
            if let Some(val) = val.as_deref_mut() {
                self.evaluate(val, epoch, &mut stats)?;
            }
            if opts.log {
                eprintln!("{}", log_line(&stats, start.elapsed().as_secs_f64()));
            }
            if let Some(every) = opts.checkpoint_every.filter(|e| *e > 0) {
                if (epoch + 1) % every == 0 {
                    self.checkpoint(&opts.checkpoint_dir, &opts.checkpoint_prefix, epoch + 1)?;
                }
            }
            for h in &mut self.handlers {
                if !h.epoch_end(&stats)? {
                    stop = true;
                }
            }
            if let Some(es) = &opts.early_stopping {
                let v = stats.get(&es.monitor).ok_or_else(|| {
                    Error::arg(
                        "fit",
                        format!(
                            "early stopping monitors '{}', which this run does not produce",
                            es.monitor
                        ),
                    )
                })?;
                let better = match best {
                    None => true,
                    Some(b) if es.higher_is_better => v > b + es.min_delta,
                    Some(b) => v < b - es.min_delta,
                };
                if better {
                    best = Some(v);
                    since_best = 0;
                } else {
                    since_best += 1;
                    if since_best > es.patience {
                        stop = true;
                    }
                }
            }
            history.push(stats);
            if stop {
                break 'epochs;
            }
        }
        for h in &mut self.handlers {
            h.train_end(&history)?;
        }
        Ok(history)
    }

    /// Where the network's parameters live (the first parameter's device; the default device
    /// for a network without parameters). `fit` moves each batch there, as Gluon's estimator
    /// loads its batches onto its context: a loader's host batches feed a model on a GPU.
    fn device(&self) -> Result<Device> {
        let params = self.net.collect_params()?;
        let first = params.iter().next().map(|(_, p)| p.device());
        Ok(first.unwrap_or_else(Device::current))
    }

    fn evaluate(
        &mut self,
        val: &mut dyn DataSource,
        epoch: usize,
        stats: &mut EpochStats,
    ) -> Result<()> {
        self.val_metrics.iter_mut().for_each(|m| m.reset());
        let (mut loss_sum, mut samples) = (0.0f64, 0usize);
        let device = self.device()?;
        for batch in val.epoch(epoch)?.batches {
            let (inputs, label) = crate::source::without_padding(batch?)?;
            let (inputs, label) = (on_device(inputs, &label, device)?, label.to_device(device)?);
            let pred = forward(self.net, &inputs)?;
            loss_sum += (self.loss)(&pred, &label)?.sum_all()?.item()?;
            samples += inputs[0].shape().first().copied().unwrap_or(1).max(1);
            for m in &mut self.val_metrics {
                m.update(&label, &pred)?;
            }
        }
        stats
            .values
            .push(("val_loss".into(), loss_sum / samples.max(1) as f64));
        for m in &self.val_metrics {
            stats.values.push((format!("val_{}", m.name()), m.get()));
        }
        Ok(())
    }

    /// Save parameters (`<dir>/<prefix>-epoch<N>.params`) and trainer state
    /// (`...-epoch<N>.states`), both safetensors, both atomic.
    pub fn checkpoint(&self, dir: &Path, prefix: &str, epoch: usize) -> Result<()> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::arg("checkpoint", format!("{}: {e}", dir.display())))?;
        let params = self.net.collect_params()?;
        save_params(&params, &dir.join(format!("{prefix}-epoch{epoch}.params")))?;
        self.trainer
            .save_states(dir.join(format!("{prefix}-epoch{epoch}.states")))
    }
}

/// A batch's inputs moved to `device`; a batch without any input, or with an input whose rows
/// are not the labels', is an error naming the input.
fn on_device(inputs: Vec<NDArray>, label: &NDArray, device: Device) -> Result<Vec<NDArray>> {
    if inputs.is_empty() {
        return Err(Error::arg("fit", "a batch holds no input arrays"));
    }
    let rows = label.shape().first().copied();
    if let Some((i, x)) = inputs
        .iter()
        .enumerate()
        .find(|(_, x)| x.shape().first().copied() != rows)
    {
        return Err(Error::shape(
            "fit",
            format!(
                "input {i} of a batch has shape {:?} and the labels {:?}: every input needs \
                 the labels' rows",
                x.shape(),
                label.shape()
            ),
        ));
    }
    inputs.into_iter().map(|x| x.to_device(device)).collect()
}

/// The block's prediction for a batch: `forward` for one input, `forward_multi` for several
/// (in the batch's order), which must give exactly one output (the loss takes one prediction).
fn forward<B: Block + ?Sized>(net: &B, inputs: &[NDArray]) -> Result<NDArray> {
    if let [x] = inputs {
        return net.forward(x);
    }
    let mut outs = net.forward_multi(inputs)?;
    match outs.len() {
        1 => Ok(outs.remove(0)),
        k => Err(Error::arg(
            "fit",
            format!(
                "the block gave {k} outputs for a batch of {} inputs; fit needs one prediction",
                inputs.len()
            ),
        )),
    }
}

/// Write every parameter's weight to a safetensors file under its hierarchical name: nn's
/// parameter file ([`sparrow_nn::save_params`]), so a checkpoint carries the same checksums and
/// layout metadata as `save_parameters`, is written through the one atomic writer, and loads
/// back with `load_parameters` (which refuses a corrupted file). Its own encoder wrote files
/// without checksums, in which one flipped byte loaded silently.
pub fn save_params(params: &sparrow_nn::ParamDict, path: &Path) -> Result<()> {
    sparrow_nn::save_params(params, path, sparrow_nn::SaveOptions::default())
}

/// The epoch's line, as Gluon's `LoggingHandler` prints it: `[Epoch 3] 1.24 s, 81234
/// samples/s: loss 0.6931, accuracy 0.5000, val_loss 0.6929, ...`.
pub fn log_line(stats: &EpochStats, seconds: f64) -> String {
    let values: Vec<String> = stats
        .values
        .iter()
        .map(|(n, v)| format!("{n} {v:.4}"))
        .collect();
    format!(
        "[Epoch {}] {seconds:.2} s, {:.0} samples/s: {}",
        stats.epoch,
        stats.samples_per_sec,
        values.join(", ")
    )
}

fn progress_bar(show: bool, epoch: usize, len: Option<usize>) -> ProgressBar {
    let bar = match len {
        Some(n) => ProgressBar::new(n as u64),
        None => ProgressBar::no_length(),
    };
    if !show {
        bar.set_draw_target(ProgressDrawTarget::hidden());
        return bar;
    }
    let template = if len.is_some() {
        "{spinner} epoch {prefix} [{elapsed_precise}] {bar:30} {pos}/{len} batches, ETA {eta} {msg}"
    } else {
        "{spinner} epoch {prefix} [{elapsed_precise}] batch {pos} {msg}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar.set_prefix(epoch.to_string());
    bar
}
