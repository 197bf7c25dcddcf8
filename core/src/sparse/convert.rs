//! Conversions between storage types (MXNet's `cast_storage` / `tostype`).

use std::sync::Arc;

use crate::buffer::Buffer;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, CsrData, DenseData, NDArray, RowSparseData};
use crate::with_buffer;
use crate::SType;

/// An all-zero array of a storage type: dense zeros, or sparse with no stored entries.
pub fn zeros_stype(shape: &[usize], dtype: DType, stype: SType) -> NDArray {
    let data = match stype {
        SType::Dense => ArrayData::Dense(DenseData {
            shape: shape.to_vec(),
            buf: Buffer::zeros(dtype, shape.iter().product()),
        }),
        SType::Csr => ArrayData::Csr(CsrData {
            shape: [
                shape.first().copied().unwrap_or(0),
                shape.get(1).copied().unwrap_or(0),
            ],
            indptr: Arc::new(vec![0; shape.first().copied().unwrap_or(0) + 1]),
            indices: Arc::new(Vec::new()),
            data: Buffer::zeros(dtype, 0),
            offset: 0,
        }),
        SType::RowSparse => ArrayData::RowSparse(RowSparseData {
            shape: shape.to_vec(),
            indices: Arc::new(Vec::new()),
            data: Buffer::zeros(dtype, 0),
        }),
    };
    NDArray::from_data(data)
}

/// The dense equivalent of any storage.
pub fn densify(d: &ArrayData) -> Result<DenseData> {
    match d {
        ArrayData::Dense(dd) => Ok(dd.clone()),
        ArrayData::Csr(c) => {
            let [rows, cols] = c.shape;
            let buf = with_buffer!(&c.data, v => {
                let vals = &v[c.offset..c.offset + c.nnz()];
                let idx = c.indices();
                let mut out = vec![Default::default(); rows * cols];
                for r in 0..rows {
                    for p in c.indptr[r] as usize..c.indptr[r + 1] as usize {
                        out[r * cols + idx[p] as usize] = vals[p];
                    }
                }
                Element::into_buffer(out)
            });
            Ok(DenseData {
                shape: vec![rows, cols],
                buf,
            })
        }
        ArrayData::RowSparse(r) => {
            let row_len = r.row_len();
            let n: usize = r.shape.iter().product();
            let buf = with_buffer!(&r.data, v => {
                let mut out = vec![Default::default(); n];
                for (k, &row) in r.indices.iter().enumerate() {
                    let dst = row as usize * row_len;
                    out[dst..dst + row_len].copy_from_slice(&v[k * row_len..(k + 1) * row_len]);
                }
                Element::into_buffer(out)
            });
            Ok(DenseData {
                shape: r.shape.clone(),
                buf,
            })
        }
    }
}

fn dense_to_rsp(d: &DenseData) -> Result<RowSparseData> {
    if d.shape.is_empty() {
        return Err(Error::stype(
            "cast_storage",
            "row_sparse needs at least one dimension",
        ));
    }
    let row_len: usize = d.shape[1..].iter().product();
    let mut indices = Vec::new();
    let data = with_buffer!(&d.buf, v => {
        let mut out = Vec::new();
        for r in 0..d.shape[0] {
            let row = &v[r * row_len..(r + 1) * row_len];
            if row.iter().any(|x| *x != Default::default()) {
                indices.push(r as i64);
                out.extend_from_slice(row);
            }
        }
        Element::into_buffer(out)
    });
    Ok(RowSparseData {
        shape: d.shape.clone(),
        indices: Arc::new(indices),
        data,
    })
}

fn dense_to_csr(d: &DenseData) -> Result<CsrData> {
    if d.shape.len() != 2 {
        return Err(Error::stype(
            "cast_storage",
            format!("csr needs a 2-D array, got shape {:?}", d.shape),
        ));
    }
    let (rows, cols) = (d.shape[0], d.shape[1]);
    let mut indptr = Vec::with_capacity(rows + 1);
    let mut indices = Vec::new();
    indptr.push(0i64);
    let data = with_buffer!(&d.buf, v => {
        let mut out = Vec::new();
        for r in 0..rows {
            for c in 0..cols {
                let x = v[r * cols + c];
                if x != Default::default() {
                    indices.push(c as i64);
                    out.push(x);
                }
            }
            indptr.push(indices.len() as i64);
        }
        Element::into_buffer(out)
    });
    Ok(CsrData {
        shape: [rows, cols],
        indptr: Arc::new(indptr),
        indices: Arc::new(indices),
        data,
        offset: 0,
    })
}

/// Convert an array to another storage type (`tostype`). Zeros (dense -> csr) and all-zero rows
/// (dense -> row_sparse) are dropped. Not recorded by autograd.
pub fn cast_storage(a: &NDArray, stype: SType) -> Result<NDArray> {
    let d = a.read();
    if d.stype() == stype {
        return Ok(NDArray::from_data(d.clone()));
    }
    let dense = densify(&d)?;
    let out = match stype {
        SType::Dense => ArrayData::Dense(dense),
        SType::Csr => ArrayData::Csr(dense_to_csr(&dense)?),
        SType::RowSparse => ArrayData::RowSparse(dense_to_rsp(&dense)?),
    };
    Ok(NDArray::from_data(out))
}

/// Gradient accumulation: rs + rs -> rs (union of rows), anything with dense -> dense.
pub fn add_grads(a: &NDArray, b: &NDArray) -> Result<NDArray> {
    if a.shape() != b.shape() {
        return Err(Error::shape(
            "add_grads",
            format!("{:?} + {:?}", a.shape(), b.shape()),
        ));
    }
    let (da, db) = (a.read().clone(), b.read().clone());
    if da.dtype() != db.dtype() {
        return Err(Error::dtype_mismatch("add_grads", da.dtype(), db.dtype()));
    }
    match (&da, &db) {
        (ArrayData::RowSparse(ra), ArrayData::RowSparse(rb)) => {
            Ok(NDArray::from_data(ArrayData::RowSparse(add_rsp(ra, rb))))
        }
        _ => {
            let (x, y) = (densify(&da)?, densify(&db)?);
            let buf = match (&x.buf, &y.buf) {
                (Buffer::F32(p), Buffer::F32(q)) => {
                    f32::into_buffer(p.iter().zip(q.iter()).map(|(a, b)| a + b).collect())
                }
                (Buffer::F64(p), Buffer::F64(q)) => {
                    f64::into_buffer(p.iter().zip(q.iter()).map(|(a, b)| a + b).collect())
                }
                _ => return Err(Error::dtype("add_grads", "gradients must be float")),
            };
            Ok(NDArray::from_data(ArrayData::Dense(DenseData {
                shape: x.shape,
                buf,
            })))
        }
    }
}

fn add_rsp(a: &RowSparseData, b: &RowSparseData) -> RowSparseData {
    fn merge<T: Element + std::ops::Add<Output = T>>(
        a: &RowSparseData,
        av: &[T],
        b: &RowSparseData,
        bv: &[T],
        rl: usize,
    ) -> (Vec<i64>, Vec<T>) {
        let (mut i, mut j) = (0, 0);
        let mut idx = Vec::with_capacity(a.nnr() + b.nnr());
        let mut out = Vec::with_capacity((a.nnr() + b.nnr()) * rl);
        while i < a.nnr() || j < b.nnr() {
            let ra = a.indices.get(i).copied().unwrap_or(i64::MAX);
            let rb = b.indices.get(j).copied().unwrap_or(i64::MAX);
            if ra == rb {
                idx.push(ra);
                out.extend(
                    av[i * rl..(i + 1) * rl]
                        .iter()
                        .zip(&bv[j * rl..(j + 1) * rl])
                        .map(|(x, y)| *x + *y),
                );
                i += 1;
                j += 1;
            } else if ra < rb {
                idx.push(ra);
                out.extend_from_slice(&av[i * rl..(i + 1) * rl]);
                i += 1;
            } else {
                idx.push(rb);
                out.extend_from_slice(&bv[j * rl..(j + 1) * rl]);
                j += 1;
            }
        }
        (idx, out)
    }
    let rl = a.row_len();
    let (idx, data) = match (&a.data, &b.data) {
        (Buffer::F32(p), Buffer::F32(q)) => {
            let (i, d) = merge(a, p, b, q, rl);
            (i, f32::into_buffer(d))
        }
        (Buffer::F64(p), Buffer::F64(q)) => {
            let (i, d) = merge(a, p, b, q, rl);
            (i, f64::into_buffer(d))
        }
        (Buffer::I64(p), Buffer::I64(q)) => {
            let (i, d) = merge(a, p, b, q, rl);
            (i, i64::into_buffer(d))
        }
        (Buffer::I32(p), Buffer::I32(q)) => {
            let (i, d) = merge(a, p, b, q, rl);
            (i, i32::into_buffer(d))
        }
        (Buffer::U8(p), Buffer::U8(q)) => {
            let (i, d) = merge(a, p, b, q, rl);
            (i, u8::into_buffer(d))
        }
        _ => unreachable!("dtypes checked equal by the caller"),
    };
    RowSparseData {
        shape: a.shape.clone(),
        indices: Arc::new(idx),
        data,
    }
}
