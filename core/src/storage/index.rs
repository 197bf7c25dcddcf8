//! Index arrays (csr row pointers and column indices, row_sparse row ids) as storage.

use std::sync::Arc;

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

/// An i64 index array, on the backend that holds its array's values: one variant per backend,
/// as [`super::Storage`]. CPU kernels read it as a slice (`Deref<Target = [i64]>`); with one
/// variant the view costs nothing (no tag to test), which matters in the row loops of the csr
/// kernels that index `indptr` per row. A device variant makes the compiler point at every
/// such read.
#[derive(Debug, Clone)]
pub(crate) enum IndexStorage {
    /// Host memory, shared (row slices and detached handles share it).
    Cpu(Arc<Vec<i64>>),
}

impl IndexStorage {
    /// The host vector, shared (the reference count a reader that recycles its vectors
    /// watches, and the identity a cached column grouping is checked against).
    pub(crate) fn host_arc(&self) -> &Arc<Vec<i64>> {
        match self {
            IndexStorage::Cpu(v) => v,
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
        match self {
            IndexStorage::Cpu(v) => v,
        }
    }
}
