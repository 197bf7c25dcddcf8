//! Array creation: zeros, ones, full, arange, linspace, eye, from vectors.

use super::{ArrayData, DenseData, NDArray, Shape};
use crate::cpu::CpuStorage;
use crate::cpu::HostElement;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::storage::Storage;

fn checked_size(op: &'static str, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            Error::shape(
                op,
                format!("shape {shape:?} has more elements than usize can count"),
            )
        })
}

impl NDArray {
    /// A dense array from a buffer and a shape; the buffer length must match the shape.
    pub(crate) fn from_buffer(buf: impl Into<Storage>, shape: &[usize]) -> Result<NDArray> {
        let buf: Storage = buf.into();
        let n = checked_size("from_buffer", shape)?;
        if n != buf.len() {
            return Err(Error::shape(
                "from_buffer",
                format!(
                    "{} elements cannot have shape {shape:?} ({n} elements)",
                    buf.len()
                ),
            ));
        }
        Ok(NDArray::from_data(ArrayData::Dense(DenseData {
            shape: Shape::from_slice(shape),
            buf,
        })))
    }

    /// A dense array from a vector and a shape.
    ///
    /// ```
    /// use sparrow_core::NDArray;
    /// let a = NDArray::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    /// assert_eq!(a.shape(), vec![2, 2]);
    /// ```
    pub fn from_vec<T: Element>(v: Vec<T>, shape: &[usize]) -> Result<NDArray> {
        NDArray::from_buffer(T::into_buffer(v), shape)
    }

    /// A 1-D dense array copied from a slice.
    pub fn from_slice<T: Element>(v: &[T]) -> NDArray {
        let n = v.len();
        NDArray::from_data(ArrayData::Dense(DenseData {
            shape: smallvec::smallvec![n],
            buf: Storage::from_vec(v.to_vec()),
        }))
    }

    /// A 0-D (scalar) array.
    pub fn scalar<T: Element>(v: T) -> NDArray {
        NDArray::from_data(ArrayData::Dense(DenseData {
            shape: Shape::new(),
            buf: Storage::from_vec(vec![v]),
        }))
    }

    /// Zeros of a shape and dtype.
    pub fn zeros(shape: &[usize], dtype: DType) -> Result<NDArray> {
        let n = checked_size("zeros", shape)?;
        NDArray::from_buffer(Storage::zeros(dtype, n), shape)
    }

    /// Ones of a shape and dtype.
    pub fn ones(shape: &[usize], dtype: DType) -> Result<NDArray> {
        NDArray::full(shape, 1.0, dtype)
    }

    /// An array filled with `value` (converted to the dtype).
    pub fn full(shape: &[usize], value: f64, dtype: DType) -> Result<NDArray> {
        let n = checked_size("full", shape)?;
        let buf = match dtype {
            DType::F32 => f32::into_buffer(vec![value as f32; n]),
            DType::F64 => f64::into_buffer(vec![value; n]),
            DType::I64 => i64::into_buffer(vec![value as i64; n]),
            DType::I32 => i32::into_buffer(vec![value as i32; n]),
            DType::U8 => u8::into_buffer(vec![value as u8; n]),
        };
        NDArray::from_buffer(buf, shape)
    }

    /// Zeros with this array's shape and dtype (always dense).
    pub fn zeros_like(&self) -> NDArray {
        let d = self.read();
        NDArray::from_data(ArrayData::Dense(DenseData {
            shape: Shape::from_slice(d.shape()),
            buf: Storage::zeros_on(d.dtype(), d.shape().iter().product(), d.device()),
        }))
    }

    /// Ones with this array's shape and dtype (always dense).
    pub fn ones_like(&self) -> NDArray {
        let (shape, dtype) = (self.shape(), self.dtype());
        NDArray::full(&shape, 1.0, dtype).expect("shape of an existing array is valid")
    }

    /// `[start, stop)` with `step`, as f32 or f64 (`dtype` must be a float type).
    pub fn arange(start: f64, stop: f64, step: f64, dtype: DType) -> Result<NDArray> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !stop.is_finite() {
            return Err(Error::arg(
                "arange",
                format!("start {start}, stop {stop}, step {step} must be finite, step non-zero"),
            ));
        }
        let n = ((stop - start) / step).ceil().max(0.0) as usize;
        match dtype {
            DType::F32 => NDArray::from_vec(
                (0..n).map(|i| (start + i as f64 * step) as f32).collect(),
                &[n],
            ),
            DType::F64 => {
                NDArray::from_vec((0..n).map(|i| start + i as f64 * step).collect(), &[n])
            }
            DType::I64 | DType::I32 | DType::U8 => {
                let a = NDArray::arange_i64(start as i64, stop.ceil() as i64, step as i64)?;
                a.astype(dtype)
            }
        }
    }

    /// `[start, stop)` with `step` in exact i64 arithmetic (bounds past 2^32 are fine).
    pub fn arange_i64(start: i64, stop: i64, step: i64) -> Result<NDArray> {
        if step == 0 {
            return Err(Error::arg("arange_i64", "step must be non-zero"));
        }
        let span = (stop as i128 - start as i128).max(0) as u128;
        let n = if step > 0 {
            span.div_ceil(step as u128)
        } else {
            ((start as i128 - stop as i128).max(0) as u128).div_ceil((-(step as i128)) as u128)
        };
        let n = usize::try_from(n).map_err(|_| Error::arg("arange_i64", "too many elements"))?;
        NDArray::from_vec((0..n as i64).map(|i| start + i * step).collect(), &[n])
    }

    /// `num` evenly spaced values over `[start, stop]` (`endpoint` includes stop).
    pub fn linspace(
        start: f64,
        stop: f64,
        num: usize,
        endpoint: bool,
        dtype: DType,
    ) -> Result<NDArray> {
        let div = if endpoint { num.saturating_sub(1) } else { num };
        let step = if div == 0 {
            0.0
        } else {
            (stop - start) / div as f64
        };
        let v: Vec<f64> = (0..num).map(|i| start + i as f64 * step).collect();
        NDArray::from_vec(v, &[num])?.astype(dtype)
    }

    /// `n x m` identity-like matrix with ones on diagonal `k`.
    pub fn eye(n: usize, m: Option<usize>, k: i64, dtype: DType) -> Result<NDArray> {
        let m = m.unwrap_or(n);
        let a = NDArray::zeros(&[n, m], dtype)?;
        {
            let mut g = a.write();
            let d = g.as_dense_mut().expect("dense");
            for i in 0..n {
                let j = i as i64 + k;
                if j >= 0 && (j as usize) < m {
                    set_one(d.buf.host_mut(), i * m + j as usize);
                }
            }
        }
        Ok(a)
    }
}

fn set_one(buf: &mut CpuStorage, pos: usize) {
    match buf {
        CpuStorage::F32(_) => buf.as_mut_slice::<f32>().unwrap()[pos] = 1.0,
        CpuStorage::F64(_) => buf.as_mut_slice::<f64>().unwrap()[pos] = 1.0,
        CpuStorage::I64(_) => buf.as_mut_slice::<i64>().unwrap()[pos] = 1,
        CpuStorage::I32(_) => buf.as_mut_slice::<i32>().unwrap()[pos] = 1,
        CpuStorage::U8(_) => buf.as_mut_slice::<u8>().unwrap()[pos] = 1,
    }
}
