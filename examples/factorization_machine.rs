//! A factorization machine on CSR input with a million features, as a Gluon user writes it:
//! `y = b + x.w + 1/2 sum_f ((x.V)_f^2 - (x^2 . V^2)_f)` (Rendle's O(nnz k) form), the linear
//! part a `Dense(1)` with a row_sparse gradient, the pairwise part reading only the batch's
//! rows of the `features x k` factor table through `Parameter::row_sparse_data` (a
//! differentiable row gather: the table's gradient is row_sparse over those rows, so lazy
//! AdaGrad updates only them). `#[derive(Block)]` registers both parameters.
//!
//! ```text
//! cargo run --release --example factorization_machine -- [--data FILE] [--features N]
//!     [--rows N] [--k K] [--epochs N] [--batch N] [--lr F] [--json]
//! ```
//!
//! Without `--data` it writes a learnable synthetic LibSVM file first (40 power-law feature ids
//! per row, labels by a hidden linear score; `--write-only` stops there), which
//! `examples/factorization_machine_torch.py` trains the same model on. The batches are read
//! into memory first, so an epoch's time is the training alone, as in the PyTorch script.

use std::path::{Path, PathBuf};
use std::time::Instant;

use sparrow::data::libsvm::save_libsvm;
use sparrow::data::synthetic::{labels, random_csr, ColumnDist, LabelRule};
use sparrow::data::LastBatch;
use sparrow::prelude::*;

/// The factorization machine: linear part and `features x k` factors.
#[derive(Block)]
#[block(kind = "fm")]
struct FactorizationMachine {
    linear: Dense,
    factors: Parameter,
}

impl FactorizationMachine {
    fn new(features: usize, k: usize) -> Self {
        FactorizationMachine {
            linear: Dense::new(1)
                .in_units(features)
                .grad_stype(SType::RowSparse)
                .weight_initializer(Initializer::Zero),
            factors: Parameter::new("factors", &[features, k])
                .with_grad_stype(SType::RowSparse)
                .with_init(Initializer::Normal { sigma: 0.01 }),
        }
    }

    /// Logits `(batch, 1)` of a csr batch `(batch, features)`.
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        // The batch's rows of the factor table, differentiable (row_sparse gradient).
        let cols: Vec<i64> = x.with_csr::<f32, _>(|c| c.indices.to_vec())?;
        let v = self.factors.row_sparse_data(&cols)?;
        let xv = x.dot(&v)?;
        let x2v2 = x.square()?.dot(&v.square()?)?;
        let pairs = xv
            .square()?
            .sub(&x2v2)?
            .sum(Some(&[1]), true)?
            .mul_scalar(0.5)?;
        self.linear.forward(x)?.add(&pairs)
    }
}

struct Args {
    data: Option<PathBuf>,
    data_dir: PathBuf,
    features: usize,
    rows: usize,
    k: usize,
    epochs: usize,
    batch: usize,
    lr: f64,
    json: bool,
    write_only: bool,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut a = Args {
        data: None,
        data_dir: std::env::temp_dir().join("sparrow-fm"),
        features: 1_000_000,
        rows: 100_000,
        k: 16,
        epochs: 3,
        batch: 256,
        lr: 0.05,
        json: false,
        write_only: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |v: String| v.parse::<f64>().map_err(|e| format!("{v}: {e}"));
        match flag.as_str() {
            "--data" => a.data = Some(value()?.into()),
            "--data-dir" => a.data_dir = value()?.into(),
            "--features" => a.features = num(value()?)? as usize,
            "--rows" => a.rows = num(value()?)? as usize,
            "--k" => a.k = num(value()?)? as usize,
            "--epochs" => a.epochs = num(value()?)? as usize,
            "--batch" => a.batch = num(value()?)? as usize,
            "--lr" => a.lr = num(value()?)?,
            "--json" => a.json = true,
            "--write-only" => a.write_only = true,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(a)
}

/// The synthetic training file under `dir` (written once per size).
fn synthetic(dir: &Path, rows: usize, features: usize) -> Result<PathBuf> {
    let path = dir.join(format!("fm_{rows}x{features}.libsvm"));
    if path.exists() {
        return Ok(path);
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::file("factorization_machine", dir, e))?;
    let x = random_csr(
        rows,
        features,
        40.0 / features as f64,
        ColumnDist::PowerLaw { exponent: 2.0 },
        21,
    )?;
    let y = labels(&x, LabelRule::LinearSign { seed: 22 })?;
    save_libsvm(&path, &x, &y)?;
    Ok(path)
}

fn run(a: &Args) -> Result<()> {
    let path = match &a.data {
        Some(p) => p.clone(),
        None => synthetic(&a.data_dir, a.rows, a.features)?,
    };
    if a.write_only {
        println!("{}", path.display());
        return Ok(());
    }
    let mut p = LibSVMIterParams::new(&path, a.features, a.batch);
    p.last_batch = LastBatch::Keep;
    p.prepare_transpose = true;
    let batches: Vec<(NDArray, NDArray)> = LibSVMIter::new(p)?
        .map(|b| {
            let b = b?;
            let label = b.label.ok_or_else(|| Error::arg("fm", "unlabelled rows"))?;
            Ok((b.data, label))
        })
        .collect::<Result<_>>()?;
    let rows: usize = batches.iter().map(|(x, _)| x.shape()[0]).sum();

    let fm = FactorizationMachine::new(a.features, a.k);
    fm.initialize(&Initializer::Zero, Device::Cpu)?;
    let mut trainer = Trainer::from_params(&fm.collect_params()?, AdaGrad::new(a.lr))?;
    let bce = loss::SigmoidBinaryCrossEntropyLoss::new();
    let mut epoch_s = Vec::new();
    for epoch in 0..a.epochs {
        let t = Instant::now();
        let mut total = 0.0;
        for (x, y) in &batches {
            let l = autograd::record(|| bce.forward(&fm.forward(x)?, y))?;
            l.backward()?;
            trainer.step(x.shape()[0])?;
            total += l.sum_all()?.to_f64_vec()[0];
        }
        let secs = t.elapsed().as_secs_f64();
        epoch_s.push(secs);
        if !a.json {
            println!(
                "epoch {epoch}: {secs:.3} s ({:.0} rows/s), mean training loss {:.4}",
                rows as f64 / secs,
                total / rows as f64
            );
        }
    }
    let mut auc = metric::Auc::new();
    for (x, y) in &batches {
        auc.update(y, &fm.forward(x)?)?;
    }
    if a.json {
        let list: Vec<String> = epoch_s.iter().map(|s| format!("{s:.4}")).collect();
        println!(
            "{{\"impl\": \"sparrow\", \"rows\": {rows}, \"features\": {}, \"k\": {}, \"batch\": {}, \"epoch_s\": [{}], \"train_auc\": {:.5}}}",
            a.features,
            a.k,
            a.batch,
            list.join(", "),
            auc.get()
        );
    } else {
        println!("training AUC after {} epochs: {:.4}", a.epochs, auc.get());
    }
    Ok(())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("factorization_machine: {e}");
            eprintln!(
                "usage: factorization_machine [--data FILE | --data-dir DIR] [--features N] \
                 [--rows N] [--k K] [--epochs N] [--batch N] [--lr F] [--json] [--write-only]"
            );
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("factorization_machine: {e}");
        std::process::exit(1);
    }
}
