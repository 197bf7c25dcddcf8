//! The storage seam: where an array's elements live, chosen in one place.
//!
//! Every buffer of an array (a dense array's values; a csr array's values, column indices and
//! row pointers; a row_sparse array's values and row ids) is a [`Storage`]. `Storage` is an
//! enum with one variant per backend, and each backend's storage type implements
//! [`BackendStorage`]: the structural operations (dtype, length, zeros, cast, gather) and one
//! supertrait per family of kernels, each family in its own file here with the enums that name
//! what to compute and the `impl Storage` forwarders operators call. An operator makes one
//! `Storage` call per kernel; the forwarder matches the backend once (`on_backend!`,
//! `on_backends!`). Today the one variant is [`Storage::Cpu`] and the kernels live in
//! `crate::cpu`.
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
mod random;
mod reduce;
mod rnn;
mod sparse;
mod sparse_dot;
mod update;

pub(crate) use conv::{ConvGeom, ConvOps, PoolGeom, PoolKind, SPATIAL};
pub(crate) use elementwise::{CmpOp, ElementwiseOps, Map, MapGrad};
pub(crate) use index::{BackendIndex, IndexStorage};
pub(crate) use layout::LayoutOps;
pub(crate) use linalg::{LinalgOps, MatMul};
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
use crate::dtype::{DType, Device, Element};

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
    /// `n` zeros of `dtype`.
    fn zeros(dtype: DType, n: usize) -> Self;
    /// Every element converted to `dtype` (`as` semantics).
    fn cast(&self, dtype: DType) -> Self;
    /// The elements at `positions`, in that order.
    fn gather(&self, positions: &mut dyn Iterator<Item = usize>) -> Self;
    /// Element `i` as f64 (inspection and tests).
    fn get_f64(&self, i: usize) -> f64;
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
    fn zeros(dtype: DType, n: usize) -> Self {
        CpuStorage::zeros(dtype, n)
    }
    fn cast(&self, dtype: DType) -> Self {
        CpuStorage::cast(self, dtype)
    }
    fn gather(&self, positions: &mut dyn Iterator<Item = usize>) -> Self {
        CpuStorage::gather(self, positions)
    }
    fn get_f64(&self, i: usize) -> f64 {
        CpuStorage::get_f64(self, i)
    }
}

/// One buffer of an array, on whichever backend holds it.
#[derive(Debug, Clone)]
pub(crate) enum Storage {
    /// Host memory, computed on by `crate::cpu`.
    Cpu(CpuStorage),
}

/// Dispatch an operation on one storage to its backend's implementation: `$body` runs with
/// `$b` bound to the backend's storage type (wrap a storage result with `Storage::from`).
macro_rules! on_backend {
    ($s:expr, $b:ident => $body:expr) => {
        match $s {
            $crate::storage::Storage::Cpu($b) => $body,
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
            #[allow(unreachable_patterns)]
            (a, b) => Err($crate::Error::device_mismatch($op, a.device(), b.device())),
        }
    };
}
pub(crate) use on_backends;

impl Storage {
    /// A storage of `v` in host memory.
    pub(crate) fn from_vec<T: Element>(v: Vec<T>) -> Storage {
        Storage::Cpu(T::into_buffer(v))
    }
    /// `n` zeros of `dtype` on `device`.
    pub(crate) fn zeros_on(dtype: DType, n: usize, device: Device) -> Storage {
        match device {
            Device::Cpu => Storage::Cpu(<CpuStorage as BackendStorage>::zeros(dtype, n)),
        }
    }
    /// `n` zeros of `dtype` in host memory.
    pub(crate) fn zeros(dtype: DType, n: usize) -> Storage {
        Storage::zeros_on(dtype, n, Device::Cpu)
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
    pub(crate) fn cast(&self, dtype: DType) -> Storage {
        on_backend!(self, b => Storage::from(BackendStorage::cast(b, dtype)))
    }
    /// The elements at `positions`, in that order, on the same device.
    pub(crate) fn gather(&self, mut positions: impl Iterator<Item = usize>) -> Storage {
        on_backend!(self, b => Storage::from(BackendStorage::gather(b, &mut positions)))
    }
    /// Element `i` as f64.
    pub(crate) fn get_f64(&self, i: usize) -> f64 {
        on_backend!(self, b => BackendStorage::get_f64(b, i))
    }
    /// The host memory of this storage, for CPU kernels. Operators reach CPU kernels only for
    /// arrays they matched as [`Storage::Cpu`]; with one backend, every storage is.
    #[inline]
    pub(crate) fn host(&self) -> &CpuStorage {
        match self {
            Storage::Cpu(c) => c,
        }
    }
    /// Mutable host memory of this storage (see [`Storage::host`]).
    #[inline]
    pub(crate) fn host_mut(&mut self) -> &mut CpuStorage {
        match self {
            Storage::Cpu(c) => c,
        }
    }
    /// Typed view of host memory (`None` when the dtype differs).
    #[inline]
    pub(crate) fn as_slice<T: Element>(&self) -> Option<&[T]> {
        T::slice(self.host())
    }
    /// Typed mutable view of host memory (copy-on-write if shared).
    #[inline]
    pub(crate) fn as_mut_slice<T: Element>(&mut self) -> Option<&mut [T]> {
        self.host_mut().as_mut_slice::<T>()
    }
}

impl From<CpuStorage> for Storage {
    fn from(c: CpuStorage) -> Storage {
        Storage::Cpu(c)
    }
}

/// Host memory of either a [`Storage`] or a [`CpuStorage`], for `with_buffer!`.
pub(crate) trait AsHost {
    /// The CPU storage.
    fn as_host(&self) -> &CpuStorage;
}

impl AsHost for CpuStorage {
    fn as_host(&self) -> &CpuStorage {
        self
    }
}

impl AsHost for Storage {
    #[inline]
    fn as_host(&self) -> &CpuStorage {
        self.host()
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

impl AsHostMut for Storage {
    #[inline]
    fn as_host_mut(&mut self) -> &mut CpuStorage {
        self.host_mut()
    }
}
