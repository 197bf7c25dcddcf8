//! Shared test helper: finite-difference check of a block's parameter gradients.

use sparrow_core::{autograd, testing, NDArray};
use sparrow_nn::Block;

/// Compare (in training mode) each parameter's gradient of `sum(block(x) * r)` with central differences.
/// Parameters must be f64 and initialized; gradients may be row_sparse.
#[allow(dead_code)]
pub fn check_param_grads(block: &dyn Block, x: &NDArray, eps: f64, tol: f64) {
    let out = autograd::train_mode(|| block.forward(x)).unwrap();
    let r = testing::test_array(&out.shape(), 0.5, 1.5, 77);
    let rv = r.to_f64_vec();
    let params = block.collect_params().unwrap();
    params.zero_grad();
    let loss = autograd::record(|| block.forward(x)?.mul(&r)?.sum_all()).unwrap();
    loss.backward().unwrap();
    let scalar = || -> f64 {
        // Training mode without recording: BatchNorm uses batch statistics as in the backward.
        let y = autograd::train_mode(|| block.forward(x))
            .unwrap()
            .to_f64_vec();
        y.iter().zip(&rv).map(|(a, b)| a * b).sum()
    };
    for (name, p) in params.iter() {
        if p.grad().is_none() {
            continue;
        }
        let analytic = p.grad().unwrap().to_f64_vec();
        let data = p.data().unwrap();
        let (shape, device) = (data.shape(), data.device());
        // Element j set through a host copy: the parameter may live on a device.
        let set = |j: usize, v: f64| {
            let mut host = data.to_f64_vec();
            host[j] = v;
            let value = NDArray::from_vec(host, &shape)
                .unwrap()
                .to_device(device)
                .unwrap();
            data.assign(&value);
        };
        for (j, &want) in analytic.iter().enumerate() {
            let orig = data.to_f64_vec()[j];
            set(j, orig + eps);
            let up = scalar();
            set(j, orig - eps);
            let down = scalar();
            set(j, orig);
            let numeric = (up - down) / (2.0 * eps);
            assert!(
                (numeric - want).abs() <= tol * (1.0 + numeric.abs()),
                "{name}[{j}]: analytic {want} numeric {numeric}"
            );
        }
    }
}

/// Gradient of the block output with respect to its input (dense f64 input).
#[allow(dead_code)]
pub fn check_input_grad(block: &dyn Block, x: &NDArray) {
    // check_grad's numeric pass runs paused (predict mode): force training mode for BatchNorm.
    testing::check_grad(
        |xs| autograd::train_mode(|| block.forward(&xs[0])),
        std::slice::from_ref(x),
        1e-6,
        1e-4,
        1e-6,
    )
    .unwrap();
}
