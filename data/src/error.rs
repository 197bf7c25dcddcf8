//! The error type of sparrow-data.
//!
//! Parse errors name the file, the 1-based line and the 1-based byte column where the problem
//! starts, and say what was expected, so a user can open the file at that spot.

use std::path::PathBuf;

/// Errors returned by sparrow-data.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// Malformed input (LibSVM or CSV text).
    #[error("{file}:{line}:{col}: {msg}")]
    Parse {
        /// The file (or `<memory>` for in-memory input).
        file: PathBuf,
        /// 1-based line number.
        line: u64,
        /// 1-based byte column.
        col: u64,
        /// What was wrong and what was expected.
        msg: String,
    },
    /// An I/O failure on a file.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An invalid argument (bad shape, zero batch size, part index out of range, ...).
    #[error("{op}: invalid argument: {msg}")]
    Arg {
        /// The function or iterator that rejected the argument.
        op: &'static str,
        /// What was wrong.
        msg: String,
    },
    /// An error from sparrow-core (array construction, shapes).
    #[error(transparent)]
    Core(#[from] sparrow_core::Error),
}

impl DataError {
    /// Shorthand for [`DataError::Arg`].
    pub fn arg(op: &'static str, msg: impl Into<String>) -> Self {
        DataError::Arg {
            op,
            msg: msg.into(),
        }
    }
    /// The check every iterator reading a part of its input makes: `part_index` of
    /// `num_parts` names a part.
    pub(crate) fn check_part(op: &'static str, num_parts: usize, part_index: usize) -> Result<()> {
        if num_parts == 0 || part_index >= num_parts {
            return Err(DataError::arg(
                op,
                format!("part_index {part_index} must be < num_parts {num_parts}"),
            ));
        }
        Ok(())
    }
    /// Shorthand for [`DataError::Io`].
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DataError::Io {
            path: path.into(),
            source,
        }
    }
    /// The (line, column) of a parse error, if this is one.
    pub fn position(&self) -> Option<(u64, u64)> {
        match self {
            DataError::Parse { line, col, .. } => Some((*line, *col)),
            _ => None,
        }
    }
}

/// Result alias for sparrow-data.
pub type Result<T> = std::result::Result<T, DataError>;

/// sparrow-core's errors pass through unchanged; parse, I/O and argument errors of a data
/// source become [`sparrow_core::Error::Data`] with their full message (file, line, column).
impl From<DataError> for sparrow_core::Error {
    fn from(e: DataError) -> Self {
        match e {
            DataError::Core(e) => e,
            other => sparrow_core::Error::Data(other.to_string()),
        }
    }
}
