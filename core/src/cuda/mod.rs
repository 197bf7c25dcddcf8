//! The CUDA backend (cargo feature `cuda`): device memory through cudarc, kernels written here
//! as CUDA C (`kernels/*.cu`) and compiled with NVRTC at first use on each device, cuBLAS for
//! dense products.
//!
//! - `driver.rs`: finding the driver, the GPUs and the libraries without panicking (cudarc
//!   panics when a dynamically loaded library is missing, so each is looked up first), and the
//!   per-device state: context, stream, compiled modules, cuBLAS handle.
//! - `compile.rs`: the kernel sources and the one NVRTC code path (the runtime's and the
//!   build check's, `examples/cuda_kernels_check.rs`).
//! - `storage.rs`: [`CudaStorage`] (a typed device buffer) and its structural operations
//!   (zeros, cast, gather, copies to and from the host); `index.rs`: [`CudaIndex`].
//! - one file per kernel family, implementing the family trait of `crate::storage`: the ported
//!   ones launch kernels; a method without a CUDA kernel yet returns an
//!   [`Error::Device`](crate::Error::Device) naming the operation and the device (never a
//!   silent copy to the host, never a panic). ARCHITECTURE.md lists which families are ported.

mod capture;
mod compile;
mod conv;
mod driver;
mod elementwise;
mod index;
mod launch;
mod layout;
mod linalg;
mod random;
mod reduce;
mod rnn;
mod sparse;
mod sparse_dot;
mod sparse_merge;
mod storage;
mod update;

pub use capture::DeviceGraph;
pub(crate) use capture::{begin_capture, end_capture};
pub use compile::{compile_ptx, kernel_sources, KernelSource};
pub(crate) use driver::cuda_device_count;
pub(crate) use index::CudaIndex;
pub(crate) use storage::CudaStorage;

/// Wait until every kernel and copy queued on CUDA device `ordinal` has finished (for timing:
/// operators return as soon as their kernels are queued). An unavailable device is an error.
pub fn synchronize(ordinal: usize) -> crate::Result<()> {
    let dev = driver::CudaDev::get(ordinal)?;
    dev.stream
        .synchronize()
        .map_err(|e| driver::cuda_error("synchronize", format!("CUDA: {e}")))
}

/// The total memory of CUDA device `ordinal` in bytes (the default parameter budget,
/// [`crate::Device::memory_budget`]). An unavailable device is an error.
pub fn total_memory(ordinal: usize) -> crate::Result<usize> {
    let dev = driver::CudaDev::get(ordinal)?;
    dev.ctx
        .total_mem()
        .map_err(|e| driver::cuda_error("memory_budget", format!("CUDA: {e}")))
}
