//! Row lookup (`embedding`) with a row_sparse gradient for the table.

use std::sync::Arc;

use sparrow_core::autograd::record_op;
use sparrow_core::{float_dispatch, ArrayData, Element, Error, NDArray, Result, RowSparseData};

/// `out[..., :] = table[ids[...], :]` for a 2-D `table` of shape `(rows, dim)` and ids of any
/// shape and dtype holding whole numbers in `[0, rows)`; the output has shape
/// `ids.shape + [dim]`. Recorded: the table's gradient is row_sparse over the distinct ids
/// (duplicates summed); the ids get no gradient.
pub fn embedding(ids: &NDArray, table: &NDArray) -> Result<NDArray> {
    let td = table.dense_data()?;
    if td.shape.len() != 2 {
        return Err(Error::shape(
            "embedding",
            format!("table must be 2-D (rows, dim), got {:?}", td.shape),
        ));
    }
    let (rows, dim) = (td.shape[0], td.shape[1]);
    let raw = ids.to_f64_vec();
    let mut pos = Vec::with_capacity(raw.len());
    for (k, &v) in raw.iter().enumerate() {
        if v.fract() != 0.0 || v < 0.0 || v >= rows as f64 {
            return Err(Error::index(
                "embedding",
                format!("id {v} at position {k} is not a row of a table with {rows} rows"),
            ));
        }
        pos.push(v as usize);
    }
    let mut oshape = ids.shape();
    oshape.push(dim);
    let out = float_dispatch!(td.buf.dtype(), "embedding", T => {
        let t = td.buf.as_slice::<T>().unwrap();
        let mut out = Vec::with_capacity(pos.len() * dim);
        for &p in &pos {
            out.extend_from_slice(&t[p * dim..(p + 1) * dim]);
        }
        NDArray::from_vec(out, &oshape)?
    });
    let tshape = td.shape.clone();
    Ok(record_op("embedding", out, &[ids, table], move |g| {
        let gd = g.dense_data()?;
        let mut uniq = pos.clone();
        uniq.sort_unstable();
        uniq.dedup();
        let data = float_dispatch!(gd.buf.dtype(), "embedding backward", T => {
            let gv = gd.buf.as_slice::<T>().unwrap();
            let mut acc = vec![<T as Element>::from_f64(0.0); uniq.len() * dim];
            for (k, &p) in pos.iter().enumerate() {
                let u = uniq.binary_search(&p).expect("id collected above");
                for (a, &x) in acc[u * dim..(u + 1) * dim].iter_mut().zip(&gv[k * dim..(k + 1) * dim]) {
                    *a += x;
                }
            }
            <T as Element>::into_buffer(acc)
        });
        let grad = NDArray::from_data(ArrayData::RowSparse(RowSparseData {
            shape: tshape.clone(),
            indices: Arc::new(uniq.into_iter().map(|p| p as i64).collect()),
            data,
        }));
        Ok(vec![None, Some(grad)])
    }))
}
