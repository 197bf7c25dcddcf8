//! Index arrays (csr row pointers and column ids, row_sparse row ids) of the CUDA backend.
//!
//! A device index array keeps its host copy beside the device one. Operators read index
//! arrays on the host for lengths, validation and the loader-side column grouping
//! (ARCHITECTURE.md, "What still reads host memory on purpose"); keeping the host copy makes
//! those reads free and infallible, at the cost of host memory the size of the indices. The
//! kernels read the device copy.

use std::sync::Arc;

use cudarc::driver::CudaSlice;

use super::driver::CudaDev;
use super::launch::driver_err;
use super::storage::CudaStorage;
use crate::error::Result;

/// An i64 index array on a CUDA device, with its host copy.
#[derive(Clone)]
pub(crate) struct CudaIndex {
    /// The host copy (what `IndexStorage`'s host view reads).
    pub(crate) host: Arc<Vec<i64>>,
    /// The device copy (what kernels read).
    pub(crate) dev: Arc<CudaSlice<i64>>,
    /// The device.
    pub(crate) device: Arc<CudaDev>,
}

impl std::fmt::Debug for CudaIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaIndex({}, {} ids)",
            self.device.ordinal,
            self.host.len()
        )
    }
}

impl CudaIndex {
    /// `host` copied to device `ordinal`.
    pub(crate) fn upload(ordinal: usize, host: Arc<Vec<i64>>) -> Result<CudaIndex> {
        let device = CudaDev::get(ordinal)?;
        let dev = if host.is_empty() {
            CudaStorage::alloc::<i64>(&device, "to_device", 0)?
        } else {
            device
                .stream
                .clone_htod(host.as_slice())
                .map_err(driver_err("to_device"))?
        };
        Ok(CudaIndex {
            host,
            dev: Arc::new(dev),
            device,
        })
    }
    /// The device's number.
    pub(crate) fn ordinal(&self) -> usize {
        self.device.ordinal
    }
}
