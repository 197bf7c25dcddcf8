//! Recomputation in a hybridized training step (`HybridTrainStep::with_recompute`): the same
//! losses and gradients, bit for bit, as the step that keeps every activation, on a deep relu
//! MLP with softmax cross-entropy and on the sparse tutorial's csr model (row_sparse weight
//! gradient, sigmoid BCE), with checkpoints every ~sqrt(n) values and with everything
//! recomputed from the inputs; and a deep MLP's planned activation memory at most half of the
//! plan that keeps them all.

use sparrow_core::graph::{MemoryPlan, Recompute};
use sparrow_core::testing::test_csr;
use sparrow_core::{autograd, DType, Device, NDArray, SType};
use sparrow_nn::loss::{Loss, SigmoidBinaryCrossEntropyLoss, SoftmaxCrossEntropyLoss};
use sparrow_nn::{Block, Dense, HybridTrainStep, Initializer, Sequential};

mod hybrid_util;
use hybrid_util::{arr, copy_params, grads, tutorial_model};

fn deep_mlp(layers: usize, width: usize, classes: usize) -> Sequential {
    let mut s = Sequential::new();
    for _ in 0..layers {
        s.add(Dense::new(width).activation("relu"));
    }
    s.add(Dense::new(classes));
    s
}

fn labels(n: usize, classes: usize) -> NDArray {
    NDArray::from_vec((0..n).map(|i| ((i * 7) % classes) as f32).collect(), &[n]).unwrap()
}

/// Four steps (each followed by plain SGD) of a step that keeps every activation and one that
/// recomputes as `mode` asks, from the same weights: every loss, gradient and weight must be
/// the same bits. Returns the recomputing step's plan summary (cloned nodes).
fn same_bits(
    make: &dyn Fn() -> Sequential,
    loss: &dyn Loss,
    x: &NDArray,
    y: &NDArray,
    mode: Recompute,
) -> usize {
    let (keep, rec) = (make(), make());
    for n in [&keep, &rec] {
        n.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
        autograd::pause(|| n.forward(x)).unwrap();
    }
    copy_params(&keep, &rec);
    let mut a = HybridTrainStep::new(&keep, loss);
    let mut b = HybridTrainStep::new(&rec, loss).with_recompute(mode);
    let bits = |v: &NDArray| -> Vec<u64> {
        v.tostype(SType::Dense)
            .unwrap()
            .to_f64_vec()
            .iter()
            .map(|f| f.to_bits())
            .collect()
    };
    let sgd = |net: &Sequential| {
        for (_, p) in net.collect_params().unwrap().iter() {
            let g = p.grad().unwrap().mul_scalar(0.05).unwrap();
            p.set_data(&p.data().unwrap().sub(&g).unwrap()).unwrap();
        }
    };
    for call in 0..4 {
        let (la, lb) = (a.step(x, y).unwrap(), b.step(x, y).unwrap());
        assert_eq!(bits(&la), bits(&lb), "{mode:?}: loss, call {call}");
        for ((n, ga), (_, gb)) in grads(&keep).iter().zip(grads(&rec)) {
            let (ga, gb) = (ga.as_ref().unwrap(), gb.as_ref().unwrap());
            assert_eq!(ga.stype(), gb.stype(), "{mode:?}: stype of {n}");
            assert_eq!(bits(ga), bits(gb), "{mode:?}: gradient of {n}, call {call}");
        }
        sgd(&keep);
        sgd(&rec);
    }
    assert!(
        b.fallback_reasons().is_empty(),
        "{:?}",
        b.fallback_reasons()
    );
    let plan = b
        .train_step()
        .unwrap()
        .recompute()
        .expect("recompute on")
        .clone();
    assert!(
        plan.dropped > 0,
        "{mode:?}: nothing was recomputed: {plan:?}"
    );
    plan.cloned_nodes
}

#[test]
fn deep_mlp_recomputed_gives_the_same_bits() {
    let x = arr(&[24, 16], -1.0, 1.0, 11);
    let y = labels(24, 6);
    let make = || deep_mlp(9, 16, 6);
    let loss = SoftmaxCrossEntropyLoss::new();
    let sqrt = same_bits(&make, &loss, &x, &y, Recompute::Sqrt);
    let all = same_bits(&make, &loss, &x, &y, Recompute::Budget(usize::MAX));
    // Recomputing from the inputs clones at least every product and bias + activation.
    assert!(all >= 18 && all > sqrt, "cloned: sqrt {sqrt}, all {all}");
}

#[test]
fn csr_model_recomputed_gives_the_same_bits_and_a_row_sparse_gradient() {
    let x = test_csr(12, 400, 0.03, 5, DType::F32);
    let y = NDArray::from_vec((0..12).map(|i| (i % 2) as f32).collect(), &[12]).unwrap();
    let make = tutorial_model;
    let loss = SigmoidBinaryCrossEntropyLoss::new();
    same_bits(&make, &loss, &x, &y, Recompute::Sqrt);
    same_bits(&make, &loss, &x, &y, Recompute::Budget(usize::MAX));
}

#[test]
fn deep_mlp_plan_holds_at_most_half_the_activations() {
    let (batch, width, layers) = (32, 64, 20);
    let x = arr(&[batch, width], -1.0, 1.0, 12);
    let y = labels(batch, width);
    let net = deep_mlp(layers, width, width);
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    let loss = SoftmaxCrossEntropyLoss::new();
    let planned = |mode: Recompute| {
        let mut step = HybridTrainStep::new(&net, &loss).with_recompute(mode);
        step.step(&x, &y).unwrap();
        let ts = step.train_step().expect("traced");
        let p = ts.plan();
        (
            MemoryPlan::activation_bytes(ts.graph()),
            p.activation_peak_bytes,
        )
    };
    let (keep_planned, keep_peak) = planned(Recompute::Off);
    let (rec_planned, rec_peak) = planned(Recompute::Sqrt);
    let act = batch * width * 4;
    // Keeping them all holds every layer's activation at the turn to the backward.
    assert!(
        keep_peak >= layers * act,
        "{keep_peak} < {layers} activations"
    );
    assert!(
        2 * rec_planned <= keep_planned,
        "planned activation bytes: recompute {rec_planned}, keep all {keep_planned}"
    );
    assert!(
        2 * rec_peak <= keep_peak,
        "activation peak: recompute {rec_peak}, keep all {keep_peak}"
    );
}
