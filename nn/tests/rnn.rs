//! Recurrent cells and layers: finite-difference gradient checks (inputs, initial states and
//! every parameter; bidirectional, stacked, valid lengths, NTC), cells against the layer,
//! shape and argument errors, dropout between layers, an Embedding feeding an LSTM with a
//! row_sparse embedding gradient (global-norm clipping of these gradients: optim/tests/rnn_clip.rs).

mod util;

use sparrow_core::{autograd, device_test, testing, DType, Device, NDArray, Result, SType};
use sparrow_nn::{
    Block, Embedding, GRUCell, Initializer, LSTMCell, Layout, Parameter, RNNCell, RecurrentCell,
    GRU, LSTM, RNN,
};
use util::{check_input_grad, check_param_grads};

fn init(b: &dyn Block) {
    b.initialize(&Initializer::Uniform { scale: 0.6 }, Device::current())
        .unwrap();
}

/// A forward that returns the output and the final states.
type RunFn<'a> = dyn Fn(&NDArray) -> Result<(NDArray, Vec<NDArray>)> + Sync + 'a;

/// A layer's whole result as one block output: the output and the final states, flattened
/// and concatenated, so the shared checks cover the final states' gradients too.
struct Whole<'a> {
    run: &'a RunFn<'a>,
    params: Vec<(String, Parameter)>,
}

impl Block for Whole<'_> {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        let (out, finals) = (self.run)(x)?;
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

/// Gradient checks of `run` (input and every parameter).
fn check_all(run: &RunFn<'_>, params: Vec<(String, Parameter)>, x: &NDArray) {
    let w = Whole { run, params };
    check_input_grad(&w, x);
    check_param_grads(&w, x, 1e-6, 1e-5);
}

device_test! {
    fn lstm_layer_grads_bidirectional_two_layers_lengths() {
        let net = LSTM::new(3).num_layers(2).bidirectional(true).dtype(DType::F64);
        let x = testing::test_array(&[4, 3, 2], -1.0, 1.0, 1);
        init(&net);
        net.forward(&x).unwrap(); // infer the input size
        let h0 = testing::test_array(&[4, 3, 3], -0.5, 0.5, 2);
        let c0 = testing::test_array(&[4, 3, 3], -0.5, 0.5, 3);
        let states = [h0.clone(), c0.clone()];
        let lens = [4usize, 1, 3];
        let run = |x: &NDArray| net.forward_with(x, Some(&states), Some(&lens));
        check_all(&run, net.params(), &x);
        // The initial states' gradients.
        testing::check_grad(
            |s| {
                let (out, f) = net.forward_with(&x, Some(s), Some(&lens))?;
                let parts = [out.reshape(&[out.size()])?, f[0].reshape(&[36])?, f[1].reshape(&[36])?];
                NDArray::concat(&parts.iter().collect::<Vec<_>>(), 0)
            },
            &[h0, c0],
            1e-6,
            1e-4,
            1e-6,
        )
        .unwrap();
    }
}

device_test! {
    fn gru_and_rnn_layer_grads() {
        let x = testing::test_array(&[3, 2, 3], -1.0, 1.0, 4);
        let gru = GRU::new(2).bidirectional(true).dtype(DType::F64);
        init(&gru);
        let lens = [2usize, 3];
        let run = |x: &NDArray| gru.forward_with(x, None, Some(&lens));
        check_all(&run, gru.params(), &x);
        for act in ["tanh", "relu"] {
            let rnn = RNN::new(3).activation(act).unwrap().num_layers(2).dtype(DType::F64);
            init(&rnn);
            let run = |x: &NDArray| rnn.forward_with(x, None, None);
            check_all(&run, rnn.params(), &x);
        }
        // NTC: the same numbers as TNC on the swapped input.
        let ntc = GRU::new(2).layout(Layout::Ntc).dtype(DType::F64);
        init(&ntc);
        let xn = x.swapaxes(0, 1).unwrap();
        let run = |x: &NDArray| ntc.forward_with(x, None, Some(&[3, 1]));
        check_all(&run, ntc.params(), &xn);
    }
}

device_test! {
    fn cells_grads_and_match_the_layer() {
        let x = testing::test_array(&[2, 3], -1.0, 1.0, 5);
        let lstm = LSTMCell::new(4).dtype(DType::F64);
        let gru = GRUCell::new(4).dtype(DType::F64);
        let rnn = RNNCell::new(4).activation("relu").unwrap().dtype(DType::F64);
        let cells: [&dyn RecurrentCell; 3] = [&lstm, &gru, &rnn];
        for cell in cells {
            init(cell);
            cell.forward(&x).unwrap();
            let states: Vec<NDArray> = (0..cell.state_count())
                .map(|k| testing::test_array(&[2, 4], -0.5, 0.5, 10 + k as u64))
                .collect();
            let run = |x: &NDArray| {
                // Two steps of a custom loop.
                let (_, s1) = cell.step(x, &states)?;
                let (y, s2) = cell.step(&x.mul_scalar(0.5)?, &s1)?;
                Ok((y, s2))
            };
            check_all(&run, cell.params(), &x);
        }
        // A loop of LSTMCell steps gives the LSTM layer's output with the same weights.
        let layer = LSTM::new(4).dtype(DType::F64);
        init(&layer);
        let seq = testing::test_array(&[3, 2, 3], -1.0, 1.0, 6);
        layer.forward(&seq).unwrap();
        for name in ["i2h_weight", "h2h_weight", "i2h_bias", "h2h_bias"] {
            let src = layer.param(&format!("l0_{name}")).unwrap().data().unwrap();
            let dst = lstm.collect_params().unwrap();
            dst.get(name).unwrap().set_data(&src).unwrap();
        }
        let (out, finals) = layer.forward_with(&seq, None, None).unwrap();
        let mut states = lstm.begin_state(2).unwrap();
        let outv = out.to_f64_vec();
        for t in 0..3 {
            let xt = seq.slice_axis(0, Some(t), Some(t + 1), 1).unwrap().reshape(&[2, 3]).unwrap();
            let (y, s) = lstm.step(&xt, &states).unwrap();
            states = s;
            let yv = y.to_f64_vec();
            for (a, b) in yv.iter().zip(&outv[t as usize * 8..(t as usize + 1) * 8]) {
                assert!((a - b).abs() < 1e-12, "step {t}: {a} vs {b}");
            }
        }
        for (a, b) in states[1].to_f64_vec().iter().zip(finals[1].to_f64_vec()) {
            assert!((a - b).abs() < 1e-12);
        }
    }
}

device_test! {
    fn names_shapes_and_errors() {
        let net = LSTM::new(5).num_layers(2).bidirectional(true).input_size(3);
        let names = net.collect_params().unwrap().names();
        assert_eq!(names.len(), 16);
        assert_eq!(&names[..4], ["l0_i2h_weight", "l0_h2h_weight", "l0_i2h_bias", "l0_h2h_bias"]);
        assert_eq!(names[4], "r0_i2h_weight");
        assert_eq!(net.param("l1_i2h_weight").unwrap().shape(), vec![20, 10]);
        assert_eq!(net.param("r0_i2h_weight").unwrap().shape(), vec![20, 3]);
        assert_eq!(GRU::new(2).param("l0_h2h_weight").unwrap().shape(), vec![6, 2]);
        init(&net);
        let x = NDArray::ones(&[6, 2, 3], DType::F32).unwrap();
        let (out, finals) = net.forward_with(&x, None, None).unwrap();
        assert_eq!(out.shape(), vec![6, 2, 10]);
        assert_eq!(finals.len(), 2);
        assert_eq!(finals[0].shape(), vec![4, 2, 5]);
        let err = |r: Result<(NDArray, Vec<NDArray>)>, needle: &str| {
            let e = r.expect_err(needle).to_string();
            assert!(e.contains(needle), "'{e}' does not mention '{needle}'");
        };
        err(net.forward_with(&NDArray::ones(&[6, 3], DType::F32).unwrap(), None, None), "3-D");
        err(net.forward_with(&NDArray::ones(&[6, 2, 4], DType::F32).unwrap(), None, None),
            "i2h_weight");
        let bad_h = NDArray::zeros(&[2, 2, 5], DType::F32).unwrap();
        err(net.forward_with(&x, Some(&[bad_h.clone(), bad_h.clone()]), None), "initial states");
        err(net.forward_with(&x, Some(&[bad_h]), None), "initial state array");
        err(net.forward_with(&x, None, Some(&[1])), "valid lengths");
        err(net.forward_with(&x, None, Some(&[1, 7])), "exceeds");
        assert!(RNN::new(2).activation("sigmoid").is_err());
        assert!(LSTM::new(2).dropout(1.0).is_err());
        err(LSTM::new(2).num_layers(0).forward_with(&x, None, None), "num_layers");
        let cell = GRUCell::new(3);
        init(&cell);
        let xs = NDArray::ones(&[2, 4], DType::F32).unwrap();
        let st = cell.begin_state(2).unwrap();
        assert!(cell.step(&xs, &[]).unwrap_err().to_string().contains("state"));
        assert!(cell.step(&x, &st).unwrap_err().to_string().contains("(batch, input)"));
        let wrong = NDArray::zeros(&[2, 5], DType::F32).unwrap();
        assert!(cell.step(&xs, &[wrong]).unwrap_err().to_string().contains("hidden state"));
    }
}

device_test! {
    fn dropout_between_layers_only_in_training() {
        let net = LSTM::new(4).num_layers(2).dropout(0.5).unwrap();
        init(&net);
        let x = testing::test_array(&[3, 2, 3], -1.0, 1.0, 8).astype(DType::F32).unwrap();
        let a = net.forward(&x).unwrap().to_f64_vec();
        let b = net.forward(&x).unwrap().to_f64_vec();
        assert_eq!(a, b, "predict mode is deterministic");
        let t = autograd::record(|| net.forward(&x)).unwrap().to_f64_vec();
        assert_ne!(a, t, "training mode drops units between the layers");
        // One layer: no dropout anywhere (nothing lies between layers).
        let one = LSTM::new(4).dropout(0.5).unwrap();
        init(&one);
        let p = one.forward(&x).unwrap().to_f64_vec();
        let q = autograd::record(|| one.forward(&x)).unwrap().to_f64_vec();
        assert_eq!(p, q);
    }
}

device_test! {
    /// The language-model pattern: token ids -> Embedding (sparse_grad) -> LSTM -> loss. The
    /// embedding's gradient is row_sparse over the ids used, equal to the dense embedding's
    /// gradient on those rows and zero elsewhere.
    fn embedding_lstm_row_sparse_grad() {
        let (vocab, edim, hidden) = (10, 3, 4);
        let ids = NDArray::from_vec(vec![1.0f64, 4., 4., 7., 1., 2.], &[3, 2]).unwrap();
        let sparse = Embedding::with_options(vocab, edim, true, DType::F64);
        let dense = Embedding::with_options(vocab, edim, false, DType::F64);
        let lstm = LSTM::new(hidden).dtype(DType::F64);
        init(&sparse);
        init(&lstm);
        dense.weight().initialize(&Initializer::Zero, Device::current()).unwrap();
        dense.weight().set_data(&sparse.weight().data().unwrap()).unwrap();
        let r = testing::test_array(&[3, 2, hidden], -1.0, 1.0, 9);
        let loss_of = |emb: &Embedding| {
            lstm.collect_params().unwrap().zero_grad();
            let l = autograd::record(|| lstm.forward(&emb.forward(&ids)?)?.mul(&r)?.sum_all())
                .unwrap();
            l.backward().unwrap();
        };
        loss_of(&dense);
        let gd = dense.weight().grad().unwrap();
        assert_eq!(gd.stype(), SType::Dense);
        let gdv = gd.to_f64_vec();
        loss_of(&sparse);
        let gs = sparse.weight().grad().unwrap();
        assert_eq!(gs.stype(), SType::RowSparse);
        let mut rows = gs.row_ids().unwrap();
        rows.sort_unstable();
        assert_eq!(rows, vec![1, 2, 4, 7]);
        let gsv = gs.to_f64_vec(); // densified
        for (k, (a, b)) in gsv.iter().zip(&gdv).enumerate() {
            assert!((a - b).abs() < 1e-12, "element {k}: {a} vs {b}");
        }
        assert!(gdv[..3].iter().all(|&v| v == 0.0), "row 0 unused");

    }
}
