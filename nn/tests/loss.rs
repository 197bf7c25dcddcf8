//! Losses: values against Gluon's formulas, gradient checks, stability at extreme logits.

use sparrow_core::{
    autograd, device_test,
    testing::{check_grad, test_array},
    DType, NDArray, SType,
};
use sparrow_nn::loss::*;

fn f64v(v: Vec<f64>, shape: &[usize]) -> NDArray {
    NDArray::from_vec(v, shape).unwrap()
}

fn grad_ok(loss: &dyn Loss, pred: &NDArray, label: &NDArray) {
    check_grad(
        |xs| loss.forward(&xs[0], label),
        std::slice::from_ref(pred),
        1e-6,
        1e-4,
        1e-7,
    )
    .unwrap();
}

device_test! {
fn gradient_checks_for_every_loss() {
    let pred = test_array(&[4, 3], -2.0, 2.0, 1);
    let real = test_array(&[4, 3], -1.0, 1.0, 2);
    let prob = test_array(&[4, 3], 0.05, 0.95, 3);
    let signs = f64v(
        (0..12)
            .map(|i| if i % 3 == 0 { 1.0 } else { -1.0 })
            .collect(),
        &[4, 3],
    );
    let bits = f64v((0..12).map(|i| (i % 2) as f64).collect(), &[4, 3]);
    let classes = f64v(vec![0.0, 2.0, 1.0, 2.0], &[4]);
    let counts = f64v((0..12).map(|i| (i % 4) as f64).collect(), &[4, 3]);
    grad_ok(&L1Loss::new(), &pred, &real);
    grad_ok(&L2Loss::new().weight(2.0), &pred, &real);
    grad_ok(&HuberLoss::new(0.5), &pred, &real);
    grad_ok(&HingeLoss::new(1.0), &pred, &signs);
    grad_ok(&SquaredHingeLoss::new(1.0), &pred, &signs);
    grad_ok(&SigmoidBinaryCrossEntropyLoss::new(), &pred, &bits);
    grad_ok(
        &SigmoidBinaryCrossEntropyLoss::new().from_sigmoid(true),
        &prob,
        &bits,
    );
    grad_ok(&SoftmaxCrossEntropyLoss::new(), &pred, &classes);
    grad_ok(
        &SoftmaxCrossEntropyLoss::new().sparse_label(false),
        &pred,
        &prob,
    );
    grad_ok(&LogisticLoss::new(), &pred, &signs);
    grad_ok(&LogisticLoss::new().binary_labels(true), &pred, &bits);
    grad_ok(&KLDivLoss::new().from_logits(false), &pred, &prob);
    grad_ok(&KLDivLoss::new(), &pred, &prob);
    grad_ok(&PoissonNLLLoss::new(), &pred, &counts);
    grad_ok(
        &PoissonNLLLoss::new().from_logits(false).compute_full(true),
        &prob,
        &counts,
    );
    let x2 = test_array(&[4, 3], -1.0, 1.0, 5);
    let y = f64v(vec![1.0, -1.0, 1.0, -1.0], &[4]);
    let cel = CosineEmbeddingLoss::new(0.1);
    check_grad(
        |xs| cel.forward_pair(&xs[0], &xs[1], &y, None),
        &[pred.clone(), x2],
        1e-6,
        1e-4,
        1e-7,
    )
    .unwrap();
}
}

device_test! {
fn values_match_gluon_formulas() {
    let pred = f64v(vec![1.0, -2.0, 0.5, 3.0], &[2, 2]);
    let label = f64v(vec![0.0, 1.0, 1.0, 1.0], &[2, 2]);
    let l2 = L2Loss::new().forward(&pred, &label).unwrap().to_f64_vec();
    assert_eq!(l2, vec![(0.5 + 4.5) / 2.0, (0.125 + 2.0) / 2.0]);
    let l1 = L1Loss::new().forward(&pred, &label).unwrap().to_f64_vec();
    assert_eq!(l1, vec![2.0, 1.25]);
    let hub = HuberLoss::new(1.0)
        .forward(&pred, &label)
        .unwrap()
        .to_f64_vec();
    assert_eq!(hub, vec![(0.5 + 2.5) / 2.0, (0.125 + 1.5) / 2.0]);
    // sample weights broadcast over the batch and scale each sample.
    let sw = f64v(vec![0.0, 2.0], &[2, 1]);
    let w = L1Loss::new()
        .forward_weighted(&pred, &label, Some(&sw))
        .unwrap()
        .to_f64_vec();
    assert_eq!(w, vec![0.0, 2.5]);
    // batch_axis = 1 averages over axis 0 instead.
    let b1 = L1Loss::new()
        .batch_axis(1)
        .forward(&pred, &label)
        .unwrap()
        .to_f64_vec();
    assert_eq!(b1, vec![0.75, 2.5]);
    // softmax CE with sparse labels equals -log softmax at the label.
    let logits = f64v(vec![1.0, 2.0, 3.0], &[1, 3]);
    let ce = SoftmaxCrossEntropyLoss::new()
        .forward(&logits, &f64v(vec![2.0], &[1]))
        .unwrap()
        .item()
        .unwrap();
    let want = -(3f64.exp() / (1f64.exp() + 2f64.exp() + 3f64.exp())).ln();
    assert!((ce - want).abs() < 1e-12);
    assert!(SoftmaxCrossEntropyLoss::new()
        .forward(&logits, &f64v(vec![3.0], &[1]))
        .is_err());
    // logistic loss with signed labels: log(1 + exp(-x y)).
    let lg = LogisticLoss::new()
        .forward(&f64v(vec![0.3], &[1]), &f64v(vec![-1.0], &[1]))
        .unwrap()
        .item()
        .unwrap();
    assert!((lg - (1.0 + 0.3f64.exp()).ln()).abs() < 1e-12);
    // Poisson NLL is a scalar mean, as in Gluon.
    let p = PoissonNLLLoss::new().forward(&pred, &label).unwrap();
    assert_eq!(p.shape(), Vec::<usize>::new());
    // cosine embedding: identical vectors with label 1 give 0, with label -1 give cos - margin.
    let a = f64v(vec![1.0, 2.0, 1.0, 2.0], &[2, 2]);
    let c = CosineEmbeddingLoss::new(0.2)
        .forward_pair(&a, &a, &f64v(vec![1.0, -1.0], &[2]), None)
        .unwrap()
        .to_f64_vec();
    assert!(c[0].abs() < 1e-12 && (c[1] - 0.8).abs() < 1e-12, "{c:?}");
}
}

device_test! {
fn sigmoid_bce_is_stable_at_extreme_logits() {
    let x =
        NDArray::from_vec(vec![-1000.0f32, -200.0, -101.0, 101.0, 200.0, 1000.0], &[6]).unwrap();
    let z1 = NDArray::ones(&[6], DType::F32).unwrap();
    let z0 = NDArray::zeros(&[6], DType::F32).unwrap();
    let l = SigmoidBinaryCrossEntropyLoss::new();
    let v1 = l.forward(&x, &z1).unwrap().to_vec::<f32>().unwrap();
    let v0 = l.forward(&x, &z0).unwrap().to_vec::<f32>().unwrap();
    let xs = [-1000.0f32, -200.0, -101.0, 101.0, 200.0, 1000.0];
    for i in 0..6 {
        // label 1: softplus(-x); label 0: softplus(x). Exact in f32 here.
        let (w1, w0) = (xs[i].min(0.0).abs(), xs[i].max(0.0));
        assert!(v1[i].is_finite() && v0[i].is_finite());
        assert!(
            (v1[i] - w1).abs() <= 1e-4 * w1.max(1.0),
            "{i}: {} vs {w1}",
            v1[i]
        );
        assert!(
            (v0[i] - w0).abs() <= 1e-4 * w0.max(1.0),
            "{i}: {} vs {w0}",
            v0[i]
        );
    }
    // The gradient is sigmoid(x) - z: finite, in [-1, 1].
    x.attach_grad();
    let s = autograd::record(|| l.forward(&x, &z1)?.sum_all()).unwrap();
    s.backward().unwrap();
    let g = x.grad().unwrap().to_vec::<f32>().unwrap();
    assert!(g.iter().all(|v| v.is_finite() && v.abs() <= 1.0), "{g:?}");
    assert!((g[0] + 1.0).abs() < 1e-6 && g[5].abs() < 1e-6);
    // Softmax CE and logistic loss at huge logits stay finite too.
    let big = NDArray::from_vec(vec![1000.0f32, -1000.0, 0.0], &[1, 3]).unwrap();
    let ce = SoftmaxCrossEntropyLoss::new()
        .forward(&big, &NDArray::from_vec(vec![1.0f32], &[1]).unwrap())
        .unwrap();
    assert!((ce.item().unwrap() - 2000.0).abs() < 1e-2);
    let lg = LogisticLoss::new()
        .forward(&x, &z1.neg().unwrap())
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!(lg.iter().all(|v| v.is_finite()));
}
}

device_test! {
fn sigmoid_bce_gradient_reaches_soft_labels_too() {
    // The fused logits path returns a label gradient (-x) when the labels are in the graph.
    bce_grads_check(&[3, 2], &[3, 2], 5);
}
}

/// Finite-difference check of sigmoid BCE on logits with respect to both the predictions and
/// (soft) labels of the given shapes.
fn bce_grads_check(pred_shape: &[usize], label_shape: &[usize], seed: u64) {
    let pred = test_array(pred_shape, -2.0, 2.0, seed);
    let soft = test_array(label_shape, 0.1, 0.9, seed + 1);
    check_grad(
        |xs| SigmoidBinaryCrossEntropyLoss::new().forward(&xs[0], &xs[1]),
        &[pred, soft],
        1e-6,
        1e-4,
        1e-7,
    )
    .unwrap();
}

device_test! {
fn a_loss_with_single_element_non_batch_axes_is_reshaped_not_reduced() {
    // (batch, 1), (batch, 1, 1) and, with batch_axis 1, (1, batch): the batch mean is a
    // reshape to (batch,); values equal the per-sample losses, gradients pass through.
    let pred = f64v(vec![0.5, -1.0, 2.0, 0.0], &[4, 1]);
    let label = f64v(vec![1.0, 0.0, 3.0, -1.0], &[4, 1]);
    let per: Vec<f64> = [0.5f64, -1.0, 2.0, 0.0]
        .iter()
        .zip([1.0f64, 0.0, 3.0, -1.0])
        .map(|(p, l)| (p - l).abs())
        .collect();
    let l = L1Loss::new().forward(&pred, &label).unwrap();
    assert_eq!(l.shape(), vec![4]);
    assert_eq!(l.to_f64_vec(), per);
    let l3 = L1Loss::new()
        .forward(
            &pred.reshape(&[4, 1, 1]).unwrap(),
            &label.reshape(&[4, 1, 1]).unwrap(),
        )
        .unwrap();
    assert_eq!((l3.shape(), l3.to_f64_vec()), (vec![4], per.clone()));
    let lt = L1Loss::new()
        .batch_axis(1)
        .forward(
            &pred.reshape(&[1, 4]).unwrap(),
            &label.reshape(&[1, 4]).unwrap(),
        )
        .unwrap();
    assert_eq!((lt.shape(), lt.to_f64_vec()), (vec![4], per));
    sparrow_core::testing::check_grad(
        |xs| L2Loss::new().forward(&xs[0], &label),
        std::slice::from_ref(&pred),
        1e-6,
        1e-6,
        1e-9,
    )
    .unwrap();
}
}

device_test! {
fn sigmoid_bce_on_per_sample_logits_matches_the_general_path() {
    // (batch, 1) logits with (batch,) labels, (1, batch) with batch_axis 1 and (batch, 1, 1):
    // the fused per-sample path. A sample weight of ones takes the general path (label
    // reshape, elementwise loss, batch mean): values and both gradients must agree.
    let vals = vec![0.5, -1.0, 2.0, 0.0, -30.0, 40.0];
    let labels = vec![1.0, 0.0, 1.0, 0.3, 1.0, 0.0];
    for (pshape, axis) in [(vec![6, 1], 0), (vec![1, 6], 1), (vec![6, 1, 1], 0)] {
        let loss = SigmoidBinaryCrossEntropyLoss::new().batch_axis(axis);
        let run = |weighted: bool| {
            let pred = f64v(vals.clone(), &pshape);
            let label = f64v(labels.clone(), &[6]);
            pred.attach_grad();
            label.attach_grad();
            let ones = f64v(vec![1.0; 6], &pshape);
            let l = autograd::record(|| {
                loss.forward_weighted(&pred, &label, weighted.then_some(&ones))
            })
            .unwrap();
            let op = l.node().map(|n| n.op);
            l.backward().unwrap();
            (
                op,
                l.shape(),
                l.to_f64_vec(),
                pred.grad().unwrap().shape(),
                pred.grad().unwrap().to_f64_vec(),
                label.grad().unwrap().shape(),
                label.grad().unwrap().to_f64_vec(),
            )
        };
        let (fused, general) = (run(false), run(true));
        // One recorded op on the fused path; the general path ends in its batch-mean reshape.
        assert_eq!(fused.0, Some("sigmoid_bce_logits"));
        assert_ne!(general.0, Some("sigmoid_bce_logits"));
        assert_eq!(fused.1, vec![6]);
        assert_eq!((&fused.3, &fused.5), (&pshape, &vec![6]));
        assert_eq!(
            (&fused.1, &fused.3, &fused.5),
            (&general.1, &general.3, &general.5)
        );
        for (a, b) in [
            (&fused.2, &general.2),
            (&fused.4, &general.4),
            (&fused.6, &general.6),
        ] {
            for (x, y) in a.iter().zip(b.iter()) {
                assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{a:?} vs {b:?}");
            }
        }
    }
    // Finite differences through the fused path, label of another shape included.
    bce_grads_check(&[5, 1], &[5], 7);
    // A label of the wrong size is still reported.
    let err = SigmoidBinaryCrossEntropyLoss::new()
        .forward(&f64v(vec![0.0; 4], &[4, 1]), &f64v(vec![0.0; 3], &[3]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("label shape"), "{err}");
}
}

device_test! {
fn sigmoid_bce_logits_takes_a_sparse_head_gradient_through_the_general_ops() {
    // A head gradient that is not a dense array of the output's shape (here row_sparse) goes
    // through the general ops; the gradients must equal the direct loops' with the same
    // values given densely, in the inputs' own shapes.
    let grads = |head: &NDArray| {
        let x = f64v(vec![0.5, -1.0, 2.0, 0.0], &[4, 1]);
        let z = f64v(vec![1.0, 0.0, 0.3, 1.0], &[4]);
        x.attach_grad();
        z.attach_grad();
        let l = autograd::record(|| {
            sparrow_core::ops::fused::sigmoid_bce_logits_to(&x, &z, &[4]).map(|l| l.unwrap())
        })
        .unwrap();
        l.backward_with_grad(head).unwrap();
        let (gx, gz) = (x.grad().unwrap(), z.grad().unwrap());
        (gx.shape(), gx.to_f64_vec(), gz.shape(), gz.to_f64_vec())
    };
    let dense = f64v(vec![0.0, 2.0, 0.0, -1.5], &[4]);
    let sparse = dense.tostype(SType::RowSparse).unwrap();
    let (want, got) = (grads(&dense), grads(&sparse));
    assert_eq!((&got.0, &got.2), (&vec![4, 1], &vec![4]));
    assert_eq!((&got.0, &got.2), (&want.0, &want.2));
    for (a, b) in [(&got.1, &want.1), (&got.3, &want.3)] {
        for (x, y) in a.iter().zip(b.iter()) {
            assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{a:?} vs {b:?}");
        }
    }
}
}

/// `-sum(t * log_softmax(x))` over the last axis through the general operators.
fn softmax_ce_composite(x: &NDArray, t: &NDArray) -> sparrow_core::Result<NDArray> {
    x.log_softmax(-1)?.mul(t)?.sum(Some(&[-1]), true)?.neg()
}

device_test! {
fn softmax_ce_logits_equals_the_composite_on_random_inputs() {
    // Random logits of rank 1 to 3 (one block wide enough that the kernels split it over
    // threads) against soft targets that need not sum to one, float64 and float32: the fused
    // op (one recorded op) against log_softmax, product, sum and negation, in values and in
    // both gradients under a random head gradient. Off the host the op declines.
    use sparrow_core::ops::fused::softmax_ce_logits;
    for (k, shape) in [vec![5], vec![4, 3], vec![2, 3, 7], vec![64, 1024]]
        .into_iter()
        .enumerate()
    {
        for (dtype, tol) in [(DType::F64, 1e-12), (DType::F32, 2e-5)] {
            let seed = 3 * k as u64;
            let mut oshape = shape.clone();
            *oshape.last_mut().unwrap() = 1;
            let run = |fused: bool| {
                let x = test_array(&shape, -4.0, 4.0, seed + 1).astype(dtype).unwrap();
                let t = test_array(&shape, 0.0, 1.0, seed + 2).astype(dtype).unwrap();
                let head = test_array(&oshape, -1.0, 1.0, seed + 3).astype(dtype).unwrap();
                x.attach_grad();
                t.attach_grad();
                let l = autograd::record(|| {
                    if fused {
                        softmax_ce_logits(&x, &t)
                    } else {
                        softmax_ce_composite(&x, &t).map(Some)
                    }
                })
                .unwrap()?;
                let op = l.node().map(|n| n.op);
                l.backward_with_grad(&head).unwrap();
                let (gx, gt) = (x.grad().unwrap(), t.grad().unwrap());
                assert_eq!((l.shape(), gx.shape(), gt.shape()), (oshape.clone(), shape.clone(), shape.clone()));
                Some((op, l.to_f64_vec(), gx.to_f64_vec(), gt.to_f64_vec()))
            };
            let want = run(false).unwrap();
            let Some(got) = run(true) else {
                assert_ne!(sparrow_core::Device::current(), sparrow_core::Device::Cpu);
                continue;
            };
            assert_eq!(got.0, Some("softmax_ce_logits"));
            for (a, b) in [(&got.1, &want.1), (&got.2, &want.2), (&got.3, &want.3)] {
                for (x, y) in a.iter().zip(b.iter()) {
                    assert!(
                        (x - y).abs() <= tol * (1.0 + y.abs()),
                        "{shape:?} {dtype:?}: {x} vs {y}"
                    );
                }
            }
        }
    }
}
}

device_test! {
fn softmax_ce_logits_gradients_pass_finite_differences() {
    // Logits and targets both differentiated, through the loss (batch mean after the fused
    // op) and through the op alone on a 3-D block.
    let pred = test_array(&[5, 4], -3.0, 3.0, 11);
    let soft = test_array(&[5, 4], 0.0, 1.0, 12);
    check_grad(
        |xs| SoftmaxCrossEntropyLoss::new().sparse_label(false).forward(&xs[0], &xs[1]),
        &[pred, soft],
        1e-6,
        1e-5,
        1e-8,
    )
    .unwrap();
    let x = test_array(&[2, 3, 4], -3.0, 3.0, 13);
    let t = test_array(&[2, 3, 4], 0.0, 2.0, 14);
    check_grad(
        |xs| {
            sparrow_core::ops::fused::softmax_ce_logits(&xs[0], &xs[1])
                .and_then(|l| l.map_or_else(|| softmax_ce_composite(&xs[0], &xs[1]), Ok))
        },
        &[x, t],
        1e-6,
        1e-5,
        1e-8,
    )
    .unwrap();
}
}

#[test]
fn softmax_ce_logits_declines_what_it_does_not_fuse() {
    use sparrow_core::ops::fused::softmax_ce_logits;
    let x = test_array(&[3, 4], -1.0, 1.0, 1);
    let t = test_array(&[3, 4], 0.0, 1.0, 2);
    // Other shapes, dtypes of their own, half precision, a sparse target, an empty class axis.
    for (a, b) in [
        (x.clone(), test_array(&[4, 3], 0.0, 1.0, 2)),
        (x.clone(), t.astype(DType::F32).unwrap()),
        (x.astype(DType::F16).unwrap(), t.astype(DType::F16).unwrap()),
        (x.clone(), t.tostype(SType::Csr).unwrap()),
        (
            NDArray::zeros(&[3, 0], DType::F64).unwrap(),
            NDArray::zeros(&[3, 0], DType::F64).unwrap(),
        ),
    ] {
        assert!(
            softmax_ce_logits(&a, &b).unwrap().is_none(),
            "{:?} {:?}",
            a.shape(),
            b.shape()
        );
    }
    // The loss still computes those through the general operators.
    let l = SoftmaxCrossEntropyLoss::new()
        .sparse_label(false)
        .forward(&x, &t.tostype(SType::Csr).unwrap())
        .unwrap();
    let want = SoftmaxCrossEntropyLoss::new()
        .sparse_label(false)
        .forward(&x, &t)
        .unwrap();
    for (a, b) in l.to_f64_vec().iter().zip(want.to_f64_vec()) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }
}

/// Class ids below `classes` in `shape`, as `dtype`.
fn class_ids(shape: &[usize], classes: usize, seed: u64, dtype: DType) -> NDArray {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| ((i as u64 * 7919 + seed * 104_729) % classes as u64) as f64)
        .collect();
    f64v(v, shape).astype(dtype).unwrap()
}

device_test! {
fn softmax_ce_ids_equals_the_composite_on_its_one_hot_rows() {
    // Class ids in several shapes of the rows' count, float64 and float32: the fused op
    // against log_softmax, the one-hot rows, product, sum and negation, in values and in the
    // logits' gradient under a random head gradient. Off the host the op declines.
    use sparrow_core::ops::fused::softmax_ce_ids;
    for (k, (shape, id_shape)) in [
        (vec![4, 3], vec![4]),
        (vec![2, 3, 7], vec![2, 3]),
        (vec![2, 3, 7], vec![6]),
        (vec![64, 1024], vec![64, 1]),
    ]
    .into_iter()
    .enumerate()
    {
        for (dtype, tol) in [(DType::F64, 1e-12), (DType::F32, 2e-5)] {
            let seed = 5 * k as u64;
            let classes = *shape.last().unwrap();
            let mut oshape = shape.clone();
            *oshape.last_mut().unwrap() = 1;
            let run = |fused: bool| {
                let x = test_array(&shape, -4.0, 4.0, seed + 1).astype(dtype).unwrap();
                let ids = class_ids(&id_shape, classes, seed, dtype);
                let head = test_array(&oshape, -1.0, 1.0, seed + 3).astype(dtype).unwrap();
                x.attach_grad();
                let l = autograd::record(|| {
                    if fused {
                        softmax_ce_ids(&x, &ids)
                    } else {
                        let lead = &shape[..shape.len() - 1];
                        let t = ids.reshape(lead)?.one_hot(classes, 1.0, 0.0, dtype)?;
                        softmax_ce_composite(&x, &t).map(Some)
                    }
                })
                .unwrap()?;
                let op = l.node().map(|n| n.op);
                l.backward_with_grad(&head).unwrap();
                let gx = x.grad().unwrap();
                assert_eq!((l.shape(), gx.shape()), (oshape.clone(), shape.clone()));
                Some((op, l.to_f64_vec(), gx.to_f64_vec()))
            };
            let want = run(false).unwrap();
            let Some(got) = run(true) else {
                assert_ne!(sparrow_core::Device::current(), sparrow_core::Device::Cpu);
                continue;
            };
            assert_eq!(got.0, Some("softmax_ce_ids"));
            for (a, b) in [(&got.1, &want.1), (&got.2, &want.2)] {
                for (x, y) in a.iter().zip(b.iter()) {
                    assert!(
                        (x - y).abs() <= tol * (1.0 + y.abs()),
                        "{shape:?} {dtype:?}: {x} vs {y}"
                    );
                }
            }
        }
    }
    // Finite differences of the logits through the op on a 3-D block.
    let ids = class_ids(&[2, 3], 4, 9, DType::F64);
    check_grad(
        |xs| match softmax_ce_ids(&xs[0], &ids)? {
            Some(l) => Ok(l),
            // Off the host the op declines: the same check of the composite.
            None => softmax_ce_composite(&xs[0], &ids.one_hot(4, 1.0, 0.0, DType::F64)?),
        },
        &[test_array(&[2, 3, 4], -3.0, 3.0, 15)],
        1e-6,
        1e-5,
        1e-8,
    )
    .unwrap();
}
}

#[test]
fn softmax_ce_ids_refuses_ids_that_are_not_classes_and_declines_other_operands() {
    use sparrow_core::ops::fused::softmax_ce_ids;
    let x = test_array(&[3, 4], -1.0, 1.0, 1);
    for (bad, at) in [
        (vec![0.0, 4.0, 1.0], 1),
        (vec![0.0, 1.0, 2.5], 2),
        (vec![-1.0, 0.0, 1.0], 0),
    ] {
        let err = softmax_ce_ids(&x, &f64v(bad, &[3]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("at position {at}")), "{err}");
    }
    // A count other than the rows', another dtype, or an empty class axis: declined.
    let ids = f64v(vec![0.0, 1.0, 2.0], &[3]);
    assert!(softmax_ce_ids(&x, &f64v(vec![0.0; 4], &[4]))
        .unwrap()
        .is_none());
    assert!(softmax_ce_ids(&x, &ids.astype(DType::F32).unwrap())
        .unwrap()
        .is_none());
    let empty = NDArray::zeros(&[3, 0], DType::F64).unwrap();
    assert!(softmax_ce_ids(&empty, &ids).unwrap().is_none());
    // The loss from ids of another dtype than the prediction's takes the one-hot path: the
    // same values.
    let loss = SoftmaxCrossEntropyLoss::new();
    let a = loss.forward(&x, &ids).unwrap().to_f64_vec();
    let b = loss
        .forward(&x, &ids.astype(DType::F32).unwrap())
        .unwrap()
        .to_f64_vec();
    for (p, q) in a.iter().zip(&b) {
        assert!((p - q).abs() < 1e-12, "{a:?} vs {b:?}");
    }
}
