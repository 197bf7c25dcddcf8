//! Large gradient buffers are recycled between backward passes (`sparrow_core::recycle`):
//! the values must be exactly those of a fresh computation, and only buffers nobody else
//! holds may be reused. Its own test binary: the pool is process-global.

use sparrow_core::recycle::{recycled_bytes, release_recycled_buffers, RECYCLE_MIN_BYTES};
use sparrow_core::{autograd, testing::test_array, DType, NDArray};

/// `X^T G` in f64, the reference for the weight gradient of `Y = X W`.
fn xt_g(x: &[f32], g: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0f64; k * n];
    for r in 0..m {
        for i in 0..k {
            let a = x[r * k + i] as f64;
            for j in 0..n {
                out[i * n + j] += a * g[r * n + j] as f64;
            }
        }
    }
    out
}

// CPU only, by design: the pool recycles host gradient buffers (`recycle.rs` hands a
// replaced host `Vec` to the next backward), and the test's assertions are about that pool's
// byte count. A device backend manages its own memory and would not fill this pool, so
// `recycled_bytes() >= RECYCLE_MIN_BYTES` would fail there for a correct backend. The test
// makes its arrays outside any device scope, so they are on the CPU.
#[test]
fn recycled_weight_gradients_equal_fresh_ones() {
    release_recycled_buffers();
    let (m, n) = (3usize, 128usize);
    let k = RECYCLE_MIN_BYTES / 4 / n; // the weight gradient is exactly the recycling size
    let x = test_array(&[m, k], -1.0, 1.0, 1)
        .astype(DType::F32)
        .unwrap();
    let w = NDArray::zeros(&[k, n], DType::F32).unwrap();
    w.attach_grad();
    let xs = x.to_vec::<f32>().unwrap();
    let mut held = Vec::new();
    for step in 0..4u64 {
        let g = test_array(&[m, n], -1.0, 1.0, 10 + step)
            .astype(DType::F32)
            .unwrap();
        let y = autograd::record(|| x.dot(&w)).unwrap();
        y.backward_with_grad(&g).unwrap();
        let got = w.grad().unwrap().to_vec::<f32>().unwrap();
        let want = xt_g(&xs, &g.to_vec::<f32>().unwrap(), m, k, n);
        for (i, (&a, &b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a as f64 - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "step {step}, element {i}: {a} vs {b}"
            );
        }
        if step == 1 {
            // The step-0 gradient was replaced and nobody held it: it went to the pool.
            assert!(recycled_bytes() >= RECYCLE_MIN_BYTES, "step {step}");
            // Hold on to this gradient: it must never be handed out again while held.
            held.push((w.grad().unwrap(), got.clone()));
        }
    }
    // The held gradient kept its values through the later steps.
    for (g, values) in held {
        assert_eq!(g.to_vec::<f32>().unwrap(), values);
    }
    release_recycled_buffers();
    assert_eq!(recycled_bytes(), 0);
}
