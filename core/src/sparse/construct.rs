//! Building csr and row_sparse arrays: from parts (validated or trusted), from COO triplets and
//! with an stype-aware `zeros`; and `check_format`, which validates MXNet's invariants.

use crate::cpu::CpuStorage;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, CsrData, NDArray, RowSparseData};
use crate::storage::{IndexStorage, Storage};
use crate::SType;

/// Check the invariants of csr parts. `full` adds the O(nnz) checks (monotone indptr, indices
/// sorted, unique and in range); without it only the lengths and end points are checked.
pub(crate) fn check_csr(c: &CsrData, full: bool) -> Result<()> {
    crate::storage::check_csr_layout(c.sparse_layout(), c.data.len(), full)
}

/// Check the invariants of row_sparse parts (`full` adds sorted/unique/in-range row ids).
/// A csr array from its parts after [`check_csr`] (`full` as there) and the check that the
/// parts hold exactly `indptr[rows]` non-zeros.
pub(crate) fn checked_csr(
    data: crate::storage::Storage,
    indices: crate::storage::IndexStorage,
    indptr: crate::storage::IndexStorage,
    shape: [usize; 2],
    full: bool,
) -> Result<NDArray> {
    if data.len() != indices.len() {
        return Err(Error::format(
            SType::Csr,
            format!(
                "data has {} values but indices has {} entries",
                data.len(),
                indices.len()
            ),
        ));
    }
    let c = CsrData {
        shape,
        indptr,
        indices,
        data,
        offset: 0,
    };
    check_csr(&c, full)?;
    if c.nnz() != c.indices.len() {
        return Err(Error::format(
            SType::Csr,
            format!(
                "indptr[{}] = {} but {} indices were given",
                shape[0],
                c.nnz(),
                c.indices.len()
            ),
        ));
    }
    Ok(NDArray::from_data(ArrayData::Csr(c)))
}

pub(crate) fn check_rsp(r: &RowSparseData, full: bool) -> Result<()> {
    let f = |m: String| Err(Error::format(SType::RowSparse, m));
    if r.shape.is_empty() {
        return f("row_sparse needs at least one dimension".into());
    }
    // Checked products: a shape such as [1, 2^32, 2^32] wraps to a row length of 0 in release
    // builds, and kernels would then index rows of a buffer that holds none.
    let Some(rl) = r.shape[1..]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|rl| rl.checked_mul(r.shape[0]).is_some())
    else {
        return f(format!("shape {:?} has more elements than memory", r.shape));
    };
    if r.nnr().checked_mul(rl) != Some(r.data.len()) {
        return f(format!(
            "data has {} elements, expected {} rows x {rl} = {}",
            r.data.len(),
            r.nnr(),
            r.nnr() as u128 * rl as u128
        ));
    }
    if !full {
        return Ok(());
    }
    r.indices.check_row_ids(r.shape[0])
}

impl NDArray {
    /// A csr array from its parts `(data, indices, indptr)` and shape, as MXNet's
    /// `csr_matrix((data, indices, indptr), shape)`. Every invariant is checked (`check_format`
    /// with `full = true`); a broken one is an [`Error::Format`] naming it.
    ///
    /// ```
    /// use sparrow_core::NDArray;
    /// let a = NDArray::csr_from_parts(vec![1.0f32, 2.0], vec![0, 2], vec![0, 1, 1, 2], [3, 3]).unwrap();
    /// assert_eq!(a.to_vec::<f32>().unwrap(), vec![1., 0., 0., 0., 0., 0., 0., 0., 2.]);
    /// ```
    pub fn csr_from_parts<T: Element>(
        data: Vec<T>,
        indices: Vec<i64>,
        indptr: Vec<i64>,
        shape: [usize; 2],
    ) -> Result<NDArray> {
        NDArray::csr_from_buffer(T::into_buffer(data), indices, indptr, shape)
    }

    /// [`NDArray::csr_from_parts`] with an untyped [`CpuStorage`] of values.
    pub(crate) fn csr_from_buffer(
        data: CpuStorage,
        indices: Vec<i64>,
        indptr: Vec<i64>,
        shape: [usize; 2],
    ) -> Result<NDArray> {
        checked_csr(
            Storage::from(data),
            indices.into(),
            indptr.into(),
            shape,
            true,
        )
    }

    /// A csr array from parts built valid by construction (the LibSVM parser's), skipping
    /// only the check that column ids are sorted and unique within each row. Everything an
    /// index computed from the parts relies on is still checked in O(rows + nnz): `indptr`
    /// has `rows + 1` entries, starts at 0, never decreases and ends at `indices.len()`,
    /// `values` and `indices` have one entry per non-zero, and every column id is in
    /// `0..cols`; a broken one is an [`Error::Format`] naming it. A safe function must not let
    /// a kernel read out of bounds (an empty `indptr` once made `dot` do so). Unsorted or
    /// repeated columns give MXNet's unspecified results, never undefined behaviour;
    /// [`NDArray::check_format`] with `full = true` finds them.
    pub fn csr_unchecked<T: Element>(
        data: Vec<T>,
        indices: Vec<i64>,
        indptr: Vec<i64>,
        shape: [usize; 2],
    ) -> Result<NDArray> {
        checked_csr(
            Storage::from_vec(data),
            IndexStorage::from(indices),
            IndexStorage::from(indptr),
            shape,
            false,
        )
    }

    /// A row_sparse array from its parts: `data` holds `indices.len()` rows of
    /// `shape[1..].product()` elements, `indices` the sorted unique row ids. Validated.
    pub fn row_sparse_from_parts<T: Element>(
        data: Vec<T>,
        indices: Vec<i64>,
        shape: &[usize],
    ) -> Result<NDArray> {
        let r = RowSparseData {
            shape: shape.to_vec(),
            indices: IndexStorage::from(indices),
            data: Storage::from_vec(data),
        };
        check_rsp(&r, true)?;
        Ok(NDArray::from_data(ArrayData::RowSparse(r)))
    }

    /// A row_sparse array from trusted parts, without validation (tests use it to hand
    /// operators broken arrays). Parts that break the invariants give errors, panics or wrong
    /// results later, never undefined behaviour: every kernel that indexes memory by row ids
    /// checks them itself first (`cpu::elementwise::zip_assign_rows`, `cpu::update`'s
    /// `check_row_ids`); the others index with bounds checks.
    pub fn row_sparse_unchecked<T: Element>(
        data: Vec<T>,
        indices: Vec<i64>,
        shape: &[usize],
    ) -> NDArray {
        NDArray::from_data(ArrayData::RowSparse(RowSparseData {
            shape: shape.to_vec(),
            indices: IndexStorage::from(indices),
            data: Storage::from_vec(data),
        }))
    }

    /// A csr array from COO triplets `(row, col, value)`: out-of-range coordinates are an error,
    /// duplicates are summed and the result is sorted by row then column.
    pub fn csr_from_coo<T: Element + std::ops::Add<Output = T>>(
        rows: &[i64],
        cols: &[i64],
        vals: &[T],
        shape: [usize; 2],
    ) -> Result<NDArray> {
        if rows.len() != cols.len() || rows.len() != vals.len() {
            return Err(Error::arg(
                "csr_from_coo",
                format!(
                    "rows, cols and vals differ in length ({}, {}, {})",
                    rows.len(),
                    cols.len(),
                    vals.len()
                ),
            ));
        }
        for (k, (&r, &c)) in rows.iter().zip(cols).enumerate() {
            if r < 0 || r as usize >= shape[0] || c < 0 || c as usize >= shape[1] {
                return Err(Error::index(
                    "csr_from_coo",
                    format!("entry {k} at ({r}, {c}) is outside shape {shape:?}"),
                ));
            }
        }
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_unstable_by_key(|&k| (rows[k], cols[k]));
        let ptr_len = shape[0]
            .checked_add(1)
            .filter(|n| n.checked_mul(8).is_some_and(|b| b <= isize::MAX as usize));
        let Some(ptr_len) = ptr_len else {
            return Err(Error::shape(
                "csr_from_coo",
                format!(
                    "{} rows: the row pointer would have more entries than usize counts",
                    shape[0]
                ),
            ));
        };
        let mut indptr = vec![0i64; ptr_len];
        let mut indices = Vec::with_capacity(order.len());
        let mut data: Vec<T> = Vec::with_capacity(order.len());
        let mut prev: Option<(i64, i64)> = None;
        for &k in &order {
            let key = (rows[k], cols[k]);
            if prev == Some(key) {
                let last = data.len() - 1;
                data[last] = data[last] + vals[k];
            } else {
                indices.push(key.1);
                data.push(vals[k]);
                indptr[key.0 as usize + 1] += 1;
                prev = Some(key);
            }
        }
        for r in 0..shape[0] {
            indptr[r + 1] += indptr[r];
        }
        NDArray::csr_unchecked(data, indices, indptr, shape)
    }

    /// An all-zero array of any storage type (a sparse one stores nothing), on the default
    /// device ([`Device::current`](crate::Device::current)).
    pub fn zeros_stype(shape: &[usize], dtype: DType, stype: SType) -> Result<NDArray> {
        if stype == SType::Csr && shape.len() != 2 {
            return Err(Error::stype(
                "zeros_stype",
                format!("csr needs a 2-D shape, got {shape:?}"),
            ));
        }
        if stype == SType::RowSparse && shape.is_empty() {
            return Err(Error::stype(
                "zeros_stype",
                "row_sparse needs at least one dimension",
            ));
        }
        super::convert::zeros_stype_on(shape, dtype, stype, crate::Device::current())
    }

    /// Validate the sparse format (MXNet's `check_format`): lengths, end points, a
    /// non-decreasing csr `indptr` and in-range csr column ids always, plus ordering and
    /// uniqueness of every index (and row_sparse row ids' range) when `full`. Dense arrays pass.
    pub fn check_format(&self, full: bool) -> Result<()> {
        match &*self.read() {
            ArrayData::Dense(_) => Ok(()),
            ArrayData::Csr(c) => check_csr(c, full),
            ArrayData::RowSparse(r) => check_rsp(r, full),
        }
    }

    /// Number of stored values: nnz for csr, stored rows x row length for row_sparse, every
    /// element for dense.
    pub fn nnz(&self) -> usize {
        match &*self.read() {
            ArrayData::Dense(d) => d.buf.len(),
            ArrayData::Csr(c) => c.nnz(),
            ArrayData::RowSparse(r) => r.data.len(),
        }
    }

    /// Convert to another storage type (`tostype`); see [`crate::sparse::cast_storage`].
    /// Recorded: the gradient passes through, cast back to this array's storage type.
    pub fn tostype(&self, stype: SType) -> Result<NDArray> {
        let out = super::cast_storage(self, stype)?;
        let in_stype = self.stype();
        Ok(crate::autograd::record_op(
            "cast_storage",
            out,
            &[self],
            move |g| {
                let gx = if g.stype() == in_stype {
                    g.clone()
                } else {
                    super::cast_storage(g, in_stype)?
                };
                Ok(vec![Some(gx)])
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(r: Result<NDArray>, needle: &str) {
        match r {
            Err(Error::Format { msg, .. }) => assert!(msg.contains(needle), "{msg}"),
            other => panic!("expected a format error containing {needle:?}, got {other:?}"),
        }
    }

    #[test]
    fn csr_parts_invariants() {
        let ok =
            NDArray::csr_from_parts(vec![1f32, 2., 3.], vec![0, 2, 1], vec![0, 2, 2, 3], [3, 3]);
        assert!(ok.is_ok());
        bad(
            NDArray::csr_from_parts(vec![1f32], vec![0], vec![0, 1], [2, 3]),
            "indptr has 2 entries",
        );
        bad(
            NDArray::csr_from_parts(vec![1f32], vec![0], vec![1, 1, 1], [2, 3]),
            "indptr[0]",
        );
        bad(
            NDArray::csr_from_parts(vec![1f32, 2.], vec![0, 1], vec![0, 2, 1], [2, 3]),
            "non-decreasing",
        );
        bad(
            NDArray::csr_from_parts(vec![1f32, 2.], vec![0, 1], vec![0, 1, 3], [2, 3]),
            "nnz",
        );
        bad(
            NDArray::csr_from_parts(vec![1f32, 2.], vec![0, 1], vec![0, 1, 1], [2, 3]),
            "2 indices were given",
        );
        bad(
            NDArray::csr_from_parts(vec![1f32, 2.], vec![1, 1], vec![0, 2, 2], [2, 3]),
            "sorted and unique",
        );
        bad(
            NDArray::csr_from_parts(vec![1f32, 2.], vec![2, 1], vec![0, 2, 2], [2, 3]),
            "sorted and unique",
        );
        bad(
            NDArray::csr_from_parts(vec![1f32], vec![3], vec![0, 1, 1], [2, 3]),
            "out of range",
        );
        bad(
            NDArray::csr_from_parts(vec![1f32], vec![-1], vec![0, 1, 1], [2, 3]),
            "out of range",
        );
        bad(
            NDArray::csr_from_parts(vec![1f32, 2.], vec![0], vec![0, 1, 1], [2, 3]),
            "2 values but indices has 1",
        );
    }

    #[test]
    fn unchecked_then_check_format() {
        let a = NDArray::csr_unchecked(vec![1f32, 2.], vec![1, 0], vec![0, 2], [1, 3]).unwrap();
        assert!(a.check_format(false).is_ok());
        assert!(a.check_format(true).is_err());
    }

    #[test]
    fn rsp_parts_invariants() {
        let a =
            NDArray::row_sparse_from_parts(vec![1f32, 2., 3., 4.], vec![0, 2], &[3, 2]).unwrap();
        assert_eq!(a.to_vec::<f32>().unwrap(), vec![1., 2., 0., 0., 3., 4.]);
        let e = NDArray::row_sparse_from_parts(vec![1f32, 2., 3.], vec![0, 2], &[3, 2]);
        bad(e, "data has 3 elements");
        bad(
            NDArray::row_sparse_from_parts(vec![1f32, 2., 3., 4.], vec![2, 0], &[3, 2]),
            "sorted",
        );
        bad(
            NDArray::row_sparse_from_parts(vec![1f32, 2.], vec![3], &[3, 2]),
            "out of range",
        );
    }

    #[test]
    fn coo_sums_duplicates_and_sorts() {
        let a = NDArray::csr_from_coo(&[1, 0, 1, 1], &[2, 1, 0, 2], &[1f32, 2., 3., 4.], [2, 3])
            .unwrap();
        a.check_format(true).unwrap();
        assert_eq!(a.nnz(), 3);
        assert_eq!(a.to_vec::<f32>().unwrap(), vec![0., 2., 0., 3., 0., 5.]);
        assert!(NDArray::csr_from_coo(&[2], &[0], &[1f32], [2, 3]).is_err());
    }

    #[test]
    fn nbytes_of_a_big_sparse_csr() {
        // 1000 x 1,000,000 at density 1e-5 in f32: 10,000 nnz * (4 + 8) + 1001 * 8 bytes.
        let nnz = 10_000usize;
        let indptr: Vec<i64> = (0..=1000).map(|r| (r * 10) as i64).collect();
        let indices: Vec<i64> = (0..nnz)
            .map(|k| ((k % 10) * 1000 + k / 10) as i64)
            .collect();
        let a =
            NDArray::csr_from_parts(vec![1f32; nnz], indices, indptr, [1000, 1_000_000]).unwrap();
        let mb = a.nbytes() as f64 / 1e6;
        assert!((mb - 0.128).abs() < 0.001, "{mb} MB");
    }
}
