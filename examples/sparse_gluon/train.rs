//! Data preparation and the training loop of one variant.

use std::path::PathBuf;
use std::time::Instant;

use sparrow::core::{autograd, sys, Device, NDArray, SType};
use sparrow::data::libsvm::{save_libsvm, LibSVMIter, LibSVMIterParams};
use sparrow::data::synthetic;
use sparrow::nn::loss::{Loss, SigmoidBinaryCrossEntropyLoss};
use sparrow::nn::{Block, Dense, Initializer, Parameter, Sequential};
use sparrow::optim::{AdaGrad, Adam, Ftrl, Optimizer, Sgd, Trainer};

use crate::args::{Args, Variant};
use crate::report::VariantResult;

type BoxError = Box<dyn std::error::Error>;

/// Untimed batches before the timed window of the dense-gradient variants (a) and (b).
pub const DENSE_WARMUP: usize = 2;

/// The generated data set, as written to LibSVM.
pub struct Data {
    pub path: PathBuf,
    pub rows: usize,
    pub nnz: usize,
    pub dense_bytes: u64,
    pub csr_bytes: u64,
    pub positives: usize,
    pub libsvm_bytes: u64,
    pub gen_ms: f64,
    pub write_ms: f64,
}

/// Step 1 and the writing half of step 2.
pub fn prepare_data(args: &Args, verbose: bool) -> Result<Data, BoxError> {
    let t0 = Instant::now();
    let (x, y) = synthetic::tutorial_data(args.samples, args.features, args.density, args.seed)?;
    let gen_ms = t0.elapsed().as_secs_f64() * 1e3;
    let dense_bytes = (args.samples as u64) * (args.features as u64) * 4;
    let csr_bytes = x.nbytes() as u64;
    let nnz = x.nnz();
    let positives = y.to_f64_vec().iter().filter(|&&v| v > 0.5).count();
    let dir = match &args.data_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("sparrow-sparse-gluon-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("tutorial.libsvm");
    let t1 = Instant::now();
    save_libsvm(&path, &x, &y)?;
    let write_ms = t1.elapsed().as_secs_f64() * 1e3;
    let libsvm_bytes = std::fs::metadata(&path)?.len();
    if verbose {
        eprintln!(
            "data: {} x {} csr at density {:e}: {} non-zeros, {} positive labels",
            args.samples, args.features, args.density, nnz, positives
        );
        eprintln!(
            "      dense f32 would be {:.1} MB; csr holds {:.3} MB (data + indices + indptr)",
            dense_bytes as f64 / 1e6,
            csr_bytes as f64 / 1e6
        );
        eprintln!(
            "      written as LibSVM to {} ({} bytes) in {:.1} ms",
            path.display(),
            libsvm_bytes,
            write_ms
        );
    }
    Ok(Data {
        path,
        rows: args.samples,
        nnz,
        dense_bytes,
        csr_bytes,
        positives,
        libsvm_bytes,
        gen_ms,
        write_ms,
    })
}

fn build_net(args: &Args, v: Variant) -> Sequential {
    // The tutorial writes each Dense followed by Activation('sigmoid'); `Dense::activation` is
    // Gluon's own spelling of the same model (`nn.Dense(units, activation='sigmoid')`), and
    // lets the layer add its bias and apply the sigmoid in one recorded op (one node and one
    // output per layer instead of three and two).
    let first = Dense::new(128)
        .in_units(args.features)
        .activation("sigmoid");
    let first = match v {
        Variant::RowSparse => first.grad_stype(SType::RowSparse),
        _ => first,
    };
    let mut net = Sequential::new();
    net.add(first);
    net.add(Dense::new(8).in_units(128).activation("sigmoid"));
    net.add(Dense::new(1).in_units(8).activation("sigmoid"));
    net
}

fn optimizer(args: &Args) -> Box<dyn Optimizer> {
    match args.optimizer.as_str() {
        "adam" => Box::new(Adam::new(args.lr)),
        "adagrad" => Box::new(AdaGrad::new(args.lr)),
        "ftrl" => Box::new(Ftrl::new(args.lr)),
        _ => Box::new(Sgd::new(args.lr)),
    }
}

/// Running loss/accuracy over the batches of an epoch (padding rows excluded).
#[derive(Default)]
struct Tally {
    loss: f64,
    correct: usize,
    rows: usize,
}

impl Tally {
    /// Count one batch. It runs inside the timed epoch (a training loop reports its loss), so
    /// the f32 arrays are read in place; three `to_f64_vec` copies per batch were ~1.7K
    /// instructions of a ~106K step.
    fn add(&mut self, pred: &NDArray, label: &NDArray, loss: &NDArray, pad: usize) {
        let in_place = pred.with_slice::<f32, _>(|p| {
            label
                .with_slice::<f32, _>(|l| loss.with_slice::<f32, _>(|ls| self.count(p, l, ls, pad)))
        });
        if !matches!(in_place, Ok(Ok(Ok(())))) {
            // Other dtypes or storage: through f64 copies.
            let (p, l, ls) = (pred.to_f64_vec(), label.to_f64_vec(), loss.to_f64_vec());
            self.count(&p, &l, &ls, pad);
        }
    }
    fn count<A, B, C>(&mut self, p: &[A], l: &[B], ls: &[C], pad: usize)
    where
        A: Copy + Into<f64>,
        B: Copy + Into<f64>,
        C: Copy + Into<f64>,
    {
        let n = p.len().min(l.len()).min(ls.len()).saturating_sub(pad);
        for i in 0..n {
            self.loss += ls[i].into();
            self.correct += usize::from((p[i].into() > 0.5) == (l[i].into() > 0.5));
        }
        self.rows += n;
    }
    fn loss(&self) -> f64 {
        self.loss / self.rows.max(1) as f64
    }
    fn accuracy(&self) -> f64 {
        self.correct as f64 / self.rows.max(1) as f64
    }
}

/// One training step on a batch; returns the predictions and per-row losses.
fn step(
    net: &Sequential,
    first: &Parameter,
    trainer: &mut Trainer,
    loss_fn: &SigmoidBinaryCrossEntropyLoss,
    x: &NDArray,
    label: &NDArray,
) -> Result<(NDArray, NDArray, usize), BoxError> {
    let (pred, loss) = autograd::record(|| -> sparrow::core::Result<_> {
        let pred = net.forward(x)?;
        let loss = loss_fn.forward(&pred, label)?;
        Ok((pred, loss))
    })?;
    loss.backward()?;
    // Rows held by the first layer's gradient, read before the step clears it.
    let rows = first
        .grad()
        .map(|g| {
            if g.stype() == SType::RowSparse {
                g.stored_rows()
            } else {
                0
            }
        })
        .unwrap_or(0);
    trainer.step(x.shape()[0])?;
    Ok((pred, loss, rows))
}

/// Whether (c)'s next epoch is a warm-up epoch: the first always is; later ones are while no
/// epoch has been timed yet and fewer than `warmup_ms` milliseconds of training have passed.
fn is_warmup(warmup_epochs: usize, timed_epochs: usize, warmed_ms: f64, warmup_ms: f64) -> bool {
    warmup_epochs == 0 || (timed_epochs == 0 && warmed_ms < warmup_ms)
}

/// Step 3 for one variant (run in its own process).
pub fn run_variant(args: &Args, v: Variant) -> Result<VariantResult, BoxError> {
    let path = args.data_file.clone().ok_or("--child needs --data-file")?;
    let mut params = LibSVMIterParams::new(&path, args.features, args.batch_size);
    params.progress = false;
    // The loader thread groups each batch's columns for (c)'s row_sparse weight gradient.
    params.prepare_transpose = v == Variant::RowSparse;
    // (c)'s 20-us steps: a woken producer must not preempt the training thread (see
    // LibSVMIterParams::idle_priority; ~0.15 ms per epoch on two cores).
    params.idle_priority = v == Variant::RowSparse && args.idle_loader;
    let mut iter = LibSVMIter::new(params)?;

    if let Some(mb) = args.device_budget_mb {
        args.device
            .set_memory_budget(Some((mb * 1e6).round() as usize));
    }
    let t0 = Instant::now();
    let net = build_net(args, v);
    net.initialize(&Initializer::Uniform { scale: 0.07 }, args.device)?;
    let mut trainer = Trainer::with_boxed(
        net.collect_params()?.iter().map(|(_, p)| p.clone()),
        optimizer(args),
    )?;
    let init_ms = t0.elapsed().as_secs_f64() * 1e3;
    // The first layer's weight, whose gradient rows each step reports.
    let first = net
        .collect_params()?
        .iter()
        .next()
        .map(|(_, p)| p.clone())
        .ok_or("model has no parameters")?;
    // A first-layer weight over the device's budget stays in host memory; its layer stages
    // each batch's rows on the device, from the batch on the host (no round trip).
    let batch_device = if first.host_resident() {
        eprintln!(
            "{}: the first layer's weight ({:.1} MB) is over {}'s budget: it stays in host \
             memory, and each step moves the batch's rows",
            v.describe(),
            first.nbytes() as f64 / 1e6,
            crate::args::device_name(args.device)
        );
        Device::Cpu
    } else {
        args.device
    };
    let loss_fn = SigmoidBinaryCrossEntropyLoss::new();
    let densify = v == Variant::Naive;
    let prep = |x: NDArray| -> Result<NDArray, BoxError> {
        Ok(if densify { x.tostype(SType::Dense)? } else { x })
    };

    let mut epoch_ms = Vec::new();
    let mut epoch_cpu_ms = Vec::new();
    let mut batches_per_epoch = 0usize;
    let mut tally = Tally::default();
    let mut first_loss = None;
    let mut max_grad_rows = 0usize;
    let timed_batches;
    let mut warmup_epochs = 0usize;
    if v == Variant::RowSparse {
        // Warm-up: whole epochs until `--warmup-ms` of training have passed (at least one),
        // then `--epochs` timed epochs. A time rather than a count: the training thread waits,
        // blocked, while the pool initializes the weight, and its core then
        // runs ~1.3x slower for the first ~15 ms of work (the first 7 epochs after a one-epoch
        // warm-up against epochs 9-40: median 1.31x per run over 10 runs; a 100 ms busy loop
        // before training brought it to ~1.0x, a 100 ms sleep did not). One ~2 ms epoch did not
        // cover that; the references' warm-up epochs last ~80 ms (PyTorch) to ~480 ms (MXNet).
        let warm_start = Instant::now();
        while epoch_ms.len() < args.epochs {
            let e = warmup_epochs + epoch_ms.len();
            let warmed_ms = warm_start.elapsed().as_secs_f64() * 1e3;
            let warming = is_warmup(warmup_epochs, epoch_ms.len(), warmed_ms, args.warmup_ms);
            iter.reset();
            let bar = sparrow::data::progress::bar(0, &format!("{} epoch {e}", v.describe()));
            let mut t = Tally::default();
            let start = Instant::now();
            let cpu_start = sys::thread_cpu_time();
            let mut nb = 0;
            for batch in iter.by_ref() {
                let batch = batch?;
                let label = batch.label.clone().ok_or("LibSVM batch without labels")?;
                // The batch to the model's device (the same arrays on the CPU).
                let (x, label) = (
                    batch.data.to_device(batch_device)?,
                    label.to_device(args.device)?,
                );
                let (pred, loss, rows) = step(&net, &first, &mut trainer, &loss_fn, &x, &label)?;
                t.add(&pred, &label, &loss, batch.pad);
                max_grad_rows = max_grad_rows.max(rows);
                nb += 1;
                // A hidden bar (no terminal, --json, CI) still costs ~0.8K instructions per
                // `inc`, ~0.7% of a step.
                if !bar.is_hidden() {
                    bar.inc(1);
                }
            }
            args.device.synchronize()?;
            let ms = start.elapsed().as_secs_f64() * 1e3;
            let cpu_ms = match (cpu_start, sys::thread_cpu_time()) {
                (Some(a), Some(b)) => (b - a).as_secs_f64() * 1e3,
                _ => f64::NAN,
            };
            bar.finish_and_clear();
            if first_loss.is_none() {
                first_loss = Some(t.loss());
            }
            batches_per_epoch = nb;
            if warming {
                warmup_epochs += 1;
            } else {
                if epoch_ms.is_empty() && !args.json {
                    eprintln!(
                        "{} warm-up: {warmup_epochs} epochs in {warmed_ms:.1} ms, loss {:.5}",
                        v.describe(),
                        first_loss.unwrap_or(f64::NAN)
                    );
                }
                epoch_ms.push(ms);
                epoch_cpu_ms.push(cpu_ms);
                if !args.json {
                    eprintln!(
                        "{} epoch {e}: {:.2} ms, loss {:.5}, accuracy {:.3}",
                        v.describe(),
                        ms,
                        t.loss(),
                        t.accuracy()
                    );
                }
            }
            tally = t;
        }
        timed_batches = batches_per_epoch;
    } else {
        // DENSE_WARMUP warm-up batches, then `dense_batches` timed batches scaled to a full
        // epoch. Two, because the first two steps allocate the two 512 MB gradient buffers
        // that later steps recycle (fresh pages fault in at ~0.25 GB/s );
        // PyTorch's reference script warms up on 5 batches.
        iter.reset();
        let mut batches = Vec::new();
        for b in iter.by_ref() {
            batches.push(b?);
        }
        batches_per_epoch = batches.len();
        let n = args
            .dense_batches
            .min(batches.len().saturating_sub(DENSE_WARMUP))
            .max(1);
        let bar = sparrow::data::progress::bar((n + DENSE_WARMUP) as u64, v.describe());
        for (i, batch) in batches.iter().take(n + DENSE_WARMUP).enumerate() {
            let label = batch.label.clone().ok_or("LibSVM batch without labels")?;
            let (x, label) = (
                batch.data.to_device(args.device)?,
                label.to_device(args.device)?,
            );
            let start = Instant::now();
            let (pred, loss, _) = step(&net, &first, &mut trainer, &loss_fn, &prep(x)?, &label)?;
            args.device.synchronize()?;
            let ms = start.elapsed().as_secs_f64() * 1e3;
            if i < DENSE_WARMUP {
                if i == 0 {
                    let mut t = Tally::default();
                    t.add(&pred, &label, &loss, batch.pad);
                    first_loss = Some(t.loss());
                }
            } else {
                epoch_ms.push(ms * batches_per_epoch as f64);
                tally.add(&pred, &label, &loss, batch.pad);
            }
            bar.inc(1);
            if !args.json {
                eprintln!("{} batch {i}: {:.1} ms", v.describe(), ms);
            }
        }
        bar.finish_and_clear();
        timed_batches = n;
    }

    let params = net.collect_params()?;
    let (_, w0) = params.iter().next().ok_or("model has no parameters")?;
    let weight_bytes: usize = params.iter().map(|(_, p)| p.nbytes()).sum();
    let grad_bytes: usize = params
        .iter()
        .filter_map(|(_, p)| p.grad())
        .map(|g| g.nbytes())
        .sum();
    let first_grad = w0.grad().ok_or("first layer has no gradient")?;
    let first_grad_rows = first_grad.stored_rows();
    Ok(VariantResult {
        variant: v,
        epoch_ms,
        epoch_cpu_ms,
        timed_batches,
        batches_per_epoch,
        warmup_epochs,
        init_ms,
        weight_bytes: weight_bytes as u64,
        grad_bytes: grad_bytes as u64,
        first_grad_stype: format!("{:?}", first_grad.stype()),
        first_grad_rows,
        max_grad_rows,
        state_bytes: trainer.state_bytes() as u64,
        peak_rss_bytes: sys::peak_rss_bytes().unwrap_or(0),
        first_loss: first_loss.unwrap_or(f64::NAN),
        loss: tally.loss(),
        accuracy: tally.accuracy(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_up_is_at_least_one_epoch_then_lasts_until_the_time_has_passed() {
        // The first epoch warms up even with no warm-up time asked for.
        assert!(is_warmup(0, 0, 0.0, 0.0));
        assert!(is_warmup(0, 0, 500.0, 100.0));
        // Later epochs warm up while the time has not passed...
        assert!(is_warmup(3, 0, 99.9, 100.0));
        assert!(!is_warmup(3, 0, 100.0, 100.0));
        assert!(!is_warmup(1, 0, 0.5, 0.0));
        // ...and never once an epoch has been timed.
        assert!(!is_warmup(3, 1, 0.0, 100.0));
    }

    /// The in-place f32 reading and the f64-copy fallback count the same rows, losses and hits,
    /// and leave the padding rows out.
    #[test]
    fn tally_counts_f32_in_place_and_other_dtypes_through_copies() {
        let (p, l, ls) = (
            [0.7, 0.2, 0.9, 0.8],
            [1.0, 0.0, 0.0, 1.0],
            [0.25, 0.5, 2.0, 8.0],
        );
        let f32s = |v: &[f64]| {
            NDArray::from_vec(v.iter().map(|&x| x as f32).collect::<Vec<_>>(), &[v.len()]).unwrap()
        };
        let f64s = |v: &[f64]| NDArray::from_vec(v.to_vec(), &[v.len()]).unwrap();
        let mut a = Tally::default();
        a.add(&f32s(&p), &f32s(&l), &f32s(&ls), 1);
        let mut b = Tally::default();
        b.add(&f64s(&p), &f64s(&l), &f64s(&ls), 1);
        for t in [&a, &b] {
            assert_eq!((t.rows, t.correct), (3, 2));
            assert_eq!(t.loss, 2.75);
        }
    }
}
