//! A hybridized block under `autograd::record` + `backward()` (Gluon's usual training loop
//! with `net.hybridize()`): after the tracing call, the block's forward runs as a planned
//! graph and the tape gets one node for it (`hybrid_graph`) whose backward runs the graph's
//! backward. Against an eager copy of the model: losses, every parameter gradient (with its
//! storage type), input gradients, training over SGD steps, two recorded calls pending before
//! one backward, `grad_req = add`, and a block whose graph has no backward replaying its
//! operators instead.

use sparrow_core::autograd::{self, GradReq};
use sparrow_core::testing::test_csr;
use sparrow_core::{DType, Device, NDArray, SType};
use sparrow_nn::loss::{Loss, SigmoidBinaryCrossEntropyLoss, SoftmaxCrossEntropyLoss};
use sparrow_nn::{Block, Dense, Hybridize, Initializer, Sequential};

mod hybrid_util;
use hybrid_util::{arr, copy_params, eager_step, grads, tutorial_model, ulp_close};

fn labels(n: usize, classes: usize) -> NDArray {
    NDArray::from_vec((0..n).map(|i| ((i * 5) % classes) as f32).collect(), &[n]).unwrap()
}

fn mlp() -> Sequential {
    let mut s = Sequential::new();
    s.add(Dense::new(16).activation("relu"));
    s.add(Dense::new(12).activation("tanh"));
    s.add(Dense::new(10).activation("sigmoid"));
    s.add(Dense::new(4));
    s
}

/// An eager model and a hybridized one with the same weights (shapes made by a first,
/// unrecorded call on `x`; the hybridized one traces there).
fn pair<B: Block + Hybridize>(
    make: &dyn Fn() -> B,
    x: &NDArray,
) -> (B, sparrow_nn::HybridBlock<B>) {
    let eager = make();
    let hyb = make().hybridize();
    for n in [&eager as &dyn Block, &hyb] {
        n.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
        autograd::pause(|| n.forward(x)).unwrap();
    }
    copy_params(&eager, &hyb);
    (eager, hyb)
}

/// Gradients of both models, compared; true when all are the same bits.
fn same_grads(eager: &dyn Block, hyb: &dyn Block, what: &str) -> bool {
    let mut exact = true;
    for ((n, ge), (_, gh)) in grads(eager).iter().zip(grads(hyb)) {
        let (ge, gh) = (ge.as_ref().unwrap(), gh.as_ref().unwrap());
        ulp_close(ge, gh, &format!("gradient of {n}, {what}"));
        exact &= ge.to_f64_vec() == gh.to_f64_vec();
    }
    exact
}

/// Forward and loss of the hybridized `net` under `record`, then backward: the loss. After
/// the tracing call (`call` 0), the block must be one tape node running its graph.
fn recorded_step(
    net: &dyn Block,
    loss: &dyn Loss,
    x: &NDArray,
    y: &NDArray,
    call: usize,
) -> NDArray {
    let (out, l) = autograd::record(|| {
        let out = net.forward(x)?;
        let l = loss.forward(&out, y)?;
        Ok::<_, sparrow_core::Error>((out, l))
    })
    .unwrap();
    if call > 0 {
        assert_eq!(out.node().unwrap().op, "hybrid_graph", "call {call}");
    }
    l.backward().unwrap();
    l
}

#[test]
fn record_and_backward_run_the_graph_and_match_eager_over_sgd_steps() {
    let x = arr(&[24, 9], -1.0, 1.0, 1);
    let y = labels(24, 4);
    let (eager, hyb) = pair(&mlp, &x);
    let loss = SoftmaxCrossEntropyLoss::new();
    let sgd = |net: &dyn Block| {
        for (_, p) in net.collect_params().unwrap().iter() {
            let g = p.grad().unwrap().mul_scalar(0.1 / 24.0).unwrap();
            p.set_data(&p.data().unwrap().sub(&g).unwrap()).unwrap();
        }
    };
    let mut exact = true;
    let (mut first, mut last) = (None, 0.0);
    for step in 0..6 {
        let le = eager_step(&eager, &loss, &x, &y);
        sgd(&eager);
        let lh = recorded_step(&hyb, &loss, &x, &y, step);
        ulp_close(&le, &lh, &format!("loss, step {step}"));
        exact &= same_grads(&eager, &hyb, &format!("step {step}"));
        sgd(&hyb);
        let m = lh.mean(None, false).unwrap().item().unwrap();
        first.get_or_insert(m);
        last = m;
    }
    assert!(last < first.unwrap(), "{first:?} -> {last}");
    assert!(exact, "gradients not bit for bit the eager ones");
    for ((n, a), (_, b)) in eager
        .collect_params()
        .unwrap()
        .iter()
        .zip(hyb.collect_params().unwrap().iter())
    {
        assert_eq!(
            a.data().unwrap().to_f64_vec(),
            b.data().unwrap().to_f64_vec(),
            "weight {n}"
        );
    }
    assert!(hyb.fallback_reasons().is_empty());
}

#[test]
fn csr_model_keeps_a_row_sparse_weight_gradient() {
    let x = test_csr(20, 500, 0.02, 3, DType::F32);
    let y = NDArray::from_vec((0..20).map(|i| (i % 2) as f32).collect(), &[20]).unwrap();
    let (eager, hyb) = pair(&tutorial_model, &x);
    let loss = SigmoidBinaryCrossEntropyLoss::new();
    for call in 0..3 {
        let le = eager_step(&eager, &loss, &x, &y);
        let lh = recorded_step(&hyb, &loss, &x, &y, call);
        ulp_close(&le, &lh, &format!("loss, call {call}"));
        assert!(same_grads(&eager, &hyb, &format!("call {call}")));
    }
    let params = hyb.collect_params().unwrap();
    let (_, w) = params
        .iter()
        .find(|(n, _)| n.ends_with("weight"))
        .expect("a weight");
    assert_eq!(w.grad().unwrap().stype(), SType::RowSparse);
}

#[test]
fn input_gradients_match_eager() {
    let x0 = arr(&[10, 7], -1.0, 1.0, 4);
    let y = labels(10, 4);
    let (eager, hyb) = pair(&mlp, &x0);
    let loss = SoftmaxCrossEntropyLoss::new();
    for call in 0..2 {
        let (xe, xh) = (x0.copy(), x0.copy());
        xe.attach_grad();
        xh.attach_grad();
        eager_step(&eager, &loss, &xe, &y);
        let out = autograd::record(|| hyb.forward(&xh)).unwrap();
        if call > 0 {
            assert_eq!(out.node().unwrap().op, "hybrid_graph", "call {call}");
        }
        autograd::record(|| loss.forward(&out, &y))
            .unwrap()
            .backward()
            .unwrap();
        let (ge, gh) = (xe.grad().unwrap(), xh.grad().unwrap());
        ulp_close(&ge, &gh, &format!("input gradient, call {call}"));
        assert!(ge.to_f64_vec().iter().any(|&v| v != 0.0));
        assert!(same_grads(&eager, &hyb, &format!("call {call}")));
    }
}

#[test]
fn two_recorded_calls_before_one_backward() {
    // The second forward must not overwrite the values the first call's backward reads.
    let x1 = arr(&[12, 9], -1.0, 1.0, 5);
    let x2 = arr(&[12, 9], -2.0, 2.0, 6);
    let y = labels(12, 4);
    let (eager, hyb) = pair(&mlp, &x1);
    let loss = SoftmaxCrossEntropyLoss::new();
    let run = |net: &dyn Block| {
        let l = autograd::record(|| {
            let a = loss.forward(&net.forward(&x1)?, &y)?;
            let b = loss.forward(&net.forward(&x2)?, &y)?;
            a.add(&b)
        })
        .unwrap();
        l.backward().unwrap();
        l
    };
    for call in 0..3 {
        let le = run(&eager);
        let lh = run(&hyb);
        ulp_close(&le, &lh, &format!("loss, call {call}"));
        assert!(same_grads(&eager, &hyb, &format!("call {call}")));
    }
}

#[test]
fn grad_req_add_accumulates_over_backwards() {
    let x = arr(&[8, 9], -1.0, 1.0, 7);
    let y = labels(8, 4);
    let (eager, hyb) = pair(&mlp, &x);
    for net in [&eager as &dyn Block, &hyb] {
        for (_, p) in net.collect_params().unwrap().iter() {
            p.set_grad_req(GradReq::Add);
            p.zero_grad();
        }
    }
    let loss = SoftmaxCrossEntropyLoss::new();
    for call in 0..3 {
        eager_step(&eager, &loss, &x, &y);
        let l = autograd::record(|| loss.forward(&hyb.forward(&x)?, &y)).unwrap();
        l.backward().unwrap();
        same_grads(
            &eager,
            &hyb,
            &format!("accumulated over {} calls", call + 1),
        );
    }
}

#[test]
fn a_graph_without_backward_replays_its_operators() {
    // `broadcast_to` has no graph backward: the recorded call replays the operators, so the
    // tape is the eager one and the gradients are still right.
    let x = arr(&[6, 4], -1.0, 1.0, 8);
    let y = labels(6, 3);
    let make = || {
        let mut s = Sequential::new();
        s.add(Dense::new(3));
        s.add(sparrow_nn::Lambda::new(|h| {
            h.sum(Some(&[1]), true)?.broadcast_to(&[6, 3])
        }));
        s.add(Dense::new(3));
        s
    };
    let (eager, hyb) = pair(&make, &x);
    let loss = SoftmaxCrossEntropyLoss::new();
    for call in 0..2 {
        eager_step(&eager, &loss, &x, &y);
        let out = autograd::record(|| hyb.forward(&x)).unwrap();
        assert_ne!(out.node().unwrap().op, "hybrid_graph");
        autograd::record(|| loss.forward(&out, &y))
            .unwrap()
            .backward()
            .unwrap();
        assert!(same_grads(&eager, &hyb, &format!("call {call}")));
    }
}
