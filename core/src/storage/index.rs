//! Index arrays (csr row pointers and column indices, row_sparse row ids) as storage.

use std::sync::Arc;

use super::Storage;
use crate::cpu::CpuStorage;

/// An i64 index array held in a [`Storage`], so it lives wherever its array's values live.
/// CPU kernels read it as a slice (`Deref<Target = [i64]>`): operators reach them only for
/// host storage, which is every storage while the CPU is the one backend.
#[derive(Debug, Clone)]
pub(crate) struct IndexStorage(Storage);

impl IndexStorage {
    /// The host vector, shared (the reference count a reader that recycles its vectors watches).
    pub(crate) fn host_arc(&self) -> &Arc<Vec<i64>> {
        match self.0.host() {
            CpuStorage::I64(v) => v,
            _ => unreachable!("IndexStorage holds i64 by construction"),
        }
    }
}

impl From<Vec<i64>> for IndexStorage {
    fn from(v: Vec<i64>) -> IndexStorage {
        IndexStorage(Storage::Cpu(CpuStorage::I64(Arc::new(v))))
    }
}

impl From<Arc<Vec<i64>>> for IndexStorage {
    fn from(v: Arc<Vec<i64>>) -> IndexStorage {
        IndexStorage(Storage::Cpu(CpuStorage::I64(v)))
    }
}

impl std::ops::Deref for IndexStorage {
    type Target = [i64];
    fn deref(&self) -> &[i64] {
        self.host_arc()
    }
}
