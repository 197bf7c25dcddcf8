//! The CUDA random family ([`RandomOps`]): a draw is made by the CPU's generator from the same
//! key and copied to the device, so a seed gives the same array on every device (what the
//! tests compare) at the cost of one host-to-device copy per draw: initializers and dropout
//! masks, not a per-element hot path yet. A device generator (Philox from the same key) would
//! remove the copy; it has to reproduce the CPU's streams to keep that property.

use super::storage::CudaStorage;
use crate::cpu::CpuStorage;
use crate::dtype::DType;
use crate::error::Result;
use crate::storage::{RandomDist, RandomOps};

impl CudaStorage {
    /// See [`RandomOps::random`]: the draw in the memory of device `ordinal`.
    pub(crate) fn random_on(
        ordinal: usize,
        dist: RandomDist,
        dtype: DType,
        n: usize,
        key: u64,
    ) -> Result<CudaStorage> {
        let host = <CpuStorage as RandomOps>::random(dist, dtype, n, key)?;
        CudaStorage::from_host(ordinal, &host)
    }
}

impl RandomOps for CudaStorage {
    /// On device 0: the seam's `Storage::random_on` names the device and calls
    /// [`CudaStorage::random_on`] instead.
    fn random(dist: RandomDist, dtype: DType, n: usize, key: u64) -> Result<Self> {
        CudaStorage::random_on(0, dist, dtype, n, key)
    }
}
