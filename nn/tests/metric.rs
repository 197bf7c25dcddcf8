//! Metrics: AUC against a brute-force pair count (with ties), classification counts, errors.

use sparrow_core::{device_test, NDArray};
use sparrow_nn::metric::*;

fn arr(v: Vec<f64>, shape: &[usize]) -> NDArray {
    NDArray::from_vec(v, shape).unwrap()
}

/// P(score_pos > score_neg) + 0.5 P(equal), over all pairs.
fn brute_auc(scores: &[f64], labels: &[f64]) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (i, &si) in scores.iter().enumerate() {
        for (j, &sj) in scores.iter().enumerate() {
            if labels[i] == 1.0 && labels[j] == 0.0 {
                den += 1.0;
                num += if si > sj {
                    1.0
                } else if si == sj {
                    0.5
                } else {
                    0.0
                };
            }
        }
    }
    num / den
}

device_test! {
fn auc_matches_brute_force_with_ties_over_batches() {
    let mut s = 12345u64;
    let mut rnd = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for trial in 0..20 {
        let n = 50 + trial * 7;
        // Scores on a coarse grid so ties are common.
        let scores: Vec<f64> = (0..n).map(|_| (rnd() % 10) as f64 / 10.0).collect();
        let labels: Vec<f64> = (0..n)
            .map(|i| ((rnd() % 3 == 0) || i == 0) as u8 as f64)
            .collect();
        let mut auc = Auc::new();
        let half = n / 2;
        auc.update(
            &arr(labels[..half].to_vec(), &[half]),
            &arr(scores[..half].to_vec(), &[half]),
        )
        .unwrap();
        auc.update(
            &arr(labels[half..].to_vec(), &[n - half]),
            &arr(scores[half..].to_vec(), &[n - half]),
        )
        .unwrap();
        let want = brute_auc(&scores, &labels);
        assert!(
            (auc.get() - want).abs() < 1e-12,
            "trial {trial}: {} vs {want}",
            auc.get()
        );
    }
    let mut auc = Auc::new();
    auc.update(&arr(vec![1.0, 1.0], &[2]), &arr(vec![0.3, 0.4], &[2]))
        .unwrap();
    assert!(auc.get().is_nan());
}
}

device_test! {
fn classification_metrics() {
    let labels = arr(vec![0.0, 1.0, 2.0, 1.0], &[4]);
    let scores = arr(
        vec![0.8, 0.1, 0.1, 0.2, 0.3, 0.5, 0.6, 0.3, 0.1, 0.1, 0.7, 0.2],
        &[4, 3],
    );
    let mut acc = Accuracy::new();
    acc.update(&labels, &scores).unwrap();
    assert_eq!(acc.get(), 0.5);
    let mut top2 = TopKAccuracy::new(2);
    top2.update(&labels, &scores).unwrap();
    assert_eq!(top2.get(), 0.75);
    // binary: truth 1 1 0 0 1, guesses (p > 0.5) 1 0 1 0 1 -> tp 2, fn 1, fp 1, tn 1.
    let y = arr(vec![1.0, 1.0, 0.0, 0.0, 1.0], &[5]);
    let p = arr(vec![0.9, 0.2, 0.7, 0.1, 0.6], &[5]);
    let mut f1 = F1::new();
    f1.update(&y, &p).unwrap();
    assert!((f1.get() - 2.0 / 3.0).abs() < 1e-12);
    let mut mcc = MCC::new();
    mcc.update(&y, &p).unwrap();
    let want = (2.0 * 1.0 - 1.0 * 1.0) / ((3.0f64 * 3.0 * 2.0 * 2.0).sqrt());
    assert!((mcc.get() - want).abs() < 1e-12);
    let mut ba = BinaryAccuracy::new(0.5);
    ba.update(&y, &p).unwrap();
    assert!((ba.get() - 0.6).abs() < 1e-12);
    ba.reset();
    assert!(ba.get().is_nan());
    assert!(acc.update(&labels, &arr(vec![0.0; 5], &[5])).is_err());
}
}

device_test! {
fn regression_and_probability_metrics_and_composite() {
    let y = arr(vec![1.0, 2.0, 3.0, 4.0], &[4]);
    let p = arr(vec![1.5, 2.0, 2.0, 6.0], &[4]);
    let mut c = CompositeMetric::new();
    c.add(MAE::new()).add(MSE::new()).add(RMSE::new());
    c.update(&y, &p).unwrap();
    let all = c.get_all();
    assert_eq!(all[0], ("mae".to_string(), 3.5 / 4.0));
    assert_eq!(all[1].1, (0.25 + 1.0 + 4.0) / 4.0);
    assert!((all[2].1 - (5.25f64 / 4.0).sqrt()).abs() < 1e-12);
    c.reset();
    assert!(c.get().is_nan());

    let labels = arr(vec![0.0, 2.0], &[2]);
    let probs = arr(vec![0.5, 0.25, 0.25, 0.1, 0.1, 0.8], &[2, 3]);
    let mut ce = CrossEntropy::new();
    ce.update(&labels, &probs).unwrap();
    let want = -((0.5f64 + 1e-12).ln() + (0.8f64 + 1e-12).ln()) / 2.0;
    assert!((ce.get() - want).abs() < 1e-12);
    let mut ppl = Perplexity::new();
    ppl.update(&labels, &probs).unwrap();
    assert!((ppl.get() - want.exp()).abs() < 1e-12);
    let mut ll = LogLoss::new();
    ll.update(&arr(vec![1.0, 0.0], &[2]), &arr(vec![0.8, 0.3], &[2]))
        .unwrap();
    assert!((ll.get() + ((0.8f64 + 1e-12).ln() + (0.7f64 + 1e-12).ln()) / 2.0).abs() < 1e-12);
}
}
