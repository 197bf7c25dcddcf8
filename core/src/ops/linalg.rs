//! Matrix products: validation, dispatch and recording. The kernel is the storage's
//! [`Storage::matmul`](crate::storage::Storage::matmul) (on the CPU, `crate::cpu::linalg`).

use crate::autograd::attach_node;
use crate::error::{Error, Result};
use crate::storage::MatMul;
use crate::{DenseData, NDArray};

/// Dense 2-D product with optional transposes, no autograd.
pub(crate) fn dot_dense(a: &NDArray, b: &NDArray, ta: bool, tb: bool) -> Result<NDArray> {
    a.with_dense2(b, |da, db| dot_dense_data(da, db, ta, tb))
}

fn dot_dense_data(da: &DenseData, db: &DenseData, ta: bool, tb: bool) -> Result<NDArray> {
    let mm = dot_geometry(da, db, ta, tb)?;
    NDArray::from_buffer(da.buf.matmul(&db.buf, &mm)?, &[mm.m, mm.n])
}

/// The product `op(a) . op(b)` of two dense 2-D operands of one dtype, checked: shared by
/// the operator and a planned graph's node writing into its buffer.
pub(crate) fn dot_geometry(da: &DenseData, db: &DenseData, ta: bool, tb: bool) -> Result<MatMul> {
    if da.shape.len() != 2 || db.shape.len() != 2 {
        return Err(Error::shape(
            "dot",
            format!("needs 2-D operands, got {:?} and {:?}", da.shape, db.shape),
        ));
    }
    if da.buf.dtype() != db.buf.dtype() {
        return Err(Error::dtype_mismatch("dot", da.buf.dtype(), db.buf.dtype()));
    }
    let (ar, ac) = (da.shape[0], da.shape[1]);
    let (br, bc) = (db.shape[0], db.shape[1]);
    let (m, k) = if ta { (ac, ar) } else { (ar, ac) };
    let (k2, n) = if tb { (bc, br) } else { (br, bc) };
    if k != k2 {
        return Err(Error::shape(
            "dot",
            format!(
                "inner dimensions differ: {:?}{} x {:?}{}",
                da.shape,
                if ta { "^T" } else { "" },
                db.shape,
                if tb { "^T" } else { "" }
            ),
        ));
    }
    Ok(MatMul { m, n, k, ta, tb })
}

impl NDArray {
    /// Matrix product of 2-D arrays (`dot(a, b)`), dispatching on storage types: a csr left
    /// operand uses the sparse kernel.
    pub fn dot(&self, other: &NDArray) -> Result<NDArray> {
        self.dot_t(other, false, false)
    }

    /// `op(a) . op(b)` with `op` = transpose when the flag is set (MXNet's transpose_a/b).
    pub fn dot_t(&self, other: &NDArray, transpose_a: bool, transpose_b: bool) -> Result<NDArray> {
        crate::graph::traced!(
            Op::Dot {
                ta: transpose_a,
                tb: transpose_b
            },
            [self, other],
            self.dot_t(other, transpose_a, transpose_b)
        );
        if let Some(out) = crate::sparse::dispatch_dot(self, other, transpose_a, transpose_b)? {
            return Ok(out);
        }
        let out = dot_dense(self, other, transpose_a, transpose_b)?;
        if !crate::autograd::is_recording() {
            return Ok(out);
        }
        // Decided when the graph is built: a data batch (no gradient attached, not computed
        // by a recorded op) gets no gradient, which in a Dense layer on a large input skips a
        // whole product as big as the forward one.
        let (need_a, need_b) = (self.requires_grad(), other.requires_grad());
        if !need_a && !need_b {
            return Ok(out);
        }
        // Each operand is kept only for the gradient that reads it: dA needs B, dB needs A.
        let a = need_b.then(|| self.clone());
        let b = need_a.then(|| other.clone());
        Ok(attach_node("dot", out, &[self, other], move |g| {
            // C = op(A) op(B).  dA = g op(B)^T (transposed back if A was), dB likewise.
            let ga = match &b {
                None => None,
                Some(b) if transpose_a => Some(dot_dense(b, g, transpose_b, true)?),
                Some(b) => Some(dot_dense(g, b, false, !transpose_b)?),
            };
            let gb = match &a {
                None => None,
                Some(a) if transpose_b => Some(dot_dense(g, a, true, transpose_a)?),
                Some(a) => Some(dot_dense(a, g, !transpose_a, false)?),
            };
            Ok(vec![ga, gb])
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::cpu::gemm::{gemm_into, strides, GemmScalar};
    use rand::rngs::Xoshiro256PlusPlus;
    use rand::{RngExt, SeedableRng};

    /// Stored operand of `rows x cols` (as used in the product), laid out row-major or, when
    /// `transposed`, as its transpose; returns (data, row stride, column stride).
    fn operand<T: GemmScalar>(
        rng: &mut Xoshiro256PlusPlus,
        rows: usize,
        cols: usize,
        transposed: bool,
    ) -> (Vec<T>, isize, isize) {
        let data = (0..rows * cols)
            .map(|_| <T as num_traits::NumCast>::from(rng.random_range(-1.0f64..1.0)).unwrap())
            .collect();
        let stored_cols = if transposed { rows } else { cols };
        let (rs, cs) = strides(stored_cols, transposed);
        (data, rs, cs)
    }

    /// Checks `gemm_into` against a plain triple loop accumulated in f64.
    fn check<T: GemmScalar>(m: usize, n: usize, k: usize, ta: bool, tb: bool, seed: u64, tol: f64) {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let (a, a_rs, a_cs) = operand::<T>(&mut rng, m, k, ta);
        let (b, b_rs, b_cs) = operand::<T>(&mut rng, k, n, tb);
        // Garbage in dst: gemm_into must overwrite every element.
        let mut dst = vec![<T as num_traits::NumCast>::from(7.5).unwrap(); m * n];
        gemm_into(m, n, k, &a, a_rs, a_cs, &b, b_rs, b_cs, &mut dst);
        for i in 0..m {
            for j in 0..n {
                let mut want = 0.0f64;
                for p in 0..k {
                    let x = a[(i as isize * a_rs + p as isize * a_cs) as usize];
                    let y = b[(p as isize * b_rs + j as isize * b_cs) as usize];
                    want += num_traits::ToPrimitive::to_f64(&x).unwrap()
                        * num_traits::ToPrimitive::to_f64(&y).unwrap();
                }
                let got = num_traits::ToPrimitive::to_f64(&dst[i * n + j]).unwrap();
                // Each term is below 1 in magnitude, so the error grows at most like k.
                assert!(
                    (got - want).abs() <= tol * (k.max(1) as f64),
                    "{m}x{k}x{n} ta={ta} tb={tb}: c[{i},{j}] = {got}, want {want}"
                );
            }
        }
    }

    /// Shapes for every path of `gemm_into`: k = 0, the small gemm path, the boundary, the
    /// single-threaded matrixmultiply path, and split products along rows (m >= n) and columns
    /// (m < n) with blocks that are not multiples of the split alignment (tails).
    const SHAPES: &[(usize, usize, usize)] = &[
        (3, 4, 0),
        (1, 1, 1),
        (3, 5, 7),
        (10, 8, 128),
        (63, 64, 65),
        (64, 64, 64),
        (65, 63, 67),
        (129, 127, 300),
        (301, 17, 1000),
        (9, 1001, 600),
        (1, 4099, 1024),
        (4099, 1, 1024),
    ];

    fn check_all(tol32: f64, tol64: f64) {
        for (s, &(m, n, k)) in SHAPES.iter().enumerate() {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                check::<f32>(m, n, k, ta, tb, s as u64, tol32);
                check::<f64>(m, n, k, ta, tb, 100 + s as u64, tol64);
            }
        }
    }

    #[test]
    fn gemm_into_matches_reference_on_default_pool() {
        check_all(1e-6, 1e-14);
    }

    #[test]
    fn gemm_into_matches_reference_with_one_and_three_threads() {
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| check_all(1e-6, 1e-14));
        }
    }
}
