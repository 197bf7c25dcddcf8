//! sparrow-nn: Gluon-style `Parameter`, `Block`, layers, losses, initializers, metrics and
//! parameter files, sparse-aware from the start.
//!
//! ```
//! use sparrow_nn::{Block, Dense, Initializer, Sequential};
//! use sparrow_core::{autograd, Device, NDArray};
//! let mut net = Sequential::new();
//! net.add(Dense::new(16).activation("relu")).add(Dense::new(1));
//! net.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
//! let x = NDArray::ones(&[8, 4], Default::default()).unwrap();
//! let loss = autograd::record(|| net.forward(&x)?.sum_all()).unwrap();
//! loss.backward().unwrap();
//! let params = net.collect_params().unwrap();
//! assert!(params.get("dense0.weight").unwrap().grad().is_some());
//! ```

// Derived blocks name this crate `::sparrow_nn`, also in its own tests and doctests.
extern crate self as sparrow_nn;

pub mod block;
#[doc(hidden)]
pub mod derive_support;
pub mod hybrid;
pub mod init;
pub mod io;
pub mod layers;
pub mod loss;
pub mod metric;
mod param_dict;
mod parameter;
pub mod rnn;
mod row_source;

pub use block::{Block, Sequential, SummaryRow};
pub use hybrid::{HybridBlock, HybridLoss, HybridTrainStep, Hybridize, SymbolBlock};
pub use init::{FactorType, Initializer, RndType};
pub use io::{load_params, save_params, BlockIo, LoadOptions, SaveOptions};
pub use layers::*;
pub use param_dict::{glob_match, ParamDict};
pub use parameter::{Parameter, UpdateView};
pub use rnn::{GRUCell, LSTMCell, Layout, RNNCell, RecurrentCell, GRU, LSTM, RNN};
pub use row_source::RowSource;
/// `#[derive(Block)]`: `kind`, parameters and children from a struct's fields (see
/// [`sparrow_derive`]).
pub use sparrow_derive::Block;
