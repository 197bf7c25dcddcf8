//! Test helpers shared by the crates' tests: finite-difference gradient checking.

use crate::error::{Error, Result};
use crate::{autograd, DType, NDArray};

/// Compare autograd gradients of `f` with central finite differences.
///
/// The scalar checked is `sum(f(inputs) * r)` for a fixed pseudo-random `r`, so every output
/// element's gradient matters. Inputs should be f64 for precision; sparse inputs are perturbed
/// through their dense equivalent by `f` itself. Returns the largest relative error found, or an
/// error naming the input and element that disagree beyond `rtol`/`atol`.
pub fn check_grad<F>(f: F, inputs: &[NDArray], eps: f64, rtol: f64, atol: f64) -> Result<f64>
where
    F: Fn(&[NDArray]) -> Result<NDArray>,
{
    for x in inputs {
        x.attach_grad();
    }
    let out = autograd::record(|| f(inputs))?;
    let n = out.size();
    let mut state = 0x9E3779B97F4A7C15u64;
    let r: Vec<f64> = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            0.5 + (state % 1000) as f64 / 1000.0
        })
        .collect();
    let r_arr = NDArray::from_vec(r.clone(), &out.shape())?.astype(out.dtype())?;
    out.backward_with_grad(&r_arr)?;
    let scalar = |xs: &[NDArray]| -> Result<f64> {
        let y = autograd::pause(|| f(xs))?;
        Ok(y.to_f64_vec().iter().zip(&r).map(|(a, b)| a * b).sum())
    };
    let mut worst = 0.0f64;
    for (i, x) in inputs.iter().enumerate() {
        let analytic = x
            .grad()
            .map(|g| g.to_f64_vec())
            .unwrap_or_else(|| vec![0.0; x.size()]);
        let base = x.to_f64_vec();
        for j in 0..base.len() {
            let probe = |delta: f64| -> Result<f64> {
                let mut v = base.clone();
                v[j] += delta;
                let xs: Vec<NDArray> = inputs
                    .iter()
                    .enumerate()
                    .map(|(k, a)| {
                        if k == i {
                            NDArray::from_vec(v.clone(), &a.shape())
                                .and_then(|t| t.astype(a.dtype()))
                        } else {
                            Ok(a.detach())
                        }
                    })
                    .collect::<Result<_>>()?;
                scalar(&xs)
            };
            let numeric = (probe(eps)? - probe(-eps)?) / (2.0 * eps);
            let a = analytic[j];
            let err = (a - numeric).abs();
            let rel = err / numeric.abs().max(a.abs()).max(1e-12);
            if err > atol + rtol * numeric.abs() {
                return Err(Error::Autograd(format!(
                    "gradient check failed for input {i} element {j}: analytic {a}, numeric {numeric}"
                )));
            }
            worst = worst.max(rel.min(err));
        }
    }
    Ok(worst)
}

/// A deterministic f64 array with values in `[lo, hi)`, for tests.
pub fn test_array(shape: &[usize], lo: f64, hi: f64, seed: u64) -> NDArray {
    let n: usize = shape.iter().product();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        | 1;
    let v: Vec<f64> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect();
    NDArray::from_vec(v, shape)
        .expect("shape matches")
        .astype(DType::F64)
        .expect("f64")
}

/// A seeded random csr test array of shape `[rows, cols]` with about `density * rows * cols`
/// uniform non-zeros, cast to `dtype`.
pub fn test_csr(rows: usize, cols: usize, density: f64, seed: u64, dtype: DType) -> NDArray {
    crate::sparse::rand_sparse_seeded(
        &[rows, cols],
        density,
        crate::SType::Csr,
        crate::sparse::SparseDist::Uniform,
        seed,
    )
    .and_then(|x| x.astype(dtype))
    .expect("a valid random csr array")
}
