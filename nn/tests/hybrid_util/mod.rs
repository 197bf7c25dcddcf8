//! Shared helpers of the hybridized-training tests: f32 test arrays, the 1-ulp comparison,
//! parameter gradients and weights of a block, one eager step, and the tutorial-shaped model.
#![allow(dead_code)]

use sparrow_core::{autograd, DType, NDArray, SType};
use sparrow_nn::loss::Loss;
use sparrow_nn::{Block, Dense, Sequential};

pub fn arr(shape: &[usize], lo: f64, hi: f64, seed: u64) -> NDArray {
    sparrow_core::testing::test_array(shape, lo, hi, seed)
        .astype(DType::F32)
        .unwrap()
}

/// Same storage type and shape; values within one f32 ulp of the array's largest magnitude.
pub fn ulp_close(a: &NDArray, b: &NDArray, what: &str) {
    assert_eq!(a.stype(), b.stype(), "{what}: stype");
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    let (x, y) = (
        a.tostype(SType::Dense).unwrap().to_f64_vec(),
        b.tostype(SType::Dense).unwrap().to_f64_vec(),
    );
    let scale = x.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    let tol = scale * f32::EPSILON as f64;
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        assert!(
            (p - q).abs() <= tol,
            "{what}[{i}]: eager {p}, hybridized {q} (tolerance {tol})"
        );
    }
}

/// Same values: bit for bit on the CPU (a graph runs the eager kernels there), within 1e-6 of
/// the largest magnitude on another device (whose fused kernels may round differently from
/// its eager ones).
pub fn same_on_device(a: &NDArray, b: &NDArray, what: &str) {
    let (x, y) = (
        a.tostype(SType::Dense).unwrap().to_f64_vec(),
        b.tostype(SType::Dense).unwrap().to_f64_vec(),
    );
    if a.device() == sparrow_core::Device::Cpu {
        assert_eq!(x, y, "{what}: values");
        return;
    }
    let scale = x.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    for (k, (u, v)) in x.iter().zip(&y).enumerate() {
        assert!(
            (u - v).abs() <= 1e-6 * scale,
            "{what}: element {k}: {u} against {v} on {:?}",
            a.device()
        );
    }
}

pub fn grads(b: &dyn Block) -> Vec<(String, Option<NDArray>)> {
    b.collect_params()
        .unwrap()
        .iter()
        .map(|(n, p)| (n.to_string(), p.grad().map(|g| g.copy())))
        .collect()
}

pub fn copy_params(from: &dyn Block, to: &dyn Block) {
    let (f, t) = (from.collect_params().unwrap(), to.collect_params().unwrap());
    for (n, p) in f.iter() {
        t.get(n).unwrap().set_data(&p.data().unwrap()).unwrap();
    }
}

/// Eager step of `net` (losses per sample, head gradient of ones).
pub fn eager_step(net: &dyn Block, loss: &dyn Loss, x: &NDArray, y: &NDArray) -> NDArray {
    let l = autograd::record(|| loss.forward(&net.forward(x)?, y)).unwrap();
    l.backward().unwrap();
    l
}

/// The sparse tutorial's model, narrowed: Dense(16, sigmoid) with a row_sparse weight
/// gradient (for a csr batch), Dense(8, sigmoid), Dense(1, sigmoid).
pub fn tutorial_model() -> Sequential {
    let mut s = Sequential::new();
    s.add(
        Dense::new(16)
            .activation("sigmoid")
            .grad_stype(SType::RowSparse),
    );
    s.add(Dense::new(8).in_units(16).activation("sigmoid"));
    s.add(Dense::new(1).in_units(8).activation("sigmoid"));
    s
}
