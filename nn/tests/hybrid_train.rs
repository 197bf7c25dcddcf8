//! Hybridized training (`HybridTrainStep`: forward, loss and backward as one planned graph)
//! against eager training: losses and every gradient (with storage types) for Dense MLPs with
//! each activation and each loss the graph backward covers, the sparse tutorial's csr model
//! with a row_sparse weight gradient, training over several SGD steps, and the eager
//! fallback naming an operator without a graph backward.
//!
//! Tolerance: gradients are compared to 1 ulp of f32 scaled by the largest magnitude of each
//! array (`ulp_close`); the graph runs the eager backwards' kernels in the same order, so in
//! practice they agree bit for bit, which the tests also report.

use sparrow_core::testing::test_csr;
use sparrow_core::{autograd, DType, Device, NDArray, SType};
use sparrow_nn::loss::{
    L1Loss, L2Loss, Loss, SigmoidBinaryCrossEntropyLoss, SoftmaxCrossEntropyLoss,
};
use sparrow_nn::{Block, Dense, HybridTrainStep, Initializer, PReLU, Sequential, Swish, ELU};

mod hybrid_util;
use hybrid_util::{arr, copy_params, eager_step, grads, tutorial_model, ulp_close};

/// Loss and gradients of `HybridTrainStep` against eager at the same weights, for the tracing
/// step and two graph steps. Returns whether every gradient was bit for bit the eager one.
fn check(make: &dyn Fn() -> Sequential, loss: &dyn Loss, x: &NDArray, y: &NDArray) -> bool {
    let eager = make();
    let hyb = make();
    eager
        .initialize(&Initializer::xavier(), Device::Cpu)
        .unwrap();
    hyb.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    // Shapes of deferred parameters first, then the same weights.
    autograd::pause(|| eager.forward(x)).unwrap();
    autograd::pause(|| hyb.forward(x)).unwrap();
    copy_params(&eager, &hyb);
    let mut step = HybridTrainStep::new(&hyb, loss);
    let mut exact = true;
    for call in 0..3 {
        let le = eager_step(&eager, loss, x, y);
        let lh = step.step(x, y).unwrap();
        ulp_close(&le, &lh, &format!("loss, call {call}"));
        for ((n, ge), (_, gh)) in grads(&eager).iter().zip(grads(&hyb)) {
            let (ge, gh) = (ge.as_ref().unwrap(), gh.as_ref().unwrap());
            ulp_close(ge, gh, &format!("gradient of {n}, call {call}"));
            exact &= ge.to_f64_vec() == gh.to_f64_vec();
        }
    }
    assert!(
        step.fallback_reasons().is_empty(),
        "{:?}",
        step.fallback_reasons()
    );
    assert!(step.train_step().is_some());
    exact
}

fn labels(n: usize, classes: usize) -> NDArray {
    NDArray::from_vec((0..n).map(|i| ((i * 7) % classes) as f32).collect(), &[n]).unwrap()
}

fn mlp(acts: &[&str], widths: &[usize]) -> Sequential {
    let mut s = Sequential::new();
    for (i, &w) in widths.iter().enumerate() {
        let mut d = Dense::new(w);
        if let Some(a) = acts.get(i).filter(|a| !a.is_empty()) {
            d = d.activation(a);
        }
        s.add(d);
    }
    s
}

#[test]
fn mlp_with_each_activation_and_softmax_ce() {
    let x = arr(&[16, 12], -1.0, 1.0, 1);
    let y = labels(16, 5);
    let exact = check(
        &|| mlp(&["relu", "tanh", "sigmoid", ""], &[20, 10, 8, 5]),
        &SoftmaxCrossEntropyLoss::new(),
        &x,
        &y,
    );
    eprintln!("softmax ce mlp gradients bit for bit: {exact}");
}

#[test]
fn mlp_with_the_other_activations_and_prelu() {
    let x = arr(&[16, 12], -2.0, 2.0, 5);
    let y = labels(16, 4);
    let acts = [
        "gelu",
        "elu",
        "selu",
        "mish",
        "silu",
        "gelu_tanh",
        "log_sigmoid",
        "softsign",
        "",
    ];
    let exact = check(
        &|| mlp(&acts, &[14, 13, 12, 11, 10, 9, 8, 7, 4]),
        &SoftmaxCrossEntropyLoss::new(),
        &x,
        &y,
    );
    eprintln!("other activations' gradients bit for bit: {exact}");
    // Parametrized layers: ELU, Swish, and PReLU's learned slopes (one per unit, broadcast
    // along axis 1; their gradient summed over the batch).
    let make = || {
        let mut s = Sequential::new();
        s.add(Dense::new(9))
            .add(ELU::new(0.4).unwrap())
            .add(Dense::new(8))
            .add(Swish::new(1.7).unwrap())
            .add(Dense::new(7))
            .add(PReLU::with_channels(7).alpha_initializer(Initializer::Uniform { scale: 0.5 }))
            .add(Dense::new(6))
            .add(PReLU::new())
            .add(Dense::new(4));
        s
    };
    check(&make, &SoftmaxCrossEntropyLoss::new(), &x, &y);
}

#[test]
fn mlp_with_l2_l1_and_sigmoid_bce() {
    let x = arr(&[10, 6], -1.0, 1.0, 2);
    let y = arr(&[10, 1], 0.0, 1.0, 3);
    let make = || mlp(&["relu", "softrelu", ""], &[9, 7, 1]);
    for (name, loss) in [
        ("l2", &L2Loss::new() as &dyn Loss),
        ("l1", &L1Loss::new()),
        ("sigmoid bce", &SigmoidBinaryCrossEntropyLoss::new()),
    ] {
        let exact = check(&make, loss, &x, &y);
        eprintln!("{name} mlp gradients bit for bit: {exact}");
    }
    // A (batch, 3) output: the BCE's general path and the loss's mean over the class axis.
    let y3 = arr(&[10, 3], 0.0, 1.0, 4);
    let make3 = || mlp(&["sigmoid", ""], &[9, 3]);
    check(&make3, &SigmoidBinaryCrossEntropyLoss::new(), &x, &y3);
    check(&make3, &L2Loss::new(), &x, &y3);
}

#[test]
fn csr_tutorial_model_keeps_a_row_sparse_weight_gradient() {
    let x = test_csr(10, 500, 0.02, 5, DType::F32);
    let y = NDArray::from_vec((0..10).map(|i| (i % 2) as f32).collect(), &[10]).unwrap();
    let make = tutorial_model;
    check(&make, &SigmoidBinaryCrossEntropyLoss::new(), &x, &y);
    // The graph's first-layer gradient really is row_sparse.
    let net = make();
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    let loss = SigmoidBinaryCrossEntropyLoss::new();
    let mut step = HybridTrainStep::new(&net, &loss);
    step.step(&x, &y).unwrap();
    step.step(&x, &y).unwrap();
    let p = net.collect_params().unwrap();
    let (_, w) = p
        .iter()
        .find(|(n, _)| n.ends_with("weight"))
        .expect("a weight");
    assert_eq!(w.grad().unwrap().stype(), SType::RowSparse);
}

/// The graph rewrites last step's row_sparse weight gradient in place when nobody holds it
/// (its values buffer viewed at the new batch's row count), and makes a new one when the
/// batch touches more rows than the buffer has or the caller kept the last one: over batches
/// touching different numbers of columns every gradient is the eager one, bit for bit, and a
/// gradient the caller kept keeps its values.
#[test]
fn row_sparse_gradient_rewritten_across_batches_and_kept_ones_left_alone() {
    let y = NDArray::from_vec((0..10).map(|i| (i % 2) as f32).collect(), &[10]).unwrap();
    let densities = [0.01, 0.04, 0.02, 0.04, 0.02, 0.01];
    let batches: Vec<NDArray> = densities
        .iter()
        .enumerate()
        .map(|(k, &d)| {
            let x = test_csr(10, 500, d, 20 + k as u64, DType::F32);
            x.prepare_csr_transpose();
            x
        })
        .collect();
    let (eager, hyb) = (tutorial_model(), tutorial_model());
    for n in [&eager, &hyb] {
        n.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
        autograd::pause(|| n.forward(&batches[0])).unwrap();
    }
    copy_params(&eager, &hyb);
    let loss = SigmoidBinaryCrossEntropyLoss::new();
    let mut step = HybridTrainStep::new(&hyb, &loss);
    let params = hyb.collect_params().unwrap();
    let first = params
        .iter()
        .find(|(_, p)| p.grad_stype() == SType::RowSparse)
        .map(|(_, p)| p.clone())
        .expect("a row_sparse weight gradient");
    let mut kept: Option<(NDArray, Vec<f64>)> = None;
    let mut ids = Vec::new();
    for (k, x) in batches.iter().enumerate() {
        eager_step(&eager, &loss, x, &y);
        step.step(x, &y).unwrap();
        for ((n, ge), (_, gh)) in grads(&eager).iter().zip(grads(&hyb)) {
            let (ge, gh) = (ge.as_ref().unwrap(), gh.as_ref().unwrap());
            assert_eq!(ge.stype(), gh.stype(), "{n}, batch {k}");
            assert_eq!(
                ge.tostype(SType::Dense).unwrap().to_f64_vec(),
                gh.tostype(SType::Dense).unwrap().to_f64_vec(),
                "gradient of {n}, batch {k}"
            );
        }
        if let Some((g, v)) = &kept {
            assert_eq!(
                &g.tostype(SType::Dense).unwrap().to_f64_vec(),
                v,
                "a kept gradient changed at batch {k}"
            );
        }
        let g = first.grad().unwrap();
        ids.push(g.id());
        match k {
            1 => kept = Some((g.clone(), g.tostype(SType::Dense).unwrap().to_f64_vec())),
            3 => kept = None,
            _ => {}
        }
    }
    ids.dedup();
    assert_eq!(
        ids.len(),
        batches.len(),
        "every step's gradient is a new array: {ids:?}"
    );
}

#[test]
fn training_over_steps_matches_eager() {
    let x = arr(&[32, 10], -1.0, 1.0, 6);
    let y = labels(32, 4);
    let make = || mlp(&["relu", "relu", ""], &[16, 16, 4]);
    let (eager, hyb) = (make(), make());
    for n in [&eager, &hyb] {
        n.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
        autograd::pause(|| n.forward(&x)).unwrap();
    }
    copy_params(&eager, &hyb);
    let loss = SoftmaxCrossEntropyLoss::new();
    // Plain SGD, w -= 0.1 g / batch (the Trainer's own run is the hybridize example's).
    let sgd = |net: &Sequential| {
        for (_, p) in net.collect_params().unwrap().iter() {
            let g = p.grad().unwrap().mul_scalar(0.1 / 32.0).unwrap();
            p.set_data(&p.data().unwrap().sub(&g).unwrap()).unwrap();
        }
    };
    let mut step = HybridTrainStep::new(&hyb, &loss);
    let mut first = None;
    let mut last = 0.0;
    for _ in 0..8 {
        let le = eager_step(&eager, &loss, &x, &y);
        sgd(&eager);
        let lh = step.step(&x, &y).unwrap();
        sgd(&hyb);
        ulp_close(&le, &lh, "loss");
        let m = lh.mean(None, false).unwrap().item().unwrap();
        first.get_or_insert(m);
        last = m;
    }
    assert!(
        last < first.unwrap(),
        "the loss went down: {first:?} -> {last}"
    );
    for ((n, a), (_, b)) in eager
        .collect_params()
        .unwrap()
        .iter()
        .zip(hyb.collect_params().unwrap().iter())
    {
        ulp_close(
            &a.data().unwrap(),
            &b.data().unwrap(),
            &format!("weight {n}"),
        );
    }
}

#[test]
fn joint_plan_keeps_fewer_bytes_than_all_activations() {
    let x = arr(&[64, 32], -1.0, 1.0, 7);
    let y = labels(64, 32);
    let net = mlp(&["relu"; 8], &[32; 9]);
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    let loss = SoftmaxCrossEntropyLoss::new();
    let mut step = HybridTrainStep::new(&net, &loss);
    step.step(&x, &y).unwrap();
    let ts = step.train_step().expect("traced");
    let plan = ts.plan();
    // Backward nodes follow the forward's and every parameter has a gradient output.
    assert!(ts.graph().nodes().len() > ts.forward_nodes());
    assert_eq!(ts.graph().outputs().len(), 1 + ts.forward().params().len());
    // Buffers are shared: the plan holds less than every value of the joint graph at once.
    assert!(plan.planned_bytes() < plan.total_bytes, "{plan:?}");
    // The products and bias + activations of both halves run out of the plan.
    let fallback = ts.fallback_ops();
    assert!(!fallback.contains(&"dot"), "{fallback:?}");
    assert!(!fallback.contains(&"bias_act"), "{fallback:?}");
}

#[test]
fn operator_without_graph_backward_trains_eagerly_with_its_name() {
    // `broadcast_to` in a forward has no graph backward.
    let x = arr(&[6, 4], -1.0, 1.0, 8);
    let y = arr(&[6, 1], 0.0, 2.0, 9);
    let make = || {
        let mut s = mlp(&[""], &[3]);
        s.add(sparrow_nn::Lambda::new(|h| {
            h.sum(Some(&[1]), true)?.broadcast_to(&[6, 3])
        }));
        s.add(Dense::new(1));
        s
    };
    let net = make();
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    let loss = L2Loss::new();
    let mut step = HybridTrainStep::new(&net, &loss);
    let eager = make();
    eager
        .initialize(&Initializer::xavier(), Device::Cpu)
        .unwrap();
    autograd::pause(|| eager.forward(&x)).unwrap();
    step.step(&x, &y).unwrap();
    copy_params(&net, &eager);
    for _ in 0..2 {
        let lh = step.step(&x, &y).unwrap();
        let le = eager_step(&eager, &loss, &x, &y);
        ulp_close(&le, &lh, "loss");
        for ((n, ge), (_, gh)) in grads(&eager).iter().zip(grads(&net)) {
            ulp_close(ge.as_ref().unwrap(), gh.as_ref().unwrap(), n);
        }
    }
    let why = step.fallback_reasons();
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(why[0].contains("'broadcast_to'"), "{why:?}");
}
