//! sparrow-core: the `NDArray` (dense, csr, row_sparse), its operators and autograd.
//!
//! See the workspace `DESIGN.md` for the layering. Everything that can fail on user input
//! returns [`Result`]; nothing here knows layers, optimizers or file formats.

pub mod autograd;
pub(crate) mod cpu;
mod dtype;
mod error;
mod ndarray;
pub mod ops;
pub mod random;
pub mod recycle;
pub mod sparse;
pub mod sys;
pub mod testing;

pub(crate) use cpu::{with_buffer, CpuStorage};
pub use dtype::{DType, Device, Element, Float, SType};
pub use error::{Error, Result};
pub(crate) use ndarray::{ArrayData, CsrData, DenseData, RowSparseData};
pub use ndarray::{CsrView, NDArray, RowSparseView, Shape};
