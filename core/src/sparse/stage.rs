//! Staging a host-resident table's rows on a compute device: the path of a parameter larger
//! than its device's memory budget ([`crate::Device::memory_budget`]).
//!
//! The table stays in host memory. Each step, the rows a batch reads are gathered into a
//! compact `[k, ...]` array on the device ([`stage_rows`]), the batch's ids are renumbered to
//! `0..k` ([`compact_columns`] for a csr batch, [`compact_ids`] for an embedding's ids), and
//! the layer computes on the compact pair there. The backward brings the gradient of those
//! `k` rows back to the host as a row_sparse gradient of the whole table, over exactly the
//! rows read, where the optimizer updates them lazily: per step, only the batch's rows cross
//! the bus, both ways.

use std::sync::Arc;

use super::groups::ColumnGroups;
use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, CsrData, RowSparseData};
use crate::storage::IndexStorage;
use crate::{Device, NDArray, SType};

/// Rows `ids` of the host array `w` (dense; ids ascending, unique, in `0..rows`) as a dense
/// `[ids.len(), w.shape[1..]]` array on `device`. Only those rows are read and copied.
///
/// Differentiable: the gradient of `w` is the incoming gradient's rows brought back to the
/// host, as a row_sparse array of `w`'s shape over `ids` (a head gradient that is itself
/// row_sparse over some of the `k` rows gives a gradient over just those).
///
/// ```
/// use sparrow_core::{sparse::stage_rows, Device, NDArray};
/// let w = NDArray::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]).unwrap();
/// let r = stage_rows(&w, &[0, 2], Device::Cpu).unwrap();
/// assert_eq!(r.shape(), vec![2, 2]);
/// assert_eq!(r.to_vec::<f32>().unwrap(), vec![1., 2., 5., 6.]);
/// ```
pub fn stage_rows(w: &NDArray, ids: &[i64], device: Device) -> Result<NDArray> {
    const OP: &str = "stage_rows";
    let wshape = w.shape();
    let Some(&rows) = wshape.first() else {
        return Err(Error::shape(OP, "a 0-d array has no rows"));
    };
    if let Some(bad) = ids.windows(2).find(|p| p[0] >= p[1]) {
        return Err(Error::arg(
            OP,
            format!(
                "row ids must be ascending and unique, got {} before {}",
                bad[0], bad[1]
            ),
        ));
    }
    if let Some(&bad) = ids.iter().find(|&&r| r < 0 || r as usize >= rows) {
        return Err(Error::index(
            OP,
            format!("row id {bad} out of range for {rows} rows"),
        ));
    }
    let row_len: usize = wshape[1..].iter().product();
    let ids = Arc::new(ids.to_vec());
    let staged = {
        let d = w.read();
        let ArrayData::Dense(dd) = &*d else {
            return Err(Error::stype(
                OP,
                format!("needs a dense table, got {:?}", d.stype()),
            ));
        };
        let ids_on = IndexStorage::from_arc_on(ids.clone(), dd.buf.device())?;
        dd.buf.gather_rows(&ids_on, row_len)?
    };
    let mut shape = wshape.clone();
    shape[0] = ids.len();
    let out = NDArray::from_buffer(staged, &shape)?.to_device(device)?;
    let home = w.device();
    Ok(crate::autograd::record_op(OP, out, &[w], move |g| {
        Ok(vec![Some(unstage_grad(g, &ids, &wshape, home)?)])
    }))
}

/// The gradient of a staged table: `g` (the `k` staged rows' gradient, dense or row_sparse
/// over local row numbers) on `home`, as a row_sparse array of the table's shape over the
/// table's row ids.
fn unstage_grad(
    g: &NDArray,
    ids: &Arc<Vec<i64>>,
    wshape: &[usize],
    home: Device,
) -> Result<NDArray> {
    const OP: &str = "stage_rows backward";
    let g = g.to_device(home)?;
    let (indices, data) = match &*g.read() {
        ArrayData::Dense(dd) => (
            IndexStorage::from_arc_on(ids.clone(), home)?,
            dd.buf.clone(),
        ),
        ArrayData::RowSparse(r) => {
            let mut global = Vec::with_capacity(r.indices.len());
            for &local in r.indices.iter() {
                let id = usize::try_from(local)
                    .ok()
                    .and_then(|l| ids.get(l))
                    .ok_or_else(|| {
                        Error::index(OP, format!("gradient row {local} of {} staged", ids.len()))
                    })?;
                global.push(*id);
            }
            (
                IndexStorage::from_arc_on(Arc::new(global), home)?,
                r.data.clone(),
            )
        }
        ArrayData::Csr(_) => {
            return Err(Error::stype(OP, "a csr gradient of staged rows"));
        }
    };
    Ok(NDArray::from_data(ArrayData::RowSparse(RowSparseData {
        shape: wshape.to_vec(),
        indices,
        data,
    })))
}

/// A host csr batch `x` (`[rows, cols]`) with its columns renumbered: the distinct columns it
/// uses, ascending (`k` of them), and `x` as a `[rows, k]` csr array whose column `j` is
/// column `cols[j]` of `x` (values and row pointers shared with `x`). The compact array carries
/// its own column grouping, so its transposed product skips the sort; a grouping `x` had
/// prepared ([`NDArray::prepare_csr_transpose`]) is reused instead of recomputed.
pub fn compact_columns(x: &NDArray) -> Result<(Vec<i64>, NDArray)> {
    const OP: &str = "compact_columns";
    let groups = match x.csr_column_groups() {
        Some(g) => g,
        None => {
            let d = x.read();
            let ArrayData::Csr(c) = &*d else {
                return Err(Error::stype(
                    OP,
                    format!("needs a csr array, got {:?}", d.stype()),
                ));
            };
            if c.indices.device() != Device::Cpu {
                return Err(Error::device_mismatch(OP, Device::Cpu, c.indices.device()));
            }
            Arc::new(ColumnGroups::compute(c))
        }
    };
    let d = x.read();
    let ArrayData::Csr(c) = &*d else {
        return Err(Error::stype(OP, "needs a csr array"));
    };
    if c.data.device() != Device::Cpu {
        return Err(Error::device_mismatch(OP, Device::Cpu, c.data.device()));
    }
    // Positions before `offset` belong to rows outside this array: never read, left 0.
    let mut indices = vec![0i64; c.offset + c.nnz()];
    for (g, w) in groups.starts.windows(2).enumerate() {
        for &e in &groups.order[w[0]..w[1]] {
            indices[c.offset + e] = g as i64;
        }
    }
    let k = groups.uniq.len();
    let compact = CsrData {
        shape: [c.shape[0], k],
        indptr: c.indptr.clone(),
        indices: IndexStorage::from(indices),
        data: c.data.clone(),
        offset: c.offset,
    };
    let relabelled = groups.relabelled(&compact);
    let cols = groups.uniq.as_ref().clone();
    drop(d);
    let out = NDArray::from_data(ArrayData::Csr(compact));
    *out.column_cache() = Some(Arc::new(relabelled));
    Ok((cols, out))
}

/// Integer-valued ids (any shape and dtype, on any device; read on the host) renumbered: the
/// distinct ids, ascending, and an array of `ids`' shape and dtype on `device` whose entries
/// are each id's position among them (what an embedding of the staged rows looks up). An id
/// that is negative or not a whole number is an error; the range against the table is checked
/// by [`stage_rows`].
pub fn compact_ids(ids: &NDArray, device: Device) -> Result<(Vec<i64>, NDArray)> {
    const OP: &str = "compact_ids";
    if ids.stype() != SType::Dense {
        return Err(Error::stype(
            OP,
            format!("needs dense ids, got {:?}", ids.stype()),
        ));
    }
    let values = ids.to_f64_vec();
    let mut whole = Vec::with_capacity(values.len());
    for &v in &values {
        if !(v >= 0.0 && v.fract() == 0.0 && v < 9.007_199_254_740_992e15) {
            return Err(Error::index(
                OP,
                format!("id {v} is not a non-negative whole number"),
            ));
        }
        whole.push(v as i64);
    }
    let mut uniq = whole.clone();
    uniq.sort_unstable();
    uniq.dedup();
    let local: Vec<f64> = whole
        .iter()
        .map(|id| uniq.binary_search(id).unwrap_or(0) as f64)
        .collect();
    let out = NDArray::host_vec(local, &ids.shape())?
        .astype(ids.dtype())?
        .to_device(device)?;
    Ok((uniq, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::test_array;

    #[test]
    fn staged_rows_and_their_gradient_match_the_table() {
        let w = test_array(&[9, 3], -1.0, 1.0, 3);
        w.attach_grad_with(crate::autograd::GradReq::Write, SType::RowSparse);
        let ids = [1i64, 4, 8];
        let s = crate::autograd::record(|| {
            let r = stage_rows(&w, &ids, Device::Cpu)?;
            r.square()?.sum_all()
        })
        .unwrap();
        s.backward().unwrap();
        let g = w.grad().unwrap();
        assert_eq!(g.stype(), SType::RowSparse);
        assert_eq!(g.row_ids().unwrap(), vec![1, 4, 8]);
        let wv = w.to_f64_vec();
        let gv = g.to_f64_vec();
        for r in 0..9 {
            for j in 0..3 {
                let want = if ids.contains(&(r as i64)) {
                    2.0 * wv[r * 3 + j]
                } else {
                    0.0
                };
                assert!((gv[r * 3 + j] - want).abs() < 1e-6, "row {r}");
            }
        }
        assert!(stage_rows(&w, &[4, 1], Device::Cpu).is_err());
        assert!(stage_rows(&w, &[1, 1], Device::Cpu).is_err());
        assert!(stage_rows(&w, &[9], Device::Cpu).is_err());
        assert!(stage_rows(&w, &[-1], Device::Cpu).is_err());
    }

    #[test]
    fn compact_columns_renumbers_and_keeps_the_product() {
        for prepared in [false, true] {
            let x = crate::sparse::rand_sparse_seeded(
                &[7, 50],
                0.2,
                SType::Csr,
                crate::sparse::SparseDist::Uniform,
                11,
            )
            .unwrap();
            if prepared {
                x.prepare_csr_transpose();
            }
            let w = test_array(&[50, 4], -1.0, 1.0, 5)
                .astype(x.dtype())
                .unwrap();
            let (cols, xc) = compact_columns(&x).unwrap();
            assert!(cols.windows(2).all(|p| p[0] < p[1]));
            assert_eq!(xc.shape(), vec![7, cols.len()]);
            let wk = stage_rows(&w, &cols, Device::Cpu).unwrap();
            let want = x.dot(&w).unwrap().to_f64_vec();
            let got = xc.dot(&wk).unwrap().to_f64_vec();
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() < 1e-6, "{a} vs {b}");
            }
            // The compact array's transposed product uses the grouping it carries.
            let g = test_array(&[7, 4], -1.0, 1.0, 8).astype(x.dtype()).unwrap();
            let t = xc.dot_t(&g, true, false).unwrap();
            let t_ref = x.dot_t(&g, true, false).unwrap().to_f64_vec();
            let tv = t.to_f64_vec();
            for (j, &c) in cols.iter().enumerate() {
                for u in 0..4 {
                    assert!((tv[j * 4 + u] - t_ref[c as usize * 4 + u]).abs() < 1e-6);
                }
            }
        }
        assert!(compact_columns(&test_array(&[2, 2], 0.0, 1.0, 1)).is_err());
    }

    #[test]
    fn compact_ids_renumbers_in_order_and_refuses_bad_ids() {
        let ids = NDArray::from_vec(vec![7.0f32, 3.0, 7.0, 10.0], &[2, 2]).unwrap();
        let (uniq, local) = compact_ids(&ids, Device::Cpu).unwrap();
        assert_eq!(uniq, vec![3, 7, 10]);
        assert_eq!(local.to_vec::<f32>().unwrap(), vec![1.0, 0.0, 1.0, 2.0]);
        assert_eq!(local.shape(), vec![2, 2]);
        for bad in [-1.0f32, 1.5] {
            let ids = NDArray::from_vec(vec![bad], &[1]).unwrap();
            assert!(compact_ids(&ids, Device::Cpu).is_err());
        }
    }
}
