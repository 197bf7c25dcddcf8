//! Sparse storage types: csr and row_sparse construction, conversion and operators.

mod construct;
mod convert;
mod dispatch;

pub use convert::{add_grads, cast_storage, densify, zeros_stype};
pub(crate) use dispatch::{
    dispatch_binary, dispatch_clip, dispatch_dot, dispatch_scalar, dispatch_unary,
};
pub use dispatch::{fallback, set_strict_stype, strict_stype};
