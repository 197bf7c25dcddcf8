//! sparrow: a Gluon-style deep-learning training framework with first-class sparse data.
//!
//! This crate is the facade: it re-exports the member crates and offers a [`prelude`].

pub use sparrow_core as core;
pub use sparrow_data as data;
pub use sparrow_nn as nn;
pub use sparrow_optim as optim;

/// The names most programs need.
pub mod prelude {
    pub use sparrow_core::{autograd, DType, Error, NDArray, Result, SType};
}
