//! sparrow-data: LibSVM reading and writing, data iterators and loaders that produce sparse
//! (CSR) batches without ever densifying them, and synthetic sparse data.
//!
//! - [`csv`]: the streaming [`csv::CSVIter`] (dense batches from CSV files).
//! - [`libsvm`]: parser, [`libsvm::load_libsvm`], [`libsvm::save_libsvm`], the streaming
//!   parallel [`libsvm::LibSVMIter`].
//! - [`batch`]: [`Batch`] and [`LastBatch`] shared by the iterators.
//! - [`progress`]: progress bars that hide themselves off a terminal or under CI.

pub mod batch;
pub mod csv;
mod error;
pub mod libsvm;
pub mod progress;

pub use batch::{Batch, LastBatch};
pub use error::{DataError, Result};
pub mod dataset;
mod ndarray_iter;
mod rows;
pub mod synthetic;

pub use dataset::{BatchSampler, DataLoader, Dataset, LibSvmDataset, Sampler, TensorDataset};
pub use ndarray_iter::NDArrayIter;
pub use rows::take_rows;
