//! CP decomposition of a 3-D tensor by alternating least squares, streaming the tensor from a
//! (memory-mapped) file a block of slabs at a time.
//!
//! The tensor `X` (`I x J x K`) is stored as a dense `(I * J, K)` array: row `i * J + j` is
//! the fiber `X[i, j, :]`, so a block of `nb` slabs `X[i0..i0 + nb]` is `nb * J` consecutive
//! rows, a `mapped_rows` view of the file with no copy. Each ALS sweep makes one pass over the
//! tensor per factor, each pass one GEMM per block:
//!
//! - `A`: `M_A[i] = sum_j (X_i C)[j] * B[j]`, from `T = X_blk C` (`nb*J x R`);
//! - `B`: `M_B += sum_i A[i] * (X_i C)`, from the same product with the new `A`;
//! - `C`: `M_C += X_blk^T W` with `W[(i, j)] = A[i] * B[j]` (the Khatri-Rao rows);
//!
//! and the factor is `M (G)^-1` with `G` the Hadamard product of the other two factors'
//! Gram matrices (`R x R`, solved here by Cholesky in f64). Each block's pages are released
//! after use (`NDArray::release_pages`), so memory beyond the factors is one block and its
//! product: the tensor itself is never resident as a whole.

use sparrow::core::random::Rng;
use sparrow::core::{DType, Error, NDArray, Result};

/// The three factor matrices: `a` is `I x R`, `b` is `J x R`, `c` is `K x R`.
pub struct Factors {
    pub a: NDArray,
    pub b: NDArray,
    pub c: NDArray,
}

/// What one sweep reports.
pub struct Sweep {
    /// `1 - ||X - X_hat|| / ||X||`.
    pub fit: f64,
}

/// Rows `start..end` of `x`: a view of the file's pages for a file-backed array, a slice
/// for one in memory.
fn rows(x: &NDArray, start: usize, end: usize) -> Result<NDArray> {
    match x.mapped_rows(start, end) {
        Ok(v) => Ok(v),
        Err(_) => x.slice_axis(0, Some(start as i64), Some(end as i64), 1),
    }
}

/// `a^T a` as f64.
fn gram(a: &NDArray) -> Result<Vec<f64>> {
    let g = a.dot_t(a, true, false)?;
    Ok(g.to_vec::<f32>()?.iter().map(|&v| v as f64).collect())
}

/// `m (g)^-1` for symmetric positive definite `g` (`r x r`), by Cholesky; a tiny ridge keeps
/// it definite when a factor's columns are nearly dependent.
fn solve_right(m: &NDArray, g: &[f64], r: usize) -> Result<NDArray> {
    let trace: f64 = (0..r).map(|i| g[i * r + i]).sum();
    let ridge = 1e-12 * (trace / r as f64).max(f64::MIN_POSITIVE);
    let mut l = vec![0.0f64; r * r];
    for i in 0..r {
        for j in 0..=i {
            let mut s = g[i * r + j] + if i == j { ridge } else { 0.0 };
            for k in 0..j {
                s -= l[i * r + k] * l[j * r + k];
            }
            if i == j {
                if s <= 0.0 {
                    return Err(Error::arg("cp_als", "Gram matrix is not positive definite"));
                }
                l[i * r + i] = s.sqrt();
            } else {
                l[i * r + j] = s / l[j * r + j];
            }
        }
    }
    let shape = m.shape();
    let mv = m.to_vec::<f32>()?;
    let mut out = vec![0.0f32; mv.len()];
    for (row, o) in mv.chunks(r).zip(out.chunks_mut(r)) {
        // Solve L y = row, then L^T z = y (z = row g^-1 since g is symmetric).
        let mut y = vec![0.0f64; r];
        for i in 0..r {
            let s: f64 = (0..i).map(|k| l[i * r + k] * y[k]).sum();
            y[i] = (row[i] as f64 - s) / l[i * r + i];
        }
        for i in (0..r).rev() {
            let s: f64 = (i + 1..r).map(|k| l[k * r + i] * y[k]).sum();
            y[i] = (y[i] - s) / l[i * r + i];
        }
        for (oi, yi) in o.iter_mut().zip(y) {
            *oi = yi as f32;
        }
    }
    NDArray::from_vec(out, &shape)
}

fn hadamard(x: &[f64], y: &[f64]) -> Vec<f64> {
    x.iter().zip(y).map(|(a, b)| a * b).collect()
}

/// Random factors in `[0, 1)`, seeded.
pub fn init(dims: [usize; 3], rank: usize, seed: u64) -> Result<Factors> {
    let mut rng = Rng::new(seed);
    Ok(Factors {
        a: rng.uniform(0.0, 1.0, &[dims[0], rank], DType::F32)?,
        b: rng.uniform(0.0, 1.0, &[dims[1], rank], DType::F32)?,
        c: rng.uniform(0.0, 1.0, &[dims[2], rank], DType::F32)?,
    })
}

/// Check that `x` is the `(I * J, K)` array of a tensor of `dims`.
pub fn check_shape(x: &NDArray, dims: [usize; 3]) -> Result<()> {
    let want = [dims[0] * dims[1], dims[2]];
    if x.shape() != want {
        return Err(Error::shape(
            "cp_als",
            format!(
                "tensor {dims:?} must be stored as {want:?}, got {:?}",
                x.shape()
            ),
        ));
    }
    Ok(())
}

/// `||X||^2`, one pass.
pub fn norm_sq(x: &NDArray, dims: [usize; 3], block: usize) -> Result<f64> {
    let j = dims[1];
    let mut s = 0.0;
    for i0 in (0..dims[0]).step_by(block) {
        let i1 = (i0 + block).min(dims[0]);
        let blk = rows(x, i0 * j, i1 * j)?;
        s += blk.square()?.sum_all()?.to_vec::<f32>()?[0] as f64;
        blk.release_pages();
    }
    Ok(s)
}

/// One ALS sweep (update `A`, then `B`, then `C`, three passes over `x`), `block` slabs at a
/// time. `x_norm_sq` is `||X||^2` (from [`norm_sq`]).
pub fn sweep(
    x: &NDArray,
    dims: [usize; 3],
    f: &mut Factors,
    block: usize,
    x_norm_sq: f64,
) -> Result<Sweep> {
    let [ni, nj, nk] = dims;
    let r = f.a.shape()[1];
    let blocks: Vec<(usize, usize)> = (0..ni)
        .step_by(block)
        .map(|i0| (i0, (i0 + block).min(ni)))
        .collect();

    // A: M_A[i] = sum_j (X_i C)[j] * B[j].
    let mut m_a = Vec::with_capacity(ni * r);
    let b3 = f.b.reshape(&[1, nj, r])?;
    for &(i0, i1) in &blocks {
        let blk = rows(x, i0 * nj, i1 * nj)?;
        let t = blk.dot(&f.c)?;
        blk.release_pages();
        let part = t
            .reshape(&[i1 - i0, nj, r])?
            .mul(&b3)?
            .sum(Some(&[1]), false)?;
        m_a.extend(part.to_vec::<f32>()?);
    }
    let m_a = NDArray::from_vec(m_a, &[ni, r])?;
    f.a = solve_right(&m_a, &hadamard(&gram(&f.c)?, &gram(&f.b)?), r)?;

    // B: M_B = sum_i A[i] * (X_i C).
    let mut m_b = NDArray::zeros(&[nj, r], DType::F32)?;
    for &(i0, i1) in &blocks {
        let blk = rows(x, i0 * nj, i1 * nj)?;
        let t = blk.dot(&f.c)?;
        blk.release_pages();
        let a3 = rows(&f.a, i0, i1)?.reshape(&[i1 - i0, 1, r])?;
        let part = t
            .reshape(&[i1 - i0, nj, r])?
            .mul(&a3)?
            .sum(Some(&[0]), false)?;
        m_b = m_b.add(&part)?;
    }
    f.b = solve_right(&m_b, &hadamard(&gram(&f.c)?, &gram(&f.a)?), r)?;

    // C: M_C = sum_blocks X_blk^T W, W[(i, j)] = A[i] * B[j].
    let mut m_c = NDArray::zeros(&[nk, r], DType::F32)?;
    let b3 = f.b.reshape(&[1, nj, r])?;
    for &(i0, i1) in &blocks {
        let a3 = rows(&f.a, i0, i1)?.reshape(&[i1 - i0, 1, r])?;
        let w = a3.mul(&b3)?.reshape(&[(i1 - i0) * nj, r])?;
        let blk = rows(x, i0 * nj, i1 * nj)?;
        m_c = m_c.add(&blk.dot_t(&w, true, false)?)?;
        blk.release_pages();
    }
    let (ga, gb) = (gram(&f.a)?, gram(&f.b)?);
    f.c = solve_right(&m_c, &hadamard(&ga, &gb), r)?;

    // ||X_hat||^2 = sum(G_A * G_B * G_C); <X, X_hat> = sum(M_C * C).
    let model_sq: f64 = hadamard(&hadamard(&ga, &gb), &gram(&f.c)?).iter().sum();
    let inner: f64 = m_c
        .to_vec::<f32>()?
        .iter()
        .zip(f.c.to_vec::<f32>()?)
        .map(|(&m, c)| m as f64 * c as f64)
        .sum();
    let resid = (x_norm_sq + model_sq - 2.0 * inner).max(0.0).sqrt();
    Ok(Sweep {
        fit: 1.0 - resid / x_norm_sq.sqrt(),
    })
}

/// The tensor `sum_r a_r (x) b_r (x) c_r` (plus `noise` times uniform noise in `[-1, 1)`),
/// written into `out` (an `(I * J, K)` array, file-backed or not) `block` slabs at a time.
pub fn synthesize(
    out: &NDArray,
    truth: &Factors,
    noise: f64,
    block: usize,
    seed: u64,
) -> Result<()> {
    let (ni, nj, r) = (truth.a.shape()[0], truth.b.shape()[0], truth.a.shape()[1]);
    let b3 = truth.b.reshape(&[1, nj, r])?;
    let mut rng = Rng::new(seed);
    for i0 in (0..ni).step_by(block) {
        let i1 = (i0 + block).min(ni);
        let a3 = rows(&truth.a, i0, i1)?.reshape(&[i1 - i0, 1, r])?;
        let w = a3.mul(&b3)?.reshape(&[(i1 - i0) * nj, r])?;
        let mut x = w.dot_t(&truth.c, false, true)?;
        if noise > 0.0 {
            let e = rng.uniform(-1.0, 1.0, &x.shape(), DType::F32)?;
            x = x.add(&e.mul_scalar(noise)?)?;
        }
        out.write_rows(i0 * nj, &x)?;
        // Written pages leave the resident set too (they stay dirty in the page cache).
        if let Ok(view) = out.mapped_rows(i0 * nj, i1 * nj) {
            view.release_pages();
        }
    }
    Ok(())
}
