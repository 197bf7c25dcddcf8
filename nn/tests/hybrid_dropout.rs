//! Dropout in training mode inside a hybridized graph, on every test device: the mask is a
//! graph node (`dropout_mask`) that draws again at every run, from the layer's own stream, so
//! a hybridized model draws the masks its eager twin draws at the same calls and trains to the
//! same bits (the CPU; 1e-6 of the largest magnitude elsewhere). Recomputation keeps the mask
//! instead of drawing it again; a CUDA graph is refused (it would replay one mask), and the
//! step still runs, correctly, without it.

use sparrow_core::graph::Recompute;
use sparrow_core::{autograd, device_test, Device, NDArray};
use sparrow_nn::loss::{Loss, SoftmaxCrossEntropyLoss};
use sparrow_nn::{
    init, Block, Dense, Dropout, HybridTrainStep, Hybridize, Initializer, Sequential,
};

mod hybrid_util;
use hybrid_util::{arr, grads, same_on_device};

/// Dense(16, relu) -> Dropout(0.5) -> Dense(12, tanh) -> Dropout(0.25) -> Dense(3), its
/// dropout layers seeded from `seed` (two nets made from one seed draw the same masks).
fn net(seed: u64) -> Sequential {
    init::seed(seed);
    let mut s = Sequential::new();
    s.add(Dense::new(16).activation("relu"));
    s.add(Dropout::new(0.5).unwrap());
    s.add(Dense::new(12).activation("tanh"));
    s.add(Dropout::new(0.25).unwrap());
    s.add(Dense::new(3));
    s
}

fn same(a: &NDArray, b: &NDArray, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    same_on_device(a, b, what);
}

fn same_grads(a: &dyn Block, b: &dyn Block, what: &str) {
    for ((n, ga), (_, gb)) in grads(a).iter().zip(&grads(b)) {
        same(
            ga.as_ref().unwrap(),
            gb.as_ref().unwrap(),
            &format!("{what}: {n}"),
        );
    }
}

/// Two nets of one seed with the same weights, initialized on the current device.
fn twins(seed: u64, x: &NDArray) -> (Sequential, Sequential) {
    let (a, b) = (net(seed), net(seed));
    for n in [&a, &b] {
        n.initialize(&Initializer::xavier(), Device::current())
            .unwrap();
        autograd::pause(|| n.forward(x)).unwrap();
    }
    let (pa, pb) = (a.collect_params().unwrap(), b.collect_params().unwrap());
    for (name, p) in pa.iter() {
        pb.get(name)
            .unwrap()
            .set_data(&p.data().unwrap().copy())
            .unwrap();
    }
    (a, b)
}

fn labels(n: usize) -> NDArray {
    NDArray::from_vec((0..n).map(|i| (i % 3) as f32).collect(), &[n]).unwrap()
}

device_test! {
    fn a_hybridized_block_draws_the_eager_masks_under_record() {
        let x = arr(&[8, 10], -1.0, 1.0, 1);
        let y = labels(8);
        let (eager, hyb) = twins(5, &x);
        let hyb = hyb.hybridize();
        let loss = SoftmaxCrossEntropyLoss::new();
        let mut outs = Vec::new();
        for step in 0..4 {
            let le = autograd::record(|| loss.forward(&eager.forward(&x)?, &y)?.sum_all()).unwrap();
            le.backward().unwrap();
            let lh = autograd::record(|| loss.forward(&hyb.forward(&x)?, &y)?.sum_all()).unwrap();
            lh.backward().unwrap();
            same(&le, &lh, &format!("loss, step {step}"));
            same_grads(&eager, &hyb, &format!("gradients, step {step}"));
            outs.push(autograd::record(|| hyb.forward(&x)).unwrap().to_f64_vec());
            autograd::record(|| eager.forward(&x)).unwrap();
        }
        // A new mask at every run: no two training outputs alike (the weights did not move).
        for i in 0..outs.len() {
            for j in 0..i {
                assert_ne!(outs[i], outs[j], "runs {j} and {i} drew the same masks");
            }
        }
        assert!(hyb.fallback_reasons().is_empty(), "{:?}", hyb.fallback_reasons());
        let g = hyb.graph().unwrap();
        assert_eq!(
            g.nodes().iter().filter(|n| n.op.name() == "dropout_mask").count(),
            2
        );
        let runs = hyb.run_counts();
        assert_eq!(runs.replayed, 0, "{runs:?}");
        assert!(runs.recorded >= 3, "{runs:?}");
        // In predict mode the masks are gone (another signature: the training flag).
        let pe = autograd::pause(|| eager.forward(&x)).unwrap();
        let ph = autograd::pause(|| hyb.forward(&x)).unwrap();
        same(&pe, &ph, "predict mode");
    }
}

device_test! {
    fn a_training_step_with_dropout_equals_eager_and_recomputes_without_redrawing() {
        let x = arr(&[8, 10], -1.0, 1.0, 2);
        let y = labels(8);
        let loss = SoftmaxCrossEntropyLoss::new();
        for mode in [Recompute::Off, Recompute::Sqrt, Recompute::Budget(usize::MAX)] {
            let (eager, hyb) = twins(9, &x);
            let mut step = HybridTrainStep::new(&hyb, &loss)
                .with_recompute(mode)
                .with_cuda_graph(true);
            for s in 0..4 {
                let le = autograd::record(|| loss.forward(&eager.forward(&x)?, &y)).unwrap();
                le.backward().unwrap();
                let lh = step.step(&x, &y).unwrap();
                same(&le, &lh, &format!("{mode:?}: loss, step {s}"));
                same_grads(&eager, &hyb, &format!("{mode:?}: step {s}"));
            }
            assert!(step.fallback_reasons().is_empty(), "{:?}", step.fallback_reasons());
            let ts = step.train_step().unwrap();
            if mode != Recompute::Off {
                // Values the backward reads are dropped and recomputed; the masks stay.
                let plan = ts.recompute().unwrap();
                assert!(plan.dropped > 0 && plan.cloned_nodes > 0, "{plan:?}");
                let masks = ts
                    .graph()
                    .nodes()
                    .iter()
                    .filter(|n| n.op.name() == "dropout_mask")
                    .count();
                assert_eq!(masks, 2, "a mask was cloned into the backward");
            }
            if matches!(Device::current(), Device::Cuda(_)) {
                let why = ts.cuda_graph_refused().unwrap_or("");
                assert!(why.contains("dropout_mask"), "{why:?}");
                assert_eq!(ts.cuda_graph_runs(), (0, 0));
            }
        }
    }
}

#[test]
fn a_mask_keeps_the_rate_and_scales_the_survivors() {
    let x = NDArray::ones(&[100_000], sparrow_core::DType::F32).unwrap();
    let stream = sparrow_core::ops::MaskStream::new(3);
    let m = x.dropout_mask(0.3, &stream).unwrap().to_f64_vec();
    let zeros = m.iter().filter(|&&v| v == 0.0).count() as f64 / m.len() as f64;
    assert!((zeros - 0.3).abs() < 0.01, "{zeros}");
    let keep = (1.0f32 / 0.7) as f64;
    assert!(m.iter().all(|&v| v == 0.0 || v == keep));
    assert_eq!(stream.drawn(), 1);
    // The next mask is another one; a stream of the same seed gives the same sequence.
    let m2 = x.dropout_mask(0.3, &stream).unwrap().to_f64_vec();
    assert_ne!(m, m2);
    let again = sparrow_core::ops::MaskStream::new(3);
    assert_eq!(x.dropout_mask(0.3, &again).unwrap().to_f64_vec(), m);
    assert!(x.dropout_mask(1.0, &stream).is_err());
    let ids = NDArray::from_vec(vec![1i64, 2], &[2]).unwrap();
    assert!(ids.dropout_mask(0.5, &stream).is_err());
}

#[test]
fn masks_larger_than_a_fill_chunk_match_eager() {
    // 70,000 elements: the planned buffer is filled in parallel chunks of 65,536, each from
    // its own stream, as the eager draw is.
    let x = arr(&[70, 1000], -1.0, 1.0, 3);
    x.attach_grad();
    init::seed(21);
    let eager = Dropout::new(0.4).unwrap();
    init::seed(21);
    let hyb = Dropout::new(0.4).unwrap().hybridize();
    for call in 0..3 {
        let e = autograd::record(|| eager.forward(&x)).unwrap();
        let h = autograd::record(|| hyb.forward(&x)).unwrap();
        same(&e, &h, &format!("call {call}"));
    }
    let runs = hyb.run_counts();
    assert_eq!((runs.recorded, runs.replayed), (2, 0), "{runs:?}");
}
