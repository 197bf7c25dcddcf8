//! The one error type of sparrow-core.
//!
//! Every public operation that can fail on user input returns [`Result`]. Messages name the
//! operator and the shapes, storage types and dtypes involved, so that a user can find the call
//! that went wrong without a debugger.

use crate::{DType, SType};

/// Errors returned by sparrow-core operations.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// Shapes that do not fit the operator.
    #[error("{op}: shape mismatch: {msg}")]
    Shape { op: &'static str, msg: String },
    /// A dtype the operator does not support, or two dtypes that differ.
    #[error("{op}: dtype error: {msg}")]
    DType { op: &'static str, msg: String },
    /// An index (element, axis or row id) out of range.
    #[error("{op}: index out of range: {msg}")]
    Index { op: &'static str, msg: String },
    /// A storage-type combination with no kernel while strict mode forbids the dense fallback,
    /// or an operator that needs a particular storage type.
    #[error("{op}: storage type error: {msg}")]
    SType { op: &'static str, msg: String },
    /// A sparse array whose parts break the format's invariants (`check_format`).
    #[error("invalid {stype:?} array: {msg}")]
    Format { stype: SType, msg: String },
    /// An invalid argument value (negative count, empty list, bad step, ...).
    #[error("{op}: invalid argument: {msg}")]
    Arg { op: &'static str, msg: String },
    /// Operands on different devices, or an operator with no kernel for the device that holds
    /// its operands.
    #[error("{op}: device error: {msg}")]
    Device { op: &'static str, msg: String },
    /// A data source failed: a file that does not parse (its message names the file, line
    /// and column) or cannot be read. sparrow-data's errors convert into this one, so a
    /// training loop over its iterators can use `?` with sparrow's `Result`.
    #[error("data: {0}")]
    Data(String),
    /// Autograd misuse: backward on an array that is not part of a recorded graph, etc.
    #[error("autograd: {0}")]
    Autograd(String),
    /// Memory the operator needed could not be allocated (an array sized from the arguments
    /// that the allocator refuses: `zeros` of 100 GB, `one_hot` with depth 2^40).
    #[error("{op}: out of memory: {msg}")]
    Memory { op: &'static str, msg: String },
    /// A file that could not be opened, mapped, read or written, or whose contents do not
    /// describe the array asked for (short file, wrong dtype or shape, changed size).
    #[error("{op}: {path}: {msg}")]
    File {
        op: &'static str,
        path: String,
        msg: String,
    },
}

/// Result alias for sparrow-core.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Shorthand for [`Error::Shape`].
    pub fn shape(op: &'static str, msg: impl Into<String>) -> Self {
        Error::Shape {
            op,
            msg: msg.into(),
        }
    }
    /// Shorthand for [`Error::DType`].
    pub fn dtype(op: &'static str, msg: impl Into<String>) -> Self {
        Error::DType {
            op,
            msg: msg.into(),
        }
    }
    /// Shorthand for [`Error::Index`].
    pub fn index(op: &'static str, msg: impl Into<String>) -> Self {
        Error::Index {
            op,
            msg: msg.into(),
        }
    }
    /// Shorthand for [`Error::SType`].
    pub fn stype(op: &'static str, msg: impl Into<String>) -> Self {
        Error::SType {
            op,
            msg: msg.into(),
        }
    }
    /// Shorthand for [`Error::File`]: `path` is the file, `msg` what was wrong with it.
    pub fn file(op: &'static str, path: &std::path::Path, msg: impl std::fmt::Display) -> Self {
        Error::File {
            op,
            path: path.display().to_string(),
            msg: msg.to_string(),
        }
    }
    /// Shorthand for [`Error::Arg`].
    pub fn arg(op: &'static str, msg: impl Into<String>) -> Self {
        Error::Arg {
            op,
            msg: msg.into(),
        }
    }
    /// Shorthand for [`Error::Format`].
    pub fn format(stype: SType, msg: impl Into<String>) -> Self {
        Error::Format {
            stype,
            msg: msg.into(),
        }
    }
    /// Two operands on different devices (copies between devices are explicit: `to_device`).
    pub fn device_mismatch(op: &'static str, a: crate::Device, b: crate::Device) -> Self {
        Error::Device {
            op,
            msg: format!("operands are on {a:?} and {b:?}; move one with to_device"),
        }
    }
    /// A dtype mismatch between two operands.
    pub fn dtype_mismatch(op: &'static str, a: DType, b: DType) -> Self {
        Error::dtype(
            op,
            format!("operands have dtypes {a:?} and {b:?}; cast one with astype"),
        )
    }
}
