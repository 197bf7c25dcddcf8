//! Launch shapes and the small helpers every CUDA kernel family shares.

use cudarc::driver::LaunchConfig;

use super::driver::cuda_error;
use crate::error::Error;

/// Threads per block of the elementwise kernels.
const BLOCK: u32 = 256;
/// Most blocks launched at once; the kernels' grid-stride loops walk the rest (enough to fill
/// any current GPU several times over).
const MAX_BLOCKS: u64 = 65_535;

/// A one-dimensional launch over `n` items (grid-stride kernels).
pub(crate) fn grid(n: usize) -> LaunchConfig {
    let blocks = (n as u64).div_ceil(BLOCK as u64).clamp(1, MAX_BLOCKS) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A driver error of a launch or copy as the backend's error, naming the operation.
pub(crate) fn driver_err(op: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error {
    move |e| cuda_error(op, format!("CUDA: {e}"))
}

/// The error of an operation with no CUDA kernel yet: never a silent copy to the host.
pub(crate) fn not_ported(op: &'static str, ordinal: usize) -> Error {
    cuda_error(
        op,
        format!(
            "no CUDA kernel for {op} yet (array on Cuda({ordinal})); move the operands to the \
             CPU with to_device(Device::Cpu) to run it there"
        ),
    )
}

/// Up to 8 axes per kernel argument struct; more is an error naming the op.
pub(crate) const MAX_DIMS: usize = 8;

/// The error for a shape of more axes than the kernels take.
pub(crate) fn too_many_dims(op: &'static str, ndim: usize) -> Error {
    cuda_error(
        op,
        format!("the CUDA kernel takes at most {MAX_DIMS} axes, got {ndim}"),
    )
}
