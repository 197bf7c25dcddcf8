//! Array creation: zeros, ones, full, arange, linspace, eye, from vectors.
//!
//! The public constructors make their array on the calling thread's default device
//! ([`Device::current`], set by [`crate::with_device`]): they build it in host memory, as the
//! CPU kernels need, and move it only when that device is not the CPU, so the CPU path costs
//! one thread-local read and copies nothing. Code inside the crate that wraps a kernel's host
//! output uses the `host_*` constructors (and `from_buffer`), which the scope does not touch:
//! an operator's output lives where its inputs live.

use super::{ArrayData, DenseData, NDArray, Shape};
use crate::cpu::alloc::{try_filled, try_with_capacity};
use crate::cpu::CpuStorage;
use crate::cpu::HostElement;
use crate::dtype::{DType, Device, Element};
use crate::error::{Error, Result};
use crate::storage::Storage;

/// The element count of `shape`, or an error naming `op` when it is past what usize counts
/// (a shape with a zero dimension is empty, whatever the others are).
pub(crate) fn checked_size(op: &'static str, shape: &[usize]) -> Result<usize> {
    if shape.contains(&0) {
        return Ok(0);
    }
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

    /// `self`, a host array a public constructor just built, on the calling thread's default
    /// device: itself on the CPU (one thread-local read, no copy), else its copy there.
    #[inline]
    pub(crate) fn on_current_device(self) -> Result<NDArray> {
        let device = Device::current();
        if device == Device::Cpu {
            Ok(self)
        } else {
            self.to_device(device)
        }
    }

    /// [`NDArray::on_current_device`] for the constructors that cannot return an error.
    #[inline]
    fn on_current_device_or_panic(self, op: &str) -> NDArray {
        self.on_current_device()
            .unwrap_or_else(|e| panic!("NDArray::{op}: {e}"))
    }

    /// A dense host array from a vector and a shape, whatever the default device: for code
    /// that wraps a CPU kernel's output.
    pub(crate) fn host_vec<T: Element>(v: Vec<T>, shape: &[usize]) -> Result<NDArray> {
        NDArray::from_buffer(T::into_buffer(v), shape)
    }

    /// A dense array from a vector and a shape, on the default device ([`Device::current`]).
    ///
    /// ```
    /// use sparrow_core::NDArray;
    /// let a = NDArray::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    /// assert_eq!(a.shape(), vec![2, 2]);
    /// ```
    pub fn from_vec<T: Element>(v: Vec<T>, shape: &[usize]) -> Result<NDArray> {
        NDArray::host_vec(v, shape)?.on_current_device()
    }

    /// A 1-D dense array copied from a slice, on the default device ([`Device::current`]).
    ///
    /// # Panics
    /// When the copy to a default device other than the CPU fails (the device cannot hold
    /// it); [`NDArray::from_vec`] returns that error instead.
    pub fn from_slice<T: Element>(v: &[T]) -> NDArray {
        let n = v.len();
        NDArray::from_data(ArrayData::Dense(DenseData {
            shape: smallvec::smallvec![n],
            buf: Storage::from_vec(v.to_vec()),
        }))
        .on_current_device_or_panic("from_slice")
    }

    /// A 0-D (scalar) array, on the default device ([`Device::current`]).
    ///
    /// # Panics
    /// When the copy to a default device other than the CPU fails (the device cannot hold
    /// it); [`NDArray::from_vec`] with shape `[]` returns that error instead.
    pub fn scalar<T: Element>(v: T) -> NDArray {
        NDArray::from_data(ArrayData::Dense(DenseData {
            shape: Shape::new(),
            buf: Storage::from_vec(vec![v]),
        }))
        .on_current_device_or_panic("scalar")
    }

    /// Zeros of a shape and dtype, allocated on the default device ([`Device::current`]).
    pub fn zeros(shape: &[usize], dtype: DType) -> Result<NDArray> {
        let n = checked_size("zeros", shape)?;
        // Zeros need no host values: the device's own allocation fills them.
        NDArray::from_buffer(Storage::zeros_on(dtype, n, Device::current())?, shape)
    }

    /// Ones of a shape and dtype, on the default device ([`Device::current`]).
    pub fn ones(shape: &[usize], dtype: DType) -> Result<NDArray> {
        NDArray::full(shape, 1.0, dtype)
    }

    /// An array filled with `value` (converted to the dtype), on the default device
    /// ([`Device::current`]).
    pub fn full(shape: &[usize], value: f64, dtype: DType) -> Result<NDArray> {
        NDArray::host_full(shape, value, dtype)?.on_current_device()
    }

    /// [`NDArray::full`] in host memory, whatever the default device.
    fn host_full(shape: &[usize], value: f64, dtype: DType) -> Result<NDArray> {
        let n = checked_size("full", shape)?;
        let op = "full";
        let buf = match dtype {
            DType::F32 => f32::into_buffer(try_filled(op, n, value as f32)?),
            DType::F64 => f64::into_buffer(try_filled(op, n, value)?),
            DType::I64 => i64::into_buffer(try_filled(op, n, value as i64)?),
            DType::I32 => i32::into_buffer(try_filled(op, n, value as i32)?),
            DType::U8 => u8::into_buffer(try_filled(op, n, value as u8)?),
            DType::F16 => half::f16::into_buffer(try_filled(op, n, half::f16::from_f64(value))?),
            DType::BF16 => half::bf16::into_buffer(try_filled(op, n, half::bf16::from_f64(value))?),
        };
        NDArray::from_buffer(buf, shape)
    }

    /// Zeros with this array's shape and dtype (always dense, by design: MXNet's `zeros_like`
    /// keeps the storage type; here [`crate::sparse::zeros_stype_on`] makes sparse zeros), on this
    /// array's device.
    ///
    /// # Panics
    /// When the allocation on this array's device fails (not on the CPU).
    pub fn zeros_like(&self) -> NDArray {
        let d = self.read();
        let buf = Storage::zeros_on(d.dtype(), d.shape().iter().product(), d.device())
            .unwrap_or_else(|e| panic!("NDArray::zeros_like: {e}"));
        NDArray::from_data(ArrayData::Dense(DenseData {
            shape: Shape::from_slice(d.shape()),
            buf,
        }))
    }

    /// Ones with this array's shape and dtype (always dense, by design: ones have no sparse
    /// form), on this array's device.
    ///
    /// # Panics
    /// When the copy to this array's device fails (not on the CPU).
    pub fn ones_like(&self) -> NDArray {
        let (shape, dtype, device) = {
            let d = self.read();
            (Shape::from_slice(d.shape()), d.dtype(), d.device())
        };
        let ones =
            NDArray::host_full(&shape, 1.0, dtype).expect("shape of an existing array is valid");
        if device == Device::Cpu {
            ones
        } else {
            ones.to_device(device)
                .unwrap_or_else(|e| panic!("NDArray::ones_like: {e}"))
        }
    }

    /// `[start, stop)` with `step`, as f32 or f64 (`dtype` must be a float type), on the
    /// default device ([`Device::current`]).
    pub fn arange(start: f64, stop: f64, step: f64, dtype: DType) -> Result<NDArray> {
        NDArray::host_arange(start, stop, step, dtype)?.on_current_device()
    }

    fn host_arange(start: f64, stop: f64, step: f64, dtype: DType) -> Result<NDArray> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !stop.is_finite() {
            return Err(Error::arg(
                "arange",
                format!("start {start}, stop {stop}, step {step} must be finite, step non-zero"),
            ));
        }
        let n = ((stop - start) / step).ceil().max(0.0) as usize;
        match dtype {
            DType::F32 => {
                let mut v = try_with_capacity("arange", n)?;
                v.extend((0..n).map(|i| (start + i as f64 * step) as f32));
                NDArray::host_vec(v, &[n])
            }
            DType::F64 => {
                let mut v = try_with_capacity("arange", n)?;
                v.extend((0..n).map(|i| start + i as f64 * step));
                NDArray::host_vec(v, &[n])
            }
            // Each value computed in f64 and rounded once.
            DType::F16 | DType::BF16 => {
                NDArray::host_arange(start, stop, step, DType::F64)?.astype(dtype)
            }
            DType::I64 | DType::I32 | DType::U8 => {
                let a = NDArray::host_arange_i64(start as i64, stop.ceil() as i64, step as i64)?;
                a.astype(dtype)
            }
        }
    }

    /// `[start, stop)` with `step` in exact i64 arithmetic (bounds past 2^32 are fine), on the
    /// default device ([`Device::current`]).
    pub fn arange_i64(start: i64, stop: i64, step: i64) -> Result<NDArray> {
        NDArray::host_arange_i64(start, stop, step)?.on_current_device()
    }

    fn host_arange_i64(start: i64, stop: i64, step: i64) -> Result<NDArray> {
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
        let mut v = try_with_capacity("arange_i64", n)?;
        v.extend((0..n as i64).map(|i| start + i * step));
        NDArray::host_vec(v, &[n])
    }

    /// `num` evenly spaced values over `[start, stop]` (`endpoint` includes stop), on the
    /// default device ([`Device::current`]).
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
        let mut v: Vec<f64> = try_with_capacity("linspace", num)?;
        v.extend((0..num).map(|i| start + i as f64 * step));
        // Cast on the host, then move once.
        NDArray::host_vec(v, &[num])?
            .astype(dtype)?
            .on_current_device()
    }

    /// `n x m` identity-like matrix with ones on diagonal `k`, on the default device
    /// ([`Device::current`]).
    pub fn eye(n: usize, m: Option<usize>, k: i64, dtype: DType) -> Result<NDArray> {
        let m = m.unwrap_or(n);
        let size = checked_size("eye", &[n, m])?;
        // The ones are written through host memory, then the array moves once.
        let a = NDArray::from_buffer(
            Storage::Cpu(CpuStorage::try_zeros("eye", dtype, size)?),
            &[n, m],
        )?;
        {
            let mut g = a.write();
            let d = g.as_dense_mut().expect("dense");
            for i in 0..n {
                let j = i as i64 + k;
                if j >= 0 && (j as usize) < m {
                    if let Some(h) = d.buf.host_mut() {
                        set_one(h, i * m + j as usize);
                    }
                }
            }
        }
        a.on_current_device()
    }
}

fn set_one(buf: &mut CpuStorage, pos: usize) {
    match buf {
        CpuStorage::F32(_) => buf.as_mut_slice::<f32>().unwrap()[pos] = 1.0,
        CpuStorage::F64(_) => buf.as_mut_slice::<f64>().unwrap()[pos] = 1.0,
        CpuStorage::I64(_) => buf.as_mut_slice::<i64>().unwrap()[pos] = 1,
        CpuStorage::I32(_) => buf.as_mut_slice::<i32>().unwrap()[pos] = 1,
        CpuStorage::U8(_) => buf.as_mut_slice::<u8>().unwrap()[pos] = 1,
        CpuStorage::F16(_) => buf.as_mut_slice::<half::f16>().unwrap()[pos] = half::f16::ONE,
        CpuStorage::BF16(_) => buf.as_mut_slice::<half::bf16>().unwrap()[pos] = half::bf16::ONE,
    }
}
