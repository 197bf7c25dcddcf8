//! sparrow-core: the `NDArray` (dense, csr, row_sparse), its operators and autograd.
//!
//! The repository's ARCHITECTURE.md describes the layout: the storage seam (`storage`), the
//! CPU kernels (`cpu`), the operators (`ops`, `sparse`, `update`) and autograd. Everything
//! that can fail on user input returns [`Result`]. Nothing here knows a layer, an optimizer's
//! API or state, or a model's file format; the optimizers' update arithmetic lives here as operators.
//! The public constructors make arrays on the calling thread's default device
//! ([`Device::current`], set for a closure by [`with_device`]). What every crate's files share
//! lives here too: the atomic writer and the checksum ([`fsio`]). [`io`] saves and loads
//! any arrays, sparse included, as safetensors or `.npz` (MXNet's `nd.save` / `nd.load`).

pub mod autograd;
mod budget;
pub(crate) mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
mod device;
mod dtype;
mod error;
pub mod fsio;
pub mod graph;
pub mod io;
mod ndarray;
pub mod npy;
pub mod ops;
pub mod random;
pub mod recycle;
pub mod sparse;
mod storage;
pub mod sys;
pub mod testing;
pub mod update;

pub use cpu::mapped::MapMode;
pub(crate) use cpu::with_buffer;
pub use device::with_device;
pub use dtype::{DType, Device, Element, Float, SType};
pub use error::{Error, Result};
/// The half element types of [`DType::F16`] and [`DType::BF16`] (the `half` crate's).
pub use half::{bf16, f16};
pub(crate) use ndarray::{ArrayData, CsrData, DenseData, RowSparseData};
pub use ndarray::{CsrView, NDArray, Shape};
