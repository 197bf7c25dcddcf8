//! Layers.

mod activation;
mod basic;
mod dense;
mod embedding;
mod norm;

pub use activation::{apply_activation, Activation, LeakyReLU};
pub use basic::{Dropout, Flatten, Identity, Lambda};
pub use dense::Dense;
pub use embedding::{Embedding, SparseEmbedding};
pub use norm::{BatchNorm, LayerNorm};
