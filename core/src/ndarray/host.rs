//! Host-memory access for code outside core: borrowed views of a sparse array's parts,
//! arrays over vectors the caller shares, and little-endian bytes for file formats.
//!
//! Storage types and buffers are private to core; these methods are the public doors to host
//! memory. They borrow under the array's read lock (hold the view briefly: in-place writers
//! wait on it) and name the op, the storage type and the dtype when the array is not what the
//! caller asked for.

use crate::cpu::HostElement;
use crate::storage::{IndexStorage, Storage};
use std::sync::Arc;

use super::{ArrayData, DenseData, NDArray, RowSparseData, Shape};
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};

/// The parts of a csr array, borrowed: row `r`'s non-zeros are positions
/// `indptr[r]..indptr[r + 1]` of `indices` and `values` (`indptr[0] == 0`).
#[derive(Debug, Clone, Copy)]
pub struct CsrView<'a, T> {
    /// `[rows, cols]`.
    pub shape: [usize; 2],
    /// Row pointers, `rows + 1` entries.
    pub indptr: &'a [i64],
    /// Column index of each non-zero (sorted and unique within a row).
    pub indices: &'a [i64],
    /// Value of each non-zero.
    pub values: &'a [T],
}

fn dtype_error(op: &'static str, has: DType, want: DType) -> Error {
    Error::dtype(
        op,
        format!("array has dtype {}, asked for {}", has.name(), want.name()),
    )
}

impl NDArray {
    /// Run `f` on the parts of a csr array with values of type `T`.
    ///
    /// ```
    /// use sparrow_core::NDArray;
    /// let a = NDArray::csr_from_parts(vec![1.0f32, 2.0], vec![0, 2], vec![0, 1, 2], [2, 3]).unwrap();
    /// let nnz_row1 = a.with_csr::<f32, _>(|c| c.indptr[2] - c.indptr[1]).unwrap();
    /// assert_eq!(nnz_row1, 1);
    /// ```
    pub fn with_csr<T: Element, R>(&self, f: impl FnOnce(CsrView<'_, T>) -> R) -> Result<R> {
        let d = self.read();
        let ArrayData::Csr(c) = &*d else {
            return Err(Error::stype(
                "with_csr",
                format!("needs a csr array, got {:?}", d.stype()),
            ));
        };
        if c.data.host().is_none() {
            return Err(Error::Device {
                op: "with_csr",
                msg: format!(
                    "the array is on {:?}; host slices need host memory (to_device(Device::Cpu))",
                    c.data.device()
                ),
            });
        }
        let values = c
            .values::<T>()
            .ok_or_else(|| dtype_error("with_csr", c.data.dtype(), T::DTYPE))?;
        Ok(f(CsrView {
            shape: c.shape,
            indptr: &c.indptr,
            indices: c.indices(),
            values,
        }))
    }

    /// The stored row ids of a row_sparse array (sorted, unique).
    pub fn row_ids(&self) -> Result<Vec<i64>> {
        match &*self.read() {
            ArrayData::RowSparse(r) => Ok(r.indices.to_vec()),
            other => Err(Error::stype(
                "row_ids",
                format!("needs a row_sparse array, got {:?}", other.stype()),
            )),
        }
    }

    /// Number of stored rows: a row_sparse array's row ids, a csr array's rows holding at
    /// least one non-zero, every row of a dense array (0 for a 0-d array).
    pub fn stored_rows(&self) -> usize {
        match &*self.read() {
            ArrayData::RowSparse(r) => r.indices.len(),
            ArrayData::Csr(c) => c.indptr.windows(2).filter(|w| w[1] > w[0]).count(),
            ArrayData::Dense(d) => d.shape.first().copied().unwrap_or(0),
        }
    }

    /// A dense array over a vector the caller keeps a handle to (a reader that recycles its
    /// buffers watches the `Arc` and reuses the vector once every array has let go of it).
    pub fn from_shared_vec<T: Element>(v: Arc<Vec<T>>, shape: &[usize]) -> Result<NDArray> {
        let n: usize = shape.iter().product();
        if n != v.len() {
            return Err(Error::shape(
                "from_shared_vec",
                format!("{} elements cannot have shape {shape:?}", v.len()),
            ));
        }
        Ok(NDArray::from_data(ArrayData::Dense(DenseData {
            shape: Shape::from_slice(shape),
            buf: Storage::from(T::shared_buffer(v)),
        })))
    }

    /// A csr array over vectors the caller shares, checked as [`NDArray::csr_from_parts`]
    /// checks (lengths and end points always; ordering and ranges of every index when
    /// `full`). Readers that build valid parts by construction pass `full = false`: the
    /// length checks keep every later kernel in bounds, the index checks cost a pass over the
    /// batch.
    pub fn csr_from_shared<T: Element>(
        values: Arc<Vec<T>>,
        indices: Arc<Vec<i64>>,
        indptr: Arc<Vec<i64>>,
        shape: [usize; 2],
        full: bool,
    ) -> Result<NDArray> {
        crate::sparse::checked_csr(
            Storage::from(T::shared_buffer(values)),
            indices.into(),
            indptr.into(),
            shape,
            full,
        )
    }

    /// The logical elements (sparse arrays densified) as little-endian bytes, row-major: the
    /// layout of safetensors and NumPy's `<` dtypes.
    pub fn to_le_bytes(&self) -> Result<Vec<u8>> {
        let d = self.dense_data()?;
        let host = d.buf.to_host()?;
        // One zeroed buffer, then every element into its slot: a loop the compiler turns into
        // wide copies (a push per element checked capacity each time).
        Ok(crate::with_buffer!(host.as_ref(), v => {
            let mut out = vec![0u8; std::mem::size_of_val(&v[..])];
            let size = out.len() / v.len().max(1);
            if size > 0 {
                out.chunks_exact_mut(size)
                    .zip(v.iter())
                    .for_each(|(dst, x)| x.put_le(dst));
            }
            out
        }))
    }

    /// A dense array of `dtype` and `shape` from little-endian bytes (see
    /// [`NDArray::to_le_bytes`]). The byte count must be the shape's elements times the
    /// dtype's size.
    pub fn from_le_bytes(bytes: &[u8], dtype: DType, shape: &[usize]) -> Result<NDArray> {
        let n = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|n| n.checked_mul(dtype.size_of()));
        if n != Some(bytes.len()) {
            return Err(Error::shape(
                "from_le_bytes",
                format!(
                    "{} bytes cannot hold shape {shape:?} of {}",
                    bytes.len(),
                    dtype.name()
                ),
            ));
        }
        fn conv<T: Element>(b: &[u8]) -> Vec<T> {
            b.chunks_exact(std::mem::size_of::<T>())
                .map(T::from_le_slice)
                .collect()
        }
        let buf = match dtype {
            DType::F32 => f32::into_buffer(conv(bytes)),
            DType::F64 => f64::into_buffer(conv(bytes)),
            DType::I64 => i64::into_buffer(conv(bytes)),
            DType::I32 => i32::into_buffer(conv(bytes)),
            DType::U8 => u8::into_buffer(bytes.to_vec()),
            DType::F16 => half::f16::into_buffer(conv(bytes)),
            DType::BF16 => half::bf16::into_buffer(conv(bytes)),
        };
        NDArray::from_buffer(buf, shape)
    }

    /// Make this array hold `src`'s value (shape, dtype, storage type), in place: every handle
    /// of this array sees it. The two share buffers until either is written (copy-on-write).
    /// Not recorded by autograd (as MXNet's `set_data`).
    pub fn assign(&self, src: &NDArray) {
        if self.same_array(src) {
            return;
        }
        let value = src.data();
        self.replace_data(value);
    }

    /// Make this array hold `src`'s value as a dense array, in place (see
    /// [`NDArray::assign`]); a sparse `src` is densified.
    pub fn assign_dense(&self, src: &NDArray) -> Result<()> {
        let value = ArrayData::Dense(src.dense_data()?);
        self.replace_data(value);
        Ok(())
    }

    /// A row_sparse array's parts as MXNet's `rsp.indices` and `rsp.data`: the sorted unique
    /// row ids and a dense array `[ids.len(), shape[1..]...]` of the stored rows (sharing the
    /// values, no copy).
    pub fn row_sparse_parts(&self) -> Result<(Vec<i64>, NDArray)> {
        let d = self.read();
        let ArrayData::RowSparse(r) = &*d else {
            return Err(Error::stype(
                "row_sparse_parts",
                format!("needs a row_sparse array, got {:?}", d.stype()),
            ));
        };
        let mut shape = Shape::from_slice(&r.shape);
        shape[0] = r.indices.len();
        let values = NDArray::from_data(ArrayData::Dense(DenseData {
            shape,
            buf: r.data.clone(),
        }));
        Ok((r.indices.to_vec(), values))
    }

    /// A row_sparse array of logical `shape` from its parts (see
    /// [`NDArray::row_sparse_parts`]): `values` is a dense `[indices.len(), shape[1..]...]`
    /// array of any dtype (shared, no copy), `indices` sorted unique row ids below
    /// `shape[0]`. Every invariant is checked.
    pub fn row_sparse_from_arrays(
        values: &NDArray,
        indices: Vec<i64>,
        shape: &[usize],
    ) -> Result<NDArray> {
        let dd = values.dense_data()?;
        let (vs, want) = (&dd.shape[..], shape.get(1..).unwrap_or(&[]));
        if vs.first() != Some(&indices.len()) || &vs[1..] != want {
            return Err(Error::shape(
                "row_sparse_from_arrays",
                format!(
                    "values of shape {vs:?} do not hold {} rows of a {shape:?} array",
                    indices.len()
                ),
            ));
        }
        // The row ids go where the values are (a row_sparse array lives on one device).
        let r = RowSparseData {
            shape: shape.to_vec(),
            indices: IndexStorage::from_vec_on(indices, dd.buf.device())?,
            data: dd.buf,
        };
        crate::sparse::check_rsp(&r, true)?;
        Ok(NDArray::from_data(ArrayData::RowSparse(r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SType;

    /// Bytes round-trip for every dtype; a byte count that does not fit the shape is an error.
    #[test]
    fn le_bytes_round_trip_and_bad_lengths_are_errors() {
        let a = NDArray::from_vec(vec![1.5f32, -2.0, 3.25, 0.0], &[2, 2]).unwrap();
        for dt in [DType::F32, DType::F64, DType::I64, DType::I32, DType::U8] {
            let x = a.astype(dt).unwrap();
            let back = NDArray::from_le_bytes(&x.to_le_bytes().unwrap(), dt, &[2, 2]).unwrap();
            assert_eq!(back.dtype(), dt);
            assert_eq!(back.to_f64_vec(), x.to_f64_vec());
        }
        assert!(NDArray::from_le_bytes(&[0u8; 15], DType::F32, &[2, 2]).is_err());
        assert!(NDArray::from_le_bytes(&[0u8; 8], DType::F64, &[usize::MAX, 2]).is_err());
    }

    /// A shared-vector csr is checked for lengths and end points even without the full check;
    /// the full check also catches unsorted columns.
    #[test]
    fn csr_from_shared_checks_its_parts() {
        let ok = NDArray::csr_from_shared(
            Arc::new(vec![1.0f32, 2.0]),
            Arc::new(vec![0, 2]),
            Arc::new(vec![0, 1, 2]),
            [2, 3],
            false,
        )
        .unwrap();
        assert_eq!(ok.to_vec::<f32>().unwrap(), vec![1., 0., 0., 0., 0., 2.]);
        let bad_len = NDArray::csr_from_shared(
            Arc::new(vec![1.0f32]),
            Arc::new(vec![0, 2]),
            Arc::new(vec![0, 1, 2]),
            [2, 3],
            false,
        );
        assert!(bad_len.is_err());
        let bad_end = NDArray::csr_from_shared(
            Arc::new(vec![1.0f32, 2.0]),
            Arc::new(vec![0, 2]),
            Arc::new(vec![0, 1, 3]),
            [2, 3],
            false,
        );
        assert!(bad_end.is_err());
        let unsorted = || {
            NDArray::csr_from_shared(
                Arc::new(vec![1.0f32, 2.0]),
                Arc::new(vec![2, 0]),
                Arc::new(vec![0, 2, 2]),
                [2, 3],
                true,
            )
        };
        assert!(unsorted().is_err());
        assert!(NDArray::from_shared_vec(Arc::new(vec![1u8; 5]), &[2, 2]).is_err());
    }

    /// `row_sparse_parts` and `row_sparse_from_arrays` are inverses; `assign` replaces the value
    /// seen through every handle.
    #[test]
    fn row_sparse_parts_round_trip_and_assign_is_seen_by_all_handles() {
        let r = NDArray::row_sparse_from_parts(vec![1.0f32, 2.0, 3.0, 4.0], vec![1, 3], &[5, 2])
            .unwrap();
        let (ids, values) = r.row_sparse_parts().unwrap();
        assert_eq!(ids, vec![1, 3]);
        assert_eq!(values.shape(), vec![2, 2]);
        let back = NDArray::row_sparse_from_arrays(&values, ids, &[5, 2]).unwrap();
        assert_eq!(back.to_f64_vec(), r.to_f64_vec());
        assert!(NDArray::row_sparse_from_arrays(&values, vec![3, 1], &[5, 2]).is_err());
        assert!(NDArray::row_sparse_from_arrays(&values, vec![1], &[5, 2]).is_err());
        let w = NDArray::zeros(&[5, 2], DType::F32).unwrap();
        let other = w.clone();
        w.assign_dense(&r).unwrap();
        assert_eq!(other.stype(), SType::Dense);
        assert_eq!(other.to_f64_vec(), r.to_f64_vec());
    }
}
