//! Random sparse arrays for tests, examples and benchmarks (`rand_sparse`), with uniform or
//! power-law (Zipf-like) column frequencies: real click data is power-law.

use rand::seq::index::sample;
use rand::{Rng, RngExt, SeedableRng};
use rand_distr::{Distribution, Zipf};

use crate::error::{Error, Result};
use crate::{NDArray, SType};

/// How the columns (csr) or rows (row_sparse) of the non-zeros are chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SparseDist {
    /// Every column equally likely.
    Uniform,
    /// Column `c` (0-based) drawn with probability proportional to `1 / (c + 1)^s`.
    PowerLaw(f64),
}

/// `k` distinct ids in `0..n`, sorted, drawn by `dist`.
fn distinct_ids(
    rng: &mut (impl Rng + ?Sized),
    n: usize,
    k: usize,
    dist: SparseDist,
) -> Result<Vec<i64>> {
    let mut ids: Vec<i64> = match dist {
        // Rejection of repeats is fast while k is well below n; near-dense rows use uniform.
        SparseDist::PowerLaw(s) if k * 2 <= n => {
            let z = Zipf::new(n as f64, s)
                .map_err(|e| Error::arg("rand_sparse", format!("power-law exponent {s}: {e}")))?;
            let mut seen = std::collections::HashSet::with_capacity(k);
            let mut tries = 0usize;
            while seen.len() < k && tries < 64 * k + 1024 {
                seen.insert(z.sample(rng) as i64 - 1);
                tries += 1;
            }
            // A steep exponent can starve the tail: top up uniformly.
            while seen.len() < k {
                seen.insert(rng.random_range(0..n) as i64);
            }
            seen.into_iter().collect()
        }
        _ => sample(rng, n, k).into_iter().map(|i| i as i64).collect(),
    };
    ids.sort_unstable();
    Ok(ids)
}

/// A random f32 array of storage type `stype` with about `density * size` non-zeros (values
/// uniform in (0, 1]). csr: every row gets `round(density * cols)` non-zeros (at least one when
/// density > 0) on columns drawn by `dist`; row_sparse: `round(density * rows)` stored rows
/// drawn by `dist`; dense: the densified csr (2-D only).
///
/// ```
/// use rand::SeedableRng;
/// use sparrow_core::{sparse::{rand_sparse, SparseDist}, SType};
/// let mut rng = rand::rngs::StdRng::seed_from_u64(0);
/// let x = rand_sparse(&[4, 100], 0.05, SType::Csr, SparseDist::Uniform, &mut rng).unwrap();
/// assert_eq!(x.nnz(), 20);
/// ```
pub fn rand_sparse(
    shape: &[usize],
    density: f64,
    stype: SType,
    dist: SparseDist,
    rng: &mut (impl Rng + ?Sized),
) -> Result<NDArray> {
    if !(0.0..=1.0).contains(&density) {
        return Err(Error::arg(
            "rand_sparse",
            format!("density {density} is not in [0, 1]"),
        ));
    }
    let count = |n: usize| {
        if density == 0.0 || n == 0 {
            0
        } else {
            ((density * n as f64).round() as usize).clamp(1, n)
        }
    };
    match stype {
        SType::RowSparse => {
            if shape.is_empty() {
                return Err(Error::shape(
                    "rand_sparse",
                    "row_sparse needs at least one dimension",
                ));
            }
            let rows = distinct_ids(rng, shape[0], count(shape[0]), dist)?;
            let rl: usize = shape[1..].iter().product();
            let data: Vec<f32> = (0..rows.len() * rl)
                .map(|_| 1.0 - rng.random::<f32>())
                .collect();
            NDArray::row_sparse_from_parts(data, rows, shape)
        }
        SType::Csr | SType::Dense => {
            if shape.len() != 2 {
                return Err(Error::shape(
                    "rand_sparse",
                    format!("csr needs a 2-D shape, got {shape:?}"),
                ));
            }
            let (r, c) = (shape[0], shape[1]);
            let k = count(c);
            let mut indices = Vec::with_capacity(r * k);
            let mut indptr = Vec::with_capacity(r + 1);
            indptr.push(0i64);
            for _ in 0..r {
                indices.extend(distinct_ids(rng, c, k, dist)?);
                indptr.push(indices.len() as i64);
            }
            let data: Vec<f32> = (0..indices.len())
                .map(|_| 1.0 - rng.random::<f32>())
                .collect();
            let a = NDArray::csr_unchecked(data, indices, indptr, [r, c])?;
            if stype == SType::Dense {
                a.tostype(SType::Dense)
            } else {
                Ok(a)
            }
        }
    }
}

/// [`rand_sparse`] with a fresh `StdRng` seeded by `seed`.
pub fn rand_sparse_seeded(
    shape: &[usize],
    density: f64,
    stype: SType,
    dist: SparseDist,
    seed: u64,
) -> Result<NDArray> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    rand_sparse(shape, density, stype, dist, &mut rng)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_counts_and_format() {
        let x = rand_sparse_seeded(&[50, 1000], 0.01, SType::Csr, SparseDist::Uniform, 1).unwrap();
        x.check_format(true).unwrap();
        assert_eq!(x.nnz(), 500);
        let p = rand_sparse_seeded(&[50, 1000], 0.01, SType::Csr, SparseDist::PowerLaw(1.1), 1)
            .unwrap();
        p.check_format(true).unwrap();
        assert_eq!(p.nnz(), 500);
        let r =
            rand_sparse_seeded(&[100, 3], 0.1, SType::RowSparse, SparseDist::Uniform, 2).unwrap();
        r.check_format(true).unwrap();
        assert_eq!(r.nnz(), 30);
        assert!(rand_sparse_seeded(&[3], 0.1, SType::Csr, SparseDist::Uniform, 0).is_err());
        assert!(rand_sparse_seeded(&[3, 3], 1.5, SType::Csr, SparseDist::Uniform, 0).is_err());
    }

    #[test]
    fn power_law_favours_low_columns() {
        let p = rand_sparse_seeded(
            &[200, 10_000],
            0.002,
            SType::Csr,
            SparseDist::PowerLaw(1.2),
            3,
        )
        .unwrap();
        let idx = p.with_csr::<f32, _>(|c| c.indices.to_vec()).unwrap();
        let low = idx.iter().filter(|&&j| j < 100).count();
        // Under uniform columns about 1% would fall below 100; power-law puts far more there.
        assert!(low * 4 > idx.len(), "{low} of {}", idx.len());
    }

    #[test]
    fn seeded_is_reproducible() {
        let a = rand_sparse_seeded(&[5, 40], 0.2, SType::Csr, SparseDist::Uniform, 9).unwrap();
        let b = rand_sparse_seeded(&[5, 40], 0.2, SType::Csr, SparseDist::Uniform, 9).unwrap();
        assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    }
}
