//! Products with a tiny dimension (a Dense layer on a wide batch) take the skinny kernels
//! inside `dot`: forward `X W^T` (tiny m, huge k) and the weight gradient `g^T X` (tiny k,
//! large output). Both are checked through the public API against f64 references, with and
//! without a gradient on the batch.

use sparrow_core::testing::test_device;
use sparrow_core::{autograd, device_test, NDArray};

/// Deterministic values in [-1, 1).
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// `rows x cols` row-major matrix whose element (r, c) is `sum_{p < inner} term(r, c, p)`, in f64.
fn reference(
    rows: usize,
    cols: usize,
    inner: usize,
    term: impl Fn(usize, usize, usize) -> f64,
) -> Vec<f64> {
    let mut out = vec![0f64; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            out[r * cols + c] = (0..inner).map(|p| term(r, c, p)).sum();
        }
    }
    out
}

fn assert_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!((g as f64 - w).abs() <= tol, "{what}[{i}]: {g} vs {w}");
    }
}

device_test! {
fn wide_dense_layer_forward_and_weight_gradient() {
    // m = 4 rows, k = 20,003 features (odd: vector tails), 300 units: the forward product has
    // m = 4 <= 16 with k >= 2^14, the weight gradient 300 x 20,003 with inner size 4.
    let (m, k, units) = (4usize, 20_003usize, 300usize);
    let xv = values(m * k, 1);
    let wv = values(units * k, 2);
    let gv = values(m * units, 3);
    for batch_grad in [false, true] {
        let x = NDArray::from_vec(xv.clone(), &[m, k]).and_then(|a| a.to_device(test_device())).unwrap();
        let w = NDArray::from_vec(wv.clone(), &[units, k]).and_then(|a| a.to_device(test_device())).unwrap();
        w.attach_grad();
        if batch_grad {
            x.attach_grad();
        }
        let y = autograd::record(|| x.dot_t(&w, false, true)).unwrap();
        let want_y = reference(m, units, k, |i, j, p| {
            xv[i * k + p] as f64 * wv[j * k + p] as f64
        });
        // |sum| of 20,003 products in [-1, 1]: f32 rounding of partial sums, a few 1e-3.
        assert_close(&y.to_vec::<f32>().unwrap(), &want_y, 2e-2, "X W^T");

        let g = NDArray::from_vec(gv.clone(), &[m, units]).and_then(|a| a.to_device(test_device())).unwrap();
        y.backward_with_grad(&g).unwrap();
        let want_dw = reference(units, k, m, |j, p, i| {
            gv[i * units + j] as f64 * xv[i * k + p] as f64
        });
        let dw = w.grad().expect("weight gradient");
        assert_close(&dw.to_vec::<f32>().unwrap(), &want_dw, 1e-5, "dW = g^T X");

        // The batch gets a gradient only when it asked for one.
        if batch_grad {
            let want_dx = reference(m, k, units, |i, p, j| {
                gv[i * units + j] as f64 * wv[j * k + p] as f64
            });
            let dx = x.grad().expect("batch gradient");
            assert_close(&dx.to_vec::<f32>().unwrap(), &want_dx, 1e-3, "dX = g W");
        } else {
            assert!(
                x.grad().is_none(),
                "a batch without attach_grad got a gradient"
            );
        }
    }
}
}
