//! Real-data check in CI: scikit-learn's breast-cancer split (examples/data, made by
//! scripts/sklearn_to_libsvm.py) streamed as CSR batches through LibSVMIter and fitted with a
//! sparse-input logistic regression must reach scikit-learn's held-out accuracy within 3 points.

use std::path::Path;

use sparrow::core::{autograd, Device, SType};
use sparrow::data::libsvm::{LibSVMIter, LibSVMIterParams};
use sparrow::data::LastBatch;
use sparrow::nn::loss::{Loss, SigmoidBinaryCrossEntropyLoss};
use sparrow::nn::{Block, Dense, Initializer};
use sparrow::optim::{Adam, Trainer};

fn iter(name: &str, batch: usize) -> LibSVMIter {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data");
    let mut p = LibSVMIterParams::new(dir.join(name), 30, batch);
    p.last_batch = LastBatch::Keep;
    p.progress = false;
    LibSVMIter::new(p).unwrap()
}

#[test]
fn breast_cancer_matches_sklearn_logistic_regression() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data");
    let sk: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("breast_cancer_sklearn.json")).unwrap(),
    )
    .unwrap();
    let sk_acc = sk["sklearn_logreg_test_accuracy"].as_f64().unwrap();

    let net = Dense::new(1).in_units(30).grad_stype(SType::RowSparse);
    net.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    let mut trainer = Trainer::new(
        net.collect_params().unwrap().iter().map(|(_, p)| p.clone()),
        Adam::new(0.05),
    )
    .unwrap();
    let loss_fn = SigmoidBinaryCrossEntropyLoss::new();
    let mut train = iter("breast_cancer_train.libsvm", 16);
    for _ in 0..20 {
        train.reset();
        for b in train.by_ref() {
            let b = b.unwrap();
            let label = b.label.unwrap();
            let loss =
                autograd::record(|| loss_fn.forward(&net.forward(&b.data)?, &label)).unwrap();
            loss.backward().unwrap();
            trainer.step(b.data.shape()[0]).unwrap();
        }
    }
    let (mut ok, mut n) = (0, 0);
    for b in iter("breast_cancer_test.libsvm", 64) {
        let b = b.unwrap();
        let z = net.forward(&b.data).unwrap().to_f64_vec();
        for (z, y) in z.iter().zip(b.label.unwrap().to_f64_vec()) {
            ok += usize::from((*z > 0.0) == (y > 0.5));
            n += 1;
        }
    }
    assert_eq!(n, 171);
    let acc = ok as f64 / n as f64;
    assert!(
        acc >= sk_acc - 0.03,
        "held-out accuracy {acc} vs scikit-learn {sk_acc}"
    );
}
