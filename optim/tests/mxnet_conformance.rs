//! Numerical conformance with MXNet 1.9.1: the data in `tests/data/mxnet_conformance.json` was
//! written by `scripts/mxnet_conformance.py` (MXNet's optimizers training a small Dense +
//! sparse-gradient Embedding model a few steps). This test replays the same steps with
//! sparrow's optimizers and requires the same weights to 1e-5 relative. No Python needed.

use serde_json::Value;
use sparrow_core::{device_test, testing::test_device, NDArray};
use sparrow_optim::*;

struct Data {
    batch: usize,
    inp: usize,
    out: usize,
    vocab: usize,
    edim: usize,
    steps: usize,
    x: Vec<f64>,
    y: Vec<f64>,
    tokens: Vec<usize>,
    yemb: Vec<f64>,
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// Gradients of L2Loss(Dense(x)) + L2Loss(sum(Embedding(tokens))) at the current weights,
/// summed over the batch (what MXNet's backward produces), the embedding's as row_sparse.
fn gradients(
    d: &Data,
    w: &[f32],
    b: &[f32],
    e: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<i64>, Vec<f32>) {
    let (mut gw, mut gb) = (vec![0.0f64; d.out * d.inp], vec![0.0f64; d.out]);
    for s in 0..d.batch {
        for o in 0..d.out {
            let mut p = b[o] as f64;
            for i in 0..d.inp {
                p += d.x[s * d.inp + i] * w[o * d.inp + i] as f64;
            }
            let dp = (p - d.y[s * d.out + o]) / d.out as f64;
            gb[o] += dp;
            for i in 0..d.inp {
                gw[o * d.inp + i] += dp * d.x[s * d.inp + i];
            }
        }
    }
    let mut ge = vec![0.0f64; d.vocab * d.edim];
    let per = d.tokens.len() / d.batch;
    for s in 0..d.batch {
        for k in 0..d.edim {
            let toks = &d.tokens[s * per..(s + 1) * per];
            let p: f64 = toks.iter().map(|&t| e[t * d.edim + k] as f64).sum();
            let dp = (p - d.yemb[s * d.edim + k]) / d.edim as f64;
            for &t in toks {
                ge[t * d.edim + k] += dp;
            }
        }
    }
    let mut rows: Vec<i64> = d.tokens.iter().map(|&t| t as i64).collect();
    rows.sort_unstable();
    rows.dedup();
    let vals = rows
        .iter()
        .flat_map(|&r| (0..d.edim).map(move |k| (r as usize, k)))
        .map(|(r, k)| ge[r * d.edim + k] as f32)
        .collect();
    let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect();
    (f(gw), f(gb), rows, vals)
}

fn make(name: &str, p: &Value) -> Box<dyn Optimizer> {
    let f = |k: &str| p.get(k).and_then(|v| v.as_f64());
    let lr = f("learning_rate").unwrap();
    let mut opt: Box<dyn Optimizer> = match name {
        "sgd" => Box::new(Sgd::with_momentum(lr, f("momentum").unwrap_or(0.0))),
        "adam" => Box::new(Adam::new(lr)),
        "adagrad" => Box::new(AdaGrad::new(lr)),
        "ftrl" => {
            let mut o = Ftrl::new(lr);
            o.lambda1 = f("lamda1").unwrap_or(0.01);
            // MXNet 1.9.1 has no lazy FTRL for a dense weight: it falls back to the dense kernel.
            o.opts.lazy_update = false;
            Box::new(o)
        }
        other => panic!("no optimizer {other} in this test"),
    };
    let o = opt.options_mut();
    o.wd = f("wd").unwrap_or(0.0);
    o.clip_gradient = f("clip_gradient");
    if let Some(l) = p.get("lazy_update").and_then(|v| v.as_bool()) {
        o.lazy_update = l;
    }
    opt
}

device_test! {
fn optimizers_match_mxnet_1_9_1() {
    let text = include_str!("data/mxnet_conformance.json");
    let j: Value = serde_json::from_str(text).unwrap();
    assert_eq!(j["mxnet_version"], "1.9.1");
    let u = |k: &str| j[k].as_u64().unwrap() as usize;
    let d = Data {
        batch: u("batch"),
        inp: u("in"),
        out: u("out"),
        vocab: u("vocab"),
        edim: u("edim"),
        steps: u("steps"),
        x: floats(&j["x"]),
        y: floats(&j["y"]),
        tokens: floats(&j["tokens"]).iter().map(|&t| t as usize).collect(),
        yemb: floats(&j["yemb"]),
    };
    let init = |k: &str| -> Vec<f32> { floats(&j["init"][k]).iter().map(|&x| x as f32).collect() };
    let cases = j["cases"].as_array().unwrap();
    assert!(cases.len() >= 5);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let mut opt = make(case["optimizer"].as_str().unwrap(), &case["params"]);
        opt.options_mut().rescale_grad = 1.0 / d.batch as f64;
        let w = NDArray::from_vec(init("dense_w"), &[d.out, d.inp]).unwrap();
        let b = NDArray::from_vec(init("dense_b"), &[d.out]).unwrap();
        let e = NDArray::from_vec(init("emb"), &[d.vocab, d.edim]).unwrap();
        let mut states: Vec<State> = [&w, &b, &e]
            .iter()
            .enumerate()
            .map(|(i, p)| opt.create_state(i, p).unwrap())
            .collect();
        for _ in 0..d.steps {
            let (gw, gb, rows, ge) = gradients(
                &d,
                &w.to_vec::<f32>().unwrap(),
                &b.to_vec::<f32>().unwrap(),
                &e.to_vec::<f32>().unwrap(),
            );
            // Sparse constructors do not follow the default-device scope: move by hand.
            let ge = NDArray::row_sparse_from_parts(ge, rows, &[d.vocab, d.edim])
                .and_then(|g| g.to_device(test_device()))
                .unwrap();
            let grads = [
                NDArray::from_vec(gw, &[d.out, d.inp]).unwrap(),
                NDArray::from_vec(gb, &[d.out]).unwrap(),
                ge,
            ];
            for (i, (p, g)) in [&w, &b, &e].iter().zip(&grads).enumerate() {
                opt.update(i, p, g, &mut states[i]).unwrap();
            }
        }
        let mut worst = 0.0f64;
        for (key, p) in [("dense_w", &w), ("dense_b", &b), ("emb", &e)] {
            let want = floats(&case["final"][key]);
            let got = p.to_vec::<f32>().unwrap();
            for (i, (&g, &m)) in got.iter().zip(&want).enumerate() {
                let err = (g as f64 - m).abs();
                let rel = err / m.abs().max(1e-3);
                worst = worst.max(rel);
                assert!(
                    err <= 1e-5 * m.abs() + 1e-7,
                    "{name}: {key}[{i}] sparrow {g} vs MXNet {m} (rel {rel:.2e})"
                );
            }
        }
        eprintln!("{name}: worst relative difference {worst:.2e}");
    }
}
}
