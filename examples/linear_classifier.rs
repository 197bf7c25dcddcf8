//! A linear classifier streamed from LibSVM, as a Gluon user writes it: `LibSVMIter` straight
//! into `Estimator::fit`, a `Dense(1)` with a row_sparse weight gradient (a lazy optimizer
//! updates only the features a batch uses), sigmoid cross-entropy on logits, AUC on held-out
//! data. Without `--train` it writes a learnable synthetic data set first (power-law feature
//! ids, labels the sign of a hidden linear score).
//!
//! Defaults: COCOB with its own defaults (learning rate 0.6, alpha 10; no learning rate to
//! tune: the coin-betting kind of update of Vowpal Wabbit's `--coin`) and batches of 1024 rows.
//! On the VW anchor's 1M x 40 data COCOB reaches the same held-out AUC at batch 256 and 1024
//! (0.7777 / 0.7776; VW `--coin` 0.7763), and 1024 rows a step spread the per-step costs
//! (autograd, the optimizer's dispatch, the gradient's row ids) over four times the examples:
//! ~1.2x the examples/s of batch 256. `--lr` defaults to the optimizer's own learning rate.
//!
//! ```text
//! cargo run --release --example linear_classifier -- [--train FILE --test FILE]
//!     [--features N] [--rows N] [--epochs N] [--batch N] [--optimizer NAME] [--lr F]
//!     [--data-dir DIR] [--json]
//! ```
//!
//! The last line (or the `--json` object) gives the training examples per second of the whole
//! run (parsing and learning, one pass per epoch) and the held-out AUC.

use std::path::{Path, PathBuf};
use std::time::Instant;

use sparrow::data::libsvm::save_libsvm;
use sparrow::data::synthetic::{labels, random_csr, ColumnDist, LabelRule};
use sparrow::prelude::*;

struct Args {
    train: Option<PathBuf>,
    test: Option<PathBuf>,
    features: usize,
    rows: usize,
    epochs: usize,
    batch: usize,
    optimizer: String,
    /// The learning rate; the optimizer's own default when not given.
    lr: Option<f64>,
    /// The optimizer's own options (`--opt alpha=4`), as `optimizer::create` takes them.
    opts: Vec<(String, f64)>,
    data_dir: PathBuf,
    json: bool,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut a = Args {
        train: None,
        test: None,
        features: 1_000_000,
        rows: 200_000,
        epochs: 1,
        batch: 1024,
        optimizer: "cocob".into(),
        lr: None,
        opts: Vec::new(),
        data_dir: std::env::temp_dir().join("sparrow-linear-classifier"),
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |v: String| v.parse::<f64>().map_err(|e| format!("{v}: {e}"));
        match flag.as_str() {
            "--train" => a.train = Some(value()?.into()),
            "--test" => a.test = Some(value()?.into()),
            "--features" => a.features = num(value()?)? as usize,
            "--rows" => a.rows = num(value()?)? as usize,
            "--epochs" => a.epochs = num(value()?)? as usize,
            "--batch" => a.batch = num(value()?)? as usize,
            "--optimizer" => a.optimizer = value()?,
            "--lr" => a.lr = Some(num(value()?)?),
            "--opt" => {
                let kv = value()?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or(format!("--opt {kv}: expected KEY=VALUE"))?;
                a.opts.push((k.to_string(), num(v.to_string())?));
            }
            "--data-dir" => a.data_dir = value()?.into(),
            "--json" => a.json = true,
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.train.is_some() != a.test.is_some() {
        return Err("give --train and --test together".into());
    }
    Ok(a)
}

/// A learnable data set: 40 power-law feature ids per row, labels by a hidden linear score;
/// 80% of the rows to `train.libsvm`, the rest to `test.libsvm` under `dir`.
fn synthetic(dir: &Path, rows: usize, features: usize) -> Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir).map_err(|e| Error::file("linear_classifier", dir, e))?;
    let x = random_csr(
        rows,
        features,
        40.0 / features as f64,
        ColumnDist::PowerLaw { exponent: 2.0 },
        7,
    )?;
    let y = labels(&x, LabelRule::LinearSign { seed: 11 })?;
    let cut = (rows * 4 / 5) as i64;
    let (train, test) = (dir.join("train.libsvm"), dir.join("test.libsvm"));
    let part = |lo: i64, hi: i64| -> Result<(NDArray, NDArray)> {
        let ids: Vec<i64> = (lo..hi).collect();
        Ok((x.take_rows(&ids)?, y.take_rows(&ids)?))
    };
    let (xa, ya) = part(0, cut)?;
    save_libsvm(&train, &xa, &ya)?;
    let (xb, yb) = part(cut, rows as i64)?;
    save_libsvm(&test, &xb, &yb)?;
    Ok((train, test))
}

fn run(a: &Args) -> Result<()> {
    let (train_path, test_path) = match (&a.train, &a.test) {
        (Some(tr), Some(te)) => (tr.clone(), te.clone()),
        _ => synthetic(&a.data_dir, a.rows, a.features)?,
    };
    let iter = |path: &Path, last: sparrow::data::LastBatch| -> Result<LibSVMIter> {
        let mut p = LibSVMIterParams::new(path, a.features, a.batch);
        // The loader groups each batch's columns for the row_sparse gradient, off the
        // training thread.
        p.prepare_transpose = true;
        p.last_batch = last;
        Ok(LibSVMIter::new(p)?)
    };

    let net = Dense::new(1)
        .in_units(a.features)
        .grad_stype(SType::RowSparse);
    net.initialize(&Initializer::Zero, Device::Cpu)?;
    let mut options: Vec<(&str, f64)> = a.lr.map(|lr| ("learning_rate", lr)).into_iter().collect();
    options.extend(a.opts.iter().map(|(k, v)| (k.as_str(), *v)));
    let optimizer = create_optimizer(&a.optimizer, &options)?;
    let lr = optimizer.options().learning_rate;
    let mut trainer = Trainer::from_params(&net.collect_params()?, optimizer)?;
    let bce = loss::SigmoidBinaryCrossEntropyLoss::new();
    let mut est = Estimator::new(&net, |z, y| bce.forward(z, y), &mut trainer);

    // Training alone is timed (parse + learn), then the held-out AUC.
    let mut train = iter(&train_path, sparrow::data::LastBatch::Keep)?;
    let opts = FitOptions {
        epochs: a.epochs,
        log: !a.json,
        progress: !a.json,
        ..Default::default()
    };
    let t = Instant::now();
    est.fit(&mut train, None, &opts)?;
    let secs = t.elapsed().as_secs_f64();
    let rows_seen = train_rows(&train_path)? * a.epochs;

    let mut auc = metric::Auc::new();
    let mut logloss = metric::LogLoss::new().from_logits(true);
    for b in iter(&test_path, sparrow::data::LastBatch::Keep)? {
        let b = b?;
        let label = b
            .label
            .ok_or_else(|| Error::arg("linear_classifier", "unlabelled test rows"))?;
        let z = net.forward(&b.data)?;
        auc.update(&label, &z)?;
        logloss.update(&label, &z)?;
    }
    let ex_s = rows_seen as f64 / secs;
    if a.json {
        println!(
            "{{\"optimizer\": \"{}\", \"lr\": {}, \"batch\": {}, \"epochs\": {}, \"train_s\": {secs:.4}, \"examples_per_s\": {ex_s:.0}, \"test_auc\": {:.5}, \"test_logloss\": {:.5}}}",
            a.optimizer, lr, a.batch, a.epochs, auc.get(), logloss.get()
        );
    } else {
        println!(
            "{} lr {} batch {}: {rows_seen} examples in {secs:.2} s ({ex_s:.0} examples/s, parse + learn); held-out AUC {:.4}, log loss {:.4}",
            a.optimizer, lr, a.batch, auc.get(), logloss.get()
        );
    }
    Ok(())
}

/// Rows of a LibSVM file (its lines that are not blank).
fn train_rows(path: &Path) -> Result<usize> {
    let text = std::fs::read(path).map_err(|e| Error::file("linear_classifier", path, e))?;
    Ok(text
        .split(|&c| c == b'\n')
        .filter(|l| l.iter().any(|c| !c.is_ascii_whitespace()))
        .count())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("linear_classifier: {e}");
            }
            eprintln!(
                "usage: linear_classifier [--train FILE --test FILE] [--features N] [--rows N] \
                 [--epochs N] [--batch N] [--optimizer NAME] [--lr F] [--opt KEY=VALUE]... \
                 [--data-dir DIR] [--json]"
            );
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("linear_classifier: {e}");
        std::process::exit(1);
    }
}
