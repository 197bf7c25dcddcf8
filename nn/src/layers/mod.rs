//! Layers.

mod activation;
mod basic;
mod conv;
mod dense;
mod embedding;
mod norm;
mod pool;

pub use activation::{
    apply_activation, Activation, LeakyReLU, PReLU, SiLU, Swish, ELU, GELU, SELU,
};
pub use basic::{Dropout, Flatten, Identity, Lambda};
pub use conv::{Conv1D, Conv1DTranspose, Conv2D, Conv2DTranspose, Conv3D, Conv3DTranspose};
pub use dense::Dense;
pub use embedding::{Embedding, SparseEmbedding};
pub use norm::{BatchNorm, LayerNorm};
pub use pool::{
    AvgPool1D, AvgPool2D, AvgPool3D, GlobalAvgPool1D, GlobalAvgPool2D, GlobalAvgPool3D,
    GlobalMaxPool1D, GlobalMaxPool2D, GlobalMaxPool3D, MaxPool1D, MaxPool2D, MaxPool3D,
};
