//! `retain`: the rows a caller names, as a row_sparse array (MXNet's `sparse.retain`, and
//! Gluon's `Parameter.row_sparse_data` for a dense weight).

use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, RowSparseData};
use crate::storage::IndexStorage;
use crate::NDArray;

/// Rows `row_ids` of a dense or row_sparse array `a` (ids sorted and deduplicated here) as a
/// row_sparse array of `a`'s shape. For a row_sparse `a`, ids it does not store are left out
/// (they are zero). Only the retained rows are copied. An id outside `0..shape[0]` is an error.
///
/// Differentiable: the gradient of `a` is the incoming gradient's rows `row_ids`, as
/// row_sparse, so reading a batch's rows of a weight inside `autograd::record` (Gluon's
/// `row_sparse_data`) gives the weight a gradient over those rows only.
///
/// ```
/// use sparrow_core::{sparse::retain_rows, NDArray};
/// let w = NDArray::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]).unwrap();
/// let r = retain_rows(&w, &[2, 0, 2]).unwrap();
/// assert_eq!(r.row_ids().unwrap(), vec![0, 2]);
/// assert_eq!(r.to_vec::<f32>().unwrap(), vec![1., 2., 0., 0., 5., 6.]);
/// ```
pub fn retain_rows(a: &NDArray, row_ids: &[i64]) -> Result<NDArray> {
    const OP: &str = "retain_rows";
    let mut ids = row_ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let out = retained(a, &ids)?;
    Ok(crate::autograd::record_op(OP, out, &[a], move |g| {
        Ok(vec![Some(retain_rows(g, &ids)?)])
    }))
}

/// The rows `ids` (sorted, unique) of `a`, not recorded.
fn retained(a: &NDArray, ids: &[i64]) -> Result<NDArray> {
    const OP: &str = "retain_rows";
    let ids = ids.to_vec();
    let d = a.read();
    let shape = d.shape();
    let Some(&rows) = shape.first() else {
        return Err(Error::shape(OP, "a 0-d array has no rows"));
    };
    if let Some(&bad) = ids.iter().find(|&&r| r < 0 || r as usize >= rows) {
        return Err(Error::index(
            OP,
            format!("row id {bad} out of range for {rows} rows"),
        ));
    }
    let row_len: usize = shape[1..].iter().product();
    let (indices, data) = match &*d {
        ArrayData::Dense(dd) => {
            let positions = ids
                .iter()
                .flat_map(|&r| (r as usize * row_len)..(r as usize + 1) * row_len);
            let data = dd.buf.gather(positions)?;
            (IndexStorage::from_vec_on(ids, dd.buf.device())?, data)
        }
        ArrayData::RowSparse(r) => {
            let p = r.data.retain_stored(r.sparse_layout(), &ids, false)?;
            (p.indices, p.values)
        }
        ArrayData::Csr(_) => {
            return Err(Error::stype(
                OP,
                "needs a dense or row_sparse array, got Csr",
            ))
        }
    };
    Ok(NDArray::from_data(ArrayData::RowSparse(RowSparseData {
        shape: shape.to_vec(),
        indices,
        data,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::test_array;
    use crate::SType;

    /// Retained rows equal the dense array's rows, others are zero, for dense and row_sparse
    /// inputs alike.
    #[test]
    fn retain_matches_the_dense_reference() {
        let w = test_array(&[7, 3], -1.0, 1.0, 11);
        let dense = w.to_f64_vec();
        let ids = [5i64, 1, 5, 6];
        for src in [w.clone(), w.tostype(SType::RowSparse).unwrap()] {
            let r = retain_rows(&src, &ids).unwrap();
            assert_eq!(r.stype(), SType::RowSparse);
            assert_eq!(r.row_ids().unwrap(), vec![1, 5, 6]);
            let got = r.to_f64_vec();
            for row in 0..7 {
                for j in 0..3 {
                    let want = if [1, 5, 6].contains(&row) {
                        dense[row * 3 + j]
                    } else {
                        0.0
                    };
                    assert_eq!(got[row * 3 + j], want);
                }
            }
        }
        let sparse = NDArray::row_sparse_from_parts(vec![1.0f32; 6], vec![0, 4], &[6, 3]).unwrap();
        assert_eq!(
            retain_rows(&sparse, &[4, 5]).unwrap().row_ids().unwrap(),
            vec![4]
        );
        assert!(retain_rows(&w, &[7]).is_err());
        assert!(retain_rows(&w, &[-1]).is_err());
        assert!(retain_rows(&NDArray::scalar(1.0f32), &[0]).is_err());
    }

    /// The gradient flows to the retained rows only, as row_sparse, matching finite
    /// differences (dense and row_sparse inputs).
    #[test]
    fn retain_rows_gradient_is_the_retained_rows() {
        crate::testing::check_grad_on_devices(
            |xs| retain_rows(&xs[0], &[3, 0, 3]),
            &[test_array(&[5, 2], -1.0, 1.0, 12)
                .astype(crate::DType::F64)
                .unwrap()],
            1e-6,
            1e-6,
            1e-8,
        )
        .unwrap();
        let w = test_array(&[5, 2], -1.0, 1.0, 13);
        w.attach_grad_with(crate::autograd::GradReq::Write, SType::RowSparse);
        let y = crate::autograd::record(|| retain_rows(&w, &[4, 1])?.sum_all()).unwrap();
        y.backward().unwrap();
        let g = w.grad().unwrap();
        assert_eq!(g.stype(), SType::RowSparse);
        assert_eq!(g.row_ids().unwrap(), vec![1, 4]);
        assert_eq!(g.to_f64_vec(), vec![0., 0., 1., 1., 0., 0., 0., 0., 1., 1.]);
    }
}
