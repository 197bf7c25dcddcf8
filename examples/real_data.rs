//! Real-data check: scikit-learn's breast-cancer data set (converted to LibSVM by
//! `scripts/sklearn_to_libsvm.py`, files in `examples/data/`), streamed through `LibSVMIter`
//! as CSR batches and fitted with a sparse-input logistic regression (Dense(1) with a
//! row_sparse weight gradient, Adam). Prints held-out accuracy beside scikit-learn's
//! LogisticRegression on the same split.
//!
//! ```text
//! cargo run --release --example real_data -- [--epochs 30] [--lr 0.05] [--json]
//! ```

use std::path::Path;

use sparrow::core::{autograd, Device, NDArray, SType};
use sparrow::data::libsvm::{LibSVMIter, LibSVMIterParams};
use sparrow::nn::loss::{Loss, SigmoidBinaryCrossEntropyLoss};
use sparrow::nn::{Block, Dense, Initializer};
use sparrow::optim::{Adam, Trainer};

type BoxError = Box<dyn std::error::Error>;

/// Train on `dir/breast_cancer_train.libsvm`, return (train accuracy, test accuracy).
fn run(dir: &Path, epochs: usize, lr: f64) -> Result<(f64, f64), BoxError> {
    let features = 30;
    let iter_for = |name: &str, batch: usize| -> Result<LibSVMIter, BoxError> {
        let mut p = LibSVMIterParams::new(dir.join(name), features, batch);
        p.last_batch = sparrow::data::LastBatch::Keep;
        p.progress = false;
        Ok(LibSVMIter::new(p)?)
    };
    let net = Dense::new(1)
        .in_units(features)
        .grad_stype(SType::RowSparse);
    net.initialize(&Initializer::Zero, Device::Cpu)?;
    let mut trainer = Trainer::new(
        net.collect_params()?.iter().map(|(_, p)| p.clone()),
        Adam::new(lr),
    )?;
    let loss_fn = SigmoidBinaryCrossEntropyLoss::new();
    let mut train = iter_for("breast_cancer_train.libsvm", 16)?;
    for _ in 0..epochs {
        train.reset();
        for b in train.by_ref() {
            let b = b?;
            let label = b.label.ok_or("no labels")?;
            let loss = autograd::record(|| loss_fn.forward(&net.forward(&b.data)?, &label))?;
            loss.backward()?;
            trainer.step(b.data.shape()[0])?;
        }
    }
    let accuracy = |it: &mut LibSVMIter| -> Result<f64, BoxError> {
        it.reset();
        let (mut ok, mut n) = (0usize, 0usize);
        for b in it.by_ref() {
            let b = b?;
            let logits: NDArray = net.forward(&b.data)?;
            let label = b.label.ok_or("no labels")?.to_f64_vec();
            for (z, y) in logits.to_f64_vec().iter().zip(label) {
                ok += usize::from((*z > 0.0) == (y > 0.5));
                n += 1;
            }
        }
        Ok(ok as f64 / n.max(1) as f64)
    };
    let train_acc = accuracy(&mut train)?;
    let test_acc = accuracy(&mut iter_for("breast_cancer_test.libsvm", 64)?)?;
    Ok((train_acc, test_acc))
}

fn main() {
    let mut epochs = 30;
    let mut lr = 0.05;
    let mut json = false;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--epochs" => epochs = it.next().and_then(|v| v.parse().ok()).unwrap_or(epochs),
            "--lr" => lr = it.next().and_then(|v| v.parse().ok()).unwrap_or(lr),
            "--json" => json = true,
            other => {
                eprintln!("real_data: unknown flag '{other}' (use --epochs N --lr F --json)");
                std::process::exit(2);
            }
        }
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data");
    let sk: serde_json::Value = std::fs::read_to_string(dir.join("breast_cancer_sklearn.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default();
    match run(&dir, epochs, lr) {
        Ok((train_acc, test_acc)) => {
            let sk_acc = sk["sklearn_logreg_test_accuracy"]
                .as_f64()
                .unwrap_or(f64::NAN);
            if json {
                println!(
                    "{}",
                    serde_json::json!({"dataset": "breast_cancer", "epochs": epochs, "lr": lr,
                        "train_accuracy": train_acc, "test_accuracy": test_acc,
                        "sklearn_logreg_test_accuracy": sk_acc})
                );
            } else {
                println!("breast cancer (sklearn), {epochs} epochs of Adam lr {lr}:");
                println!(
                    "  sparrow train accuracy {train_acc:.4}, held-out accuracy {test_acc:.4}"
                );
                println!("  scikit-learn LogisticRegression held-out accuracy {sk_acc:.4}");
            }
        }
        Err(e) => {
            eprintln!("real_data: error: {e}");
            std::process::exit(1);
        }
    }
}
