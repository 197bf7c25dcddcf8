//! Reading values out of arrays and converting dtypes.

use super::{ArrayData, DenseData, NDArray};
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};

impl NDArray {
    /// All logical elements as a row-major `Vec<T>` (sparse arrays are densified).
    /// `T` must match the dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        crate::graph::host_read("to_vec", self);
        let dense = self.dense_data()?;
        let host = dense.buf.to_host()?;
        host.as_slice::<T>().map(|s| s.to_vec()).ok_or_else(|| {
            Error::dtype(
                "to_vec",
                format!(
                    "array has dtype {}, asked for {}",
                    dense.buf.dtype().name(),
                    T::DTYPE.name()
                ),
            )
        })
    }

    /// All logical elements converted to f64 (for inspection and tests; a device's array is
    /// copied to the host once).
    ///
    /// # Panics
    /// When a sparse array cannot be densified or a device's copy to the host fails.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        crate::graph::host_read("to_f64_vec", self);
        let dense = self.dense_data().expect("densify of a valid array");
        let host = dense
            .buf
            .to_host()
            .unwrap_or_else(|e| panic!("to_f64_vec: {e}"));
        (0..host.len()).map(|i| host.get_f64(i)).collect()
    }

    /// The value of a one-element array.
    pub fn item(&self) -> Result<f64> {
        crate::graph::host_read("item", self);
        let n = self.size();
        if n != 1 {
            return Err(Error::shape(
                "item",
                format!("array of shape {:?} has {n} elements, not 1", self.shape()),
            ));
        }
        // One element read from the storage (one element copied from a device).
        self.dense_data()?.buf.get_f64(0)
    }

    /// Dense storage of this array: shared for dense arrays, densified for sparse ones.
    pub(crate) fn dense_data(&self) -> Result<DenseData> {
        let d = self.read();
        match &*d {
            ArrayData::Dense(dd) => Ok(dd.clone()),
            other => crate::sparse::densify(other),
        }
    }

    /// Run `f` on this array's dense storage, borrowed under the read lock (a densified copy
    /// for a sparse array). Unlike [`NDArray::dense_data`] it clones no buffer handle: two
    /// atomic reference-count updates fewer per use, which operators on small arrays do several
    /// times per op. `f` must not lock this array for writing.
    pub(crate) fn with_dense<R>(&self, f: impl FnOnce(&DenseData) -> Result<R>) -> Result<R> {
        let d = self.read();
        let dd = dense_cow(&d)?;
        f(&dd)
    }

    /// [`NDArray::with_dense`] over two arrays (one lock when they are the same array).
    pub(crate) fn with_dense2<R>(
        &self,
        other: &NDArray,
        f: impl FnOnce(&DenseData, &DenseData) -> Result<R>,
    ) -> Result<R> {
        let a = self.read();
        let da = dense_cow(&a)?;
        if self.same_array(other) {
            return f(&da, &da);
        }
        let b = other.read();
        let db = dense_cow(&b)?;
        f(&da, &db)
    }

    /// Run `f` on the typed dense slice of a dense array: without copying in host memory, on
    /// a copy of a device's array.
    pub fn with_slice<T: Element, R>(&self, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        let d = self.read();
        match &*d {
            ArrayData::Dense(dd) => dd.buf.to_host()?.as_slice::<T>().map(f).ok_or_else(|| {
                Error::dtype(
                    "with_slice",
                    format!(
                        "array has dtype {}, asked for {}",
                        dd.buf.dtype().name(),
                        T::DTYPE.name()
                    ),
                )
            }),
            other => Err(Error::stype(
                "with_slice",
                format!("needs a dense array, got {:?}", other.stype()),
            )),
        }
    }

    /// Run `f` on the typed mutable dense slice of a dense array, in place (copy-on-write if the
    /// buffer is shared with a detached handle). Not recorded by autograd. Host memory only: a
    /// device's array is an [`Error::Device`] (write a host array, then `to_device`).
    pub fn with_slice_mut<T: Element, R>(&self, f: impl FnOnce(&mut [T]) -> R) -> Result<R> {
        let mut d = self.write();
        match &mut *d {
            ArrayData::Dense(dd) if dd.buf.host().is_none() => Err(Error::Device {
                op: "with_slice_mut",
                msg: format!(
                    "the array is on {:?}; a host slice needs host memory (to_device(Device::Cpu))",
                    dd.buf.device()
                ),
            }),
            ArrayData::Dense(dd) => {
                let dt = dd.buf.dtype();
                dd.buf.as_mut_slice::<T>().map(f).ok_or_else(|| {
                    Error::dtype(
                        "with_slice_mut",
                        format!(
                            "array has dtype {}, asked for {}",
                            dt.name(),
                            T::DTYPE.name()
                        ),
                    )
                })
            }
            other => Err(Error::stype(
                "with_slice_mut",
                format!("needs a dense array, got {:?}", other.stype()),
            )),
        }
    }

    /// A copy converted to `dtype` (same storage type; not differentiable across dtypes).
    pub fn astype(&self, dtype: DType) -> Result<NDArray> {
        crate::graph::traced!(Op::Astype(dtype), [self], self.astype(dtype));
        let d = self.read();
        let src = d.dtype();
        let dense = matches!(&*d, ArrayData::Dense(_));
        let out = match &*d {
            ArrayData::Dense(dd) => ArrayData::Dense(DenseData {
                shape: dd.shape.clone(),
                buf: dd.buf.cast(dtype)?,
            }),
            ArrayData::Csr(c) => {
                let mut c = c.clone();
                c.data = c.data.cast(dtype)?;
                ArrayData::Csr(c)
            }
            ArrayData::RowSparse(r) => {
                let mut r = r.clone();
                r.data = r.data.cast(dtype)?;
                ArrayData::RowSparse(r)
            }
        };
        drop(d);
        let out = NDArray::from_data(out);
        // A cast between float types passes the gradient back, cast to the input's dtype (as
        // MXNet's `astype` and PyTorch's `.to(dtype)` do); casts from or to integers carry none.
        if dense && src.is_float() && dtype.is_float() {
            return Ok(crate::autograd::record_op(
                "astype",
                out,
                &[self],
                move |g| Ok(vec![Some(g.astype(src)?)]),
            ));
        }
        Ok(out)
    }

    /// A new handle sharing this array's buffers but with no autograd history
    /// (`detach` / `stop_gradient`).
    pub fn detach(&self) -> NDArray {
        crate::graph::traced_plain!(Op::Detach, [self], self.detach());
        NDArray::from_data(self.data())
    }

    /// A deep copy (new buffers). For arrays whose size comes from user input, prefer
    /// [`NDArray::try_copy`].
    ///
    /// # Panics
    /// When the host or the device cannot allocate the copy.
    pub fn copy(&self) -> NDArray {
        self.try_copy().unwrap_or_else(|e| panic!("copy: {e}"))
    }

    /// [`NDArray::copy`], with a host or device that cannot allocate the copy as an error
    /// ([`crate::Error::Memory`] on the host, naming the bytes) instead of a panic.
    pub fn try_copy(&self) -> crate::Result<NDArray> {
        let deep = match self.data() {
            ArrayData::Dense(mut dd) => {
                dd.buf = dd.buf.duplicate()?;
                ArrayData::Dense(dd)
            }
            other => other,
        };
        Ok(NDArray::from_data(deep))
    }
}

/// Dense storage of `d`: borrowed when it is dense, densified otherwise.
pub(crate) fn dense_cow(d: &ArrayData) -> Result<std::borrow::Cow<'_, DenseData>> {
    match d {
        ArrayData::Dense(dd) => Ok(std::borrow::Cow::Borrowed(dd)),
        other => crate::sparse::densify(other).map(std::borrow::Cow::Owned),
    }
}
