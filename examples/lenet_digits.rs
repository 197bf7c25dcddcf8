//! LeNet-style recipe on scikit-learn's bundled digits (1797 8x8 grey images, 10 classes),
//! exported with its held-out split by `scripts/digits_lenet.py` (files in `examples/data/`):
//! Conv2D(16, 3, pad 1, relu) -> MaxPool2D(2) -> Conv2D(32, 3, pad 1, relu) -> MaxPool2D(2)
//! -> Dense(64, relu) -> Dense(10), softmax cross-entropy, Adam(lr 0.003), batch 32, shuffled,
//! the recipe of the script's PyTorch reference. Prints the held-out accuracy per seed beside
//! the reference's (`digits_reference.json`, written by the same script).
//!
//! ```text
//! cargo run --release --example lenet_digits -- [--data DIR] [--epochs 20] [--seeds 3]
//! ```
//! DIR defaults to `$SPARROW_DIGITS_DIR`, else `examples/data`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use sparrow::data::{LastBatch, NDArrayIter};
use sparrow::nn::loss::{Loss, SoftmaxCrossEntropyLoss};
use sparrow::nn::{Block, Conv2D, Dense, Flatten, Initializer, MaxPool2D, Sequential};
use sparrow::optim::{Adam, Trainer};
use sparrow::prelude::{autograd, Device, NDArray};

type BoxError = Box<dyn std::error::Error>;

const PIXELS: &str = "0123456789abcdefg";

/// Images `(n, 1, 8, 8)` scaled to [0, 1] and labels `(n,)` of one exported split.
fn load(path: &Path) -> Result<(NDArray, NDArray), BoxError> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate() {
        let bad = || {
            format!(
                "{}:{}: expected '<label> <64 pixels>'",
                path.display(),
                i + 1
            )
        };
        let (label, pixels) = line.split_once(' ').ok_or_else(bad)?;
        if pixels.len() != 64 {
            return Err(bad().into());
        }
        ys.push(label.parse::<f32>().map_err(|_| bad())?);
        for c in pixels.chars() {
            let v = PIXELS.find(c).ok_or_else(bad)?;
            xs.push(v as f32 / 16.0);
        }
    }
    let n = ys.len();
    Ok((
        NDArray::from_vec(xs, &[n, 1, 8, 8])?,
        NDArray::from_vec(ys, &[n])?,
    ))
}

fn lenet() -> Sequential {
    let mut net = Sequential::new();
    net.add(Conv2D::new(16, &[3]).padding(&[1]).activation("relu"))
        .add(MaxPool2D::new(&[2]))
        .add(Conv2D::new(32, &[3]).padding(&[1]).activation("relu"))
        .add(MaxPool2D::new(&[2]))
        .add(Flatten)
        .add(Dense::new(64).activation("relu"))
        .add(Dense::new(10));
    net
}

/// Fraction of rows of `x` whose largest score is the label.
fn accuracy(net: &Sequential, x: &NDArray, y: &NDArray) -> Result<f64, BoxError> {
    let pred = net.forward(x)?.argmax(Some(-1), false)?.to_f64_vec();
    let ok = pred
        .iter()
        .zip(y.to_f64_vec())
        .filter(|(p, l)| **p == *l)
        .count();
    Ok(ok as f64 / pred.len() as f64)
}

/// Train one network from `seed`; return (test accuracy, last epoch's mean training loss,
/// seconds).
fn run(dir: &Path, epochs: usize, seed: u64) -> Result<(f64, f64, f64), BoxError> {
    let (xtr, ytr) = load(&dir.join("digits_train.txt"))?;
    let (xte, yte) = load(&dir.join("digits_test.txt"))?;
    sparrow::nn::init::seed(seed);
    let net = lenet();
    net.initialize(&Initializer::xavier(), Device::Cpu)?;
    // Deferred shapes: one forward fixes them before the trainer collects the parameters.
    net.forward(&xtr.slice_axis(0, Some(0), Some(1), 1)?)?;
    let mut trainer = Trainer::new(
        net.collect_params()?.iter().map(|(_, p)| p.clone()),
        Adam::new(0.003),
    )?;
    let loss_fn = SoftmaxCrossEntropyLoss::new();
    let mut it = NDArrayIter::new(xtr, Some(ytr), 32, true, LastBatch::Keep)?.with_seed(seed);
    let t = Instant::now();
    let mut last_loss = f64::NAN;
    for _ in 0..epochs {
        let (mut total, mut rows) = (0.0, 0usize);
        for b in it.by_ref() {
            let b = b?;
            let label = b.label.ok_or("no labels")?;
            let loss = autograd::record(|| loss_fn.forward(&net.forward(&b.data)?, &label))?;
            total += loss.sum_all()?.to_f64_vec()[0];
            rows += b.data.shape()[0];
            loss.backward()?;
            trainer.step(b.data.shape()[0])?;
        }
        last_loss = total / rows as f64;
        it.reset();
    }
    let secs = t.elapsed().as_secs_f64();
    Ok((accuracy(&net, &xte, &yte)?, last_loss, secs))
}

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().collect();
    let get = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let dir = get("--data")
        .or_else(|| std::env::var("SPARROW_DIGITS_DIR").ok())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/data"));
    let epochs: usize = get("--epochs").map_or(Ok(20), |v| v.parse())?;
    let seeds: u64 = get("--seeds").map_or(Ok(3), |v| v.parse())?;
    let mut accs = Vec::new();
    for seed in 0..seeds {
        let (acc, loss, secs) = run(&dir, epochs, seed)?;
        println!(
            "seed {seed}: test accuracy {acc:.4}, last epoch's training loss {loss:.5} ({epochs} epochs, {secs:.1} s)"
        );
        accs.push(acc);
    }
    let mean = accs.iter().sum::<f64>() / accs.len() as f64;
    println!("sparrow LeNet: mean test accuracy {mean:.4} over {seeds} seed(s)");
    if let Ok(text) = std::fs::read_to_string(dir.join("digits_reference.json")) {
        let r: serde_json::Value = serde_json::from_str(&text)?;
        println!(
            "reference ({}): PyTorch LeNet mean {:.4} {}, sklearn LogisticRegression {:.4}",
            r["torch_version"].as_str().unwrap_or("?"),
            r["torch_lenet_test_accuracy_mean"]
                .as_f64()
                .unwrap_or(f64::NAN),
            r["torch_lenet_test_accuracy"],
            r["sklearn_logistic_regression_test_accuracy"]
                .as_f64()
                .unwrap_or(f64::NAN),
        );
    }
    Ok(())
}
