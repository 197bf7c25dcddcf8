//! Index arrays (csr row pointers and column indices, row_sparse row ids) as storage.

use std::sync::Arc;

#[cfg(feature = "cuda")]
use crate::cuda::CudaIndex;
use crate::dtype::Device;
#[cfg(feature = "cuda")]
use crate::error::Error;
use crate::error::Result;

/// The backend's own form of an i64 index array (csr row pointers and column indices,
/// row_sparse row ids): what [`IndexStorage`]'s variant for that backend holds (the shared host
/// vector on the CPU). The sparse kernel families take and return it; their forwarders wrap it
/// in the variant.
pub(crate) trait BackendIndex {
    /// The index array type.
    type Index;
}

impl BackendIndex for crate::cpu::CpuStorage {
    type Index = Arc<Vec<i64>>;
}

/// The backend-specific half of [`IndexStorage`]: view it as one backend's index array (an
/// index array on another device is an [`Error::Device`](crate::Error::Device) naming `op`),
/// and wrap one back. Lets the sparse forwarders run one generic body per backend.
pub(crate) trait IndexOf: BackendIndex {
    /// `i` as this backend's index array.
    fn index_of<'a>(op: &'static str, i: &'a IndexStorage) -> Result<&'a Self::Index>;
    /// This backend's index array as an [`IndexStorage`].
    fn wrap_index(i: Self::Index) -> IndexStorage;
    /// [`IndexOf::index_of`] with the backend inferred from a storage of it.
    fn index_of_on<'a>(&self, op: &'static str, i: &'a IndexStorage) -> Result<&'a Self::Index> {
        Self::index_of(op, i)
    }
    /// [`IndexOf::wrap_index`] with the backend inferred from a storage of it.
    fn wrap_index_of(&self, i: Self::Index) -> IndexStorage {
        Self::wrap_index(i)
    }
}

impl IndexOf for crate::cpu::CpuStorage {
    #[allow(unused_variables)] // `op` names the error of the other backends' variants
    fn index_of<'a>(op: &'static str, i: &'a IndexStorage) -> Result<&'a Arc<Vec<i64>>> {
        match i {
            IndexStorage::Cpu(v) => Ok(v),
            #[cfg(feature = "cuda")]
            other => Err(Error::device_mismatch(op, Device::Cpu, other.device())),
        }
    }
    fn wrap_index(i: Arc<Vec<i64>>) -> IndexStorage {
        IndexStorage::Cpu(i)
    }
}

#[cfg(feature = "cuda")]
impl IndexOf for crate::cuda::CudaStorage {
    fn index_of<'a>(op: &'static str, i: &'a IndexStorage) -> Result<&'a CudaIndex> {
        match i {
            IndexStorage::Cuda(v) => Ok(v),
            other => Err(Error::device_mismatch(op, Device::Cuda(0), other.device())),
        }
    }
    fn wrap_index(i: CudaIndex) -> IndexStorage {
        IndexStorage::Cuda(i)
    }
}

/// An i64 index array, on the backend that holds its array's values: one variant per backend,
/// as [`super::Storage`]. It reads as a host slice (`Deref<Target = [i64]>`): the CPU's own
/// vector, or the host copy a CUDA index array keeps beside its device copy
/// (`crate::cuda::CudaIndex`), so lengths and the host-side validation work on any backend.
#[derive(Debug, Clone)]
pub(crate) enum IndexStorage {
    /// Host memory, shared (row slices and detached handles share it).
    Cpu(Arc<Vec<i64>>),
    /// A CUDA device's memory, with its host copy.
    #[cfg(feature = "cuda")]
    Cuda(CudaIndex),
}

impl IndexStorage {
    /// The host vector, shared (the reference count a reader that recycles its vectors
    /// watches, and the identity a cached column grouping is checked against).
    pub(crate) fn host_arc(&self) -> &Arc<Vec<i64>> {
        match self {
            IndexStorage::Cpu(v) => v,
            #[cfg(feature = "cuda")]
            IndexStorage::Cuda(c) => &c.host,
        }
    }
    /// The device that holds the index array.
    pub(crate) fn device(&self) -> Device {
        match self {
            IndexStorage::Cpu(_) => Device::Cpu,
            #[cfg(feature = "cuda")]
            IndexStorage::Cuda(c) => Device::Cuda(c.ordinal()),
        }
    }
    /// A copy on `device` (the same array when it is there already).
    pub(crate) fn to_device(&self, device: Device) -> Result<IndexStorage> {
        if self.device() == device {
            return Ok(self.clone());
        }
        IndexStorage::from_arc_on(self.host_arc().clone(), device)
    }
    /// Host ids as an index array on `device`.
    pub(crate) fn from_arc_on(v: Arc<Vec<i64>>, device: Device) -> Result<IndexStorage> {
        match device {
            Device::Cpu => Ok(IndexStorage::Cpu(v)),
            #[cfg(feature = "cuda")]
            Device::Cuda(ordinal) => Ok(IndexStorage::Cuda(CudaIndex::upload(ordinal, v)?)),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => Err(Device::unavailable_error("to_device", device)),
        }
    }
}

impl From<Vec<i64>> for IndexStorage {
    fn from(v: Vec<i64>) -> IndexStorage {
        IndexStorage::Cpu(Arc::new(v))
    }
}

impl From<Arc<Vec<i64>>> for IndexStorage {
    fn from(v: Arc<Vec<i64>>) -> IndexStorage {
        IndexStorage::Cpu(v)
    }
}

impl std::ops::Deref for IndexStorage {
    type Target = [i64];
    #[inline(always)]
    fn deref(&self) -> &[i64] {
        self.host_arc()
    }
}
