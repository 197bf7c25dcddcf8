//! Seeded synthetic sparse data for examples and benchmarks: CSR matrices with a given density,
//! uniform or power-law column popularity, and labels from a rule.
//!
//! The default recipe is MXNet's sparse Gluon tutorial: 1000 x 1,000,000 at density 1e-5,
//! values uniform in [0, 1), label = (row sum > mean row sum).

use rand::{rngs::StdRng, RngExt, SeedableRng};
use rayon::prelude::*;
use sparrow_core::NDArray;

use crate::batch::csr_array;
use crate::error::{DataError, Result};

/// How columns are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ColumnDist {
    /// Every column equally likely.
    Uniform,
    /// Column `floor(cols * u^exponent)` for uniform `u`: with `exponent > 1` low columns are
    /// popular (heavy head, long tail), as feature ids in click logs are.
    PowerLaw {
        /// Skew; 1 is uniform.
        exponent: f64,
    },
}

/// How labels are derived from the rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LabelRule {
    /// 1 if the row's value sum is above the mean row sum, else 0 (MXNet tutorial).
    RowSumAboveMean,
    /// 1 if `x . w > 0` for a hidden weight vector `w_j` uniform in [-1, 1] drawn from `seed`.
    LinearSign {
        /// Seed of the hidden weights.
        seed: u64,
    },
}

/// Rows generated per task (each task has its own seeded generator, so the result does not
/// depend on the number of threads).
const ROWS_PER_TASK: usize = 256;

/// A `rows x cols` CSR f32 matrix with about `density * cols` non-zeros per row, distinct
/// sorted columns per row, values uniform in [0, 1). Deterministic for a given `seed`.
pub fn random_csr(
    rows: usize,
    cols: usize,
    density: f64,
    dist: ColumnDist,
    seed: u64,
) -> Result<NDArray> {
    if !(0.0..=1.0).contains(&density) || cols == 0 && rows > 0 {
        return Err(DataError::arg(
            "random_csr",
            format!("density {density} must be in [0, 1] and cols > 0"),
        ));
    }
    let per_row = density * cols as f64;
    let tasks: Vec<(Vec<i64>, Vec<i64>, Vec<f32>)> = (0..rows.div_ceil(ROWS_PER_TASK))
        .into_par_iter()
        .map(|t| {
            let mut rng =
                StdRng::seed_from_u64(seed ^ (t as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let (mut lens, mut idx, mut val) = (Vec::new(), Vec::new(), Vec::new());
            let r1 = ((t + 1) * ROWS_PER_TASK).min(rows);
            for _ in t * ROWS_PER_TASK..r1 {
                // floor(per_row) plus one more with the fractional probability: mean per_row.
                let mut k = per_row.floor() as usize;
                if rng.random::<f64>() < per_row.fract() {
                    k += 1;
                }
                let k = k.min(cols);
                let start = idx.len();
                while idx.len() - start < k {
                    let need = k - (idx.len() - start);
                    for _ in 0..need {
                        let c = match dist {
                            ColumnDist::Uniform => rng.random_range(0..cols),
                            ColumnDist::PowerLaw { exponent } => {
                                let u: f64 = rng.random();
                                ((cols as f64 * u.powf(exponent)) as usize).min(cols - 1)
                            }
                        };
                        idx.push(c as i64);
                    }
                    idx[start..].sort_unstable();
                    let mut w = start;
                    for r in start..idx.len() {
                        if r == start || idx[r] != idx[w - 1] {
                            idx[w] = idx[r];
                            w += 1;
                        }
                    }
                    idx.truncate(w);
                }
                val.extend((0..k).map(|_| rng.random::<f32>()));
                lens.push(k as i64);
            }
            (lens, idx, val)
        })
        .collect();
    let mut indptr = Vec::with_capacity(rows + 1);
    indptr.push(0i64);
    let nnz: usize = tasks.iter().map(|t| t.1.len()).sum();
    let (mut indices, mut values) = (Vec::with_capacity(nnz), Vec::with_capacity(nnz));
    for (lens, idx, val) in tasks {
        for l in lens {
            indptr.push(indptr.last().copied().unwrap_or(0) + l);
        }
        indices.extend(idx);
        values.extend(val);
    }
    csr_array(rows, cols, indptr, indices, values)
}

/// Labels (dense f32 `[rows]`, 0 or 1) of a CSR matrix under `rule`.
pub fn labels(x: &NDArray, rule: LabelRule) -> Result<NDArray> {
    if x.stype() != sparrow_core::SType::Csr || x.dtype() != sparrow_core::DType::F32 {
        return Err(DataError::arg(
            "synthetic::labels",
            "expects a CSR matrix with f32 values",
        ));
    }
    let (rows, score) = x.with_csr::<f32, _>(|c| {
        let (v, ind) = (c.values, c.indices);
        let score: Vec<f64> = (0..c.shape[0])
            .into_par_iter()
            .map(|r| {
                let (s, e) = (c.indptr[r] as usize, c.indptr[r + 1] as usize);
                match rule {
                    LabelRule::RowSumAboveMean => v[s..e].iter().map(|&x| x as f64).sum(),
                    LabelRule::LinearSign { seed } => (s..e)
                        .map(|p| v[p] as f64 * hidden_weight(seed, ind[p] as u64))
                        .sum(),
                }
            })
            .collect();
        (c.shape[0], score)
    })?;
    let thr = match rule {
        LabelRule::RowSumAboveMean => score.iter().sum::<f64>() / rows.max(1) as f64,
        LabelRule::LinearSign { .. } => 0.0,
    };
    let y: Vec<f32> = score.iter().map(|&s| (s > thr) as u8 as f32).collect();
    Ok(NDArray::from_vec(y, &[rows])?)
}

/// Hidden weight of column `j`: a hash of (seed, j) mapped to [-1, 1].
fn hidden_weight(seed: u64, j: u64) -> f64 {
    let mut z = seed ^ j.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
}

/// MXNet's sparse Gluon tutorial data: `rows x cols` at `density`, uniform columns, labels
/// row sum > mean.
pub fn tutorial_data(
    rows: usize,
    cols: usize,
    density: f64,
    seed: u64,
) -> Result<(NDArray, NDArray)> {
    let x = random_csr(rows, cols, density, ColumnDist::Uniform, seed)?;
    let y = labels(&x, LabelRule::RowSumAboveMean)?;
    Ok((x, y))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn density_determinism_and_validity() {
        let a = random_csr(1000, 1_000_000, 1e-5, ColumnDist::Uniform, 1).unwrap();
        let b = random_csr(1000, 1_000_000, 1e-5, ColumnDist::Uniform, 1).unwrap();
        let cols = |x: &NDArray| x.with_csr::<f32, _>(|c| c.indices.to_vec()).unwrap();
        assert_eq!(cols(&a), cols(&b));
        // 10 per row on average.
        assert!((9_000..11_000).contains(&a.nnz()), "{}", a.nnz());
        a.with_csr::<f32, _>(|ca| {
            for r in 0..1000 {
                let row = &ca.indices[ca.indptr[r] as usize..ca.indptr[r + 1] as usize];
                assert!(row.windows(2).all(|w| w[0] < w[1]));
                assert!(row.iter().all(|&c| (0..1_000_000).contains(&c)));
            }
        })
        .unwrap();
        let c = random_csr(1000, 1_000_000, 1e-5, ColumnDist::Uniform, 2).unwrap();
        assert_ne!(cols(&c), cols(&a));
    }

    #[test]
    fn power_law_is_skewed_and_labels_balanced() {
        let x = random_csr(2000, 1000, 0.02, ColumnDist::PowerLaw { exponent: 3.0 }, 5).unwrap();
        let low = x
            .with_csr::<f32, _>(|c| c.indices.iter().filter(|&&j| j < 100).count())
            .unwrap();
        // Uniform columns would put 10% of the entries below column 100.
        assert!(
            low * 10 > x.nnz() * 3,
            "power law is skewed to low columns: {low}"
        );
        let y = labels(&x, LabelRule::RowSumAboveMean)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let ones = y.iter().filter(|&&v| v == 1.0).count();
        assert!((600..1400).contains(&ones), "{ones}");
        let y2 = labels(&x, LabelRule::LinearSign { seed: 3 })
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert!(y2.contains(&1.0) && y2.contains(&0.0));
        assert!(random_csr(2, 3, 1.5, ColumnDist::Uniform, 0).is_err());
    }
}
