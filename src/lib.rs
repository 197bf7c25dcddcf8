//! sparrow: a Gluon-style deep-learning training framework with first-class sparse data.
//!
//! This crate is the facade: it re-exports the member crates and offers a [`prelude`].

pub use sparrow_core as core;
pub use sparrow_data as data;
pub use sparrow_kvstore as kvstore;
pub use sparrow_nn as nn;
pub use sparrow_optim as optim;

// The README's Rust snippets compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The names most programs need: arrays and autograd, blocks and layers, losses and metrics
/// (as the `loss` and `metric` modules, with their traits), the Trainer and every optimizer,
/// and the data iterators.
///
/// ```
/// use sparrow::prelude::*;
///
/// # fn main() -> Result<()> {
/// let net = Dense::new(1);
/// net.initialize(&Initializer::Normal { sigma: 0.1 }, Device::Cpu)?;
/// let mut trainer = Trainer::from_params(&net.collect_params()?, Sgd::new(0.1).wd(1e-4))?;
/// let x = NDArray::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
/// let y = NDArray::from_vec(vec![1.0f32, 0.0], &[2, 1])?;
/// let l2 = loss::L2Loss::new();
/// let l = autograd::record(|| l2.forward(&net.forward(&x)?, &y)?.mean(None, false))?;
/// l.backward()?;
/// trainer.step(2)?;
/// # Ok(())
/// # }
/// ```
pub mod prelude {
    pub use sparrow_core::{
        autograd, sparse, with_device, DType, Device, Error, NDArray, Result, SType,
    };
    pub use sparrow_data::csv::{CSVIter, CSVIterParams};
    pub use sparrow_data::libsvm::{LibSVMIter, LibSVMIterParams};
    pub use sparrow_data::{Batch, DataLoader, NDArrayIter, TensorDataset};
    pub use sparrow_nn::loss::{self, Loss};
    pub use sparrow_nn::metric::{self, Metric};
    pub use sparrow_nn::{
        Activation, AvgPool1D, AvgPool2D, AvgPool3D, BatchNorm, Block, BlockIo, Conv1D,
        Conv1DTranspose, Conv2D, Conv2DTranspose, Conv3D, Conv3DTranspose, Dense, Dropout,
        Embedding, Flatten, GlobalAvgPool1D, GlobalAvgPool2D, GlobalAvgPool3D, GlobalMaxPool1D,
        GlobalMaxPool2D, GlobalMaxPool3D, Identity, Initializer, Lambda, LayerNorm, LeakyReLU,
        MaxPool1D, MaxPool2D, MaxPool3D, PReLU, ParamDict, Parameter, Sequential, SiLU,
        SparseEmbedding, Swish, ELU, GELU, SELU,
    };
    pub use sparrow_optim::{
        create as create_optimizer, AdaDelta, AdaGrad, Adam, AdamW, Adamax, Estimator, FitOptions,
        Ftml, Ftrl, Lamb, Nadam, Nag, Optimizer, RMSProp, Sgd, Signum, Trainer,
    };
}
