//! Conversions between storage types (MXNet's `cast_storage` / `tostype`).

use crate::cpu::HostElement;
use crate::storage::{IndexStorage, Storage};
use std::sync::Arc;

use rayon::prelude::*;

use crate::cpu::CpuStorage;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, CsrData, DenseData, NDArray, RowSparseData};
use crate::with_buffer;
use crate::SType;

/// An all-zero array of a storage type: dense zeros, or sparse with no stored entries.
pub fn zeros_stype(shape: &[usize], dtype: DType, stype: SType) -> NDArray {
    let data = match stype {
        SType::Dense => ArrayData::Dense(DenseData {
            shape: crate::Shape::from_slice(shape),
            buf: Storage::zeros(dtype, shape.iter().product()),
        }),
        SType::Csr => ArrayData::Csr(CsrData {
            shape: [
                shape.first().copied().unwrap_or(0),
                shape.get(1).copied().unwrap_or(0),
            ],
            indptr: IndexStorage::from(Arc::new(vec![0; shape.first().copied().unwrap_or(0) + 1])),
            indices: IndexStorage::from(Arc::new(Vec::new())),
            data: Storage::zeros(dtype, 0),
            offset: 0,
        }),
        SType::RowSparse => ArrayData::RowSparse(RowSparseData {
            shape: shape.to_vec(),
            indices: IndexStorage::from(Arc::new(Vec::new())),
            data: Storage::zeros(dtype, 0),
        }),
    };
    NDArray::from_data(data)
}

/// The dense equivalent of any storage.
pub(crate) fn densify(d: &ArrayData) -> Result<DenseData> {
    match d {
        ArrayData::Dense(dd) => Ok(dd.clone()),
        ArrayData::Csr(c) => {
            let [rows, cols] = c.shape;
            let buf = with_buffer!(&c.data, v => {
                let vals = &v[c.offset..c.offset + c.nnz()];
                let idx = c.indices();
                let mut out = crate::recycle::zeroed_vec(rows * cols);
                if cols > 0 {
                    out.par_chunks_mut(cols).with_min_len((PAR_ROWS / cols).max(1)).enumerate().for_each(|(r, o)| {
                        for p in c.indptr[r] as usize..c.indptr[r + 1] as usize {
                            o[idx[p] as usize] = vals[p];
                        }
                    });
                }
                crate::cpu::HostElement::into_buffer(out)
            });
            Ok(DenseData {
                shape: smallvec::smallvec![rows, cols],
                buf: Storage::from(buf),
            })
        }
        ArrayData::RowSparse(r) => {
            let row_len = r.row_len();
            let n: usize = r.shape.iter().product();
            let buf = with_buffer!(&r.data, v => {
                // A dense gradient densified every step reuses the previous step's buffer.
                let mut out = crate::recycle::zeroed_vec(n);
                for (k, &row) in r.indices.iter().enumerate() {
                    let dst = row as usize * row_len;
                    out[dst..dst + row_len].copy_from_slice(&v[k * row_len..(k + 1) * row_len]);
                }
                crate::cpu::HostElement::into_buffer(out)
            });
            Ok(DenseData {
                shape: crate::Shape::from_slice(&r.shape),
                buf: Storage::from(buf),
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
    let rows = d.shape[0];
    let (indices, data) = with_buffer!(&d.buf, v => {
        // Find the non-zero rows in parallel, then gather them.
        let keep: Vec<i64> = (0..rows)
            .into_par_iter()
            .with_min_len(256)
            .filter(|&r| v[r * row_len..(r + 1) * row_len].iter().any(|x| *x != Default::default()))
            .map(|r| r as i64)
            .collect();
        let data = crate::cpu::HostElement::into_buffer(
            keep.iter()
                .flat_map(|&r| v[r as usize * row_len..(r as usize + 1) * row_len].iter().copied())
                .collect(),
        );
        (keep, data)
    });
    Ok(RowSparseData {
        shape: d.shape.to_vec(),
        indices: IndexStorage::from(indices),
        data: Storage::from(data),
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
    // Blocks of rows are scanned in parallel, each into its own (indices, values, counts);
    // the blocks are then joined in order.
    let block = (PAR_ROWS / cols.max(1)).max(1);
    let (indptr, indices, data) = with_buffer!(&d.buf, v => {
        let parts: Vec<(Vec<i64>, Vec<_>, Vec<i64>)> = (0..rows.div_ceil(block))
            .into_par_iter()
            .map(|b| {
                let (mut idx, mut vals, mut counts) = (Vec::new(), Vec::new(), Vec::new());
                for r in b * block..((b + 1) * block).min(rows) {
                    for c in 0..cols {
                        let x = v[r * cols + c];
                        if x != Default::default() {
                            idx.push(c as i64);
                            vals.push(x);
                        }
                    }
                    counts.push(idx.len() as i64);
                }
                (idx, vals, counts)
            })
            .collect();
        let mut indptr = Vec::with_capacity(rows + 1);
        indptr.push(0i64);
        let (mut indices, mut vals) = (Vec::new(), Vec::new());
        for (i, v, c) in parts {
            let base = indices.len() as i64;
            indptr.extend(c.iter().map(|&k| k + base));
            indices.extend(i);
            vals.extend(v);
        }
        (indptr, indices, crate::cpu::HostElement::into_buffer(vals))
    });
    Ok(CsrData {
        shape: [rows, cols],
        indptr: IndexStorage::from(indptr),
        indices: IndexStorage::from(indices),
        data: Storage::from(data),
        offset: 0,
    })
}

/// Elements per parallel block when converting dense to csr.
const PAR_ROWS: usize = 1 << 14;

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
            if !da.dtype().is_float() {
                return Err(Error::dtype("add_grads", "gradients must be float"));
            }
            // Sparse + dense scatters the stored values into a copy of the dense operand; the
            // binary-op dispatch has that kernel.
            crate::autograd::pause(|| a.add(b))
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
        (Storage::Cpu(CpuStorage::F32(p)), Storage::Cpu(CpuStorage::F32(q))) => {
            let (i, d) = merge(a, p, b, q, rl);
            (i, f32::into_buffer(d))
        }
        (Storage::Cpu(CpuStorage::F64(p)), Storage::Cpu(CpuStorage::F64(q))) => {
            let (i, d) = merge(a, p, b, q, rl);
            (i, f64::into_buffer(d))
        }
        (Storage::Cpu(CpuStorage::I64(p)), Storage::Cpu(CpuStorage::I64(q))) => {
            let (i, d) = merge(a, p, b, q, rl);
            (i, i64::into_buffer(d))
        }
        (Storage::Cpu(CpuStorage::I32(p)), Storage::Cpu(CpuStorage::I32(q))) => {
            let (i, d) = merge(a, p, b, q, rl);
            (i, i32::into_buffer(d))
        }
        (Storage::Cpu(CpuStorage::U8(p)), Storage::Cpu(CpuStorage::U8(q))) => {
            let (i, d) = merge(a, p, b, q, rl);
            (i, u8::into_buffer(d))
        }
        _ => unreachable!("dtypes checked equal by the caller"),
    };
    RowSparseData {
        shape: a.shape.clone(),
        indices: IndexStorage::from(idx),
        data: Storage::from(data),
    }
}
