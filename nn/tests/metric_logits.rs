//! Cross-entropy and perplexity from logits agree with the same metrics on the probabilities
//! the logits stand for; labels that are not classes are errors.

use sparrow_core::{device_test, NDArray};
use sparrow_nn::metric::{CrossEntropy, LogLoss, Metric, Perplexity};

device_test! {
fn cross_entropy_from_logits_matches_probabilities() {
    // Multi-class: softmax of the logits are the probabilities.
    let logits = vec![2.0f64, -1.0, 0.5, 0.0, 3.0, -2.0];
    let probs: Vec<f64> = logits
        .chunks(3)
        .flat_map(|r| {
            let z: f64 = r.iter().map(|v| v.exp()).sum();
            r.iter().map(move |v| v.exp() / z).collect::<Vec<_>>()
        })
        .collect();
    let labels = NDArray::from_vec(vec![0.0f64, 2.0], &[2]).unwrap();
    let (lg, pr) = (
        NDArray::from_vec(logits.clone(), &[2, 3]).unwrap(),
        NDArray::from_vec(probs, &[2, 3]).unwrap(),
    );
    let mut a = CrossEntropy::new().from_logits(true);
    let mut b = CrossEntropy::new();
    a.update(&labels, &lg).unwrap();
    b.update(&labels, &pr).unwrap();
    assert!((a.get() - b.get()).abs() < 1e-9, "{} vs {}", a.get(), b.get());
    let mut pa = Perplexity::new().from_logits(true);
    pa.update(&labels, &lg).unwrap();
    assert!((pa.get() - a.get().exp()).abs() < 1e-9);

    // Binary: a (n,) logit of the positive class; sigmoid gives the probability. Large
    // logits stay finite (no log of 0).
    let x = vec![4.0f64, -3.0, 0.2, 800.0];
    let y = NDArray::from_vec(vec![1.0f64, 0.0, 0.0, 0.0], &[4]).unwrap();
    let p: Vec<f64> = x.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect();
    let mut a = LogLoss::new().from_logits(true);
    let mut b = LogLoss::new();
    let y3 = NDArray::from_vec(vec![1.0f64, 0.0, 0.0], &[3]).unwrap();
    a.update(&y3, &NDArray::from_vec(x[..3].to_vec(), &[3]).unwrap()).unwrap();
    b.update(&y3, &NDArray::from_vec(p[..3].to_vec(), &[3]).unwrap()).unwrap();
    assert!((a.get() - b.get()).abs() < 1e-9, "{} vs {}", a.get(), b.get());
    let mut big = LogLoss::new().from_logits(true);
    big.update(&y, &NDArray::from_vec(x, &[4]).unwrap()).unwrap();
    assert!(big.get().is_finite() && big.get() > 100.0, "{}", big.get());
}
}

device_test! {
fn cross_entropy_rejects_labels_that_are_not_classes() {
    let p = NDArray::from_vec(vec![0.2f64, 0.8, 0.5, 0.5], &[2, 2]).unwrap();
    for bad in [2.0, -1.0, 0.5] {
        let l = NDArray::from_vec(vec![0.0f64, bad], &[2]).unwrap();
        let e = CrossEntropy::new().update(&l, &p).unwrap_err().to_string();
        assert!(e.contains("not a class"), "{e}");
    }
}
}
