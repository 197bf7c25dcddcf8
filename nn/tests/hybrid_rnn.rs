//! Hybridized recurrent layers against eager ones: RNN (tanh, relu), LSTM and GRU, stacked,
//! bidirectional, `NTC`, with initial states in and final states out, traced into graphs
//! (`rnn_sequence` nodes with the slices, concats and transposes around them). Inference
//! outputs, recorded losses and gradients, and planned training steps (`HybridTrainStep`, with
//! and without recomputation) equal eager's: bit for bit on the CPU, to 1e-6 of each array's
//! largest magnitude elsewhere. Export and import, and the fallback for valid lengths.

use sparrow_core::graph::Recompute;
use sparrow_core::{autograd, device_test, Device, NDArray, Result};
use sparrow_nn::loss::{L2Loss, Loss};
use sparrow_nn::{
    Block, Dense, HybridBlock, HybridTrainStep, Hybridize, Initializer, Layout, Parameter,
    Sequential, SymbolBlock, GRU, LSTM, RNN,
};

mod hybrid_util;
use hybrid_util::{arr, copy_params, grads, same_on_device};

/// The forward of a layer with optional initial states and valid lengths.
type RunFn = dyn Fn(&NDArray, Option<&[NDArray]>, Option<&[usize]>) -> Result<(NDArray, Vec<NDArray>)>
    + Send
    + Sync;

/// A recurrent layer's whole result as one output: initial states computed from the input by
/// traced operators (when `states` > 0: slices of the `TNC` input and their `tanh`), then the
/// output and the final states, flattened and concatenated (so the graph carries the states
/// in and out).
struct Whole {
    run: Box<RunFn>,
    params: Vec<(String, Parameter)>,
    /// State arrays the layer takes (0: start from zeros).
    states: usize,
    /// Layers times directions (rows of a state array).
    rows: usize,
    /// Per-example valid lengths (not traceable).
    lengths: Option<Vec<usize>>,
}

impl Block for Whole {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        let initial: Vec<NDArray> = (0..self.states)
            .map(|k| {
                x.slice_axis(0, Some(k as i64), Some((k + self.rows) as i64), 1)?
                    .tanh()
            })
            .collect::<Result<_>>()?;
        let st = (self.states > 0).then_some(initial.as_slice());
        let (out, finals) = (self.run)(x, st, self.lengths.as_deref())?;
        let mut parts = vec![out.reshape(&[out.size()])?];
        for f in finals {
            parts.push(f.reshape(&[f.size()])?);
        }
        NDArray::concat(&parts.iter().collect::<Vec<_>>(), 0)
    }
    fn kind(&self) -> &'static str {
        "whole"
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        self.params.clone()
    }
}

/// Which recurrence.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Tanh,
    Relu,
    Lstm,
    Gru,
}

/// A layer of `kind` with `hidden` units, `layers` stacked, optionally bidirectional, in
/// `layout`, wrapped as [`Whole`] (with states from the input when `with_states`).
fn whole(
    kind: Kind,
    hidden: usize,
    layers: usize,
    bidi: bool,
    layout: Layout,
    with_states: bool,
) -> Whole {
    macro_rules! build {
        ($l:expr, $states:expr) => {{
            let l = $l
                .num_layers(layers)
                .bidirectional(bidi)
                .layout(layout)
                .input_size(hidden);
            let params = l.params();
            Whole {
                run: Box::new(move |x, st, len| l.forward_with(x, st, len)),
                params,
                states: if with_states { $states } else { 0 },
                rows: layers * if bidi { 2 } else { 1 },
                lengths: None,
            }
        }};
    }
    match kind {
        Kind::Tanh => build!(RNN::new(hidden), 1),
        Kind::Relu => build!(RNN::new(hidden).activation("relu").unwrap(), 1),
        Kind::Lstm => build!(LSTM::new(hidden), 2),
        Kind::Gru => build!(GRU::new(hidden), 1),
    }
}

fn init(b: &dyn Block) {
    b.initialize(&Initializer::Uniform { scale: 0.5 }, Device::current())
        .unwrap();
}

fn assert_same_grads(a: &[(String, Option<NDArray>)], b: &[(String, Option<NDArray>)]) {
    assert_eq!(a.len(), b.len());
    for ((n, ga), (_, gb)) in a.iter().zip(b) {
        match (ga, gb) {
            (Some(x), Some(y)) => same_on_device(x, y, &format!("gradient of {n}")),
            (None, None) => {}
            _ => panic!("gradient of {n}: present on one side only"),
        }
    }
}

/// Eager against hybridized for `make()`: inference (tracing call, then planned), the
/// recorded forward's loss and gradients, and planned training steps (`HybridTrainStep`,
/// recomputation off and everything recomputed), each against the eager step.
fn check(what: &str, make: &dyn Fn() -> Whole, x: &NDArray) {
    let eager = make();
    init(&eager);
    let out = autograd::pause(|| eager.forward(x)).unwrap();
    let hyb = make().hybridize();
    init(&hyb);
    copy_params(&eager, &hyb);
    for call in 0..2 {
        let h = autograd::pause(|| hyb.forward(x)).unwrap();
        same_on_device(&out, &h, &format!("{what}: output, call {call}"));
    }
    let target = arr(&out.shape(), -1.0, 1.0, 5);
    let l2 = L2Loss::new();
    let loss_of = |b: &dyn Block| {
        let l = autograd::record(|| l2.forward(&b.forward(x)?, &target)?.sum_all()).unwrap();
        l.backward().unwrap();
        l
    };
    let le = loss_of(&eager);
    let ge = grads(&eager);
    for call in 0..2 {
        let lh = loss_of(&hyb);
        same_on_device(&le, &lh, &format!("{what}: recorded loss, call {call}"));
        assert_same_grads(&ge, &grads(&hyb));
    }
    assert!(
        hyb.fallback_reasons().is_empty(),
        "{what}: {:?}",
        hyb.fallback_reasons()
    );
    let runs = hyb.run_counts();
    assert_eq!(runs.replayed, 0, "{what}: {runs:?}");
    assert!(runs.planned >= 1 && runs.recorded >= 1, "{what}: {runs:?}");
    let graph = hyb.graph().unwrap();
    assert!(
        graph.nodes().iter().any(|n| n.op.name() == "rnn_sequence"),
        "{what}: no rnn_sequence node"
    );
    // Planned training steps, the eager step's loss and gradients each time.
    for recompute in [
        Recompute::Off,
        Recompute::Sqrt,
        Recompute::Budget(usize::MAX),
    ] {
        let stepped = make();
        init(&stepped);
        copy_params(&eager, &stepped);
        let mut step = HybridTrainStep::new(&stepped, &l2).with_recompute(recompute);
        for s in 0..2 {
            let le = autograd::record(|| l2.forward(&eager.forward(x)?, &target)).unwrap();
            le.backward().unwrap();
            let ls = step.step(x, &target).unwrap();
            same_on_device(&le, &ls, &format!("{what}: step {s} loss ({recompute:?})"));
            assert_same_grads(&grads(&eager), &grads(&stepped));
        }
        assert!(
            step.fallback_reasons().is_empty(),
            "{what}: {:?}",
            step.fallback_reasons()
        );
    }
}

device_test! {
    fn recurrent_layers_trace_and_train_as_eager() {
        let (t, n, h) = (5, 3, 4);
        let tnc = arr(&[t, n, h], -1.0, 1.0, 11);
        for kind in [Kind::Tanh, Kind::Relu, Kind::Lstm, Kind::Gru] {
            check(
                &format!("{kind:?}, one layer, zero states"),
                &|| whole(kind, h, 1, false, Layout::Tnc, false),
                &tnc,
            );
            check(
                &format!("{kind:?}, two bidirectional layers, states in and out"),
                &|| whole(kind, h, 2, true, Layout::Tnc, true),
                &tnc,
            );
        }
        // NTC (traced transposes) from zero states, stacked.
        let ntc = arr(&[n, t, h], -1.0, 1.0, 12);
        check(
            "LSTM, NTC, two bidirectional layers",
            &|| whole(Kind::Lstm, h, 2, true, Layout::Ntc, false),
            &ntc,
        );
    }
}

/// An LSTM model as users write it: the layer, then a Dense head over its flattened output.
fn lstm_model() -> Sequential {
    let mut net = Sequential::new();
    net.add(LSTM::new(4).num_layers(2).bidirectional(true));
    net.add(Dense::new(3));
    net
}

device_test! {
    fn an_lstm_model_in_a_sequential_hybridizes_and_trains_as_eager() {
        let x = arr(&[6, 2, 3], -1.0, 1.0, 21);
        let eager = lstm_model();
        init(&eager);
        let want = autograd::pause(|| eager.forward(&x)).unwrap();
        let hyb: HybridBlock<Sequential> = lstm_model().hybridize();
        init(&hyb);
        copy_params(&eager, &hyb);
        for call in 0..2 {
            let got = autograd::pause(|| hyb.forward(&x)).unwrap();
            same_on_device(&want, &got, &format!("output, call {call}"));
        }
        assert!(hyb.fallback_reasons().is_empty(), "{:?}", hyb.fallback_reasons());
        let stepped = lstm_model();
        init(&stepped);
        copy_params(&eager, &stepped);
        let (l2, y) = (L2Loss::new(), arr(&[6, 3], -1.0, 1.0, 22));
        let mut step = HybridTrainStep::new(&stepped, &l2);
        for s in 0..2 {
            let le = autograd::record(|| l2.forward(&eager.forward(&x)?, &y)).unwrap();
            le.backward().unwrap();
            let ls = step.step(&x, &y).unwrap();
            same_on_device(&le, &ls, &format!("step {s} loss"));
            assert_same_grads(&grads(&eager), &grads(&stepped));
        }
        assert!(step.fallback_reasons().is_empty(), "{:?}", step.fallback_reasons());
    }
}

#[test]
fn recurrent_graphs_export_and_import() {
    let dir = std::env::temp_dir().join(format!("sparrow_hybrid_rnn_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (gp, pp) = (dir.join("net.json"), dir.join("net.safetensors"));
    let x = arr(&[6, 2, 3], -1.0, 1.0, 23);
    let net = lstm_model().hybridize();
    net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    let want = autograd::pause(|| net.forward(&x)).unwrap();
    net.export(&gp, &pp).unwrap();
    let imported = SymbolBlock::import(&gp, &pp).unwrap();
    let got = autograd::pause(|| imported.forward(&x)).unwrap();
    assert_eq!(want.to_f64_vec(), got.to_f64_vec());
    let names: Vec<&str> = imported
        .graph()
        .nodes()
        .iter()
        .map(|n| n.op.name())
        .collect();
    // Two layers, two directions each.
    assert_eq!(
        names.iter().filter(|&&n| n == "rnn_sequence").count(),
        4,
        "{names:?}"
    );
    assert!(names.contains(&"concat"), "{names:?}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn valid_lengths_run_eagerly_with_a_message() {
    let x = arr(&[4, 2, 3], -1.0, 1.0, 24);
    let mut w = whole(Kind::Gru, 3, 1, false, Layout::Tnc, false);
    w.lengths = Some(vec![4, 2]);
    let eager_out = {
        let e = whole(Kind::Gru, 3, 1, false, Layout::Tnc, false);
        init(&e);
        let params = e.params();
        init(&w);
        for ((_, a), (_, b)) in params.iter().zip(w.params()) {
            b.set_data(&a.data().unwrap()).unwrap();
        }
        e
    };
    let net = w.hybridize();
    let got = net.forward(&x).unwrap();
    let r = net.fallback_reasons();
    assert!(r.len() == 1 && r[0].contains("valid lengths"), "{r:?}");
    // The eager result with those lengths: the second example's output past step 2 is zero.
    let full = eager_out.forward(&x).unwrap();
    assert_eq!(got.shape(), full.shape());
    let out = got.to_f64_vec();
    let (t, n, h) = (4, 2, 3);
    for step in 2..t {
        for u in 0..h {
            assert_eq!(out[(step * n + 1) * h + u], 0.0, "step {step} unit {u}");
        }
    }
}

device_test! {
    fn a_hybridized_layer_takes_states_and_returns_them() {
        // Gluon's `out, states = lstm(x, states)` on a hybridized LSTM: several inputs and
        // outputs, planned in inference and one tape node (over the joined outputs) under
        // `record`, with the gradients of the inputs (states too) and parameters eager's.
        let (t, n, h) = (5, 3, 4);
        let make = || LSTM::new(h).num_layers(2).bidirectional(true).input_size(2);
        let eager = make();
        init(&eager);
        let hyb = make().hybridize();
        init(&hyb);
        copy_params(&eager, &hyb);
        let inputs = || {
            vec![
                arr(&[t, n, 2], -1.0, 1.0, 31),
                arr(&[4, n, h], -0.5, 0.5, 32),
                arr(&[4, n, h], -0.5, 0.5, 33),
            ]
        };
        let want = autograd::pause(|| eager.forward_multi(&inputs())).unwrap();
        for call in 0..2 {
            let got = autograd::pause(|| hyb.forward_multi(&inputs())).unwrap();
            assert_eq!(got.len(), 3);
            for (k, (w, g)) in want.iter().zip(&got).enumerate() {
                same_on_device(w, g, &format!("output {k}, call {call}"));
            }
        }
        // Every output feeds the loss, each with its own weight.
        let run = |b: &dyn Block| {
            let xs = inputs();
            for x in &xs {
                x.attach_grad();
            }
            let l = autograd::record(|| {
                let outs = b.forward_multi(&xs)?;
                let mut total = outs[0].square()?.sum_all()?;
                for (k, o) in outs[1..].iter().enumerate() {
                    total = total.add(&o.mul_scalar(k as f64 + 2.0)?.sum_all()?)?;
                }
                Ok::<_, sparrow_core::Error>(total)
            })
            .unwrap();
            l.backward().unwrap();
            let ig: Vec<NDArray> = xs.iter().map(|x| x.grad().unwrap()).collect();
            (l, ig)
        };
        let (le, ie) = run(&eager);
        let ge = grads(&eager);
        for call in 0..2 {
            let (lh, ih) = run(&hyb);
            same_on_device(&le, &lh, &format!("loss, call {call}"));
            for (k, (a, b)) in ie.iter().zip(&ih).enumerate() {
                same_on_device(a, b, &format!("input {k} gradient, call {call}"));
            }
            assert_same_grads(&ge, &grads(&hyb));
        }
        assert!(hyb.fallback_reasons().is_empty(), "{:?}", hyb.fallback_reasons());
        let runs = hyb.run_counts();
        assert_eq!(runs.replayed, 0, "{runs:?}");
        assert!(runs.planned >= 1 && runs.recorded >= 1, "{runs:?}");
        assert_eq!(hyb.graph().unwrap().outputs().len(), 3);
    }
}
