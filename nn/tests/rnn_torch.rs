//! Recurrent layers against PyTorch: `tests/data/rnn_torch.json` was written by
//! `scripts/rnn_fixtures.py` (torch.nn.LSTM / GRU / RNN with seeded weights; valid lengths
//! through pack_padded_sequence). Each case is rebuilt with torch's weights under Gluon's names;
//! outputs, final states and the gradients of the input, the initial states and every weight
//! of `sum(out * r_out) + sum(h_n * r_h) [+ sum(c_n * r_c)]` must agree to ~1e-5 (f32).

use serde_json::Value;
use sparrow_core::{autograd, device_test, DType, Device, NDArray, Result};
use sparrow_nn::{Block, Initializer, Layout, Parameter, GRU, LSTM, RNN};

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 2e-5 + 1e-5 * b.abs(),
            "{what}[{k}]: sparrow {a}, torch {b}"
        );
    }
}

type Run = Box<dyn Fn(&NDArray, &[NDArray], Option<&[usize]>) -> Result<(NDArray, Vec<NDArray>)>>;

/// The layer of a case, its parameter lookup and its forward.
fn build(c: &Value) -> (Box<dyn Block>, Run) {
    let u = |k: &str| c[k].as_u64().unwrap() as usize;
    let (hidden, layers) = (u("hidden"), u("layers"));
    let bidir = c["bidirectional"].as_bool().unwrap();
    let layout = if c["layout"] == "NTC" {
        Layout::Ntc
    } else {
        Layout::Tnc
    };
    macro_rules! make {
        ($l:expr) => {{
            let l = std::sync::Arc::new(
                $l.num_layers(layers)
                    .bidirectional(bidir)
                    .layout(layout)
                    .input_size(u("input")),
            );
            let r = l.clone();
            let run: Run = Box::new(move |x, s, lens| {
                r.forward_with(x, if s.is_empty() { None } else { Some(s) }, lens)
            });
            (Box::new(ArcBlock(l)) as Box<dyn Block>, run)
        }};
    }
    match c["kind"].as_str().unwrap() {
        "lstm" => make!(LSTM::new(hidden)),
        "gru" => make!(GRU::new(hidden)),
        "rnn_tanh" => make!(RNN::new(hidden)),
        "rnn_relu" => make!(RNN::new(hidden).activation("relu").unwrap()),
        k => panic!("unknown kind {k}"),
    }
}

/// A shared layer as a block (the run closure holds the other handle).
struct ArcBlock<B: Block>(std::sync::Arc<B>);

impl<B: Block> Block for ArcBlock<B> {
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        self.0.forward(x)
    }
    fn kind(&self) -> &'static str {
        self.0.kind()
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        self.0.params()
    }
}

device_test! {
    fn layers_match_pytorch() {
        let j: Value = serde_json::from_str(include_str!("data/rnn_torch.json")).unwrap();
        let cases = j["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 6);
        for c in cases {
            let name = c["name"].as_str().unwrap();
            let (block, run) = build(c);
            block.initialize(&Initializer::Zero, Device::current()).unwrap();
            let params = block.collect_params().unwrap();
            let torch_params = c["params"].as_object().unwrap();
            assert_eq!(params.len(), torch_params.len(), "{name}: parameter count");
            for (pname, p) in params.iter() {
                let shape: Vec<usize> = c["param_shapes"][pname]
                    .as_array()
                    .unwrap_or_else(|| panic!("{name}: torch has no {pname}"))
                    .iter()
                    .map(|v| v.as_u64().unwrap() as usize)
                    .collect();
                p.set_data(&NDArray::from_vec(floats(&torch_params[pname]), &shape).unwrap())
                    .unwrap();
            }
            let shape = |k: &str| -> Vec<usize> {
                c[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect()
            };
            let x = NDArray::from_vec(floats(&c["x"]), &shape("x_shape")).unwrap();
            x.attach_grad();
            let (l, n, h) = (
                c["layers"].as_u64().unwrap() as usize
                    * if c["bidirectional"].as_bool().unwrap() { 2 } else { 1 },
                c["N"].as_u64().unwrap() as usize,
                c["hidden"].as_u64().unwrap() as usize,
            );
            let states: Vec<NDArray> = c["states"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| NDArray::from_vec(floats(s), &[l, n, h]).unwrap())
                .collect();
            for s in &states {
                s.attach_grad();
            }
            let lens: Option<Vec<usize>> = c["lengths"]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_u64().unwrap() as usize).collect());
            let (out, finals, loss) = autograd::record(|| {
                let (out, finals) = run(&x, &states, lens.as_deref())?;
                let r = NDArray::from_vec(floats(&c["r_out"]), &out.shape())?;
                let mut loss = out.mul(&r)?.sum_all()?;
                for (f, rf) in finals.iter().zip(c["r_finals"].as_array().unwrap()) {
                    let rf = NDArray::from_vec(floats(rf), &f.shape())?;
                    loss = loss.add(&f.mul(&rf)?.sum_all()?)?;
                }
                Ok::<_, sparrow_core::Error>((out, finals, loss))
            })
            .unwrap();
            loss.backward().unwrap();
            assert_eq!(out.shape(), shape("out_shape"), "{name}: output shape");
            close(&format!("{name} out"), &out.to_vec::<f32>().unwrap(), &floats(&c["out"]));
            let tf = c["finals"].as_array().unwrap();
            assert_eq!(finals.len(), tf.len());
            for (k, (f, t)) in finals.iter().zip(tf).enumerate() {
                close(&format!("{name} final state {k}"), &f.to_vec::<f32>().unwrap(), &floats(t));
            }
            close(&format!("{name} grad x"), &x.grad().unwrap().to_vec::<f32>().unwrap(),
                  &floats(&c["grad_x"]));
            for (k, (s, t)) in states.iter().zip(c["grad_states"].as_array().unwrap()).enumerate() {
                close(&format!("{name} grad state {k}"),
                      &s.grad().unwrap().to_vec::<f32>().unwrap(), &floats(t));
            }
            for (pname, p) in params.iter() {
                close(&format!("{name} grad {pname}"),
                      &p.grad().unwrap().to_vec::<f32>().unwrap(),
                      &floats(&c["grad_params"][pname]));
            }
            assert_eq!(out.dtype(), DType::F32);
        }
    }
}
