//! The storage seam: where an array's elements live, chosen in one place.
//!
//! Every buffer of an array (a dense array's values; a csr array's values, column indices and
//! row pointers; a row_sparse array's values and row ids) is a [`Storage`]. `Storage` is an
//! enum with one variant per backend, and each backend's storage type implements
//! [`BackendStorage`]: the structural operations (dtype, length, zeros, cast, gather) and one
//! supertrait per family of kernels, each family in its own file here with the enums that name
//! what to compute and the `impl Storage` forwarders operators call. An operator makes one
//! `Storage` call per kernel; the forwarder matches the backend once (`on_backend!`,
//! `on_backends!`). The variants are [`Storage::Cpu`] (kernels in `crate::cpu`) and, with the
//! cargo feature `cuda`, `Storage::Cuda` (kernels in `crate::cuda`).
//!
//! Adding a device backend (CUDA) adds a variant here and in [`IndexStorage`], its arms in the
//! dispatch macros, and a storage type implementing [`BackendStorage`] in its own folder; no
//! operator changes. Host memory owned by a memory-mapped file is a `CpuStorage` owner, not a
//! variant. See ARCHITECTURE.md.

mod conv;
mod elementwise;
mod index;
mod layout;
mod linalg;
mod planned;
mod random;
mod reduce;
mod rnn;
mod softmax_ce;
mod sparse;
mod sparse_dot;
mod update;

pub(crate) use conv::{ConvGeom, ConvOps, PoolGeom, PoolKind, SPATIAL};
pub(crate) use elementwise::{CmpOp, ElementwiseOps, Map, MapGrad};
pub(crate) use index::{BackendIndex, IndexOf, IndexStorage};
pub(crate) use layout::LayoutOps;
pub(crate) use linalg::{LinalgOps, MatMul};
pub(crate) use planned::PlannedOps;
pub(crate) use random::{RandomDist, RandomOps};
pub(crate) use reduce::{ArgReduceOp, ReduceOp, ReduceOps, SoftmaxOp};
pub use rnn::RnnMode;
pub(crate) use rnn::{RnnDims, RnnGrads, RnnOps};
pub(crate) use sparse::{
    check_csr_layout, Merge, SparseLayout, SparseOps, SparseParts, SquareSumAxis, StoredReduce,
    WithDense,
};
pub(crate) use sparse_dot::{CsrIndex, CsrView, SparseDotOps};
pub(crate) use update::{GradRef, UpdateOps, UpdateRule, UpdateScalars};

use crate::cpu::CpuStorage;
#[cfg(feature = "cuda")]
use crate::cuda::CudaStorage;
use crate::dtype::{DType, Device, Element};
use crate::error::{Error, Result};

/// What every backend's storage provides: the structural operations that move, allocate and
/// convert elements without knowing what the array means, and (as supertraits, one per family
/// of operators, each in its own file of this folder) the kernels operators call.
pub(crate) trait BackendStorage:
    Clone
    + std::fmt::Debug
    + Send
    + Sync
    + Sized
    + ConvOps
    + ElementwiseOps
    + LayoutOps
    + LinalgOps
    + RandomOps
    + ReduceOps
    + RnnOps
    + SparseDotOps
    + SparseOps
    + UpdateOps
{
    /// The device whose memory holds the elements.
    fn device(&self) -> Device;
    /// The element type.
    fn dtype(&self) -> DType;
    /// Number of elements.
    fn len(&self) -> usize;
    /// `n` zeros of `dtype` in the memory of `device` (one of this backend's devices; another
    /// is an [`Error::Device`](crate::Error::Device)).
    fn zeros(device: Device, dtype: DType, n: usize) -> Result<Self>;
    /// Every element converted to `dtype` (`as` semantics).
    fn cast(&self, dtype: DType) -> Result<Self>;
    /// The elements at `positions`, in that order.
    fn gather(&self, positions: &mut dyn Iterator<Item = usize>) -> Result<Self>;
    /// Every element, in a new buffer on the same device (a deep copy). By default through
    /// [`BackendStorage::gather`]; backends with a bulk copy override it (one indirect call per
    /// element made `NDArray::copy` of a large array slow).
    fn duplicate(&self) -> Result<Self> {
        self.gather(&mut (0..self.len()))
    }
    /// Element `i` as f64 (inspection and tests).
    fn get_f64(&self, i: usize) -> Result<f64>;
}

impl BackendStorage for CpuStorage {
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn dtype(&self) -> DType {
        CpuStorage::dtype(self)
    }
    fn len(&self) -> usize {
        CpuStorage::len(self)
    }
    fn zeros(device: Device, dtype: DType, n: usize) -> Result<Self> {
        match device {
            Device::Cpu => CpuStorage::try_zeros("zeros", dtype, n),
            other => Err(Error::device_mismatch("zeros", Device::Cpu, other)),
        }
    }
    fn cast(&self, dtype: DType) -> Result<Self> {
        Ok(CpuStorage::cast(self, dtype))
    }
    fn gather(&self, positions: &mut dyn Iterator<Item = usize>) -> Result<Self> {
        Ok(CpuStorage::gather(self, positions))
    }
    fn duplicate(&self) -> Result<Self> {
        // Fallible: a copy's size is the caller's array's, which may be past what the host
        // has (an error naming the bytes, not an abort).
        Ok(crate::with_buffer!(self, v => {
            // A large copy is often a weight or a table: on huge pages, as fresh arrays are.
            let mut out = crate::cpu::alloc::try_uninit_vec("copy", v.len())?;
            out.extend_from_slice(v);
            crate::cpu::HostElement::into_buffer(out)
        }))
    }
    fn get_f64(&self, i: usize) -> Result<f64> {
        Ok(CpuStorage::get_f64(self, i))
    }
}

#[cfg(feature = "cuda")]
impl BackendStorage for CudaStorage {
    fn device(&self) -> Device {
        CudaStorage::device(self)
    }
    fn dtype(&self) -> DType {
        CudaStorage::dtype(self)
    }
    fn len(&self) -> usize {
        CudaStorage::len(self)
    }
    fn zeros(device: Device, dtype: DType, n: usize) -> Result<Self> {
        match device {
            Device::Cuda(ordinal) => CudaStorage::zeros(ordinal, dtype, n),
            other => Err(Error::device_mismatch("zeros", Device::Cuda(0), other)),
        }
    }
    fn cast(&self, dtype: DType) -> Result<Self> {
        CudaStorage::cast(self, dtype)
    }
    fn gather(&self, positions: &mut dyn Iterator<Item = usize>) -> Result<Self> {
        CudaStorage::gather(self, positions)
    }
    fn get_f64(&self, i: usize) -> Result<f64> {
        CudaStorage::get_f64(self, i)
    }
}

/// One buffer of an array, on whichever backend holds it.
#[derive(Debug, Clone)]
pub(crate) enum Storage {
    /// Host memory, computed on by `crate::cpu`.
    Cpu(CpuStorage),
    /// Memory of a CUDA device, computed on by `crate::cuda`.
    #[cfg(feature = "cuda")]
    Cuda(CudaStorage),
}

/// Dispatch an operation on one storage to its backend's implementation: `$body` runs with
/// `$b` bound to the backend's storage type (wrap a storage result with `Storage::from`).
macro_rules! on_backend {
    ($s:expr, $b:ident => $body:expr) => {
        match $s {
            $crate::storage::Storage::Cpu($b) => $body,
            #[cfg(feature = "cuda")]
            $crate::storage::Storage::Cuda($b) => $body,
        }
    };
}
pub(crate) use on_backend;

/// Dispatch an operation on two storages that must share a backend: `$body` runs with `$x`
/// and `$y` bound to that backend's storage type; operands on different devices are an
/// [`Error::Device`](crate::Error::Device) naming `$op` (copies between devices are explicit).
macro_rules! on_backends {
    ($op:expr, ($a:expr, $b:expr), ($x:ident, $y:ident) => $body:expr) => {
        match ($a, $b) {
            ($crate::storage::Storage::Cpu($x), $crate::storage::Storage::Cpu($y)) => $body,
            #[cfg(feature = "cuda")]
            ($crate::storage::Storage::Cuda($x), $crate::storage::Storage::Cuda($y))
                if $x.ordinal() == $y.ordinal() =>
            {
                $body
            }
            #[allow(unreachable_patterns)]
            (a, b) => Err($crate::Error::device_mismatch($op, a.device(), b.device())),
        }
    };
}
pub(crate) use on_backends;

/// [`on_backends!`] for a kernel that writes into a third storage `$c` (the `_into` forms a
/// planned graph runs): all three must share a backend (and a device).
macro_rules! on_backends_into {
    ($op:expr, ($a:expr, $b:expr, $c:expr), ($x:ident, $y:ident, $z:ident) => $body:expr) => {
        match ($a, $b, $c) {
            (
                $crate::storage::Storage::Cpu($x),
                $crate::storage::Storage::Cpu($y),
                $crate::storage::Storage::Cpu($z),
            ) => $body,
            #[cfg(feature = "cuda")]
            (
                $crate::storage::Storage::Cuda($x),
                $crate::storage::Storage::Cuda($y),
                $crate::storage::Storage::Cuda($z),
            ) if $x.ordinal() == $y.ordinal() && $y.ordinal() == $z.ordinal() => $body,
            #[allow(unreachable_patterns)]
            (a, b, c) => Err(if a.device() != b.device() {
                $crate::Error::device_mismatch($op, a.device(), b.device())
            } else {
                $crate::Error::device_mismatch($op, a.device(), c.device())
            }),
        }
    };
}
pub(crate) use on_backends_into;

impl Storage {
    /// A storage of `v` in host memory.
    pub(crate) fn from_vec<T: Element>(v: Vec<T>) -> Storage {
        Storage::Cpu(T::into_buffer(v))
    }
    /// `n` zeros of `dtype` on `device`.
    pub(crate) fn zeros_on(dtype: DType, n: usize, device: Device) -> Result<Storage> {
        match device {
            Device::Cpu => Ok(Storage::Cpu(<CpuStorage as BackendStorage>::zeros(
                device, dtype, n,
            )?)),
            #[cfg(feature = "cuda")]
            Device::Cuda(_) => Ok(Storage::Cuda(<CudaStorage as BackendStorage>::zeros(
                device, dtype, n,
            )?)),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => Err(Device::unavailable_error("zeros", device)),
        }
    }
    /// A copy of this storage in the memory of `device` (the explicit copy of
    /// `NDArray::to_device`); the same storage when it is there already.
    pub(crate) fn to_device(&self, device: Device) -> Result<Storage> {
        if self.device() == device {
            return Ok(self.clone());
        }
        match device {
            Device::Cpu => Ok(Storage::Cpu(self.to_host()?.into_owned())),
            #[cfg(feature = "cuda")]
            Device::Cuda(ordinal) => {
                let host = self.to_host()?;
                Ok(Storage::Cuda(CudaStorage::from_host(ordinal, &host)?))
            }
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => Err(Device::unavailable_error("to_device", device)),
        }
    }
    /// The elements in host memory: borrowed on the CPU, copied from a device (the host
    /// views of `ndarray/host.rs` and `to_vec` read through this).
    pub(crate) fn to_host(&self) -> Result<std::borrow::Cow<'_, CpuStorage>> {
        match self {
            Storage::Cpu(c) => Ok(std::borrow::Cow::Borrowed(c)),
            #[cfg(feature = "cuda")]
            Storage::Cuda(c) => Ok(std::borrow::Cow::Owned(c.to_host()?)),
        }
    }
    /// The device whose memory holds the elements.
    #[inline]
    pub(crate) fn device(&self) -> Device {
        on_backend!(self, b => b.device())
    }
    /// The element type.
    #[inline]
    pub(crate) fn dtype(&self) -> DType {
        on_backend!(self, b => BackendStorage::dtype(b))
    }
    /// Number of elements.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        on_backend!(self, b => BackendStorage::len(b))
    }
    /// Bytes of the elements.
    #[inline]
    pub(crate) fn nbytes(&self) -> usize {
        self.len() * self.dtype().size_of()
    }
    /// Every element converted to `dtype`, on the same device.
    pub(crate) fn cast(&self, dtype: DType) -> Result<Storage> {
        on_backend!(self, b => Ok(Storage::from(BackendStorage::cast(b, dtype)?)))
    }
    /// The elements at `positions`, in that order, on the same device.
    pub(crate) fn gather(&self, mut positions: impl Iterator<Item = usize>) -> Result<Storage> {
        on_backend!(self, b => Ok(Storage::from(BackendStorage::gather(b, &mut positions)?)))
    }
    /// Every element in a new buffer on the same device (a deep copy).
    pub(crate) fn duplicate(&self) -> Result<Storage> {
        on_backend!(self, b => Ok(Storage::from(BackendStorage::duplicate(b)?)))
    }
    /// Element `i` as f64.
    pub(crate) fn get_f64(&self, i: usize) -> Result<f64> {
        on_backend!(self, b => BackendStorage::get_f64(b, i))
    }
    /// The host memory of this storage, for CPU kernels and host views; `None` for device
    /// memory (read it through [`Storage::to_host`]).
    #[inline]
    pub(crate) fn host(&self) -> Option<&CpuStorage> {
        match self {
            Storage::Cpu(c) => Some(c),
            #[cfg(feature = "cuda")]
            Storage::Cuda(_) => None,
        }
    }
    /// Make a host buffer's elements the first `n` of the memory it owns, without allocating
    /// (see `HostBuf::set_view_len`): `false` where it cannot (a device buffer, a buffer shared
    /// with another array or not owned, fewer than `n` elements owned).
    pub(crate) fn set_view_len(&mut self, n: usize) -> bool {
        match self.host_mut() {
            Some(c) => crate::with_buffer!(&mut *c, v => {
                std::sync::Arc::get_mut(v).is_some_and(|h| h.set_view_len(n))
            }),
            None => false,
        }
    }
    /// True when no other storage shares this buffer (a write in place changes no one
    /// else's values).
    pub(crate) fn is_unshared(&self) -> bool {
        match self {
            Storage::Cpu(c) => crate::with_buffer!(c, v => std::sync::Arc::strong_count(v) == 1),
            #[cfg(feature = "cuda")]
            Storage::Cuda(c) => c.is_unshared(),
        }
    }
    /// The device address of a device buffer (`None` for host memory): what a captured CUDA
    /// graph reads and writes.
    pub(crate) fn device_address(&self) -> Option<u64> {
        match self {
            Storage::Cpu(_) => None,
            #[cfg(feature = "cuda")]
            Storage::Cuda(c) => Some(c.address()),
        }
    }
    /// Mutable host memory of this storage (see [`Storage::host`]).
    #[inline]
    pub(crate) fn host_mut(&mut self) -> Option<&mut CpuStorage> {
        match self {
            Storage::Cpu(c) => Some(c),
            #[cfg(feature = "cuda")]
            Storage::Cuda(_) => None,
        }
    }
    /// Typed view of host memory (`None` when the dtype differs or the memory is a
    /// device's).
    #[inline]
    pub(crate) fn as_slice<T: Element>(&self) -> Option<&[T]> {
        self.host().and_then(T::slice)
    }
    /// Typed mutable view of host memory (copy-on-write if shared; `None` as
    /// [`Storage::as_slice`]).
    #[inline]
    pub(crate) fn as_mut_slice<T: Element>(&mut self) -> Option<&mut [T]> {
        self.host_mut().and_then(|h| h.as_mut_slice::<T>())
    }
}

impl From<CpuStorage> for Storage {
    fn from(c: CpuStorage) -> Storage {
        Storage::Cpu(c)
    }
}

#[cfg(feature = "cuda")]
impl From<CudaStorage> for Storage {
    fn from(c: CudaStorage) -> Storage {
        Storage::Cuda(c)
    }
}

/// Host memory of a [`CpuStorage`], for `with_buffer!`.
pub(crate) trait AsHost {
    /// The CPU storage.
    fn as_host(&self) -> &CpuStorage;
}

impl AsHost for CpuStorage {
    fn as_host(&self) -> &CpuStorage {
        self
    }
}

/// Mutable counterpart of [`AsHost`].
pub(crate) trait AsHostMut {
    /// The CPU storage, mutably.
    fn as_host_mut(&mut self) -> &mut CpuStorage;
}

impl AsHostMut for CpuStorage {
    fn as_host_mut(&mut self) -> &mut CpuStorage {
        self
    }
}
